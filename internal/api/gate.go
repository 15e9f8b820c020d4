package api

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/gorillamux"
	"github.com/go-chi/chi/v5"

	"github.com/sandgate/sandgate/internal/fault"
	"github.com/sandgate/sandgate/internal/jsontext"
)

// gate runs before every generated handler: it finds the OpenAPI operation, authenticates
// the caller unless the operation declares `security: []`, bounds the body, and validates the
// request against the contract, so malformed input gets a 400 problem before any handler.
type gate struct {
	router routers.Router
	// routes are the contract's operations by "METHOD /path/{template}": chi has matched the
	// route already, so its pattern finds the operation without a second router's regular
	// expressions (router is the fallback for a pattern chi names otherwise).
	routes       map[string]*routers.Route
	spec         *openapi3.T // the contract as the routes give it to the validator (newGate)
	authenticate func(http.Handler) http.Handler
	maxBody      int64
	unsecured    sync.Map // *openapi3.Operation → *openapi3.Operation without security requirements
}

func newGate(doc *openapi3.T, authenticate func(http.Handler) http.Handler, maxBody int64) (*gate, error) {
	doc.Servers = nil // match any host
	r, err := gorillamux.NewRouter(doc)
	if err != nil {
		return nil, err
	}
	// Requests are validated with kin-openapi's own schema validator, not its JSON Schema
	// 2020-12 one, which it picks for a 3.1 document (routers.Route.Spec) and which compiles
	// the schema again for every request body: 38 % of the gateway's CPU per execution in
	// `make bench` (docs/benchmarks.md). The request schemas use no keyword the two read
	// differently (the contract tests validate requests and answers with the 2020-12 one).
	validating := *doc
	validating.OpenAPI = "3.0.3"
	lenientDiscriminators(doc)
	routes := map[string]*routers.Route{}
	for path, item := range doc.Paths.Map() {
		for method, op := range item.Operations() {
			routes[method+" "+path] = &routers.Route{Spec: &validating, Path: path, PathItem: item, Method: method, Operation: op}
		}
	}
	return &gate{router: r, routes: routes, spec: &validating, authenticate: authenticate, maxBody: maxBody}, nil
}

// lenientDiscriminators lets requests leave out the property of a union's discriminator
// (RunRequest's `kind`, added after clients that do not send it): the union's variants are
// told apart by their other required members, and the handler infers the property. The
// contract requires it in each variant so that generated clients send it.
func lenientDiscriminators(doc *openapi3.T) {
	for _, ref := range doc.Components.Schemas {
		s := ref.Value
		if s == nil || s.Discriminator == nil {
			continue
		}
		name := s.Discriminator.PropertyName
		s.Discriminator = nil
		for _, v := range s.OneOf {
			if v.Value != nil {
				v.Value.Required = slices.DeleteFunc(slices.Clone(v.Value.Required), func(r string) bool { return r == name })
			}
		}
	}
}

// findRoute is the contract's operation of r and its path parameters, encoded as the
// contract's router (gorillamux with encoded paths) gives them. A HEAD request is the GET
// operation's (RFC 9110 §9.3.2; middleware.GetHead routed it there).
func (g *gate) findRoute(r *http.Request) (*routers.Route, map[string]string, error) {
	method := r.Method
	if method == http.MethodHead {
		method = http.MethodGet
	}
	if rc := chi.RouteContext(r.Context()); rc != nil {
		if route, ok := g.routes[method+" "+rc.RoutePattern()]; ok {
			params := make(map[string]string, len(rc.URLParams.Keys))
			for i, k := range rc.URLParams.Keys {
				v := rc.URLParams.Values[i]
				if r.URL.RawPath == "" { // chi matched the decoded path
					v = (&url.URL{Path: v}).EscapedPath()
				}
				params[k] = v
			}
			return route, params, nil
		}
	}
	if r.Method == http.MethodHead {
		r = r.Clone(r.Context())
		r.Method = http.MethodGet
	}
	route, params, err := g.router.FindRoute(r)
	if err != nil {
		return nil, nil, err
	}
	found := *route
	found.Spec = g.spec
	return &found, params, nil
}

