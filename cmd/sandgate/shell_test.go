package main

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/creack/pty"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/sandgate/sandgate/internal/config"
)

// terminal is the output of a program on a pseudo-terminal, read as it comes.
type terminal struct {
	mu   sync.Mutex
	buf  strings.Builder
	more chan struct{} // signalled after every read
	done chan struct{} // closed when the terminal's output ends
}

func readTerminal(r interface{ Read([]byte) (int, error) }) *terminal {
	tm := &terminal{more: make(chan struct{}, 1), done: make(chan struct{})}
	go func() {
		defer close(tm.done)
		b := make([]byte, 4096)
		for {
			n, err := r.Read(b)
			tm.mu.Lock()
			tm.buf.Write(b[:n])
			tm.mu.Unlock()
			select {
			case tm.more <- struct{}{}:
			default:
			}
			if err != nil {
				return
			}
		}
	}()
	return tm
}

// waitFor waits until the output after offset from matches re, and returns the offset
// after the match.
func (tm *terminal) waitFor(t *testing.T, from int, re *regexp.Regexp) int {
	t.Helper()
	timeout := time.After(time.Minute)
	for {
		tm.mu.Lock()
		s := tm.buf.String()
		tm.mu.Unlock()
		if loc := re.FindStringIndex(s[from:]); loc != nil {
			return from + loc[1]
		}
		select {
		case <-tm.more:
		case <-tm.done:
			tm.mu.Lock()
			s := tm.buf.String()
			tm.mu.Unlock()
			if loc := re.FindStringIndex(s[from:]); loc != nil {
				return from + loc[1]
			}
			t.Fatalf("the terminal's output ended before %s; it was:\n%q", re, s)
		case <-timeout:
			t.Fatalf("no %s on the terminal within a minute; it was:\n%q", re, s)
		}
	}
}

// TestShell drives `sandgate shell` on a pseudo-terminal as a user at a terminal would:
// keys reach the remote shell raw (Ctrl-C, Ctrl-Z, Ctrl-D are bytes for it, not signals or
// the end of input for sandgate), the
// remote terminal has this one's size and follows its resizes, the shell's exit code is
// sandgate's, and this terminal is back in its own mode afterwards.
func TestShell(t *testing.T) {
	gw := startGateway(t)
	c := newCLI(t, gw, gw.Token("alice", "dev"))
	c.session("--name", "term")
	c.env["TERM"] = "xterm-256color"

	ptmx, tty, err := pty.Open()
	require.NoError(t, err)
	defer func() { _ = ptmx.Close() }()
	require.NoError(t, pty.Setsize(ptmx, &pty.Winsize{Rows: 24, Cols: 80}))
	before, err := unix.IoctlGetTermios(int(tty.Fd()), unix.TCGETS)
	require.NoError(t, err)
	require.NotZero(t, before.Lflag&unix.ICANON, "a fresh terminal is in canonical mode")

	cmd := c.command(nil, "shell", "term")
	var stderr syncBuffer // sandgate's own messages, apart from the terminal
	cmd.Stdin, cmd.Stdout, cmd.Stderr = tty, tty, &stderr
	defer func() {
		if t.Failed() {
			t.Logf("sandgate's stderr:\n%s", stderr.String())
		}
	}()
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true}
	require.NoError(t, cmd.Start())
	tm := readTerminal(ptmx)
	typeKeys(t, ptmx, "stty size; echo marker-$((6*7))\r")
	at := tm.waitFor(t, 0, regexp.MustCompile(`24 80\r\n(.*\r\n)?marker-42\r\n`))

	// Raw: the keys a terminal acts on here (^C interrupts, ^Z suspends, ^D ends input)
	// reach the remote program as bytes, and sandgate goes on. The remote terminal is put
	// in raw mode too, so that the bytes reach the program as they are.
	typeKeys(t, ptmx, "stty raw -echo; echo raw-$((1+1)); head -c 3 | od -An -tx1; stty sane\r")
	at = tm.waitFor(t, at, regexp.MustCompile(`raw-2`))
	typeKeys(t, ptmx, "\x03\x1a\x04")
	at = tm.waitFor(t, at, regexp.MustCompile(`03 1a 04`))
	typeKeys(t, ptmx, "echo after-$((1+1))\r")
	at = tm.waitFor(t, at, regexp.MustCompile(`after-2\r\n`))

	// A resize here is the remote terminal's size: sandgate forwards it on SIGWINCH. The
	// remote shell waits for it itself: asking again from here, a request each time, ran
	// past the caller's request rate (quotas.requests_per_second) under load, and the 429
	// ended sandgate's standard input.
	require.NoError(t, pty.Setsize(ptmx, &pty.Winsize{Rows: 40, Cols: 100}))
	typeKeys(t, ptmx, "until [ \"$(stty size)\" = '40 100' ]; do sleep 0.05; done; echo resized-$((2*3)); stty size\r")
	tm.waitFor(t, at, regexp.MustCompile(`resized-6\r\n40 100\r\n`))

	// The shell's exit code is sandgate's.
	typeKeys(t, ptmx, "exit 3\r")
	err = cmd.Wait()
	var ee *exec.ExitError
	require.True(t, errors.As(err, &ee), "sandgate ended with %v; the terminal showed:\n%q", err, tm.snapshot())
	assert.Equal(t, 3, ee.ExitCode(), "the terminal showed:\n%q", tm.snapshot())
	after, err := unix.IoctlGetTermios(int(tty.Fd()), unix.TCGETS)
	require.NoError(t, err)
	assert.Equal(t, before.Lflag, after.Lflag, "the terminal's mode is restored")
	assert.Equal(t, before.Iflag, after.Iflag)
	assert.Equal(t, before.Oflag, after.Oflag)
	_ = tty.Close()
}

