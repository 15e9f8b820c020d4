package providertest

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"image/png"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sandgate/sandgate/internal/providers"
)

// results checks the rich results of Python code in a context (Harness.RichResults): the
// last expression's value, a pandas DataFrame's HTML and text, a matplotlib figure as a
// valid PNG, and a result over the limit dropped whole. The DataFrame and figure tests need
// pandas and matplotlib in the sandbox: without them they skip, saying so — under CI=true
// they fail, as CI's sandbox image (and machine) has them.
func (s *suite) results(t *testing.T) {
	s.leaf(t, "main_result", needStateful|needRichResults, func(e *env) {
		sb := e.create()
		res := e.rich(sb, "6 * 7", 0)
		require.Len(e.t, res, 1)
		assert.True(e.t, res[0].Main)
		assert.Equal(e.t, "42", mimeText(e, res[0], "text/plain"))
		assert.Empty(e.t, e.rich(sb, "x = 6 * 7", 0), "a statement last gives none")
	})

	s.leaf(t, "dataframe", needStateful|needRichResults, func(e *env) {
		sb := e.create()
		e.requireModule(sb, "pandas")
		res := e.rich(sb, "import pandas as pd\npd.DataFrame({\"a\": [1, 2]})", 0)
		require.Len(e.t, res, 1)
		assert.True(e.t, res[0].Main)
		html := mimeText(e, res[0], "text/html")
		assert.Contains(e.t, html, "<table")
		assert.Contains(e.t, html, "<th>a</th>")
		assert.Equal(e.t, "   a\n0  1\n1  2", mimeText(e, res[0], "text/plain"))
	})

	s.leaf(t, "matplotlib_png", needStateful|needRichResults, func(e *env) {
		sb := e.create()
		e.requireModule(sb, "matplotlib")
		res := e.rich(sb, "import matplotlib.pyplot as plt\nplt.figure(figsize=(4, 2))\nplt.plot([1, 2, 3], [1, 4, 9])\nplt.show()", 0)
		require.Len(e.t, res, 1, "the figure shown")
		assert.False(e.t, res[0].Main)
		assert.Contains(e.t, mimeText(e, res[0], "text/plain"), "<Figure size 400x200")
		data, err := base64.StdEncoding.DecodeString(mimeText(e, res[0], "image/png"))
		require.NoError(e.t, err)
		require.True(e.t, bytes.HasPrefix(data, []byte("\x89PNG\r\n\x1a\n")), "a PNG signature")
		cfg, err := png.DecodeConfig(bytes.NewReader(data))
		require.NoError(e.t, err)
		assert.Greater(e.t, cfg.Width, cfg.Height, "a 4x2 figure is wider than high: %dx%d", cfg.Width, cfg.Height)
		assert.Greater(e.t, cfg.Height, 50)
		img, err := png.Decode(bytes.NewReader(data))
		require.NoError(e.t, err, "the whole PNG decodes")
		assert.Equal(e.t, cfg.Width, img.Bounds().Dx())
	})

	s.leaf(t, "over_the_limit", needStateful|needRichResults, func(e *env) {
		sb := e.create()
		res := e.rich(sb, "display({'text/plain': 'x' * 5000}, raw=True)\n'fits'", 1000)
		require.Len(e.t, res, 2)
		assert.Nil(e.t, res[0].Data, "dropped whole, never cut")
		assert.Equal(e.t, &providers.DroppedResult{Types: []string{"text/plain"}, Bytes: 5002}, res[0].Dropped)
		assert.Equal(e.t, "'fits'", mimeText(e, res[1], "text/plain"))
	})
}

// rich runs code in context "rich" and requires it to succeed; it returns its rich results,
// checking that each also came, in order, as it was produced. The execution has an id, as
// the domain gives every one: a sandbox that holds executions (Reattacher) holds it.
func (e *env) rich(sb providers.Sandbox, code string, maxBytes int64) []providers.RichResult {
	e.t.Helper()
	var (
		mu   sync.Mutex
		live []providers.RichResult
	)
	spec := providers.ExecSpec{Code: code, Language: "python", Context: "rich", Timeout: 2 * time.Minute, MaxResultBytes: maxBytes, ID: e.id("rich")}
	spec.ResultFunc = func(r providers.RichResult) {
		mu.Lock()
		defer mu.Unlock()
		live = append(live, r)
	}
	r := e.run(e.ctx, sb, spec)
	require.NoError(e.t, r.err)
	require.Equal(e.t, 0, r.status.ExitCode, "stderr: %s", r.stderr)
	mu.Lock()
	defer mu.Unlock()
	assert.Equal(e.t, r.status.Results, live, "each result also comes as it is produced")
	return r.status.Results
}

// requireModule skips the test when the sandbox's python lacks module (fails under CI=true).
func (e *env) requireModule(sb providers.Sandbox, module string) {
	e.t.Helper()
	r := e.run(e.ctx, sb, providers.ExecSpec{Code: "import " + module, Language: "python", Context: "rich", Timeout: 2 * time.Minute})
	require.NoError(e.t, r.err)
	if r.status.ExitCode == 0 {
		return
	}
	msg := "the sandbox's python has no " + module + " (the sandbox image of images/sandbox has it: rebuild it with build.sh): " + strings.TrimSpace(string(r.stderr))
	if os.Getenv("CI") == "true" {
		e.t.Fatal(msg)
	}
	e.t.Skip(msg)
}

// mimeText is the string data of MIME type t in r ("" without one).
func mimeText(e *env, r providers.RichResult, t string) string {
	e.t.Helper()
	raw, ok := r.Data[t]
	if !ok {
		return ""
	}
	var s string
	require.NoError(e.t, json.Unmarshal(raw, &s), "%s data is a string", t)
	return s
}