func (g *gate) middleware(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		route, params, err := g.findRoute(r)
		if err != nil {
			// chi already matched this route, so the contract and the router disagree.
			WriteProblem(w, r, http.StatusNotFound, "not-found", "Not found", "no such operation: "+r.Method+" "+r.URL.Path)
			return
		}
		validate := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if p, ok := unknownQueryParameters(r, route); !ok {
				writeProblem(w, r, p)
				return
			}
			body := route.Operation.RequestBody
			raw := body != nil && body.Value.Content.Get("application/octet-stream") != nil
			if raw && r.ContentLength != 0 && route.Operation.Responses.Status(http.StatusUnsupportedMediaType) != nil {
				if p, ok := structuredUpload(r); !ok {
					writeProblem(w, r, p)
					return
				}
			}
			if body != nil && !raw && r.Body != nil && r.Body != http.NoBody && r.ContentLength != 0 {
				if p, ok := unsupportedMediaType(r, body.Value); !ok {
					writeProblem(w, r, p)
					return
				}
			}
			// Only a body the operation takes is read (and bounded): another is left unread.
			if body != nil && !raw && r.Body != nil && r.Body != http.NoBody {
				b, err := io.ReadAll(http.MaxBytesReader(w, r.Body, g.maxBody))
				if err != nil {
					writeValidationProblem(w, r, err)
					return
				}
				// Deep nesting is refused before the validator sees it: decoding and checking
				// a 10,000-level body against the schema costs seconds of CPU.
				if jsonDepth(b) > maxJSONDepth {
					WriteProblem(w, r, http.StatusBadRequest, "validation", "Invalid request",
						fmt.Sprintf("the JSON body nests objects and arrays more than %d levels deep; flatten it (see /openapi.yaml for the request shape)", maxJSONDepth))
					return
				}
				if body.Value.Content.Get("application/json") != nil {
					// encoding/json would change or drop part of the request silently.
					if msg, encoding := jsontext.Problem(b); msg != "" {
						if encoding {
							msg += "; send binary data as a file upload (PUT /v1/sessions/{session_id}/files/{path}, application/octet-stream), " +
								"or encode it (e.g. base64) and decode it in the program"
						}
						WriteProblem(w, r, http.StatusBadRequest, "validation", "Invalid request", msg)
						return
					}
				}
				r.Body = io.NopCloser(bytes.NewReader(b))
				r = r.WithContext(context.WithValue(r.Context(), bodyKey, b))
			}
			vr := r
			if r.Method == http.MethodHead {
				vr = r.Clone(r.Context())
				vr.Method = http.MethodGet
			}
			in := &openapi3filter.RequestValidationInput{
				Request: vr, PathParams: params, Route: g.withoutSecurity(route),
				Options: &openapi3filter.Options{
					AuthenticationFunc: openapi3filter.NoopAuthenticationFunc, // done by authenticate
					ExcludeRequestBody: raw || body == nil,                    // streamed and bounded by the domain; or none taken
					MultiError:         true,
				},
			}
			if err := openapi3filter.ValidateRequest(r.Context(), in); err != nil {
				writeValidationProblem(w, r, err)
				return
			}
			next.ServeHTTP(w, r)
		})
		g.guard(route, validate).ServeHTTP(w, r)
	})
}

// guard is h behind route's authentication: none for an operation that declares
// `security: []`, else the bearer-token check.
func (g *gate) guard(route *routers.Route, h http.Handler) http.Handler {
	if route.Operation.Security != nil && len(*route.Operation.Security) == 0 {
		return h
	}
	return g.authenticate(h)
}

// afterAuthentication runs h — the answer to a request the generated wrapper could not bind
// (a malformed parameter) — once the caller is authenticated as the operation requires, so
// an anonymous caller learns nothing about the request but that it needs a token (401).
func (g *gate) afterAuthentication(w http.ResponseWriter, r *http.Request, h http.HandlerFunc) {
	route, _, err := g.findRoute(r)
	if err != nil {
		h(w, r)
		return
	}
	g.guard(route, h).ServeHTTP(w, r)
}

