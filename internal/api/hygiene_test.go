package api_test

import (
	"bytes"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sandgate/sandgate/internal/config"
)

// A JSON body that encoding/json would change silently is refused before anything runs:
// bytes that are no UTF-8 (they would become U+FFFD), an unpaired surrogate escape (the
// same), and a second value after the first (it would be dropped).
func TestJSONBodyIsExactlyOneUTF8Text(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{})
	tok := e.token("alice")
	post := func(body string) reply {
		return e.send(tok, "POST", "/v1/sessions/default/commands", "application/json", bytes.NewReader([]byte(body)), int64(len(body)), nil)
	}
	p := requireProblem(t, post("{\"command\":\"echo \xff\xfe > ran\"}"), 400, "validation")
	assert.Contains(t, p["detail"], "not valid UTF-8 (RFC 8259 §8.1)")
	assert.Contains(t, p["detail"], "file upload")
	p = requireProblem(t, post(`{"command":"echo \udcff > ran"}`), 400, "validation")
	assert.Contains(t, p["detail"], `\udcff`)
	assert.Contains(t, p["detail"], "RFC 8259 §8.2")
	p = requireProblem(t, post(`{"command":"echo first > ran"}{"command":"echo second > ran"}`), 400, "validation")
	assert.Contains(t, p["detail"], "data after its JSON value")
	assert.NotContains(t, p["detail"], "file upload")
	// Nothing ran.
	r := post(`{"command":"ls ran 2>&1; echo \ud83d\ude80 ünï"}`)
	require.Equal(t, 200, r.Status, "%s", r.Body)
	assert.Contains(t, r.JSON(t)["stdout"], "No such file")
	assert.Contains(t, r.JSON(t)["stdout"], "🚀 ünï", "paired surrogates and UTF-8 pass")
	// Trailing white space is no second value.
	require.Equal(t, 200, post("{\"command\":\"true\"}\r\n\t ").Status)
}

// A request the contract refuses gets one line per failure that names the parameter or body
// member and what the contract expects of it (its schema's own constraints), in the detail
// and in errors[]; never the validator's own text.
func TestValidationMessagesNameTheParameter(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{})
	tok := e.token("alice", "admins")
	id := e.newSession(tok, "default")
	task := e.do(tok, "POST", "/v1/sessions/"+id+"/commands", map[string]any{"command": "true"}).JSON(t)["task_id"].(string)
	post := func(path, body string) reply {
		return e.send(tok, "POST", path, "application/json", bytes.NewReader([]byte(body)), int64(len(body)), nil)
	}
	for _, c := range []struct {
		r      reply
		field  string
		detail string
	}{
		{e.do(tok, "GET", "/v1/sessions/zzz", nil), "path.session_id", "path parameter 'session_id' must be a string matching ^([0-9a-f]{32}|default)$"},
		{e.do(tok, "GET", "/v1/sessions?limit=abc", nil), "query.limit", "query parameter 'limit' must be an integer from 1 to 500"},
		{e.do(tok, "GET", "/v1/sessions?limit=0", nil), "query.limit", "query parameter 'limit' must be an integer from 1 to 500"},
		{e.do(tok, "GET", "/v1/tasks?status=zz", nil), "query.status", "query parameter 'status' must be one of pending, running, succeeded, failed, timed_out, cancelled, lost"},
		{e.do(tok, "GET", "/v1/audit?kind=zz", nil), "query.kind", "query parameter 'kind' must be one of "},
		{e.send(tok, "GET", "/v1/tasks/"+task+"/output", "", nil, 0, map[string]string{"Last-Event-ID": "x"}), "header.Last-Event-ID", "header 'Last-Event-ID' must be a string matching ^[0-9]{1,19}-[0-9]{1,19}(-[0-9]{1,19})?$"},
		{post("/v1/sessions", `{"from_snapshot":"x"}`), "body.from_snapshot", "body member 'from_snapshot' must be a string matching ^[0-9a-f]{32}$"},
		{post("/v1/sessions", `{"ttl_s":60}`), "body.ttl_s", "body member 'ttl_s' is not a member of this object (the members are cpu, env, from_snapshot, labels, memory_mb, name, on_expiry, profile, secrets, timeout_s)"},
		{post("/v1/sessions", `[1]`), "body", "the body must be a JSON object"},
		{post("/v1/sessions/"+id+"/ports/8080/links", `{"ttl_s":5}`), "body.ttl_s", "body member 'ttl_s' must be an integer from 60 to 604800"},
		{post("/v1/sessions/"+id+"/contexts", `{"name":"a b"}`), "body.name", "body member 'name' must be a string matching ^[A-Za-z0-9_][A-Za-z0-9_.-]{0,63}$"},
		{post("/v1/sessions/"+id+"/commands", `{}`), "body.command", "body member 'command' is required"},
		{post("/v1/sessions/"+id+"/commands", `{"command":"x","zz":1}`), "body.zz", "body member 'zz' is not a member of this object (the members are background, command, "},
		{post("/v1/sessions/"+id+"/commands", `{"command":"x","env":{"A":1}}`), "body.env.A", "body member 'env.A' must be a string of at most 65536 characters"},
		{post("/v1/sessions/"+id+"/commands", `{"command":"x","timeout_s":"5"}`), "body.timeout_s", "body member 'timeout_s' must be a number from 0.1 to 86400"},
		{post("/v1/sessions/"+id+"/commands", `{"command":`), "body", "the body is not valid JSON: unexpected EOF"},
	} {
		p := requireProblem(t, c.r, 400, "validation")
		detail := p["detail"].(string)
		assert.Contains(t, detail, c.detail)
		assert.NotContains(t, detail, "\n", "one line")
		for _, noise := range []string{"jsonschema", "example.com", "Schema:", "Value:", "strconv", "error at", "Error at"} {
			assert.NotContains(t, detail, noise)
		}
		require.NotEmpty(t, p["errors"], "%s", detail)
		fp := p["errors"].([]any)[0].(map[string]any)
		assert.Equal(t, c.field, fp["field"], "%s", detail)
		assert.True(t, strings.HasPrefix(c.detail, fp["message"].(string)) || strings.HasPrefix(fp["message"].(string), c.detail), "%s", fp["message"])
	}
	// Several failures: one line each, joined.
	p := requireProblem(t, post("/v1/sessions/"+id+"/commands", `{"command":"","timeout_s":0}`), 400, "validation")
	assert.Len(t, p["errors"], 2)
	assert.Contains(t, p["detail"], "body member 'command' must be a string of 1 to 1048576 characters; body member 'timeout_s' must be a number from 0.1 to 86400")
}

