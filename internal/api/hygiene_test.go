package api_test

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
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