// unsupportedMediaType checks that the Content-Type of r's body is one the operation's body
// declares (RFC 9110 §8.3; parameters such as charset=utf-8 aside): if not, ok is false and p
// is a 415 problem naming the expected type, which also goes in Accept-Post (W3C LDP §7.1)
// or Accept-Patch (RFC 5789 §3.1) for those methods. A media type the contract takes as
// "*/*" (the preview pass-through) accepts anything.
func unsupportedMediaType(r *http.Request, body *openapi3.RequestBody) (p Problem, ok bool) {
	declared := make([]string, 0, len(body.Content))
	for mt := range body.Content {
		if mt == "*/*" {
			return Problem{}, true
		}
		declared = append(declared, mt)
	}
	slices.Sort(declared)
	got, _, err := mime.ParseMediaType(r.Header.Get("Content-Type"))
	if err == nil && slices.Contains(declared, strings.ToLower(got)) {
		return Problem{}, true
	}
	want := strings.Join(declared, ", ")
	switch r.Method {
	case http.MethodPost:
		p.header = map[string]string{"Accept-Post": want}
	case http.MethodPatch:
		p.header = map[string]string{"Accept-Patch": want}
	}
	sent := "no Content-Type"
	if ct := r.Header.Get("Content-Type"); ct != "" {
		sent = "Content-Type '" + ct + "'"
	}
	p.Type, p.Title, p.Status = ProblemTypeBase+"unsupported-media-type", "Unsupported media type", http.StatusUnsupportedMediaType
	p.Detail = fmt.Sprintf("this operation takes a body of type %s, and the request has %s; send it with Content-Type: %s (see /openapi.yaml)", want, sent, declared[0])
	return p, false
}

// unknownQueryParameters checks that every query parameter of r is one route's operation
// declares (openapi.yaml, on the operation or its path): if not, ok is false and p is a 400
// validation problem naming the unknown ones and the declared ones. A misspelt filter
// (`?lable=`) would otherwise be ignored and answer everything.
func unknownQueryParameters(r *http.Request, route *routers.Route) (p Problem, ok bool) {
	if r.URL.RawQuery == "" {
		return Problem{}, true
	}
	var declared []string
	for _, params := range []openapi3.Parameters{route.PathItem.Parameters, route.Operation.Parameters} {
		for _, ref := range params {
			if ref.Value != nil && ref.Value.In == openapi3.ParameterInQuery {
				declared = append(declared, ref.Value.Name)
			}
		}
	}
	var unknown []string
	for name := range r.URL.Query() {
		if !slices.Contains(declared, name) {
			unknown = append(unknown, name)
		}
	}
	if len(unknown) == 0 {
		return Problem{}, true
	}
	slices.Sort(unknown)
	slices.Sort(declared)
	declared = slices.Compact(declared)
	takes := "no query parameters"
	if len(declared) > 0 {
		takes = "the query parameters " + quoteAll(declared)
	}
	p = Problem{Type: ProblemTypeBase + "validation", Title: "Invalid request", Status: http.StatusBadRequest}
	for _, name := range unknown {
		p.Errors = append(p.Errors, FieldProblem{Field: "query." + name, Message: fmt.Sprintf("query parameter '%s' is unknown", name)})
	}
	noun := "parameter"
	if len(unknown) > 1 {
		noun = "parameters"
	}
	p.Detail = fmt.Sprintf("unknown query %s %s: %s %s takes %s; remove or correct it (see /openapi.yaml)",
		noun, quoteAll(unknown), route.Method, route.Path, takes)
	return p, false
}

// quoteAll is names quoted and joined with ", ".
func quoteAll(names []string) string {
	q := make([]string, len(names))
	for i, n := range names {
		q[i] = "'" + n + "'"
	}
	return strings.Join(q, ", ")
}

