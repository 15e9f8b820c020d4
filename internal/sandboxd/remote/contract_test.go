//go:build unix

package remote

import (
	"archive/tar"
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/gorillamux"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sandgate/sandgate/internal/fault"
	"github.com/sandgate/sandgate/internal/sandboxd"
)

// The tests in this file check Handler and Client against openapi.yaml: every request the
// Client sends must be routed and valid (or, for the cases marked invalidRequest, refused by
// the document as the server refuses it), and every answer the Handler gives must be a
// documented status with a documented body and headers.

const contractToken = "contract-token-0123456789abcdef0123456789"

// kin-openapi decodes no archive media types by itself: their bodies are checked as bytes.
func init() {
	openapi3filter.RegisterBodyDecoder(ArchiveContentType, openapi3filter.FileBodyDecoder)
	openapi3filter.RegisterBodyDecoder(ArchiveGzipContentType, openapi3filter.FileBodyDecoder)
}

// loadContract loads and validates openapi.yaml.
func loadContract(t *testing.T) *openapi3.T {
	t.Helper()
	loader := openapi3.NewLoader()
	doc, err := loader.LoadFromData(OpenAPI())
	require.NoError(t, err)
	require.NoError(t, doc.Validate(loader.Context))
	require.True(t, doc.IsOpenAPI31OrLater())
	return doc
}

// contract checks the traffic of one or more clients against a document. Failures are
// collected (RoundTrip may run where t.Fatal must not) and reported by verify.
type contract struct {
	doc    *openapi3.T
	router routers.Router

	mu       sync.Mutex
	failures []string
	seen     map[string]map[int]int // operation id → status → answers
	pending  int                    // answers whose body has not been checked yet
}

func newContract(t *testing.T, doc *openapi3.T) *contract {
	t.Helper()
	doc.Servers = nil // match the test server's host
	r, err := gorillamux.NewRouter(doc)
	require.NoError(t, err)
	return &contract{doc: doc, router: r, seen: map[string]map[int]int{}}
}

func (c *contract) failf(format string, args ...any) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.failures = append(c.failures, fmt.Sprintf(format, args...))
}

func (c *contract) problems() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.failures)
}

// verify fails t for every disagreement found, for answers left unchecked, and, with
// allOperations, for an operation of the document that no request used.
func (c *contract) verify(t *testing.T, allOperations bool) {
	t.Helper()
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, f := range c.failures {
		t.Error(f)
	}
	assert.Zero(t, c.pending, "answers whose body was never read to its end or closed")
	if !allOperations {
		return
	}
	for path, item := range c.doc.Paths.Map() {
		for method, op := range item.Operations() {
			if len(c.seen[op.OperationID]) == 0 {
				t.Errorf("%s %s (%s) is in the document but the test never called it", method, path, op.OperationID)
			}
		}
	}
	for id, statuses := range c.seen {
		t.Logf("%s: %v", id, statuses)
	}
}

// transport returns a RoundTripper that checks every request and answer passing through next.
func (c *contract) transport(next http.RoundTripper) http.RoundTripper {
	return &checkingTransport{c: c, next: next}
}

type invalidRequestKey struct{}

// invalidRequest marks the requests made with the returned context as ones the document must
// refuse; they are sent anyway, so the server's refusal is checked against the document too.
func invalidRequest(ctx context.Context) context.Context {
	return context.WithValue(ctx, invalidRequestKey{}, true)
}

type checkingTransport struct {
	c    *contract
	next http.RoundTripper
}

func (tr *checkingTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	c := tr.c
	what := req.Method + " " + req.URL.RequestURI()
	var body []byte
	if req.Body != nil && req.Body != http.NoBody {
		var err error
		body, err = io.ReadAll(req.Body)
		_ = req.Body.Close()
		if err != nil {
			return nil, err
		}
	}
	route, params, err := c.router.FindRoute(req)
	if err != nil {
		c.failf("%s: the document has no such operation: %v", what, err)
		return nil, fmt.Errorf("contract: %s is not in openapi.yaml: %w", what, err)
	}

	checked := req.Clone(req.Context())
	checked.Body = io.NopCloser(bytes.NewReader(body))
	in := &openapi3filter.RequestValidationInput{
		Request: checked, PathParams: params, Route: route,
		Options: &openapi3filter.Options{AuthenticationFunc: bearerOnly, MultiError: true},
	}
	reqErr := openapi3filter.ValidateRequest(req.Context(), in)
	wantInvalid, _ := req.Context().Value(invalidRequestKey{}).(bool)
	switch {
	case wantInvalid && reqErr == nil:
		c.failf("%s: the document accepts a request the server must refuse (body %s)", what, body)
	case !wantInvalid && reqErr != nil:
		c.failf("%s: the client's request does not match the document: %v", what, reqErr)
	}

	out := req.Clone(req.Context())
	if body != nil {
		out.Body = io.NopCloser(bytes.NewReader(body))
	}
	resp, err := tr.next.RoundTrip(out)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	if c.seen[route.Operation.OperationID] == nil {
		c.seen[route.Operation.OperationID] = map[int]int{}
	}
	c.seen[route.Operation.OperationID][resp.StatusCode]++
	if resp.StatusCode == http.StatusSwitchingProtocols {
		// An upgraded connection is the caller's from here on: its status and headers are
		// checked now, and its body is the connection itself.
		c.mu.Unlock()
		c.checkResponse(what, in, resp, nil)
		return resp, nil
	}
	c.pending++
	c.mu.Unlock()
	if wantInvalid && resp.StatusCode != http.StatusBadRequest {
		c.failf("%s: the document refuses the request, but the server answered %d, not 400", what, resp.StatusCode)
	}
	// The body is checked once the client has read it to its end or closed it, so an exec
	// stream still reaches the client frame by frame.
	resp.Body = &checkedBody{rc: resp.Body, done: func(data []byte) {
		c.checkResponse(what, in, resp, data)
		c.mu.Lock()
		c.pending--
		c.mu.Unlock()
	}}
	return resp, nil
}

