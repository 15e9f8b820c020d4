//go:build unix

package sandboxd_test

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"image/png"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sandgate/sandgate/internal/sandboxd"
)

// Rich results of python contexts (package doc, "Rich results"): the same behaviour with
// IPython's display machinery (when the interpreter has IPython) and with the driver's own
// (an interpreter without it: here one whose IPython does not import).

// displayMachineries are the two ways the driver makes rich results, each a function that
// sets a runtime up with it (or skips: without IPython there is only one).
var displayMachineries = map[string]func(t *testing.T) *testBundle{
	"ipython": func(t *testing.T) *testBundle {
		requirePythonModules(t, "IPython")
		return setup(t)
	},
	"plain": func(t *testing.T) *testBundle {
		// A package named IPython that does not import stands for an image without it.
		shadow := t.TempDir()
		require.NoError(t, os.MkdirAll(filepath.Join(shadow, "IPython"), 0o755))
		require.NoError(t, os.WriteFile(filepath.Join(shadow, "IPython", "__init__.py"), []byte("raise ImportError('no IPython in this test')\n"), 0o644))
		return setupEnv(t, "PYTHONPATH="+shadow)
	},
}

// setupEnv is setup with extra variables in the programs' base environment.
func setupEnv(t *testing.T, extra ...string) *testBundle {
	t.Helper()
	ws := t.TempDir()
	env := append([]string{"PATH=" + os.Getenv("PATH"), "HOME=" + ws, "LANG=C.UTF-8", "PYTHONUNBUFFERED=1"}, extra...)
	rt, err := sandboxd.New(sandboxd.Options{Workspace: ws, Env: env, KillGrace: testGrace, DrainDelay: testGrace})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, rt.Close()) })
	real, err := filepath.EvalSymlinks(ws)
	require.NoError(t, err)
	return &testBundle{rt: rt, workspace: real}
}

// requirePythonModules skips the test when python3 cannot import the modules (under CI=true
// it fails: CI's machine has them, scripts/test-setup.sh installs them).
func requirePythonModules(t *testing.T, modules ...string) {
	t.Helper()
	out, err := exec.Command("python3", "-c", "import "+strings.Join(modules, ", ")).CombinedOutput()
	if err == nil {
		return
	}
	msg := "python3 cannot import " + strings.Join(modules, ", ") + " (Debian: apt-get install python3-ipython python3-pandas python3-matplotlib; scripts/test-setup.sh does): " + strings.TrimSpace(string(out))
	if os.Getenv("CI") == "true" {
		t.Fatal(msg)
	}
	t.Skip(msg)
}

// richOutcome is an execution with its results as they came.
type richOutcome struct {
	outcome
	live []sandboxd.RichResult
}

func (b *testBundle) rich(t *testing.T, req sandboxd.ExecRequest) richOutcome {
	t.Helper()
	var out, errOut bytes.Buffer
	var o richOutcome
	o.res, o.err = b.rt.Exec(t.Context(), req, sandboxd.Streams{Stdout: &out, Stderr: &errOut, ResultFunc: func(r sandboxd.RichResult) {
		o.live = append(o.live, r)
	}})
	o.stdout, o.stderr = out.String(), errOut.String()
	require.NoError(t, o.err)
	assert.Equal(t, o.res.Results, o.live, "each result comes as it is produced, in order")
	return o
}

// text is the string value of r's data of MIME type mime ("" without one).
func text(t *testing.T, r sandboxd.RichResult, mime string) string {
	t.Helper()
	raw, ok := r.Data[mime]
	if !ok {
		return ""
	}
	var s string
	require.NoError(t, json.Unmarshal(raw, &s), "%s is a string", mime)
	return s
}