// structuredUpload refuses a raw upload declared as structured data — JSON (application/json,
// any +json) or multipart/* (curl -F, browsers' file forms): a client that sends those has
// encoded the bytes (a JSON string's quotes, a multipart body's boundaries and headers), and
// the file would hold the encoding, not the bytes. ok is false and p a 415 problem naming
// application/octet-stream for such a body; any other type (or none) is taken as bytes —
// application/x-www-form-urlencoded too: it is what `curl --data-binary @file` declares by
// default while sending the file's bytes unchanged, the most common way to upload from a shell.
func structuredUpload(r *http.Request) (p Problem, ok bool) {
	ct := r.Header.Get("Content-Type")
	if ct == "" {
		return Problem{}, true
	}
	mt, _, err := mime.ParseMediaType(ct)
	if err != nil {
		return Problem{}, true // no structure claimed: bytes
	}
	mt = strings.ToLower(mt)
	switch {
	case mt == "application/json", strings.HasSuffix(mt, "+json"), strings.HasPrefix(mt, "multipart/"):
	default:
		return Problem{}, true
	}
	return Problem{
		Type: ProblemTypeBase + "unsupported-media-type", Title: "Unsupported media type", Status: http.StatusUnsupportedMediaType,
		Detail: fmt.Sprintf("this operation takes the raw bytes of the file as application/octet-stream, and the request has Content-Type '%s', "+
			"whose encoding would be stored instead of the bytes; send the bytes themselves with Content-Type: application/octet-stream (see /openapi.yaml)", ct),
	}, false
}

// maxJSONDepth bounds the nesting of a JSON request body (objects and arrays); no request of
// the contract comes close.
const maxJSONDepth = 64

// jsonDepth returns the deepest nesting of objects and arrays in b, scanning once (strings
// and their escapes skipped); it stops counting once past maxJSONDepth. Malformed JSON is
// left to the validator.
func jsonDepth(b []byte) int {
	depth, deepest, inString := 0, 0, false
	for i := 0; i < len(b); i++ {
		c := b[i]
		if inString {
			switch c {
			case '\\':
				i++
			case '"':
				inString = false
			}
			continue
		}
		switch c {
		case '"':
			inString = true
		case '{', '[':
			depth++
			if depth > deepest {
				deepest = depth
				if deepest > maxJSONDepth {
					return deepest
				}
			}
		case '}', ']':
			depth--
		}
	}
	return deepest
}

// postGuard reads the whole POST body of a mounted handler (at most maxBody: 413) before
// next sees it; next gets the same bytes.
type postGuard struct {
	maxBody int64
	// jsonText refuses (400 validation) a body that encoding/json would change or cut
	// silently (internal/jsontext); binaryHint is the next step its message names for
	// binary data.
	jsonText   bool
	binaryHint string
	// calls, when set, counts the calls the body carries (Mount.Calls); spend takes all but
	// the first (which the rate limiter took already) from the principal's request rate.
	calls func(r *http.Request, body []byte) (int, error)
	spend func(w http.ResponseWriter, r *http.Request, n, calls int) bool
}

func (g postGuard) wrap(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost || r.Body == nil || r.Body == http.NoBody {
			next.ServeHTTP(w, r)
			return
		}
		b, err := io.ReadAll(http.MaxBytesReader(w, r.Body, g.maxBody))
		if err != nil {
			writeValidationProblem(w, r, err)
			return
		}
		if g.jsonText {
			if msg, encoding := jsontext.Problem(b); msg != "" {
				if encoding && g.binaryHint != "" {
					msg += "; " + g.binaryHint
				}
				WriteProblem(w, r, http.StatusBadRequest, string(fault.Validation), "Invalid request", msg)
				return
			}
		}
		if g.calls != nil {
			n, err := g.calls(r, b)
			if err != nil {
				writeProblem(w, r, ProblemFor(err))
				return
			}
			if n > 1 && g.spend != nil && !g.spend(w, r, n-1, n) {
				return
			}
		}
		r.Body = io.NopCloser(bytes.NewReader(b))
		next.ServeHTTP(w, r)
	})
}