// bearerOnly accepts any bearer token (the server judges its value) and nothing else.
func bearerOnly(_ context.Context, ai *openapi3filter.AuthenticationInput) error {
	if ai.SecuritySchemeName != "bearer" || ai.SecurityScheme == nil || ai.SecurityScheme.Type != "http" || !strings.EqualFold(ai.SecurityScheme.Scheme, "bearer") {
		return fmt.Errorf("unexpected security scheme %q", ai.SecuritySchemeName)
	}
	v, ok := strings.CutPrefix(ai.RequestValidationInput.Request.Header.Get("Authorization"), "Bearer ")
	if !ok || v == "" {
		return errors.New("no bearer token")
	}
	return nil
}

// checkResponse checks one answer against the document.
func (c *contract) checkResponse(what string, in *openapi3filter.RequestValidationInput, resp *http.Response, data []byte) {
	ct := resp.Header.Get("Content-Type")
	stream := ct == StreamContentType
	rin := &openapi3filter.ResponseValidationInput{
		RequestValidationInput: in,
		Status:                 resp.StatusCode,
		Header:                 resp.Header,
		Body:                   io.NopCloser(bytes.NewReader(data)),
		Options: &openapi3filter.Options{
			IncludeResponseStatus: true,
			MultiError:            true,
			// kin-openapi has no decoder for the frame stream: its status, headers and
			// media type are checked here, its frames by checkFrames.
			ExcludeResponseBody: stream,
		},
	}
	if err := openapi3filter.ValidateResponse(in.Request.Context(), rin); err != nil {
		c.failf("%s: answer %d does not match the document: %v", what, resp.StatusCode, err)
		return
	}
	if stream {
		ref := in.Route.Operation.Responses.Status(resp.StatusCode)
		if ref == nil || ref.Value.Content.Get(ct) == nil {
			c.failf("%s: answer %d with %s is not in the document", what, resp.StatusCode, ct)
			return
		}
		c.checkFrames(what, data)
	}
	if ct == problemType {
		c.checkProblem(what, resp.StatusCode, data)
	}
}

// checkProblem checks what the schema cannot: the status and type agree with the answer and
// the kind.
func (c *contract) checkProblem(what string, status int, data []byte) {
	var p problem
	if err := json.Unmarshal(data, &p); err != nil {
		c.failf("%s: malformed problem: %v", what, err)
		return
	}
	if p.Status != status || p.Type != problemTypeBase+p.Kind || p.Title != http.StatusText(status) {
		c.failf("%s: problem %+v disagrees with status %d", what, p, status)
	}
}

// checkFrames checks an exec stream: frames of known types, ending with exactly one result
// frame (a Result) or error frame (a Problem).
func (c *contract) checkFrames(what string, data []byte) {
	for len(data) > 0 {
		if len(data) < frameHeader {
			c.failf("%s: a stream ends in a partial frame header", what)
			return
		}
		typ, n := data[0], int(binary.BigEndian.Uint32(data[1:frameHeader]))
		data = data[frameHeader:]
		if len(data) < n {
			c.failf("%s: a stream ends in a partial frame", what)
			return
		}
		payload := data[:n]
		data = data[n:]
		switch typ {
		case FrameStdout, FrameStderr:
			continue
		case FrameRichResult:
			c.checkSchema(what+" rich result frame", "RichResult", payload)
			continue
		case FrameResult:
			c.checkSchema(what+" result frame", "Result", payload)
		case FrameError:
			c.checkSchema(what+" error frame", "Problem", payload)
		default:
			c.failf("%s: frame type %d is not in the document", what, typ)
			return
		}
		if len(data) > 0 {
			c.failf("%s: %d bytes follow the last frame", what, len(data))
		}
		return
	}
	c.failf("%s: the stream ends without a result or error frame", what)
}

// checkSchema validates a JSON payload against a component schema.
func (c *contract) checkSchema(what, name string, payload []byte) {
	ref := c.doc.Components.Schemas[name]
	if ref == nil {
		c.failf("%s: no schema %s", what, name)
		return
	}
	var v any
	if err := json.Unmarshal(payload, &v); err != nil {
		c.failf("%s: malformed JSON: %v", what, err)
		return
	}
	if err := ref.Value.VisitJSON(v, openapi3.EnableJSONSchema2020(), openapi3.MultiErrors(), openapi3.VisitAsResponse()); err != nil {
		c.failf("%s: does not match %s: %v", what, name, err)
	}
}

// checkedBody collects a response body as it is read and hands it to done once, at its end
// or when it is closed (the unread rest is drained first).
type checkedBody struct {
	rc   io.ReadCloser
	buf  bytes.Buffer
	once sync.Once
	done func([]byte)
}

func (b *checkedBody) Read(p []byte) (int, error) {
	n, err := b.rc.Read(p)
	b.buf.Write(p[:n])
	if errors.Is(err, io.EOF) {
		b.once.Do(func() { b.done(b.buf.Bytes()) })
	}
	return n, err
}

func (b *checkedBody) Close() error {
	_, _ = io.Copy(&b.buf, b.rc)
	err := b.rc.Close()
	b.once.Do(func() { b.done(b.buf.Bytes()) })
	return err
}

type contractBundle struct {
	rt        *sandboxd.Runtime
	server    *httptest.Server
	client    *Client
	workspace string
}