func TestPythonContextRichResults(t *testing.T) {
	t.Parallel()
	for name, setupWith := range displayMachineries {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			b := setupWith(t)

			o := b.rich(t, py("p", "6 * 7"))
			require.Len(t, o.res.Results, 1)
			main := o.res.Results[0]
			assert.True(t, main.Main)
			assert.Equal(t, "42", text(t, main, "text/plain"))
			assert.Empty(t, o.stdout, "the value is a result, not output")
			assert.Empty(t, o.stderr)

			// No main result: a statement last, a value of None, a cell ending with ';', a
			// failing cell.
			for _, code := range []string{"x = 6 * 7", "None", "x;  # quiet", "print(x)", "def f():\n    return 1"} {
				o := b.rich(t, py("p", code))
				assert.Empty(t, o.res.Results, code)
				assert.Equal(t, 0, o.res.ExitCode, code)
			}
			o = b.rich(t, py("p", "y = 1\n1 / 0"))
			assert.Empty(t, o.res.Results)
			require.NotNil(t, o.res.Error)
			assert.Equal(t, "ZeroDivisionError", o.res.Error.Name)
			assert.Contains(t, o.stderr, `File "<cell 7>", line 2, in <module>`, "the last expression keeps its line")
			assert.NotContains(t, o.stderr, "_sandboxd")
			assert.Equal(t, o.stderr, o.res.Error.Traceback, "nothing but the traceback on stderr")

			// The expression runs after the statements before it, in the same namespace, once.
			o = b.rich(t, py("p", "n = 0\ndef bump():\n    global n\n    n += 1\n    return n\nbump()"))
			require.Len(t, o.res.Results, 1)
			assert.Equal(t, "1", text(t, o.res.Results[0], "text/plain"))
			assert.Equal(t, "1\n", b.ok(t, py("p", "print(n)")))
			o = b.rich(t, py("p", "'quote' + chr(10)"))
			assert.Equal(t, `'quote\n'`, text(t, o.res.Results[0], "text/plain"), "text/plain is the repr")

			// The notebook's own names stay out of the cell's namespace.
			assert.Equal(t, "[]\n", b.ok(t, py("p", "print([k for k in ('In', 'Out', '_ih', '_oh', 'get_ipython', 'exit') if k in globals()])")))
			assert.Equal(t, "3\n", b.ok(t, py("p", "import sys\nexit(3) if False else print(3)")))
			o = b.rich(t, py("p", "exit(4)"))
			assert.Equal(t, 4, o.res.ExitCode, "exit() still ends the cell with its code")
		})
	}
}

func TestPythonContextDisplays(t *testing.T) {
	t.Parallel()
	for name, setupWith := range displayMachineries {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			b := setupWith(t)
			code := `
class Card:
    def _repr_html_(self):
        return "<b>card</b>"
    def _repr_png_(self):
        return b"\x89PNG-ish"
    def _repr_json_(self):
        return {"suit": "hearts", "rank": [1, 2]}
    def __repr__(self):
        return "Card()"

class Bundle:
    def _repr_mimebundle_(self, include=None, exclude=None):
        return {"text/markdown": "# *md*", "text/plain": "bundle"}

class Broken:
    def _repr_html_(self):
        raise ValueError("no html today")
    def __repr__(self):
        return "Broken()"

print("before")
display(Card())
display(Bundle(), {"a": 1})
display(Broken())
display({"text/latex": "$x^2$", "image/svg+xml": "<svg/>"}, raw=True)
print("after")
Card()
`
			o := b.rich(t, py("d", code))
			assert.Equal(t, "before\nafter\n", o.stdout)
			require.Len(t, o.res.Results, 6, "results: %+v; stderr %s", o.res.Results, o.stderr)
			card := o.res.Results[0]
			assert.False(t, card.Main)
			assert.Equal(t, "<b>card</b>", text(t, card, "text/html"))
			assert.Equal(t, "Card()", text(t, card, "text/plain"))
			png, err := base64.StdEncoding.DecodeString(text(t, card, "image/png"))
			require.NoError(t, err)
			assert.Equal(t, []byte("\x89PNG-ish"), png, "binary data travels base64-encoded")
			assert.JSONEq(t, `{"suit": "hearts", "rank": [1, 2]}`, string(card.Data["application/json"]), "JSON data is a JSON value")

			assert.Equal(t, "# *md*", text(t, o.res.Results[1], "text/markdown"))
			assert.Equal(t, "bundle", text(t, o.res.Results[1], "text/plain"))
			assert.Equal(t, "{'a': 1}", text(t, o.res.Results[2], "text/plain"))
			assert.Equal(t, "Broken()", text(t, o.res.Results[3], "text/plain"), "a failing format is left out, the others stay")
			assert.NotContains(t, o.res.Results[3].Data, "text/html")
			assert.Contains(t, o.stderr, "no html today", "and its failure is told")
			assert.Equal(t, "$x^2$", text(t, o.res.Results[4], "text/latex"))
			assert.Equal(t, "<svg/>", text(t, o.res.Results[4], "image/svg+xml"))
			assert.True(t, o.res.Results[5].Main)
			assert.Equal(t, "<b>card</b>", text(t, o.res.Results[5], "text/html"))

			// A bundle's data must have its type's form: what has not is left out.
			o = b.rich(t, py("d", `display({"image/png": "not base64!", "text/plain": "kept", "Bad Type": "x", "text/html": 3}, raw=True)`))
			require.Len(t, o.res.Results, 1)
			assert.Equal(t, []string{"text/plain"}, keys(o.res.Results[0]))
		})
	}
}

