package jsontext_test

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sandgate/sandgate/internal/jsontext"
)

func TestProblem(t *testing.T) {
	for _, ok := range []string{
		`{"command":"echo hi"}`, " {\"a\":1}\n", `{"a":"\u00e9 \ud83d\ude80 \\ud800 \" \\"}`, `{"a":"ünï 🚀"}`,
		`{"a":`, `{"a":1`, // malformed: the decoder's business
		`[1,2]`, `"x"`,
	} {
		msg, _ := jsontext.Problem([]byte(ok))
		assert.Empty(t, msg, "%s", ok)
	}
	for in, want := range map[string]struct {
		msg      string
		encoding bool
	}{
		"{\"command\":\"echo \xff\xfe\"}": {"not valid UTF-8 (RFC 8259 §8.1): byte 17 (0xff)", true},
		"{\"a\":\"\xc3\"}":                {"byte 6 (0xc3)", true},
		`{"a":"x\udcff"}`:                 {`escape \udcff at byte 7 is an unpaired UTF-16 surrogate`, true},
		`{"a":"\ud800"}`:                  {`escape \ud800 at byte 6`, true},
		`{"a":"\ud800\u0041"}`:            {`escape \ud800 at byte 6`, true},
		`{"command":"id"}{"command":"x"}`: {"data after its JSON value (from byte 16)", false},
		`{"command":"id"} x`:              {"data after its JSON value (from byte 16)", false},
	} {
		msg, encoding := jsontext.Problem([]byte(in))
		assert.Contains(t, msg, want.msg, "%q", in)
		assert.Equal(t, want.encoding, encoding, "%q", in)
	}
	// What is refused is exactly what encoding/json would have changed.
	var v map[string]string
	require.NoError(t, json.Unmarshal([]byte(`{"a":"x\udcff"}`), &v))
	require.Equal(t, "x\uFFFD", v["a"])
}