// setupContract serves a fresh runtime behind an httptest server and returns a client of it
// whose traffic c checks.
func setupContract(t *testing.T, c *contract) *contractBundle {
	t.Helper()
	ws := t.TempDir()
	rt, err := sandboxd.New(sandboxd.Options{Workspace: ws, KillGrace: 300 * time.Millisecond, DrainDelay: 200 * time.Millisecond})
	require.NoError(t, err)
	srv := httptest.NewServer(Handler(rt, contractToken, nil))
	client := c.checkedClient(srv.URL, contractToken)
	t.Cleanup(func() {
		_ = client.Close()
		_ = rt.Close()
		srv.Close()
	})
	real, err := filepath.EvalSymlinks(ws)
	require.NoError(t, err)
	return &contractBundle{rt: rt, server: srv, client: client, workspace: real}
}

// checkedClient returns a Client of baseURL whose requests and answers c checks.
func (c *contract) checkedClient(baseURL, token string) *Client {
	client := NewTCPClient(baseURL, token)
	client.http = &http.Client{Transport: c.transport(client.transport)}
	return client
}

func wantKind(t *testing.T, err error, k fault.Kind) {
	t.Helper()
	require.Error(t, err)
	require.Truef(t, fault.IsKind(err, k), "want %s, got %s: %v", k, fault.KindOf(err), err)
}

func TestContractDocumentIsValid(t *testing.T) {
	t.Parallel()
	doc := loadContract(t)
	assert.Equal(t, "3.1.0", doc.OpenAPI)
	_, err := gorillamux.NewRouter(doc)
	require.NoError(t, err)
}

// TestContractSchemasMatchTheGoTypes compares every schema's properties with the JSON names
// of its Go type, and its required properties with the fields encoded without omitempty, so
// a field added, renamed or dropped on either side fails even if no request carries it.
func TestContractSchemasMatchTheGoTypes(t *testing.T) {
	t.Parallel()
	doc := loadContract(t)
	for name, v := range map[string]any{
		"ExecRequest":          execBody{},
		"Result":               sandboxd.Result{},
		"RichResult":           sandboxd.RichResult{},
		"ExecError":            sandboxd.ExecError{},
		"ContextInfo":          sandboxd.ContextInfo{},
		"ExecutionInfo":        sandboxd.ExecutionInfo{},
		"TermSize":             sandboxd.TermSize{},
		"FileInfo":             sandboxd.FileInfo{},
		"WriteResult":          writeResult{},
		"CreateContextRequest": createContextBody{},
		"TokenRequest":         tokenBody{},
		"Problem":              problem{},
	} {
		ref := doc.Components.Schemas[name]
		require.NotNil(t, ref, name)
		s := ref.Value
		names, required := jsonFields(reflect.TypeOf(v))
		props := make([]string, 0, len(s.Properties))
		for p := range s.Properties {
			props = append(props, p)
		}
		assert.ElementsMatch(t, names, props, "%s: properties", name)
		assert.ElementsMatch(t, required, s.Required, "%s: required properties", name)
		if assert.NotNil(t, s.AdditionalProperties.Has, "%s: additionalProperties", name) {
			assert.False(t, *s.AdditionalProperties.Has, "%s must refuse unknown properties", name)
		}
	}

	// Every kind a problem can carry is in the enum.
	kinds := doc.Components.Schemas["Problem"].Value.Properties["kind"].Value.Enum
	for _, k := range []string{kindUnauthenticated, kindUnknownRoute, kindMethodNotAllowed, kindAwaitingToken} {
		assert.Contains(t, kinds, k)
	}
	for k := range kindStatus {
		assert.Contains(t, kinds, string(k))
	}
	assert.Contains(t, kinds, string(fault.Internal))
}

// jsonFields returns the JSON names of t's fields (embedded structs flattened) and those
// always encoded (no omitempty).
func jsonFields(t reflect.Type) (names, required []string) {
	for f := range t.Fields() {
		tag := f.Tag.Get("json")
		if tag == "-" || !f.IsExported() && !f.Anonymous {
			continue
		}
		name, opts, _ := strings.Cut(tag, ",")
		if f.Anonymous && name == "" && f.Type.Kind() == reflect.Struct {
			n, r := jsonFields(f.Type)
			names, required = append(names, n...), append(required, r...)
			continue
		}
		if name == "" {
			name = f.Name
		}
		names = append(names, name)
		if !slices.Contains(strings.Split(opts, ","), "omitempty") {
			required = append(required, name)
		}
	}
	return names, required
}