// TestShellOverRequestRate types into `sandgate shell` a key at a time, faster than the
// caller's request rate (quotas.requests_per_second) lets sandgate send them one request each:
// the gateway refuses some writes (429 with Retry-After), sandgate waits them out and sends
// the keys read meanwhile along, and the remote shell gets every key once, in order.
func TestShellOverRequestRate(t *testing.T) {
	gw := startGateway(t, func(c *config.Config) {
		c.Sandbox.Quotas.RequestsPerSecond = 1
		c.Sandbox.Quotas.RequestsBurst = 6 // the session, and sandgate's start
		c.Server.MetricsAddr = "127.0.0.1:0"
	})
	c := newCLI(t, gw, gw.Token("alice", "dev"))
	c.session("--name", "term")

	ptmx, tty, err := pty.Open()
	require.NoError(t, err)
	defer func() { _ = ptmx.Close() }()
	require.NoError(t, pty.Setsize(ptmx, &pty.Winsize{Rows: 24, Cols: 400}))
	cmd := c.command(nil, "shell", "term", "--", "sh")
	var stderr syncBuffer
	cmd.Stdin, cmd.Stdout, cmd.Stderr = tty, tty, &stderr
	defer func() {
		if t.Failed() {
			t.Logf("sandgate's stderr:\n%s", stderr.String())
		}
	}()
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true}
	require.NoError(t, cmd.Start())
	tm := readTerminal(ptmx)

	typeKeys(t, ptmx, "echo ready-$((2+3))\r")
	at := tm.waitFor(t, 0, regexp.MustCompile(`ready-5\r\n`))

	// 80 keys, each its own write a moment after the last, as a fast typist's: sandgate reads
	// them apart, and they make many more writes than one a second.
	var typed strings.Builder
	for i := range 40 {
		fmt.Fprintf(&typed, "%02d", i)
	}
	for _, k := range "echo " + typed.String() + "\r" {
		typeKeys(t, ptmx, string(k))
		time.Sleep(10 * time.Millisecond)
	}
	tm.waitFor(t, at, regexp.MustCompile(`\r\n`+typed.String()+`\r\n`))
	refused := stdinRefusals(t, gw.MetricsURL())
	assert.Positive(t, refused, "the gateway refused no write: the test did not reach the request rate")

	typeKeys(t, ptmx, "exit 3\r")
	err = cmd.Wait()
	var ee *exec.ExitError
	require.True(t, errors.As(err, &ee), "sandgate ended with %v; the terminal showed:\n%q", err, tm.snapshot())
	assert.Equal(t, 3, ee.ExitCode(), "the terminal showed:\n%q", tm.snapshot())
	assert.NotContains(t, stderr.String(), "standard input", "no write failed for good")
	_ = tty.Close()
}

// stdinRefusals is how many writes to a task's standard input the gateway at metricsURL
// answered 429.
func stdinRefusals(t *testing.T, metricsURL string) int {
	t.Helper()
	resp, err := http.Get(metricsURL)
	require.NoError(t, err)
	defer func() { _ = resp.Body.Close() }()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	total := 0
	re := regexp.MustCompile(`(?m)^sandgate_http_request_duration_seconds_count\{(.*)\} (\d+)$`)
	for _, m := range re.FindAllStringSubmatch(string(b), -1) {
		if strings.Contains(m[1], `code="429"`) && strings.Contains(m[1], "stdin") {
			n, err := strconv.Atoi(m[2])
			require.NoError(t, err)
			total += n
		}
	}
	return total
}

func (tm *terminal) snapshot() string {
	tm.mu.Lock()
	defer tm.mu.Unlock()
	return tm.buf.String()
}

func typeKeys(t *testing.T, w interface{ Write([]byte) (int, error) }, s string) {
	t.Helper()
	_, err := w.Write([]byte(s))
	require.NoError(t, err)
}

// syncBuffer is a bytes.Buffer safe for a writer and a reader at once.
type syncBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
