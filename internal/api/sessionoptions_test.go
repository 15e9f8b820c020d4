package api_test

import (
	"bytes"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// sessionIDs are the ids of a session list answer, in its order.
func sessionIDs(t *testing.T, r reply) []string {
	t.Helper()
	require.Equal(t, 200, r.Status, "body: %s", r.Body)
	var ids []string
	for _, s := range r.JSON(t)["sessions"].([]any) {
		ids = append(ids, s.(map[string]any)["id"].(string))
	}
	return ids
}

// TestLabelSelectors: ?label=key=value lists only the sessions (and the tasks of sessions)
// carrying that label, repeated ones all; a selector without "=" is a 400 that says how.
func TestLabelSelectors(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{})
	alice, bob := e.token("alice"), e.token("bob")
	mk := func(tok string, labels map[string]string) string {
		r := e.do(tok, "POST", "/v1/sessions", map[string]any{"labels": labels})
		require.Equal(t, 201, r.Status, "body: %s", r.Body)
		return r.JSON(t)["id"].(string)
	}
	ml := mk(alice, map[string]string{"team": "ml", "env": "dev"})
	mlProd := mk(alice, map[string]string{"team": "ml", "env": "prod"})
	web := mk(alice, map[string]string{"team": "web"})
	mk(bob, map[string]string{"team": "ml"}) // another principal's: never listed for alice

	require.ElementsMatch(t, []string{ml, mlProd}, sessionIDs(t, e.do(alice, "GET", "/v1/sessions?label=team=ml", nil)))
	require.Equal(t, []string{mlProd}, sessionIDs(t, e.do(alice, "GET", "/v1/sessions?label=team=ml&label=env=prod", nil)))
	require.Empty(t, sessionIDs(t, e.do(alice, "GET", "/v1/sessions?label=team=ops", nil)))
	require.ElementsMatch(t, []string{ml, mlProd, web}, sessionIDs(t, e.do(alice, "GET", "/v1/sessions", nil)))
	// The value may hold "=" (split at the first one) and is matched exactly.
	odd := mk(alice, map[string]string{"q": "a=b"})
	require.Equal(t, []string{odd}, sessionIDs(t, e.do(alice, "GET", "/v1/sessions?label="+url.QueryEscape("q=a=b"), nil)))

	p := requireProblem(t, e.do(alice, "GET", "/v1/sessions?label=team", nil), 400, "validation")
	require.Contains(t, p["detail"], "key=value", "the detail says what a selector is")
	p = requireProblem(t, e.do(alice, "GET", "/v1/sessions?label=team=ml&label=team=web", nil), 400, "validation")
	require.Contains(t, p["detail"], "'team'")

	// Tasks: those of the sessions carrying the labels.
	run := func(sid string) string {
		r := e.do(alice, "POST", "/v1/sessions/"+sid+"/commands", map[string]any{"command": "true"})
		require.Equal(t, 200, r.Status, "body: %s", r.Body)
		return r.JSON(t)["task_id"].(string)
	}
	tML, tWeb := run(ml), run(web)
	r := e.do(alice, "GET", "/v1/tasks?label=team=ml", nil)
	require.Equal(t, 200, r.Status, "body: %s", r.Body)
	var tasks []string
	for _, x := range r.JSON(t)["tasks"].([]any) {
		tasks = append(tasks, x.(map[string]any)["id"].(string))
	}
	require.Equal(t, []string{tML}, tasks)
	require.NotContains(t, tasks, tWeb)
	requireProblem(t, e.do(alice, "GET", "/v1/tasks?label==ml", nil), 400, "validation")
}