// TestContract drives every route through the Client (and the probes through the same
// checking transport) and checks all traffic against the document.
func TestContract(t *testing.T) {
	t.Parallel()
	c := newContract(t, loadContract(t))
	b := setupContract(t, c)
	ctx := t.Context()
	require.NoError(t, os.Mkdir(filepath.Join(b.workspace, "sub"), 0o755))

	t.Run("health", func(t *testing.T) {
		require.NoError(t, b.client.Ready(ctx))
		hc := &http.Client{Transport: c.transport(http.DefaultTransport)}
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, b.server.URL+"/healthz", nil)
		require.NoError(t, err)
		resp, err := hc.Do(req)
		require.NoError(t, err)
		data, err := io.ReadAll(resp.Body)
		require.NoError(t, resp.Body.Close())
		require.NoError(t, err)
		assert.Equal(t, http.StatusOK, resp.StatusCode)
		assert.JSONEq(t, `{"status":"ok"}`, string(data))
		hc.CloseIdleConnections()
	})

	t.Run("exec", func(t *testing.T) {
		var out, errOut bytes.Buffer
		res, err := b.client.Exec(ctx, sandboxd.ExecRequest{
			Command: `printf %s "$V"; pwd >&2; exit 3`, Env: map[string]string{"V": "v"}, Dir: "sub",
			Timeout: 10 * time.Second, MaxOutput: 1 << 20,
		}, sandboxd.Streams{Stdout: &out, Stderr: &errOut})
		require.NoError(t, err)
		assert.Equal(t, 3, res.ExitCode)
		assert.Equal(t, "v", out.String())
		assert.Equal(t, filepath.Join(b.workspace, "sub")+"\n", errOut.String())

		out.Reset()
		res, err = b.client.Exec(ctx, sandboxd.ExecRequest{Argv: []string{"cat"}, Stdin: []byte("in\x00put\xff")}, sandboxd.Streams{Stdout: &out})
		require.NoError(t, err)
		assert.Equal(t, 0, res.ExitCode)
		assert.Equal(t, "in\x00put\xff", out.String())

		out.Reset()
		_, err = b.client.Exec(ctx, sandboxd.ExecRequest{Language: "python", Code: "print(6 * 7)"}, sandboxd.Streams{Stdout: &out})
		require.NoError(t, err)
		assert.Equal(t, "42\n", out.String())

		res, err = b.client.Exec(ctx, sandboxd.ExecRequest{Command: "head -c 100 /dev/zero", MaxOutput: 10}, sandboxd.Streams{})
		require.NoError(t, err)
		assert.True(t, res.Truncated)

		res, err = b.client.Exec(ctx, sandboxd.ExecRequest{Command: "sleep 30", Timeout: 200 * time.Millisecond}, sandboxd.Streams{})
		require.NoError(t, err)
		assert.True(t, res.TimedOut)
		assert.NotEmpty(t, res.Signal)

		res, err = b.client.Exec(ctx, sandboxd.ExecRequest{Context: "c1", Language: "python", Code: "1/0"}, sandboxd.Streams{})
		require.NoError(t, err)
		require.NotNil(t, res.Error)
		assert.Equal(t, "ZeroDivisionError", res.Error.Name)
		res, err = b.client.Exec(ctx, sandboxd.ExecRequest{Context: "c1", Code: "import os; os._exit(9)"}, sandboxd.Streams{})
		require.NoError(t, err)
		assert.True(t, res.ContextLost)
	})

	t.Run("rich results", func(t *testing.T) {
		code := "display({'text/html': '<b>hi</b>'}, raw=True)\ndisplay({'text/plain': 'x' * 100}, raw=True)\n6 * 7"
		for _, id := range []string{"", "contract-rich"} {
			var live []sandboxd.RichResult
			res, err := b.client.Exec(ctx, sandboxd.ExecRequest{Context: "rich", Language: "python", Code: code, MaxResults: 50, ID: id},
				sandboxd.Streams{ResultFunc: func(r sandboxd.RichResult) { live = append(live, r) }})
			require.NoError(t, err, id)
			require.Len(t, res.Results, 3, id)
			assert.Equal(t, `"\u003cb\u003ehi\u003c/b\u003e"`, string(res.Results[0].Data["text/html"]), "%s: <b>hi</b>, as encoding/json writes it", id)
			assert.Equal(t, &sandboxd.DroppedResult{Types: []string{"text/plain"}, Bytes: 102}, res.Results[1].Dropped, id)
			assert.True(t, res.Results[2].Main, id)
			assert.Equal(t, `"42"`, string(res.Results[2].Data["text/plain"]), id)
			assert.Equal(t, res.Results, live, "%s: each result also came as it was produced", id)
		}
	})

	t.Run("held executions", func(t *testing.T) {
		var out bytes.Buffer
		res, err := b.client.Exec(ctx, sandboxd.ExecRequest{Command: "echo held", ID: "contract-1"}, sandboxd.Streams{Stdout: &out})
		require.NoError(t, err)
		assert.Equal(t, 0, res.ExitCode)
		assert.Equal(t, "held\n", out.String())
		_, err = b.client.Reattach(ctx, "contract-1", sandboxd.Streams{})
		wantKind(t, err, fault.NotFound) // its caller got its end: not kept

		running := make(chan error, 1)
		go func() {
			_, err := b.client.Exec(ctx, sandboxd.ExecRequest{Command: "sleep 30", ID: "contract-2"}, sandboxd.Streams{})
			running <- err
		}()
		require.Eventually(t, func() bool { return b.client.StopExecution(ctx, "contract-2") == nil },
			15*time.Second, 10*time.Millisecond, "stopped once it is held")
		require.Error(t, <-running, "a stopped execution ends its stream with an error")
		wantKind(t, b.client.StopExecution(ctx, "contract-none"), fault.NotFound)
	})

	t.Run("kept executions", func(t *testing.T) {
		// A program reading its open input: what WriteStdin sends comes back.
		info, err := b.client.Start(ctx, sandboxd.ExecRequest{Command: "cat", ID: "contract-cat", StdinOpen: true, Stdin: []byte("first ")})
		require.NoError(t, err)
		assert.Equal(t, "contract-cat", info.ID)
		assert.Equal(t, "cat", info.Program)
		assert.True(t, info.StdinOpen)
		assert.Positive(t, info.PID)
		n, err := b.client.WriteStdin(ctx, "contract-cat", strings.NewReader("second"), true)
		require.NoError(t, err)
		assert.Equal(t, int64(6), n)
		var out bytes.Buffer
		res, err := b.client.Reattach(ctx, "contract-cat", sandboxd.Streams{Stdout: &out})
		require.NoError(t, err)
		assert.Equal(t, 0, res.ExitCode)
		assert.Equal(t, "first second", out.String())
		_, err = b.client.WriteStdin(ctx, "contract-cat", strings.NewReader("late"), false)
		wantKind(t, err, fault.Conflict)
		_, err = b.client.WriteStdin(ctx, "contract-none", nil, true)
		wantKind(t, err, fault.NotFound)

		// A terminal: resized, and its program sees the new size.
		_, err = b.client.Start(ctx, sandboxd.ExecRequest{Command: "read line; stty size", ID: "contract-pty", PTY: &sandboxd.TermSize{Rows: 24, Cols: 80}})
		require.NoError(t, err)
		require.NoError(t, b.client.Resize(ctx, "contract-pty", sandboxd.TermSize{Rows: 40, Cols: 120}))
		_, err = b.client.WriteStdin(ctx, "contract-pty", strings.NewReader("go\n"), false)
		require.NoError(t, err)
		out.Reset()
		_, err = b.client.Reattach(ctx, "contract-pty", sandboxd.Streams{Stdout: &out})
		require.NoError(t, err)
		assert.Contains(t, out.String(), "40 120")
		wantKind(t, b.client.Resize(ctx, "contract-pty", sandboxd.TermSize{Rows: 40, Cols: 120}), fault.Conflict)
		wantKind(t, b.client.Resize(invalidRequest(ctx), "contract-pty", sandboxd.TermSize{}), fault.Validation)

		// A background process is listed until stopped.
		_, err = b.client.Start(ctx, sandboxd.ExecRequest{Command: "sleep 30", ID: "contract-bg", Background: true})
		require.NoError(t, err)
		_, err = b.client.Start(ctx, sandboxd.ExecRequest{Command: "true", ID: "contract-bg"})
		wantKind(t, err, fault.Conflict)
		_, err = b.client.Start(ctx, sandboxd.ExecRequest{Code: "x", Language: "python", Context: "c1", ID: "contract-bad", Background: true})
		wantKind(t, err, fault.Validation)
		list, err := b.client.Executions(ctx)
		require.NoError(t, err)
		ids := []string{}
		for _, e := range list {
			ids = append(ids, e.ID)
		}
		assert.Contains(t, ids, "contract-bg")
		require.NoError(t, b.client.StopExecution(ctx, "contract-bg"))
		_, err = b.client.Reattach(ctx, "contract-bg", sandboxd.Streams{})
		assert.ErrorIs(t, err, ErrStopped)
	})

	t.Run("exec problems", func(t *testing.T) {
		for name, tt := range map[string]struct {
			req     sandboxd.ExecRequest
			invalid bool // the document refuses the request as well
			kind    fault.Kind
		}{
			"nothing to run":   {sandboxd.ExecRequest{}, true, fault.Validation},
			"two things":       {sandboxd.ExecRequest{Command: "true", Argv: []string{"true"}}, true, fault.Validation},
			"negative timeout": {sandboxd.ExecRequest{Command: "true", Timeout: -time.Second}, true, fault.Validation},
			"bad language":     {sandboxd.ExecRequest{Code: "x", Language: "cobol"}, true, fault.Validation},
			"bad env name":     {sandboxd.ExecRequest{Command: "true", Env: map[string]string{"1X": "v"}}, true, fault.Validation},
			"code, no lang":    {sandboxd.ExecRequest{Code: "x"}, false, fault.Validation},
			"dir escapes":      {sandboxd.ExecRequest{Command: "true", Dir: "../x"}, false, fault.Policy},
			"dir missing":      {sandboxd.ExecRequest{Command: "true", Dir: "missing"}, false, fault.NotFound},
		} {
			rctx := ctx
			if tt.invalid {
				rctx = invalidRequest(ctx)
			}
			_, err := b.client.Exec(rctx, tt.req, sandboxd.Streams{})
			wantKind(t, err, tt.kind)
			assert.NotEmpty(t, err.Error(), name)
		}
	})

	t.Run("files", func(t *testing.T) {
		n, err := b.client.WriteFile(ctx, "d/f.txt", strings.NewReader("hello"), 100)
		require.NoError(t, err)
		assert.Equal(t, int64(5), n)
		n, err = b.client.WriteFile(ctx, "empty", nil, -1)
		require.NoError(t, err)
		assert.Zero(t, n)

		rc, err := b.client.ReadFile(ctx, "d/f.txt")
		require.NoError(t, err)
		data, err := io.ReadAll(rc)
		require.NoError(t, rc.Close())
		require.NoError(t, err)
		assert.Equal(t, "hello", string(data))

		list, err := b.client.ListFiles(ctx, "")
		require.NoError(t, err)
		assert.Len(t, list, 3) // d, empty, sub
		list, err = b.client.ListFiles(ctx, "d")
		require.NoError(t, err)
		require.Len(t, list, 1)
		assert.Equal(t, "d/f.txt", list[0].Path)
		list, err = b.client.ListFiles(ctx, "sub")
		require.NoError(t, err)
		assert.Empty(t, list)

		_, err = b.client.ReadFile(ctx, "../etc/passwd")
		wantKind(t, err, fault.Policy)
		_, err = b.client.WriteFile(ctx, "../escaped", strings.NewReader("x"), -1)
		wantKind(t, err, fault.Policy)
		_, err = b.client.ListFiles(ctx, "/etc")
		wantKind(t, err, fault.Policy)
		wantKind(t, b.client.RemoveFile(ctx, "/etc/passwd"), fault.Policy)
		_, err = b.client.WriteFile(ctx, "big", strings.NewReader("12345"), 4)
		wantKind(t, err, fault.TooLarge)
		_, err = b.client.ReadFile(ctx, "missing")
		wantKind(t, err, fault.NotFound)
		_, err = b.client.ListFiles(ctx, "missing")
		wantKind(t, err, fault.NotFound)
		_, err = b.client.ReadFile(ctx, "d")
		wantKind(t, err, fault.Conflict)
		_, err = b.client.ListFiles(ctx, "d/f.txt")
		wantKind(t, err, fault.Conflict)

		require.NoError(t, b.client.RemoveFile(ctx, "d/f.txt"))
		require.NoError(t, b.client.RemoveFile(ctx, "d/f.txt"))
		_, err = b.client.ReadFile(ctx, "d/f.txt")
		wantKind(t, err, fault.NotFound)

		// Folders: made with their parents, moved, removed with what they hold.
		require.NoError(t, b.client.MakeDir(ctx, "m/n"))
		require.NoError(t, b.client.MakeDir(ctx, "m/n"))
		_, err = b.client.WriteFile(ctx, "m/n/g.txt", strings.NewReader("g"), -1)
		require.NoError(t, err)
		wantKind(t, b.client.MakeDir(ctx, "m/n/g.txt"), fault.Conflict)
		wantKind(t, b.client.MakeDir(ctx, "../m"), fault.Policy)
		require.NoError(t, b.client.Move(ctx, "m/n", "o/p"))
		list, err = b.client.ListFiles(ctx, "o/p")
		require.NoError(t, err)
		require.Len(t, list, 1)
		assert.Equal(t, "o/p/g.txt", list[0].Path)
		wantKind(t, b.client.Move(ctx, "missing", "x"), fault.NotFound)
		wantKind(t, b.client.Move(ctx, "o", "/etc/o"), fault.Policy)
		wantKind(t, b.client.Move(ctx, "empty", "o"), fault.Conflict)
		wantKind(t, b.client.RemoveFile(ctx, "o"), fault.Conflict)
		require.NoError(t, b.client.RemoveAll(ctx, "o"))
		require.NoError(t, b.client.RemoveAll(ctx, "o"))
		wantKind(t, b.client.RemoveAll(ctx, "/etc"), fault.Policy)
		_, err = b.client.ListFiles(ctx, "o")
		wantKind(t, err, fault.NotFound)
	})

	t.Run("contexts", func(t *testing.T) {
		info, err := b.client.CreateContext(ctx, "py", "python")
		require.NoError(t, err)
		assert.True(t, info.Alive)
		_, err = b.client.CreateContext(ctx, "py", "python")
		wantKind(t, err, fault.Conflict)
		_, err = b.client.CreateContext(invalidRequest(ctx), "c", "cobol")
		wantKind(t, err, fault.Validation)
		_, err = b.client.CreateContext(invalidRequest(ctx), "-bad", "bash")
		wantKind(t, err, fault.Validation)

		list, err := b.client.ListContexts(ctx)
		require.NoError(t, err)
		names := make([]string, 0, len(list))
		for _, ci := range list {
			names = append(names, ci.Name)
		}
		assert.Contains(t, names, "py")

		info, err = b.client.RestartContext(ctx, "py")
		require.NoError(t, err)
		assert.Zero(t, info.Executions)
		_, err = b.client.RestartContext(ctx, "nope")
		wantKind(t, err, fault.NotFound)

		require.NoError(t, b.client.DeleteContext(ctx, "py"))
		wantKind(t, b.client.DeleteContext(ctx, "py"), fault.NotFound)
	})

	t.Run("ports", func(t *testing.T) {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
		defer ln.Close()
		go func() {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			defer conn.Close()
			_, _ = io.Copy(conn, conn) // an echo server
		}()
		conn, err := b.client.DialPort(ctx, ln.Addr().(*net.TCPAddr).Port)
		require.NoError(t, err)
		_, err = conn.Write([]byte("ping\n"))
		require.NoError(t, err)
		buf := make([]byte, 5)
		_, err = io.ReadFull(conn, buf)
		require.NoError(t, err)
		assert.Equal(t, "ping\n", string(buf))
		require.NoError(t, conn.Close())

		// A port nobody listens on: the port of the listener above, closed.
		closed, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
		port := closed.Addr().(*net.TCPAddr).Port
		require.NoError(t, closed.Close())
		_, err = b.client.DialPort(ctx, port)
		wantKind(t, err, fault.Conflict)
		_, err = b.client.DialPort(invalidRequest(ctx), 70000)
		wantKind(t, err, fault.Validation)
	})

	t.Run("workspace archive", func(t *testing.T) {
		require.NoError(t, os.MkdirAll(filepath.Join(b.workspace, "arc/in"), 0o755))
		require.NoError(t, os.WriteFile(filepath.Join(b.workspace, "arc/in/f.bin"), []byte{0, 0xff, 1}, 0o640))
		require.NoError(t, os.Symlink("in/f.bin", filepath.Join(b.workspace, "arc/link")))
		for _, compressed := range []bool{false, true} {
			rc, err := b.client.ReadArchive(ctx, compressed)
			require.NoError(t, err)
			archive, err := io.ReadAll(rc)
			require.NoError(t, rc.Close())
			require.NoError(t, err)

			into := setupContract(t, c)
			st, err := into.client.WriteArchive(ctx, bytes.NewReader(archive), compressed, 1<<20)
			require.NoError(t, err)
			assert.Positive(t, st.Entries)
			data, err := os.ReadFile(filepath.Join(into.workspace, "arc/in/f.bin"))
			require.NoError(t, err)
			assert.Equal(t, []byte{0, 0xff, 1}, data)
			link, err := os.Readlink(filepath.Join(into.workspace, "arc/link"))
			require.NoError(t, err)
			assert.Equal(t, "in/f.bin", link)

			// Only into an empty workspace (or one emptied first); within X-Max-Bytes.
			_, err = into.client.WriteArchive(ctx, bytes.NewReader(archive), compressed, -1)
			wantKind(t, err, fault.Conflict)
			require.NoError(t, os.WriteFile(filepath.Join(into.workspace, "from-the-image"), []byte("x"), 0o644))
			_, err = into.client.ReplaceWorkspace(ctx, bytes.NewReader(archive), compressed, -1)
			require.NoError(t, err)
			_, err = os.Stat(filepath.Join(into.workspace, "from-the-image"))
			assert.True(t, os.IsNotExist(err), "replace empties the workspace first")
			_, err = os.Stat(filepath.Join(into.workspace, "arc/in/f.bin"))
			require.NoError(t, err)
			_, err = setupContract(t, c).client.WriteArchive(ctx, bytes.NewReader(archive), compressed, 1)
			wantKind(t, err, fault.TooLarge)
		}
		// A hostile archive, a body that is not gzip, a bad gzip parameter.
		var evil bytes.Buffer
		tw := tar.NewWriter(&evil)
		require.NoError(t, tw.WriteHeader(&tar.Header{Name: "../escape", Typeflag: tar.TypeReg, Mode: 0o644}))
		require.NoError(t, tw.Close())
		_, err := setupContract(t, c).client.WriteArchive(ctx, &evil, false, -1)
		wantKind(t, err, fault.Policy)
		_, err = setupContract(t, c).client.WriteArchive(ctx, strings.NewReader("not gzip"), true, -1)
		wantKind(t, err, fault.Validation)
		_, err = setupContract(t, c).client.WriteArchive(ctx, &failingReader{}, false, -1)
		require.ErrorIs(t, err, errSourceFailed)
		resp, err := b.client.do(invalidRequest(ctx), http.MethodGet, "/v1/workspace/archive", url.Values{"gzip": {"yes"}}, nil, nil)
		require.NoError(t, err)
		assert.Equal(t, http.StatusBadRequest, resp.StatusCode)
		discard(resp)
		resp, err = b.client.do(invalidRequest(ctx), http.MethodPut, "/v1/workspace/archive", url.Values{"replace": {"yes"}}, strings.NewReader(""),
			func(h http.Header) { h.Set("Content-Type", ArchiveContentType) })
		require.NoError(t, err)
		assert.Equal(t, http.StatusBadRequest, resp.StatusCode)
		discard(resp)
	})

	t.Run("token", func(t *testing.T) {
		// The token given at start counts as set: the same one is accepted, another refused.
		require.NoError(t, b.client.SetToken(ctx, contractToken))
		wantKind(t, b.client.SetToken(ctx, strings.Repeat("x", 40)), fault.Conflict)
		wantKind(t, b.client.SetToken(invalidRequest(ctx), "short"), fault.Validation)
		wantKind(t, b.client.SetToken(invalidRequest(ctx), strings.Repeat("x", 39)+" "), fault.Validation)
	})

	t.Run("wrong token", func(t *testing.T) {
		wrong := c.checkedClient(b.server.URL, "wrong")
		defer wrong.Close()
		_, err := wrong.ListContexts(ctx)
		wantKind(t, err, fault.Provision)
		_, err = wrong.Exec(ctx, sandboxd.ExecRequest{Command: "touch ran"}, sandboxd.Streams{})
		wantKind(t, err, fault.Provision)
		_, err = wrong.ReadFile(ctx, "x")
		wantKind(t, err, fault.Provision)
		_, statErr := os.Stat(filepath.Join(b.workspace, "ran"))
		assert.True(t, os.IsNotExist(statErr), "nothing runs without the token")
	})

	c.verify(t, true)
}

