package api

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"github.com/klauspost/compress/gzhttp"
	"net/http"
	"regexp"
	"strconv"
	"time"

	"github.com/go-chi/chi/v5/middleware"
	"github.com/rs/cors"
	"go.yaml.in/yaml/v3"
)

// HTTP conventions every answer follows, whatever handler makes it: a request id (echoed or
// fresh), CORS for the configured origins, gzip for JSON bodies, HEAD wherever GET is.

// RequestIDHeader carries the request id both ways: a caller's own id (when it is sane) is
// kept, logged and echoed; otherwise the gateway makes one. Problems carry it as request_id.
const RequestIDHeader = "X-Request-Id"

// validRequestID is what an incoming X-Request-Id must look like to be kept: 1 to 128
// characters of letters, digits and . _ : - (so it is safe in logs and headers). Anything
// else is replaced by a fresh id, never echoed.
var validRequestID = regexp.MustCompile(`^[A-Za-z0-9._:-]{1,128}$`)

// requestID puts the request id into the context (chi's key, which middleware.GetReqID reads)
// and into the answer's X-Request-Id.
func requestID(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id := r.Header.Get(RequestIDHeader)
		if !validRequestID.MatchString(id) {
			id = newRequestID()
		}
		w.Header().Set(RequestIDHeader, id)
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), middleware.RequestIDKey, id)))
	})
}

// newRequestID is 128 random bits in hex.
func newRequestID() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // never fails (crypto/rand)
	return hex.EncodeToString(b[:])
}

// CORS configures cross-origin access (server.cors). No origin is allowed by default.
type CORS struct {
	// AllowedOrigins are the origins (scheme://host[:port]) browsers may call the API from;
	// "*" allows any. Empty: no cross-origin access (preflights are answered without
	// Access-Control-Allow-Origin, so browsers refuse).
	AllowedOrigins []string
	// MaxAge is how long a browser may cache a preflight answer; default 10 minutes.
	MaxAge time.Duration
}

// corsAllowedHeaders are the request header fields a cross-origin caller may send.
var corsAllowedHeaders = []string{
	"Authorization", "Content-Type", "Accept", "Last-Event-ID", "Range", "If-None-Match", "If-Range",
	RequestIDHeader, "Mcp-Session-Id", "Mcp-Protocol-Version",
}

// corsExposedHeaders are the answer's header fields a cross-origin caller's script may read.
var corsExposedHeaders = []string{
	"Location", "ETag", "Last-Modified", "Content-Range", "Accept-Ranges", "Retry-After", "WWW-Authenticate",
	"RateLimit-Limit", "RateLimit-Remaining", "RateLimit-Reset", RequestIDHeader, "Mcp-Session-Id",
}

// corsMiddleware answers preflights (OPTIONS with Access-Control-Request-Method) itself and
// adds the CORS fields to answers for an allowed Origin. Credentials (cookies) are never
// allowed: the API takes bearer tokens, which a page sends explicitly.
func corsMiddleware(c CORS) func(http.Handler) http.Handler {
	if len(c.AllowedOrigins) == 0 {
		return func(next http.Handler) http.Handler { return next }
	}
	maxAge := c.MaxAge
	if maxAge <= 0 {
		maxAge = 10 * time.Minute
	}
	return cors.New(cors.Options{
		AllowedOrigins: c.AllowedOrigins,
		AllowedMethods: []string{http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodDelete},
		AllowedHeaders: corsAllowedHeaders,
		ExposedHeaders: corsExposedHeaders,
		MaxAge:         int(maxAge / time.Second),
	}).Handler
}

// compressJSON gzips JSON and problem answers of 1 KiB or more for callers that accept it
// (gzhttp; a smaller answer costs more to compress than it saves). Event streams and files
// are never compressed: a stream must reach the caller event by event, and a file's bytes,
// ETag and ranges are those of the stored file.
func compressJSON() func(http.Handler) http.Handler {
	wrap, err := gzhttp.NewWrapper(gzhttp.CompressionLevel(5), gzhttp.MinSize(gzhttp.DefaultMinSize),
		gzhttp.ContentTypes([]string{"application/json", "application/problem+json"}))
	if err != nil {
		panic(err) // constant options
	}
	return func(h http.Handler) http.Handler { return wrap(h) }
}

// specJSON renders the contract (YAML) as JSON with the same content and key order, so
// /openapi.json and /openapi.yaml are one document in two syntaxes.
func specJSON(src []byte) ([]byte, error) {
	var doc yaml.Node
	if err := yaml.Unmarshal(src, &doc); err != nil {
		return nil, err
	}
	var b bytes.Buffer
	if err := writeJSONNode(&b, &doc); err != nil {
		return nil, err
	}
	var out bytes.Buffer
	if err := json.Indent(&out, b.Bytes(), "", "  "); err != nil {
		return nil, err
	}
	out.WriteByte('\n')
	return out.Bytes(), nil
}

func writeJSONNode(b *bytes.Buffer, n *yaml.Node) error {
	switch n.Kind {
	case yaml.DocumentNode:
		if len(n.Content) != 1 {
			return fmt.Errorf("openapi.yaml: expected one document")
		}
		return writeJSONNode(b, n.Content[0])
	case yaml.MappingNode:
		b.WriteByte('{')
		for i := 0; i+1 < len(n.Content); i += 2 {
			if i > 0 {
				b.WriteByte(',')
			}
			k, _ := json.Marshal(n.Content[i].Value)
			b.Write(k)
			b.WriteByte(':')
			if err := writeJSONNode(b, n.Content[i+1]); err != nil {
				return err
			}
		}
		b.WriteByte('}')
	case yaml.SequenceNode:
		b.WriteByte('[')
		for i, c := range n.Content {
			if i > 0 {
				b.WriteByte(',')
			}
			if err := writeJSONNode(b, c); err != nil {
				return err
			}
		}
		b.WriteByte(']')
	case yaml.AliasNode:
		return writeJSONNode(b, n.Alias)
	case yaml.ScalarNode:
		var v any
		if err := n.Decode(&v); err != nil {
			return err
		}
		if f, ok := v.(float64); ok && (f != f || f > 1e308 || f < -1e308) {
			return fmt.Errorf("openapi.yaml line %d: %s has no JSON form", n.Line, n.Value)
		}
		j, err := json.Marshal(v)
		if err != nil {
			return fmt.Errorf("openapi.yaml line %d: %w", n.Line, err)
		}
		b.Write(j)
	default:
		return fmt.Errorf("openapi.yaml line %d: unexpected YAML node", n.Line)
	}
	return nil
}

// serveBytes serves a fixed document (the contract) with its content type, for GET and HEAD.
func serveBytes(contentType string, body []byte) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Content-Type", contentType)
		h.Set("Content-Length", strconv.Itoa(len(body)))
		if r.Method == http.MethodHead {
			return
		}
		_, _ = w.Write(body)
	}
}
