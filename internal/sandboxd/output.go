//go:build unix

package sandboxd

import (
	"io"
	"os"
	"sync"
	"sync/atomic"
	"time"
)

// readChunk is the largest read from an output pipe: each read is written on at once.
const readChunk = 32 << 10

// capture reads a program's stdout and stderr pipes and writes what arrives to the caller's
// writers as it arrives, each stream capped at limit bytes (the rest is read and dropped).
type capture struct {
	readers   []*os.File
	copiers   sync.WaitGroup
	truncated atomic.Bool
}

// newCapture makes the two output pipes and starts copying; stdout and stderr are the child's
// ends, for the caller to hand over and then close. A nil writer discards its stream. When
// out's two writers are the same, writes to it are serialised.
func newCapture(out Streams, limit int64) (c *capture, stdout, stderr *os.File, err error) {
	if limit <= 0 {
		limit = DefaultMaxOutput
	}
	wOut, wErr := out.Stdout, out.Stderr
	if wOut == nil {
		wOut = io.Discard
	}
	if wErr == nil {
		wErr = io.Discard
	}
	if wOut != io.Discard && sameWriter(wOut, wErr) {
		l := &lockedWriter{w: wOut}
		wOut, wErr = l, l
	}
	c = &capture{}
	childEnds := make([]*os.File, 0, 2)
	for _, w := range []io.Writer{wOut, wErr} {
		r, cw, err := os.Pipe()
		if err != nil {
			closeFiles(childEnds)
			c.close()
			return nil, nil, nil, err
		}
		childEnds = append(childEnds, cw)
		c.readers = append(c.readers, r)
		c.copiers.Go(func() { c.copy(w, r, limit) })
	}
	return c, childEnds[0], childEnds[1], nil
}

// captureOf starts copying one reader — a terminal's master, whose end is EIO once every
// process let go of the terminal — to w (nil: discarded), capped at limit bytes; drain closes
// it.
func captureOf(r *os.File, w io.Writer, limit int64) *capture {
	if limit <= 0 {
		limit = DefaultMaxOutput
	}
	if w == nil {
		w = io.Discard
	}
	c := &capture{readers: []*os.File{r}}
	c.copiers.Go(func() { c.copy(w, r, limit) })
	return c
}

// copy copies r to w up to limit bytes, then drops the rest; when w fails it keeps reading so
// the program never blocks on a full pipe.
func (c *capture) copy(w io.Writer, r io.Reader, limit int64) {
	buf := make([]byte, readChunk)
	var written int64
	failed := false
	for {
		n, err := r.Read(buf)
		if n > 0 {
			chunk := buf[:n]
			if room := limit - written; int64(n) > room {
				chunk = chunk[:max(room, 0)]
				c.truncated.Store(true)
			}
			if len(chunk) > 0 && !failed {
				if _, werr := w.Write(chunk); werr != nil {
					failed = true
				}
			}
			written += int64(len(chunk))
		}
		if err != nil {
			return
		}
	}
}

// drain waits for both streams to reach EOF, or at most delay; then it stops reading (a
// process still writing gets EPIPE) and waits for the copiers to return.
func (c *capture) drain(delay time.Duration) {
	done := make(chan struct{})
	go func() { c.copiers.Wait(); close(done) }()
	timer := time.NewTimer(delay)
	defer timer.Stop()
	select {
	case <-done:
	case <-timer.C:
		c.close()
		<-done
	}
	c.close()
}

func (c *capture) close() { closeFiles(c.readers) }

// feeder copies a source into a pipe whose read end goes to a program.
type feeder struct {
	w     *os.File
	done  chan struct{}
	grace time.Duration
}

// newFeeder makes a pipe, starts copying src into it and returns the child's end. The write
// end is closed once src is exhausted, so the program sees EOF after it. grace bounds how long
// stop waits for a copy whose source Read blocks.
func newFeeder(src io.Reader, grace time.Duration) (child *os.File, f *feeder, err error) {
	r, w, err := os.Pipe()
	if err != nil {
		return nil, nil, err
	}
	f = &feeder{w: w, done: make(chan struct{}), grace: grace}
	go func() {
		defer close(f.done)
		_, _ = io.Copy(w, src) // EPIPE once the reader is gone, EBADF once stop closed w
		_ = w.Close()
	}()
	return r, f, nil
}

// stop ends the write (a program that never read its input does not hold it up) and waits for
// the copying goroutine, at most grace when src blocks in Read (the goroutine then ends when
// that Read returns, writing nothing more). It accepts a nil feeder.
func (f *feeder) stop() {
	if f == nil {
		return
	}
	_ = f.w.Close()
	t := time.NewTimer(f.grace)
	defer t.Stop()
	select {
	case <-f.done:
	case <-t.C:
	}
}

// lockedWriter serialises writes to one writer used for two streams.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// sameWriter reports whether a and b are the same writer (comparable and equal).
func sameWriter(a, b io.Writer) (same bool) {
	defer func() {
		if recover() != nil {
			same = false // uncomparable dynamic type
		}
	}()
	return a == b
}

func closeFiles(fs []*os.File) {
	for _, f := range fs {
		if f != nil {
			_ = f.Close()
		}
	}
}