func keys(r sandboxd.RichResult) []string {
	var out []string
	for k := range r.Data {
		out = append(out, k)
	}
	return out
}

// TestPythonContextResultLimit: results past the limit are dropped whole and named; what
// fits after them is kept.
func TestPythonContextResultLimit(t *testing.T) {
	t.Parallel()
	b := setup(t)
	req := py("l", `display({"text/plain": "a" * 100}, raw=True)
display({"text/plain": "b" * 1000, "text/html": "<p>" + "b" * 2000 + "</p>"}, raw=True)
display({"text/plain": "c" * 100}, raw=True)
"d" * 10`)
	req.MaxResults = 300
	o := b.rich(t, req)
	require.Len(t, o.res.Results, 4)
	assert.Equal(t, strings.Repeat("a", 100), text(t, o.res.Results[0], "text/plain"))
	dropped := o.res.Results[1]
	assert.Nil(t, dropped.Data)
	require.NotNil(t, dropped.Dropped)
	assert.Equal(t, []string{"text/html", "text/plain"}, dropped.Dropped.Types)
	assert.Equal(t, int64(1002+2029), dropped.Dropped.Bytes, `"bbb…" and "\u003cp\u003ebbb…\u003c/p\u003e" as JSON`)
	assert.Equal(t, strings.Repeat("c", 100), text(t, o.res.Results[2], "text/plain"))
	assert.True(t, o.res.Results[3].Main)
	var total int64
	for _, r := range o.res.Results {
		if r.Dropped == nil {
			total += r.Size()
		}
	}
	assert.LessOrEqual(t, total, int64(300))

	// Without MaxResults, MaxOutput bounds the results too.
	req = py("l", `display({"text/plain": "e" * 100}, raw=True)`)
	req.MaxOutput = 50
	o = b.rich(t, req)
	require.Len(t, o.res.Results, 1)
	assert.NotNil(t, o.res.Results[0].Dropped)
}

// TestPythonContextResultsOfThreads: a cell's thread that displays while the cell runs adds
// to its results; one that displays after the cell ended adds to no cell's.
func TestPythonContextResultsOfThreads(t *testing.T) {
	t.Parallel()
	b := setup(t)
	o := b.rich(t, py("th", `import os, threading, time
done = threading.Event()
def worker():
    display({"text/plain": "from a thread"}, raw=True)
    done.set()
    while not os.path.exists("go"):
        time.sleep(0.01)
    display({"text/plain": "too late"}, raw=True)
    open("shown", "w").close()
threading.Thread(target=worker, daemon=True).start()
ready = done.wait()`))
	require.Len(t, o.res.Results, 1)
	assert.Equal(t, "from a thread", text(t, o.res.Results[0], "text/plain"))
	// Between cells, the thread displays again.
	require.NoError(t, os.WriteFile(filepath.Join(b.workspace, "go"), nil, 0o644))
	require.Eventually(t, func() bool {
		_, err := os.Stat(filepath.Join(b.workspace, "shown"))
		return err == nil
	}, slow, 10*time.Millisecond)
	o = b.rich(t, py("th", "print('ok')"))
	assert.Equal(t, "ok\n", o.stdout)
	assert.Empty(t, o.res.Results, "a display between cells belongs to none")
}

// TestPythonContextResultsOfKeptExecutions: a kept execution's followers get its results
// as they come, and its end has them all.
func TestPythonContextResultsOfKeptExecutions(t *testing.T) {
	t.Parallel()
	b := setup(t)
	req := py("k", `display({"text/plain": "one"}, raw=True)
"two"`)
	req.ID = "kept-rich"
	e, err := b.rt.Start(req)
	require.NoError(t, err)
	var (
		mu   sync.Mutex
		live []sandboxd.RichResult
	)
	res, err := e.Follow(t.Context(), sandboxd.Streams{ResultFunc: func(r sandboxd.RichResult) {
		mu.Lock()
		defer mu.Unlock()
		live = append(live, r)
	}})
	require.NoError(t, err)
	require.Len(t, res.Results, 2)
	assert.Equal(t, "'two'", text(t, res.Results[1], "text/plain"))
	mu.Lock()
	defer mu.Unlock()
	assert.Equal(t, res.Results, live)
}