// File paths that cannot mean what they say are refused with what to do instead: a trailing
// '/' on a write (it wrote a file of that name), an empty element ('//', which answered
// "escapes the sandbox workspace"); reading a folder names the listing.
func TestFilePathMistakes(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{})
	tok := e.token("alice")
	id := e.newSession(tok, "default")
	base := "/v1/sessions/" + id + "/files/"

	p := requireProblem(t, e.do(tok, "PUT", base+"dir/", []byte("x")), 400, "validation")
	assert.Contains(t, p["detail"], "a file path cannot end with '/' ('dir/'); to make a folder, write a file inside it")
	requireProblem(t, e.do(tok, "GET", base+"dir", nil), 404, "not-found")
	for _, path := range []string{"/double/slash.txt", "double//slash.txt"} {
		p := requireProblem(t, e.do(tok, "PUT", base+path, []byte("x")), 400, "validation")
		assert.Contains(t, p["detail"], "the file path '"+path+"' has an empty element")
		assert.Contains(t, p["detail"], "…/files/double/slash.txt")
	}
	require.Equal(t, 200, e.do(tok, "PUT", base+"dir/inside.txt", []byte("x")).Status)
	for _, path := range []string{"dir", "dir/"} {
		p = requireProblem(t, e.do(tok, "GET", base+path, nil), 409, "conflict")
		assert.Equal(t, "'dir' is a folder, not a file; list it with GET /v1/sessions/"+id+"/files?dir=dir", p["detail"])
	}
	// An escaped leading slash is an absolute path: still the policy refusal.
	requireProblem(t, e.do(tok, "GET", base+"%2Fetc%2Fpasswd", nil), 403, "policy")
}

// Limits are stated: a body over server.max_body_bytes names the bytes and the key, a file
// name over the file system's bound names that bound.
func TestLimitsAreStated(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{config: func(c *config.Config) { c.Server.MaxBodyBytes = 1024 }})
	tok := e.token("alice")
	id := e.newSession(tok, "default")
	body := `{"command":"echo ` + strings.Repeat("x", 2000) + `"}`
	p := requireProblem(t, e.send(tok, "POST", "/v1/sessions/"+id+"/commands", "application/json", strings.NewReader(body), int64(len(body)), nil), 413, "too-large")
	assert.Contains(t, p["detail"], "the body is over 1024 bytes (server.max_body_bytes)")

	p = requireProblem(t, e.do(tok, "PUT", "/v1/sessions/"+id+"/files/"+strings.Repeat("n", 300), []byte("x")), 400, "validation")
	assert.Contains(t, p["detail"], "each name in it may have at most 255 bytes")
}

// Session names, label keys and values and snapshot names are shown back by CLIs and
// consoles: a control character (C0, DEL, C1) in them is refused, naming it.
func TestNamesHaveNoControlCharacters(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{})
	tok := e.token("alice")
	for _, c := range []struct {
		body map[string]any
		want string
	}{
		{map[string]any{"name": "evil\u001b[2J"}, `session name "evil\x1b[2J" contains the control character U+001B at byte 4`},
		{map[string]any{"name": "tab\there"}, "U+0009"},
		{map[string]any{"labels": map[string]string{"ok": "fine", "k\u007f": "v"}}, `label key "k\x7f" contains the control character U+007F`},
		{map[string]any{"labels": map[string]string{"k": "\u009b31m"}}, `label "k"'s value "\u009b31m" contains the control character U+009B`},
	} {
		p := requireProblem(t, e.do(tok, "POST", "/v1/sessions", c.body), 400, "validation")
		assert.Contains(t, p["detail"], c.want)
		assert.Contains(t, p["detail"], "control characters (U+0000–U+001F, U+007F–U+009F) are not allowed")
	}
	r := e.do(tok, "POST", "/v1/sessions", map[string]any{"name": "Ünï 🚀 analysis", "labels": map[string]string{"é": "ß ✓"}})
	require.Equal(t, 201, r.Status, "%s", r.Body)
	id := r.JSON(t)["id"].(string)
	p := requireProblem(t, e.do(tok, "POST", "/v1/sessions/"+id+"/snapshots", map[string]any{"name": "before\r\nafter"}), 400, "validation")
	assert.Contains(t, p["detail"], `snapshot name "before\r\nafter" contains the control character U+000D at byte 6`)
}