// withoutSecurity returns route with an operation that declares no security requirement.
// Authentication is the authenticate middleware's job; kin-openapi's security check would
// only call a no-op, but first reads the whole request body into memory to replay it to that
// no-op (openapi3filter validateSecurityRequirement), which for a raw upload means buffering
// up to the size of the upload before any limit applies.
func (g *gate) withoutSecurity(route *routers.Route) *routers.Route {
	op := route.Operation
	if op == nil {
		return route
	}
	v, ok := g.unsecured.Load(op)
	if !ok {
		c := *op
		c.Security = &openapi3.SecurityRequirements{}
		v, _ = g.unsecured.LoadOrStore(op, &c)
	}
	r := *route
	r.Operation = v.(*openapi3.Operation)
	return &r
}

func writeValidationProblem(w http.ResponseWriter, r *http.Request, err error) {
	var mbe *http.MaxBytesError
	if errors.As(err, &mbe) {
		writeProblem(w, r, ProblemFor(err))
		return
	}
	p := Problem{Type: ProblemTypeBase + "validation", Title: "Invalid request", Status: http.StatusBadRequest}
	p.Errors = requestProblems(err)
	msgs := make([]string, 0, len(p.Errors))
	for _, fp := range p.Errors {
		msgs = append(msgs, fp.Message)
	}
	p.Detail = strings.Join(msgs, "; ") + " (see /openapi.yaml for the request shape)"
	writeProblem(w, r, p)
}

// rawFilePath lets callers write file paths with plain slashes
// (/v1/sessions/{id}/files/out/data.bin): the remainder after /files/ is re-encoded as one
// path segment before routing, which is what the contract's {path} parameter expects.
func rawFilePath(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		const pre = "/v1/sessions/"
		p := r.URL.EscapedPath()
		if strings.HasPrefix(p, pre) {
			rest := p[len(pre):]
			if id, tail, ok := strings.Cut(rest, "/files/"); ok && !strings.Contains(id, "/") && strings.Contains(tail, "/") {
				// An empty element ('…/files//a', 'a//b') is a mistake, not a path from the
				// root; a trailing '/' is the domain's to judge (a folder to list or delete, no
				// file to write).
				if strings.HasPrefix(tail, "/") || strings.Contains(tail, "//") {
					WriteProblem(w, r, http.StatusBadRequest, string(fault.Validation), "Invalid request",
						fmt.Sprintf("the file path '%s' has an empty element (a '/' right after …/files/, or '//'); name each folder once, e.g. …/files/%s",
							tail, strings.Join(strings.FieldsFunc(tail, func(c rune) bool { return c == '/' }), "/")))
					return
				}
				if dec, err := url.PathUnescape(tail); err == nil {
					u := *r.URL
					u.RawPath = pre + id + "/files/" + url.PathEscape(dec)
					u.Path, _ = url.PathUnescape(u.RawPath)
					r2 := r.Clone(r.Context())
					r2.URL = &u
					r = r2
				}
			}
		}
		next.ServeHTTP(w, r)
	})
}

type ctxKey int

const (
	requestKey ctxKey = iota
	bodyKey           // the JSON body as the gate read it ([]byte)
)

// bodyOf returns the JSON body of the request of ctx as the gate read (and validated) it, or
// nil: for a handler that must tell a member set to null from one left out (a merge patch).
func bodyOf(ctx context.Context) []byte {
	if r := requestOf(ctx); r != nil {
		b, _ := r.Context().Value(bodyKey).([]byte)
		return b
	}
	return nil
}

// withRequest keeps the *http.Request reachable from strict handlers (for Location headers
// and the declared size of a raw upload).
func withRequest(ctx context.Context, r *http.Request) context.Context {
	return context.WithValue(ctx, requestKey, r)
}

// requestOf returns the request withRequest kept, or nil.
func requestOf(ctx context.Context) *http.Request {
	r, _ := ctx.Value(requestKey).(*http.Request)
	return r
}
