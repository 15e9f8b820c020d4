package api_test

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sandgate/sandgate/internal/config"
)

// TestCodeRichResults: code's rich results — the last expression's value and its displays —
// come back in the execution result and in its task, within the output limit.
func TestCodeRichResults(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{})
	tok := e.token("alice")
	sid := e.newSession(tok, "stateful")

	r := e.do(tok, "POST", "/v1/sessions/"+sid+"/code", map[string]any{"code": "6 * 7"})
	require.Equal(t, 200, r.Status, "%s", r.Body)
	res := r.JSON(t)
	assert.Equal(t, "", res["stdout"], "the value is a result, not output")
	assert.Equal(t, []any{map[string]any{"is_main_result": true, "data": map[string]any{"text/plain": "42"}}}, res["results"])

	r = e.do(tok, "POST", "/v1/sessions/"+sid+"/code", map[string]any{"code": `display({"text/html": "<b>table</b>", "text/plain": "table"}, raw=True)
x = 1`})
	require.Equal(t, 200, r.Status, "%s", r.Body)
	res = r.JSON(t)
	assert.Equal(t, []any{map[string]any{"is_main_result": false, "data": map[string]any{"text/html": "<b>table</b>", "text/plain": "table"}}}, res["results"])
	task := e.do(tok, "GET", "/v1/tasks/"+res["task_id"].(string), nil).JSON(t)
	assert.Equal(t, res["results"], task["result"].(map[string]any)["results"], "the task keeps them")

	r = e.do(tok, "POST", "/v1/sessions/"+sid+"/code", map[string]any{"code": "print(1)"})
	_, has := r.JSON(t)["results"]
	assert.False(t, has, "no results, no member")
}

// TestCodeRichResultsOverTheLimit: a result larger than sandbox.max_output_bytes is reported
// as dropped, never cut.
func TestCodeRichResultsOverTheLimit(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{config: func(c *config.Config) { c.Sandbox.MaxOutputBytes = 1000 }})
	tok := e.token("alice")
	sid := e.newSession(tok, "stateful")
	r := e.do(tok, "POST", "/v1/sessions/"+sid+"/code", map[string]any{"code": `display({"image/png": "iVBORw0KGgoA" * 200}, raw=True)
"small"`})
	require.Equal(t, 200, r.Status, "%s", r.Body)
	results := r.JSON(t)["results"].([]any)
	require.Len(t, results, 2)
	assert.Equal(t, map[string]any{"is_main_result": false, "dropped": map[string]any{"types": []any{"image/png"}, "bytes": 2402.0}}, results[0])
	assert.Equal(t, map[string]any{"is_main_result": true, "data": map[string]any{"text/plain": "'small'"}}, results[1])
}

// TestCodeRichResultsStream: with Accept: text/event-stream each rich result is a
// rich_result event as the code produces it; the result has them all; a stream resumed after
// one does not repeat it.
func TestCodeRichResultsStream(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{})
	tok := e.token("alice")
	sid := e.newSession(tok, "stateful")
	s := e.stream(tok, "POST", "/v1/sessions/"+sid+"/code", map[string]any{"code": `import os, time
display({"text/plain": "first"}, raw=True)
while not os.path.exists("go"):
    time.sleep(0.02)
print("then")
6 * 7`}, nil)
	require.Equal(t, 200, s.resp.StatusCode)
	require.Equal(t, "task", s.event(t).event)

	ev := s.event(t)
	require.Equal(t, "rich_result", ev.event, "the display arrives while the code runs")
	assert.Equal(t, map[string]any{"is_main_result": false, "data": map[string]any{"text/plain": "first"}}, decode(t, ev.data))
	first := ev.id
	assert.True(t, strings.HasPrefix(first, "0-0-"), "its id carries the results' position: %s", first)

	sess := e.do(tok, "GET", "/v1/sessions/"+sid, nil).JSON(t)
	require.NoError(t, os.WriteFile(filepath.Join(sess["sandbox_id"].(string), "go"), nil, 0o644))
	var names []string
	var result map[string]any
	for result == nil {
		ev := s.event(t)
		names = append(names, ev.event)
		if ev.event == "result" {
			result = decode(t, ev.data)
		}
	}
	// stdout (in pieces as the program writes) and the results come on two channels from
	// the sandbox: in either order.
	assert.Equal(t, []string{"result", "rich_result", "stdout"}, distinct(names))
	assert.Equal(t, 1, strings.Count(strings.Join(names, " "), "rich_result"))
	results := result["results"].([]any)
	require.Len(t, results, 2)
	assert.Equal(t, map[string]any{"is_main_result": true, "data": map[string]any{"text/plain": "42"}}, results[1])

	again := e.stream(tok, "GET", "/v1/tasks/"+result["task_id"].(string)+"/output", nil, map[string]string{"Last-Event-ID": first})
	require.Equal(t, 200, again.resp.StatusCode)
	names = nil
	for ev := again.event(t); ev.event != "result"; ev = again.event(t) {
		names = append(names, ev.event)
		if ev.event == "rich_result" {
			assert.True(t, decode(t, ev.data)["is_main_result"].(bool), "only the one after the id")
		}
	}
	assert.Equal(t, []string{"rich_result", "stdout"}, distinct(names))
	assert.Equal(t, 1, strings.Count(strings.Join(names, " "), "rich_result"))
}

// distinct returns the sorted set of names.
func distinct(names []string) []string {
	out := slices.Clone(names)
	slices.Sort(out)
	return slices.Compact(out)
}