// TestContractAwaitingToken checks a sandboxd started without a secret (--await-token):
// nothing runs before PUT /v1/token, the first token wins, the same one again is accepted
// and another one refused; then the API serves with that token only.
func TestContractAwaitingToken(t *testing.T) {
	t.Parallel()
	c := newContract(t, loadContract(t))
	ws := t.TempDir()
	rt, err := sandboxd.New(sandboxd.Options{Workspace: ws})
	require.NoError(t, err)
	var set atomic.Int32
	srv := httptest.NewServer(HandlerAwaitingToken(rt, nil, func() { set.Add(1) }))
	client := c.checkedClient(srv.URL, contractToken)
	t.Cleanup(func() {
		_ = client.Close()
		_ = rt.Close()
		srv.Close()
	})
	ctx := t.Context()

	require.NoError(t, client.Ready(ctx), "the probes answer before the token")
	_, err = client.Exec(ctx, sandboxd.ExecRequest{Command: "touch ran"}, sandboxd.Streams{})
	wantKind(t, err, fault.Provision)
	assert.ErrorIs(t, err, ErrAwaitingToken)
	assert.ErrorIs(t, err, ErrUnreachable, "nothing ran: the caller may repeat it")
	_, err = client.ListContexts(ctx)
	assert.ErrorIs(t, err, ErrAwaitingToken)
	_, err = client.ReadFile(ctx, "x")
	assert.ErrorIs(t, err, ErrAwaitingToken)
	_, statErr := os.Stat(filepath.Join(ws, "ran"))
	assert.True(t, os.IsNotExist(statErr), "nothing runs before the token")
	wantKind(t, client.SetToken(invalidRequest(ctx), "too-short"), fault.Validation)
	assert.Zero(t, set.Load())

	require.NoError(t, client.SetToken(ctx, contractToken))
	require.NoError(t, client.SetToken(ctx, contractToken), "the same token again is accepted")
	other := strings.Repeat("o", 48)
	wantKind(t, client.SetToken(ctx, other), fault.Conflict)
	assert.Equal(t, int32(1), set.Load(), "onToken runs once")

	var out bytes.Buffer
	_, err = client.Exec(ctx, sandboxd.ExecRequest{Command: "echo served"}, sandboxd.Streams{Stdout: &out})
	require.NoError(t, err)
	assert.Equal(t, "served\n", out.String())
	wrong := c.checkedClient(srv.URL, other)
	defer wrong.Close()
	_, err = wrong.ListContexts(ctx)
	wantKind(t, err, fault.Provision)
	assert.NotErrorIs(t, err, ErrAwaitingToken)
	c.verify(t, false)
}

