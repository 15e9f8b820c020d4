package api_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestStatefulCode: on a profile with stateful: true, a variable set by one code call is there
// in the next; a command never shares it; restart clears it.
func TestStatefulCode(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{})
	tok := e.token("alice")
	sid := e.newSession(tok, "stateful")
	code := func(body map[string]any) map[string]any {
		t.Helper()
		r := e.do(tok, "POST", "/v1/sessions/"+sid+"/code", body)
		require.Equal(t, 200, r.Status, "body: %s", r.Body)
		return r.JSON(t)
	}
	code(map[string]any{"code": "answer = 6 * 7"})
	res := code(map[string]any{"code": "print(answer)"})
	assert.Equal(t, "42\n", res["stdout"])
	assert.EqualValues(t, 0, res["exit_code"])

	// An exception is a result: traceback on stderr, exit 1, state kept.
	res = code(map[string]any{"code": "1 / 0"})
	assert.EqualValues(t, 1, res["exit_code"])
	assert.Contains(t, res["stderr"], "ZeroDivisionError")
	assert.Equal(t, "42\n", code(map[string]any{"code": "print(answer)"})["stdout"])

	// A named bash context keeps cwd and exports; the default context is untouched.
	code(map[string]any{"code": "mkdir -p d && cd d && export X=7", "language": "bash", "context": "sh"})
	res = code(map[string]any{"code": `echo "$X $(basename "$PWD")"`, "language": "bash", "context": "sh"})
	assert.Equal(t, "7 d\n", res["stdout"])

	r := e.do(tok, "GET", "/v1/sessions/"+sid+"/contexts", nil)
	require.Equal(t, 200, r.Status, "body: %s", r.Body)
	list := r.JSON(t)["contexts"].([]any)
	require.Len(t, list, 2)
	assert.Equal(t, "default", list[0].(map[string]any)["name"])
	assert.Equal(t, "python", list[0].(map[string]any)["language"])
	assert.Equal(t, "sh", list[1].(map[string]any)["name"])

	r = e.do(tok, "POST", "/v1/sessions/"+sid+"/contexts/default/restart", nil)
	require.Equal(t, 200, r.Status, "body: %s", r.Body)
	assert.Equal(t, "default", r.JSON(t)["name"])
	res = code(map[string]any{"code": "print(answer)"})
	assert.EqualValues(t, 1, res["exit_code"])
	assert.Contains(t, res["stderr"], "NameError")

	r = e.do(tok, "POST", "/v1/sessions/"+sid+"/contexts", map[string]any{"name": "extra", "language": "python"})
	require.Equal(t, 201, r.Status, "body: %s", r.Body)
	requireProblem(t, e.do(tok, "POST", "/v1/sessions/"+sid+"/contexts", map[string]any{"name": "extra"}), 409, "conflict")
	r = e.do(tok, "DELETE", "/v1/sessions/"+sid+"/contexts/extra", nil)
	require.Equal(t, 200, r.Status, "body: %s", r.Body)
	assert.Len(t, r.JSON(t)["contexts"], 2)
	requireProblem(t, e.do(tok, "DELETE", "/v1/sessions/"+sid+"/contexts/extra", nil), 404, "not-found")
	requireProblem(t, e.do(tok, "POST", "/v1/sessions/"+sid+"/contexts/nope/restart", nil), 404, "not-found")
}

// TestContextInputErrors: bad names, a context on a command, unknown languages and other
// tenants' sessions get clear problems.
func TestContextInputErrors(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{})
	tok := e.token("alice")
	sid := e.newSession(tok, "stateful")
	requireProblem(t, e.do(tok, "POST", "/v1/sessions/"+sid+"/code", map[string]any{"code": "1", "context": "bad name!"}), 400, "validation")
	requireProblem(t, e.do(tok, "POST", "/v1/sessions/"+sid+"/commands", map[string]any{"command": "true", "context": "x"}), 400, "validation")
	requireProblem(t, e.do(tok, "POST", "/v1/sessions/"+sid+"/contexts", map[string]any{"name": "c", "language": "cobol"}), 400, "validation")
	requireProblem(t, e.do(tok, "POST", "/v1/sessions/"+sid+"/contexts/bad%20name/restart", nil), 400, "validation")
	// "." and ".." would be path segments in URLs: never context names.
	for _, name := range []string{".", "..", ".hidden", "-x"} {
		requireProblem(t, e.do(tok, "POST", "/v1/sessions/"+sid+"/contexts", map[string]any{"name": name}), 400, "validation")
		requireProblem(t, e.do(tok, "POST", "/v1/sessions/"+sid+"/code", map[string]any{"code": "1", "context": name}), 400, "validation")
	}
	// Another principal sees nothing of alice's session.
	requireProblem(t, e.do(e.token("mallory"), "GET", "/v1/sessions/"+sid+"/contexts", nil), 404, "not-found")
	// per_call sandboxes keep no contexts.
	requireProblem(t, e.do(tok, "GET", "/v1/sessions/default/contexts?profile=oneshot", nil), 409, "conflict")
	// Without stateful, code runs in a fresh interpreter each time.
	plain := e.newSession(tok, "default")
	r := e.do(tok, "POST", "/v1/sessions/"+plain+"/code", map[string]any{"code": "v = 1"})
	require.Equal(t, 200, r.Status)
	r = e.do(tok, "POST", "/v1/sessions/"+plain+"/code", map[string]any{"code": "print(v)"})
	require.Equal(t, 200, r.Status)
	assert.EqualValues(t, 1, r.JSON(t)["exit_code"])
}

