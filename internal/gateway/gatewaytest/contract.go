package gatewaytest

import (
	"bytes"
	"compress/gzip"
	"context"
	"io"
	"mime"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/gorillamux"
	"github.com/stretchr/testify/require"

	sandgate "github.com/sandgate/sandgate"
)

// Contract checks answers against openapi.yaml (the file as written, loaded by kin-openapi):
// the status must be declared for the operation, and the body and declared header fields
// must match its schema.
type Contract struct {
	Doc    *openapi3.T
	router routers.Router
}

var (
	contractOnce sync.Once
	contract     *Contract
	contractErr  error
)

// LoadContract loads and validates openapi.yaml once per test binary.
func LoadContract(t testing.TB) *Contract {
	t.Helper()
	contractOnce.Do(func() {
		openapi3filter.RegisterBodyDecoder("application/problem+json", openapi3filter.JSONBodyDecoder)
		l := openapi3.NewLoader()
		doc, err := l.LoadFromData(sandgate.OpenAPI)
		if err != nil {
			contractErr = err
			return
		}
		if err = doc.Validate(l.Context); err != nil {
			contractErr = err
			return
		}
		doc.Servers = nil // match any host
		r, err := gorillamux.NewRouter(doc)
		contract, contractErr = &Contract{Doc: doc, router: r}, err
	})
	require.NoError(t, contractErr, "openapi.yaml")
	return contract
}

// Check validates one answer to req. Requests outside the contract (/mcp, the console, the
// dev issuer, a path or method it does not have) are not checked: Checked says whether it
// was. Event streams are checked for their status and media type, not their events.
func (c *Contract) Check(t testing.TB, req *http.Request, status int, header http.Header, body []byte) (checked bool) {
	t.Helper()
	r := req.Clone(context.Background())
	if r.Method == http.MethodHead {
		r.Method = http.MethodGet // HEAD is the GET operation without the body
	}
	r.URL = filePathAsOneSegment(r.URL)
	route, params, err := c.router.FindRoute(r)
	if err != nil {
		return false
	}
	ct, _, _ := mime.ParseMediaType(header.Get("Content-Type"))
	if header.Get("Content-Encoding") == "gzip" && req.Method != http.MethodHead {
		zr, err := gzip.NewReader(bytes.NewReader(body))
		require.NoError(t, err, "a gzip body")
		body, err = io.ReadAll(zr)
		require.NoError(t, err, "a gzip body")
	}
	in := &openapi3filter.ResponseValidationInput{
		RequestValidationInput: &openapi3filter.RequestValidationInput{Request: r, PathParams: params, Route: route},
		Status:                 status,
		Header:                 header,
		Body:                   io.NopCloser(bytes.NewReader(body)),
		Options: &openapi3filter.Options{
			IncludeResponseStatus: true, // an undeclared status is an error
			ExcludeResponseBody:   req.Method == http.MethodHead || ct == "text/event-stream" || status == http.StatusNotModified,
			MultiError:            true,
		},
	}
	err = openapi3filter.ValidateResponse(context.Background(), in)
	require.NoError(t, err, "%s %s answered %d (%s) outside the contract (%s): %s",
		req.Method, req.URL.Path, status, header.Get("Content-Type"), route.Operation.OperationID, firstBytes(body, 2000))
	if req.Method != http.MethodHead && status != http.StatusNotModified && status != http.StatusNoContent {
		resp := route.Operation.Responses.Status(status)
		if resp == nil {
			resp = route.Operation.Responses.Default() // passed-through answers (preview ports)
		}
		require.NotNil(t, resp, "status %d of %s", status, route.Operation.OperationID)
		require.NotNil(t, resp.Value.Content.Get(ct), "%s %s answered %d as %q, which %s does not declare for it",
			req.Method, req.URL.Path, status, ct, route.Operation.OperationID)
	}
	return true
}

// filePathAsOneSegment re-encodes a file path written with plain slashes
// (/v1/sessions/{id}/files/out/data.bin) as the contract's one {path} segment, as the
// gateway does before routing.
func filePathAsOneSegment(u *url.URL) *url.URL {
	const pre = "/v1/sessions/"
	p := u.EscapedPath()
	rest, ok := strings.CutPrefix(p, pre)
	if !ok {
		return u
	}
	id, tail, ok := strings.Cut(rest, "/files/")
	if !ok || strings.Contains(id, "/") || !strings.Contains(tail, "/") {
		return u
	}
	dec, err := url.PathUnescape(tail)
	if err != nil {
		return u
	}
	c := *u
	c.RawPath = pre + id + "/files/" + url.PathEscape(dec)
	c.Path, _ = url.PathUnescape(c.RawPath)
	return &c
}

func firstBytes(b []byte, n int) string {
	if len(b) > n {
		return string(b[:n]) + "…"
	}
	return string(b)
}