// TestSetTokenOn gives the token as the first request of a raw connection, which then
// carries the client's requests.
func TestSetTokenOn(t *testing.T) {
	t.Parallel()
	rt, err := sandboxd.New(sandboxd.Options{Workspace: t.TempDir()})
	require.NoError(t, err)
	srv := httptest.NewServer(HandlerAwaitingToken(rt, nil, nil))
	t.Cleanup(func() {
		_ = rt.Close()
		srv.Close()
	})
	addr := strings.TrimPrefix(srv.URL, "http://")
	dials := 0
	dial := func(token string) func(ctx context.Context) (net.Conn, error) {
		return func(ctx context.Context) (net.Conn, error) {
			dials++
			var d net.Dialer
			conn, err := d.DialContext(ctx, "tcp", addr)
			if err != nil {
				return nil, err
			}
			return SetTokenOn(ctx, conn, "test", token)
		}
	}
	c := NewDialClient("test", dial(contractToken), contractToken)
	defer c.Close()
	for range 3 {
		_, err := c.ListContexts(t.Context())
		require.NoError(t, err)
	}
	assert.Equal(t, 1, dials, "one connection, the token sent once on it")

	other := NewDialClient("test", dial(strings.Repeat("z", 40)), strings.Repeat("z", 40))
	defer other.Close()
	_, err = other.ListContexts(t.Context())
	wantKind(t, err, fault.Conflict)
}

