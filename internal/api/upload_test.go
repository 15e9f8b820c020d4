package api_test

import (
	"bufio"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sandgate/sandgate/internal/config"
)

// pattern is an endless reader of a repeating byte pattern that allocates nothing, so a
// test's own upload does not move the process's memory.
type pattern struct{ n, limit int64 }

func (p *pattern) Read(b []byte) (int, error) {
	if p.limit >= 0 && p.n >= p.limit {
		return 0, io.EOF
	}
	if p.limit >= 0 && int64(len(b)) > p.limit-p.n {
		b = b[:p.limit-p.n]
	}
	for i := range b {
		b[i] = byte((p.n + int64(i)) % 251)
	}
	p.n += int64(len(b))
	return len(b), nil
}

// countingReader counts what the client actually sent.
type countingReader struct {
	r io.Reader
	n atomic.Int64
}

func (c *countingReader) Read(b []byte) (int, error) {
	n, err := c.r.Read(b)
	c.n.Add(int64(n))
	return n, err
}

// rss reads this process's resident set size in bytes from /proc/self/status.
func rss(t *testing.T) int64 {
	t.Helper()
	f, err := os.Open("/proc/self/status")
	require.NoError(t, err)
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "VmRSS:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			require.NoError(t, err)
			return kb << 10
		}
	}
	t.Fatal("no VmRSS in /proc/self/status")
	return 0
}

func (e *testEnv) put(tok, path string, body io.Reader, size int64, header map[string]string) reply {
	e.t.Helper()
	return e.send(tok, "PUT", path, "application/octet-stream", body, size, header)
}

// The gateway (in this process) streams an upload from the socket to the sandbox: a 512 MiB
// chunked upload moves its resident memory by no more than 32 MiB. (It used to read the whole
// body into memory before any limit applied.) Not parallel: the measurement is of the process.
func TestUploadStreamsInConstantMemory(t *testing.T) {
	if testing.Short() {
		t.Skip("writes 512 MiB")
	}
	e := newEnv(t, envOpts{config: func(c *config.Config) { c.Sandbox.MaxFileBytes = 1 << 30 }})
	tok := e.token("uploader")
	id := e.newSession(tok, "default")
	path := "/v1/sessions/" + id + "/files/big.bin"
	// Warm up (sandbox, connections) so that only the upload itself is measured.
	require.Equal(t, 200, e.put(tok, path, strings.NewReader("x"), 1, nil).Status)

	const size = 512 << 20
	want := sha256.New()
	_, _ = io.Copy(want, &pattern{limit: size})

	before := rss(t)
	var peak atomic.Int64
	done := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		tick := time.NewTicker(5 * time.Millisecond)
		defer tick.Stop()
		for {
			if v := rss(t); v > peak.Load() {
				peak.Store(v)
			}
			select {
			case <-done:
				return
			case <-tick.C:
			}
		}
	}()
	r := e.put(tok, path, &pattern{limit: size}, -1, nil)
	close(done)
	<-sampled
	require.Equal(t, 200, r.Status, "%s", r.Body)
	m := r.JSON(t)
	assert.EqualValues(t, size, m["size"])
	assert.Equal(t, hex.EncodeToString(want.Sum(nil)), m["sha256"])
	growth := peak.Load() - before
	t.Logf("resident memory: %d MiB before, %d MiB at the peak of a %d MiB upload", before>>20, peak.Load()>>20, size>>20)
	assert.LessOrEqual(t, growth, int64(32<<20), "the upload moved resident memory by %d MiB", growth>>20)
}

// Over sandbox.max_file_bytes (1 MiB here): a declared Content-Length is refused before a
// byte is read, even when the client waits for 100 Continue; a chunked body is cut at the
// limit. Both answer 413 and leave no file, partial or whole.
func TestUploadOverTheLimit(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{})
	tok := e.token("uploader")
	id := e.newSession(tok, "default")
	base := "/v1/sessions/" + id + "/files/"

	body := &countingReader{r: &pattern{limit: 10 << 30}}
	start := time.Now()
	p := requireProblem(t, e.put(tok, base+"declared.bin", body, 10<<30, map[string]string{"Expect": "100-continue"}), 413, "too-large")
	assert.Contains(t, p["detail"], "max_file_bytes")
	assert.Less(t, time.Since(start), 5*time.Second)
	assert.Zero(t, body.n.Load(), "the client was not asked for the body")

	// Without Expect the client sends what the socket takes before it sees the answer; the
	// gateway reads none of it.
	body = &countingReader{r: &pattern{limit: 10 << 30}}
	requireProblem(t, e.put(tok, base+"declared.bin", body, 10<<30, nil), 413, "too-large")
	assert.Less(t, body.n.Load(), int64(64<<20), "the 10 GiB body was not streamed to the end")

	requireProblem(t, e.put(tok, base+"chunked.bin", &pattern{limit: 5 << 20}, -1, nil), 413, "too-large")
	for _, name := range []string{"declared.bin", "chunked.bin"} {
		requireProblem(t, e.do(tok, "GET", base+name, nil), 404, "not-found")
	}
	r := e.do(tok, "GET", "/v1/sessions/"+id+"/files?dir=.", nil)
	require.Equal(t, 200, r.Status, "%s", r.Body)
	assert.NotContains(t, string(r.Body), "sandgate-upload", "no temporary file left behind")

	// At the limit exactly: written.
	r = e.put(tok, base+"exact.bin", &pattern{limit: 1 << 20}, -1, nil)
	require.Equal(t, 200, r.Status, "%s", r.Body)
	assert.EqualValues(t, 1<<20, r.JSON(t)["size"])
}