// TestUnknownQueryParameters: a query parameter the operation does not declare is a 400
// naming it and the ones the operation takes, on any operation; declared ones pass.
func TestUnknownQueryParameters(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{})
	alice := e.token("alice")
	sid := e.newSession(alice, "default")

	p := requireProblem(t, e.do(alice, "GET", "/v1/sessions?lable=x", nil), 400, "validation")
	detail := p["detail"].(string)
	require.Contains(t, detail, "'lable'")
	require.Contains(t, detail, "'label'", "the known parameters are named")
	require.Equal(t, "query.lable", p["errors"].([]any)[0].(map[string]any)["field"])

	p = requireProblem(t, e.do(alice, "GET", "/v1/sessions/"+sid+"/files?path=sub", nil), 400, "validation")
	require.Contains(t, p["detail"], "'path'")
	p = requireProblem(t, e.do(alice, "GET", "/v1/me?x=1&y=2", nil), 400, "validation")
	require.Contains(t, p["detail"], "'x', 'y'")
	require.Contains(t, p["detail"], "no query parameters")
	// A path-level parameter (profile) and an operation's own are known.
	require.Equal(t, 200, e.do(alice, "GET", "/v1/sessions/"+sid+"?profile=default", nil).Status)
	require.Equal(t, 200, e.do(alice, "GET", "/v1/sessions?limit=5&status=active", nil).Status)
	// A POST too, and before anything runs.
	requireProblem(t, e.do(alice, "POST", "/v1/sessions/"+sid+"/commands?wait=1", map[string]any{"command": "touch ran"}), 400, "validation")
	requireProblem(t, e.do(alice, "GET", "/v1/sessions/"+sid+"/files/ran", nil), 404, "not-found")
	// Without a token the answer is still 401: nothing about the request is told.
	requireProblem(t, e.do("", "GET", "/v1/sessions?lable=x", nil), 401, "unauthenticated")
}

// TestSessionPatch: a merge patch renames and relabels (null removes), sets or clears the
// lifetime; both merge-patch and plain JSON are taken; another principal's session is 404.
func TestSessionPatch(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{})
	alice, bob := e.token("alice"), e.token("bob")
	r := e.do(alice, "POST", "/v1/sessions", map[string]any{"name": "a", "labels": map[string]string{"team": "ml", "stage": "dev"}})
	require.Equal(t, 201, r.Status, "body: %s", r.Body)
	sid := r.JSON(t)["id"].(string)
	patch := func(tok, ctype, body string) reply {
		return e.send(tok, "PATCH", "/v1/sessions/"+sid, ctype, strings.NewReader(body), int64(len(body)), nil)
	}

	r = patch(alice, "application/merge-patch+json", `{"name":"b","labels":{"stage":null,"owner":"x"}}`)
	require.Equal(t, 200, r.Status, "body: %s", r.Body)
	s := r.JSON(t)
	require.Equal(t, "b", s["name"])
	require.Equal(t, map[string]any{"team": "ml", "owner": "x"}, s["labels"])
	got := e.do(alice, "GET", "/v1/sessions/"+sid, nil).JSON(t)
	require.Equal(t, s["labels"], got["labels"], "the change is kept")
	require.Equal(t, []string{sid}, sessionIDs(t, e.do(alice, "GET", "/v1/sessions?label=owner=x", nil)))

	// Members left out are kept; the lifetime is set from now, then cleared.
	before := time.Now()
	r = patch(alice, "application/json", `{"timeout_s":600}`)
	require.Equal(t, 200, r.Status, "body: %s", r.Body)
	s = r.JSON(t)
	require.Equal(t, "b", s["name"])
	exp, err := time.Parse(time.RFC3339Nano, s["expires_at"].(string))
	require.NoError(t, err)
	require.WithinRange(t, exp, before.Add(599*time.Second), time.Now().Add(601*time.Second))
	require.Equal(t, "destroy", s["on_expiry"])
	r = patch(alice, "application/merge-patch+json", `{"timeout_s":null,"name":null,"labels":null}`)
	require.Equal(t, 200, r.Status, "body: %s", r.Body)
	s = r.JSON(t)
	require.NotContains(t, s, "expires_at")
	require.NotContains(t, s, "name")
	require.Empty(t, s["labels"])

	requireProblem(t, patch(bob, "application/merge-patch+json", `{"name":"mine"}`), 404, "not-found")
	requireProblem(t, patch(alice, "text/plain", `{"name":"c"}`), 415, "unsupported-media-type")
	requireProblem(t, patch(alice, "application/json", `{"nmae":"c"}`), 400, "validation")
	requireProblem(t, patch(alice, "application/json", `{"timeout_s":2592001}`), 400, "validation")
	many := map[string]any{}
	for i := range 33 {
		many[string(rune('a'+i%26))+strings.Repeat("x", i/26)] = "v"
	}
	requireProblem(t, e.do(alice, "PATCH", "/v1/sessions/"+sid, map[string]any{"labels": many}), 400, "validation")
	require.Empty(t, e.do(alice, "GET", "/v1/sessions/"+sid, nil).JSON(t)["labels"], "a refused patch changes nothing")
}