// TestPythonContextFigures: matplotlib figures become PNG results — each plt.show() shows
// the open ones, figures left open are shown at the end, and all are closed — with
// matplotlib's files in the context's own folder, not the workspace.
func TestPythonContextFigures(t *testing.T) {
	t.Parallel()
	requirePythonModules(t, "matplotlib")
	for name, setupWith := range displayMachineries {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			b := setupWith(t)
			o := b.rich(t, sandboxd.ExecRequest{Context: "f", Language: "python", Timeout: 2 * time.Minute, Code: `import matplotlib.pyplot as plt
plt.plot([1, 2, 3], [1, 4, 9])
plt.show()
print("between")
fig, ax = plt.subplots(figsize=(4, 2))
ax.bar(["a", "b"], [3, 5])
plt.figure(figsize=(2, 2))
plt.plot([0, 1])`})
			assert.Equal(t, "between\n", o.stdout)
			assert.NotContains(t, o.stderr, "Warning", "Agg shows nothing of its own and warns of nothing")
			require.Len(t, o.res.Results, 4, "shown, the two left open, and the main result: %+v", o.res.Results)
			sizes := [][2]int{}
			for _, i := range []int{0, 2, 3} {
				r := o.res.Results[i]
				assert.False(t, r.Main)
				assert.Contains(t, text(t, r, "text/plain"), "<Figure size")
				sizes = append(sizes, pngSize(t, text(t, r, "image/png")))
			}
			assert.True(t, o.res.Results[1].Main, "the last expression's value comes before the figures left open")
			assert.Contains(t, text(t, o.res.Results[1], "text/plain"), "Line2D")
			assert.Greater(t, sizes[1][0], sizes[1][1], "the 4x2 figure is wider than high")
			assert.Equal(t, "0\n", b.ok(t, py("f", "print(len(plt.get_fignums()))")), "shown figures are closed")

			// A figure that is the main result is shown once, as the main result.
			o = b.rich(t, py("f", "fig = plt.figure()\nfig.add_subplot().plot([1, 2])\nfig"))
			require.Len(t, o.res.Results, 1)
			assert.True(t, o.res.Results[0].Main)
			pngSize(t, text(t, o.res.Results[0], "image/png"))

			entries, err := os.ReadDir(b.workspace)
			require.NoError(t, err)
			assert.Empty(t, entries, "nothing of matplotlib or IPython lands in the workspace")
		})
	}
}

// pngSize decodes a base64 PNG and returns its width and height.
func pngSize(t *testing.T, b64 string) [2]int {
	t.Helper()
	data, err := base64.StdEncoding.DecodeString(b64)
	require.NoError(t, err)
	require.True(t, bytes.HasPrefix(data, []byte("\x89PNG\r\n\x1a\n")), "a PNG signature")
	cfg, err := png.DecodeConfig(bytes.NewReader(data))
	require.NoError(t, err)
	require.Positive(t, cfg.Width)
	require.Positive(t, cfg.Height)
	img, err := png.Decode(bytes.NewReader(data))
	require.NoError(t, err, "the whole PNG decodes")
	require.Equal(t, cfg.Width, img.Bounds().Dx())
	return [2]int{cfg.Width, cfg.Height}
}

// TestPythonContextDataFrame: a pandas DataFrame as the main result is an HTML table and a
// text table.
func TestPythonContextDataFrame(t *testing.T) {
	t.Parallel()
	requirePythonModules(t, "pandas")
	for name, setupWith := range displayMachineries {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			b := setupWith(t)
			o := b.rich(t, sandboxd.ExecRequest{Context: "df", Language: "python", Timeout: 2 * time.Minute, Code: `import pandas as pd
pd.DataFrame({"a": [1, 2]})`})
			require.Len(t, o.res.Results, 1, o.stderr)
			r := o.res.Results[0]
			assert.True(t, r.Main)
			assert.Contains(t, text(t, r, "text/html"), "<table")
			assert.Contains(t, text(t, r, "text/html"), "<th>a</th>")
			assert.Equal(t, "   a\n0  1\n1  2", text(t, r, "text/plain"))
		})
	}
}

// TestPythonContextInterruptedWhileDisplaying: a timeout that interrupts code while it sends
// results cuts no message in two: the code ends with KeyboardInterrupt and the context,
// its state and its protocol live on.
func TestPythonContextInterruptedWhileDisplaying(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.ok(t, py("busy", "kept = 'yes'"))
	req := py("busy", "while True:\n    display({'text/plain': 'x' * 200000}, raw=True)")
	req.Timeout = time.Second
	o := b.rich(t, req)
	assert.True(t, o.res.TimedOut)
	assert.False(t, o.res.ContextLost, "stderr: %s", o.stderr)
	require.NotNil(t, o.res.Error)
	assert.Equal(t, "KeyboardInterrupt", o.res.Error.Name)
	assert.NotEmpty(t, o.res.Results)
	assert.Equal(t, "yes\n", b.ok(t, py("busy", "print(kept)")))
}
