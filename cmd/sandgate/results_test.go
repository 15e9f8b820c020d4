package main

import (
	"bytes"
	"image/png"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestCodeRichResults: `sandgate code` prints the text of code's rich results on stdout and
// saves images to files it names on stderr.
func TestCodeRichResults(t *testing.T) {
	gw := startGateway(t)
	c := newCLI(t, gw, gw.Token("alice", "dev"))
	sid := c.session()

	assert.Equal(t, "before\n42\n", c.ok(strings.NewReader("print('before')\n6 * 7"), "code", sid, "-"), "the last expression's value, as a REPL shows it")
	r := c.run(strings.NewReader("display({'image/png': 'iVBORw0KGgo=', 'text/plain': 'a picture'}, raw=True)\n'done'"), "code", sid, "-")
	require.Equal(t, 0, r.code, r.stderr)
	assert.Equal(t, "'done'\n", r.stdout, "an image is saved, not printed")
	m := regexp.MustCompile(`result 1 \(image/png, 8 bytes\) saved to (\S+)`).FindStringSubmatch(r.stderr)
	require.NotNil(t, m, r.stderr)
	data, err := os.ReadFile(filepath.Join(c.dir, m[1]))
	require.NoError(t, err)
	assert.Equal(t, []byte("\x89PNG\r\n\x1a\n"), data)

	// A matplotlib chart, into --results-dir.
	if out, err := exec.Command("python3", "-c", "import matplotlib").CombinedOutput(); err != nil {
		msg := "python3 has no matplotlib (Debian: apt-get install python3-matplotlib; scripts/test-setup.sh does): " + strings.TrimSpace(string(out))
		if os.Getenv("CI") == "true" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	charts := t.TempDir()
	r = c.run(strings.NewReader("import matplotlib.pyplot as plt\nplt.bar(['a', 'b'], [3, 5])\nplt.show()"), "code", "--results-dir", charts, sid, "-")
	require.Equal(t, 0, r.code, r.stderr)
	m = regexp.MustCompile(`result 1 \(image/png, [0-9.]+ KiB\) saved to (\S+)`).FindStringSubmatch(r.stderr)
	require.NotNil(t, m, r.stderr)
	assert.Equal(t, charts, filepath.Dir(m[1]))
	data, err = os.ReadFile(m[1])
	require.NoError(t, err)
	img, err := png.Decode(bytes.NewReader(data))
	require.NoError(t, err, "a PNG that decodes")
	assert.Positive(t, img.Bounds().Dx())
}