// TestSessionEnvAndTimeout: a session made with env and timeout_s shows the variables'
// names (never their values) and its end; its commands, code and contexts see the env, an
// execution's own env wins.
func TestSessionEnvAndTimeout(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{})
	alice := e.token("alice")
	before := time.Now()
	r := e.do(alice, "POST", "/v1/sessions", map[string]any{
		"profile": "stateful", "env": map[string]string{"GREETING": "hello", "API_TOKEN": "s3cret"}, "timeout_s": 3600,
	})
	require.Equal(t, 201, r.Status, "body: %s", r.Body)
	require.NotContains(t, string(r.Body), "s3cret", "values are never shown")
	sid := r.JSON(t)["id"].(string)
	s := e.do(alice, "GET", "/v1/sessions/"+sid, nil)
	require.NotContains(t, string(s.Body), "s3cret")
	got := s.JSON(t)
	require.Equal(t, []any{"API_TOKEN", "GREETING"}, got["env_names"])
	exp, err := time.Parse(time.RFC3339Nano, got["expires_at"].(string))
	require.NoError(t, err)
	require.WithinRange(t, exp, before.Add(3599*time.Second), time.Now().Add(3601*time.Second))

	r = e.do(alice, "POST", "/v1/sessions/"+sid+"/commands", map[string]any{"command": `echo "$GREETING $API_TOKEN"`})
	require.Equal(t, 200, r.Status, "body: %s", r.Body)
	require.Equal(t, "hello s3cret\n", r.JSON(t)["stdout"])
	r = e.do(alice, "POST", "/v1/sessions/"+sid+"/commands", map[string]any{"command": `echo "$GREETING"`, "env": map[string]string{"GREETING": "hi"}})
	require.Equal(t, "hi\n", r.JSON(t)["stdout"], "the execution's own env wins")
	r = e.do(alice, "POST", "/v1/sessions/"+sid+"/code", map[string]any{"code": `import os; print(os.environ["GREETING"])`})
	require.Equal(t, 200, r.Status, "body: %s", r.Body)
	require.Equal(t, "hello\n", r.JSON(t)["stdout"], "the default context sees it")
	r = e.do(alice, "POST", "/v1/sessions/"+sid+"/code", map[string]any{"code": `echo "$GREETING"`, "language": "bash", "context": "sh"})
	require.Equal(t, 200, r.Status, "body: %s", r.Body)
	require.Equal(t, "hello\n", r.JSON(t)["stdout"], "a named bash context sees it")

	requireProblem(t, e.do(alice, "POST", "/v1/sessions", map[string]any{"env": map[string]string{"1BAD": "x"}}), 400, "validation")
	requireProblem(t, e.do(alice, "POST", "/v1/sessions", map[string]any{"timeout_s": 0}), 400, "validation")
	// local_subprocess cannot bound resources: asking for them is refused, never ignored.
	p := requireProblem(t, e.do(alice, "POST", "/v1/sessions", map[string]any{"cpu": 0.5}), 403, "policy")
	require.Contains(t, p["detail"], "cpu")
	requireProblem(t, e.do(alice, "POST", "/v1/sessions", map[string]any{"memory_mb": 256}), 403, "policy")
}