// TestContractErrorFrame checks the error frame: an execution that fails after its stream
// began (sandboxd shuts down) ends the stream with a Problem.
func TestContractErrorFrame(t *testing.T) {
	t.Parallel()
	c := newContract(t, loadContract(t))
	b := setupContract(t, c)
	errc := make(chan error, 1)
	go func() {
		_, err := b.client.Exec(t.Context(), sandboxd.ExecRequest{Command: "echo started; sleep 0.3; touch started; exec sleep 30"}, sandboxd.Streams{})
		errc <- err
	}()
	require.Eventually(t, func() bool {
		_, err := os.Stat(filepath.Join(b.workspace, "started"))
		return err == nil
	}, 15*time.Second, 20*time.Millisecond)
	require.NoError(t, b.rt.Close())
	err := <-errc
	wantKind(t, err, fault.Gone)
	assert.Equal(t, map[int]int{http.StatusOK: 1}, c.seen["exec"])
	c.verify(t, false)
}

// TestContractCatchesDrift makes sure the checks bite: a route, a status or a field missing
// from the document is reported.
func TestContractCatchesDrift(t *testing.T) {
	t.Parallel()
	t.Run("unknown route", func(t *testing.T) {
		t.Parallel()
		c := newContract(t, loadContract(t))
		b := setupContract(t, c)
		err := b.client.call(t.Context(), http.MethodGet, "/v1/nothing", nil, nil, http.StatusOK, nil)
		require.Error(t, err)
		require.Len(t, c.problems(), 1)
		assert.Contains(t, c.problems()[0], "no such operation")
	})
	t.Run("undocumented status", func(t *testing.T) {
		t.Parallel()
		doc := loadContract(t)
		doc.Paths.Find("/v1/files").Get.Responses.Delete("404")
		c := newContract(t, doc)
		b := setupContract(t, c)
		_, err := b.client.ReadFile(t.Context(), "missing")
		wantKind(t, err, fault.NotFound)
		require.Len(t, c.problems(), 1)
		assert.Contains(t, c.problems()[0], "status is not supported")
	})
	t.Run("undocumented field", func(t *testing.T) {
		t.Parallel()
		doc := loadContract(t)
		delete(doc.Components.Schemas["ContextInfo"].Value.Properties, "executions")
		c := newContract(t, doc)
		b := setupContract(t, c)
		_, err := b.client.CreateContext(t.Context(), "sh", "bash")
		require.NoError(t, err)
		require.Len(t, c.problems(), 1)
		assert.Contains(t, c.problems()[0], "executions")
	})
	t.Run("a rule the document lacks", func(t *testing.T) {
		t.Parallel()
		doc := loadContract(t)
		doc.Components.Schemas["ExecRequest"].Value.Properties["timeout_ms"].Value.Min = nil
		c := newContract(t, doc)
		b := setupContract(t, c)
		_, err := b.client.Exec(invalidRequest(t.Context()), sandboxd.ExecRequest{Command: "true", Timeout: -time.Second}, sandboxd.Streams{})
		wantKind(t, err, fault.Validation)
		require.Len(t, c.problems(), 1)
		assert.Contains(t, c.problems()[0], "the document accepts a request the server must refuse")
	})
	t.Run("undocumented request field", func(t *testing.T) {
		t.Parallel()
		doc := loadContract(t)
		delete(doc.Components.Schemas["ExecRequest"].Value.Properties, "timeout_ms")
		c := newContract(t, doc)
		b := setupContract(t, c)
		_, err := b.client.Exec(t.Context(), sandboxd.ExecRequest{Command: "true", Timeout: time.Second}, sandboxd.Streams{})
		require.NoError(t, err)
		require.Len(t, c.problems(), 1)
		assert.Contains(t, c.problems()[0], "timeout_ms")
	})
}

var errSourceFailed = errors.New("the source failed")

// failingReader gives a few bytes, then fails.
type failingReader struct{ done bool }

func (f *failingReader) Read(p []byte) (int, error) {
	if f.done {
		return 0, errSourceFailed
	}
	f.done = true
	return copy(p, make([]byte, 512)), nil
}