// TestContextOpsDoNotWaitForExecutions: listing answers while an execution runs, and a restart
// frees a context stuck in one (the execution reports the lost context).
func TestContextOpsDoNotWaitForExecutions(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{})
	tok := e.token("alice")
	sid := e.newSession(tok, "stateful")
	r := e.do(tok, "POST", "/v1/sessions/"+sid+"/code", map[string]any{"code": "x = 1"})
	require.Equal(t, 200, r.Status, "body: %s", r.Body)
	r = e.do(tok, "POST", "/v1/sessions/"+sid+"/code", map[string]any{"code": "import time\nprint('stuck', flush=True)\nwhile True:\n    try:\n        time.sleep(60)\n    except KeyboardInterrupt:\n        pass", "wait_s": 0})
	require.Equal(t, 202, r.Status, "body: %s", r.Body)
	task := r.JSON(t)["id"].(string)
	time.Sleep(300 * time.Millisecond)

	start := time.Now()
	r = e.do(tok, "GET", "/v1/sessions/"+sid+"/contexts", nil)
	require.Equal(t, 200, r.Status, "body: %s", r.Body)
	r = e.do(tok, "POST", "/v1/sessions/"+sid+"/contexts/default/restart", nil)
	require.Equal(t, 200, r.Status, "body: %s", r.Body)
	assert.Less(t, time.Since(start), 30*time.Second, "context operations waited for the execution")

	done := e.waitTask(tok, task)
	res := done["result"].(map[string]any)
	assert.Contains(t, res["notice"], "context 'default' ended")
	r = e.do(tok, "POST", "/v1/sessions/"+sid+"/code", map[string]any{"code": "print('x' in globals())"})
	require.Equal(t, 200, r.Status, "body: %s", r.Body)
	assert.Equal(t, "False\n", r.JSON(t)["stdout"])
}

// TestBashContextInheritsItsLanguage: code naming an existing bash context needs no language,
// and bash code without a context runs in a fresh shell even on a stateful profile.
func TestBashContextInheritsItsLanguage(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{})
	tok := e.token("alice")
	sid := e.newSession(tok, "stateful")
	r := e.do(tok, "POST", "/v1/sessions/"+sid+"/contexts", map[string]any{"name": "shell", "language": "bash"})
	require.Equal(t, 201, r.Status, "body: %s", r.Body)
	r = e.do(tok, "POST", "/v1/sessions/"+sid+"/code", map[string]any{"code": "export GREETING=hi", "context": "shell"})
	require.Equal(t, 200, r.Status, "body: %s", r.Body)
	r = e.do(tok, "POST", "/v1/sessions/"+sid+"/code", map[string]any{"code": `echo "$GREETING"`, "context": "shell"})
	require.Equal(t, 200, r.Status, "body: %s", r.Body)
	assert.Equal(t, "hi\n", r.JSON(t)["stdout"])
	r = e.do(tok, "POST", "/v1/sessions/"+sid+"/code", map[string]any{"code": `echo "[$GREETING]"`, "language": "bash"})
	require.Equal(t, 200, r.Status, "body: %s", r.Body)
	assert.Equal(t, "[]\n", r.JSON(t)["stdout"])
	requireProblem(t, e.do(tok, "POST", "/v1/sessions/"+sid+"/code", map[string]any{"code": "print(1)", "language": "python", "context": "shell"}), 400, "validation")
}