// TestStructuredUploadRefused: a raw upload sent as JSON or a form is a 415 naming
// application/octet-stream, and writes nothing; octet-stream, another type or none store the
// bytes as sent.
func TestStructuredUploadRefused(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{})
	alice := e.token("alice")
	sid := e.newSession(alice, "default")
	put := func(name, ctype string, body []byte) reply {
		return e.send(alice, "PUT", "/v1/sessions/"+sid+"/files/"+name, ctype, bytes.NewReader(body), int64(len(body)), nil)
	}
	for _, ct := range []string{"application/json", "application/json; charset=utf-8", "application/vnd.api+json", "multipart/form-data; boundary=x"} {
		p := requireProblem(t, put("j.bin", ct, []byte(`"hello"`)), 415, "unsupported-media-type")
		require.Contains(t, p["detail"], "application/octet-stream", ct)
	}
	requireProblem(t, e.do(alice, "GET", "/v1/sessions/"+sid+"/files/j.bin", nil), 404, "not-found")
	// application/x-www-form-urlencoded: what curl --data-binary @file declares, with the
	// file's bytes unchanged (the README's walkthrough uploads so).
	for i, ct := range []string{"application/octet-stream", "", "text/plain", "image/png", "application/x-www-form-urlencoded"} {
		name := "f" + string(rune('0'+i))
		r := put(name, ct, []byte("hello"))
		require.Equal(t, 200, r.Status, "%s: %s", ct, r.Body)
		require.EqualValues(t, 5, r.JSON(t)["size"], ct)
		require.Equal(t, "hello", string(e.do(alice, "GET", "/v1/sessions/"+sid+"/files/"+name, nil).Body))
	}
}

// TestStreamChunksNameTheirStream: an output chunk's data names its stream as the event does.
func TestStreamChunksNameTheirStream(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{})
	alice := e.token("alice")
	sid := e.newSession(alice, "default")
	s := e.stream(alice, "POST", "/v1/sessions/"+sid+"/commands", map[string]any{"command": "echo out; echo err >&2"}, nil)
	require.Equal(t, 200, s.resp.StatusCode)
	seen := map[string]bool{}
	for {
		ev := s.event(t)
		if ev.event == "result" {
			break
		}
		if ev.event == "stdout" || ev.event == "stderr" {
			require.Equal(t, ev.event, decode(t, ev.data)["stream"])
			seen[ev.event] = true
		}
	}
	require.True(t, seen["stdout"] && seen["stderr"], "both streams were seen: %v", seen)
}

// TestRunKind: a one-off run may name its kind (the union's discriminator), which must fit
// the member given; without it the member decides.
func TestRunKind(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{})
	alice := e.token("alice")
	r := e.do(alice, "POST", "/v1/runs", map[string]any{"kind": "command", "profile": "oneshot", "command": "echo hi"})
	require.Equal(t, 200, r.Status, "body: %s", r.Body)
	require.Equal(t, "hi\n", r.JSON(t)["stdout"])
	r = e.do(alice, "POST", "/v1/runs", map[string]any{"kind": "code", "profile": "oneshot", "code": "print(6*7)"})
	require.Equal(t, 200, r.Status, "body: %s", r.Body)
	require.Equal(t, "42\n", r.JSON(t)["stdout"])
	requireProblem(t, e.do(alice, "POST", "/v1/runs", map[string]any{"kind": "code", "profile": "oneshot", "command": "echo hi"}), 400, "validation")
	requireProblem(t, e.do(alice, "POST", "/v1/runs", map[string]any{"kind": "shell", "profile": "oneshot", "command": "echo hi"}), 400, "validation")
}