// A JSON operation's body of another media type answers 415 naming the one it takes (in
// Accept-Post too); parameters of application/json and a body-less call still pass.
func TestWrongContentTypeIs415(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{})
	tok := e.token("alice")
	body := `{"command":"echo ran"}`
	for _, ctype := range []string{"text/plain", "application/merge-patch+json", "application/x-www-form-urlencoded", ""} {
		r := e.send(tok, "POST", "/v1/sessions/default/commands", ctype, strings.NewReader(body), int64(len(body)), nil)
		p := requireProblem(t, r, 415, "unsupported-media-type")
		assert.Equal(t, "application/json", r.Header.Get("Accept-Post"))
		assert.Contains(t, p["detail"], "this operation takes a body of type application/json")
		assert.Contains(t, p["detail"], "send it with Content-Type: application/json")
		if ctype != "" {
			assert.Contains(t, p["detail"], "Content-Type '"+ctype+"'")
		} else {
			assert.Contains(t, p["detail"], "no Content-Type")
		}
	}
	r := e.send(tok, "POST", "/v1/sessions/default/commands", "Application/JSON; charset=utf-8", strings.NewReader(body), int64(len(body)), nil)
	require.Equal(t, 200, r.Status, "%s", r.Body)
	require.Equal(t, 201, e.send(tok, "POST", "/v1/sessions", "", nil, 0, nil).Status, "an optional body left out")
}

// A file name that is not UTF-8 (a program made it) is listed with path_escaped, its path
// percent-encoded byte for byte, which downloads that very file; UTF-8 names carry none.
func TestNonUTF8FileNamesCanBeFetchedBack(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{})
	tok := e.token("alice")
	id := e.newSession(tok, "default")
	base := "/v1/sessions/" + id + "/files"
	r := e.do(tok, "POST", "/v1/sessions/"+id+"/commands", map[string]any{"command": `mkdir -p d && printf 'raw bytes' > "$(printf 'd/\377name')" && echo ok > plain.txt`})
	require.Equal(t, 200, r.Status, "%s", r.Body)
	require.EqualValues(t, 0, r.JSON(t)["exit_code"], "%s", r.Body)

	list := e.do(tok, "GET", base+"?dir=d", nil)
	require.Equal(t, 200, list.Status, "%s", list.Body)
	entries := list.JSON(t)["entries"].([]any)
	require.Len(t, entries, 1)
	en := entries[0].(map[string]any)
	assert.Equal(t, "\uFFFDname", en["name"], "the display form")
	assert.Equal(t, "d/%FFname", en["path_escaped"])
	got := e.do(tok, "GET", base+"/"+en["path_escaped"].(string), nil)
	require.Equal(t, 200, got.Status, "%s", got.Body)
	assert.Equal(t, "raw bytes", string(got.Body))
	requireProblem(t, e.do(tok, "GET", base+"/d/%EF%BF%BDname", nil), 404, "not-found")

	for _, en := range e.do(tok, "GET", base, nil).JSON(t)["entries"].([]any) {
		assert.NotContains(t, en.(map[string]any), "path_escaped", "UTF-8 names need none")
	}
	// The upload's answer says the same.
	w := e.do(tok, "PUT", base+"/%FF%FE.txt", []byte("x"))
	require.Equal(t, 200, w.Status, "%s", w.Body)
	assert.Equal(t, "%FF%FE.txt", w.JSON(t)["path_escaped"])
	assert.Equal(t, "x", string(e.do(tok, "GET", base+"/%FF%FE.txt", nil).Body))
}

// TestAuthenticationBeforeParameters: a request whose parameters cannot even be bound (the
// generated wrapper's 400) is answered 401 to a caller without a valid token, as any other
// request on an authenticated operation is; an authenticated caller gets the 400.
func TestAuthenticationBeforeParameters(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{})
	tok := e.token("alice")
	for _, path := range []string{"/v1/sessions?limit=abc", "/v1/audit?since=yesterday", "/v1/tasks?limit=-"} {
		requireProblem(t, e.do("", "GET", path, nil), 401, "unauthenticated")
		requireProblem(t, e.do("not-a-token", "GET", path, nil), 401, "unauthenticated")
	}
	requireProblem(t, e.do(tok, "GET", "/v1/sessions?limit=abc", nil), 400, "validation")
}
