package execute

import (
	"encoding/base64"
	"sync"
	"unicode/utf8"
)

// Capture keeps a bounded view of one output stream: the first half of its limit and the
// last half (a ring), counting every byte written. Memory is O(limit) however much a program
// prints (field notes: huge output must not exhaust the gateway).
type Capture struct {
	mu       sync.Mutex
	headCap  int
	ringSize int
	head     []byte
	ring     []byte // allocated when output first exceeds the head
	pos      int
	full     bool
	total    int64
}

func NewCapture(limit int64) *Capture {
	if limit < 2 {
		limit = 2
	}
	h := limit / 2
	// Buffers grow with the output: most programs print little, so an execution does not
	// pay for the whole limit up front.
	return &Capture{headCap: int(h), ringSize: int(limit - h)}
}

func (c *Capture) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := len(p)
	c.total += int64(n)
	if room := c.headCap - len(c.head); room > 0 {
		k := min(room, len(p))
		c.head = append(c.head, p[:k]...)
		p = p[k:]
	}
	if len(p) > 0 && c.ring == nil {
		c.ring = make([]byte, c.ringSize)
	}
	for len(p) > 0 {
		k := copy(c.ring[c.pos:], p)
		p = p[k:]
		c.pos += k
		if c.pos == len(c.ring) {
			c.pos, c.full = 0, true
		}
	}
	return n, nil
}

// Skip counts n bytes the stream had that never reached the capture (a runtime that held the
// execution dropped them from the middle): they count in the total, so the output says it
// was truncated.
func (c *Capture) Skip(n int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if n > 0 {
		c.total += n
	}
}

// Bytes returns the kept output, whether its middle was dropped and, then, how many of its
// bytes are the stream's start (the rest is its end). When truncated, partial UTF-8
// sequences at the cut are trimmed so that text output stays valid.
func (c *Capture) Bytes() (out []byte, truncated bool, total, headLen int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	var tail []byte
	if c.full {
		tail = append(append([]byte{}, c.ring[c.pos:]...), c.ring[:c.pos]...)
	} else {
		tail = append([]byte{}, c.ring[:c.pos]...)
	}
	kept := int64(len(c.head) + len(tail))
	truncated = c.total > kept
	head := c.head
	if truncated {
		head = trimPartialEnd(head)
		tail = trimPartialStart(tail)
	}
	out = make([]byte, 0, len(head)+len(tail))
	out = append(append(out, head...), tail...)
	return out, truncated, c.total, int64(len(head))
}

func trimPartialEnd(b []byte) []byte {
	for i := 1; i <= 3 && i <= len(b); i++ {
		r := b[len(b)-i]
		if utf8.RuneStart(r) {
			if !utf8.FullRune(b[len(b)-i:]) {
				return b[:len(b)-i]
			}
			return b
		}
	}
	return b
}

func trimPartialStart(b []byte) []byte {
	for i := 0; i <= 3 && i < len(b); i++ { // at most 3 continuation bytes precede a start
		if utf8.RuneStart(b[i]) {
			return b[i:]
		}
	}
	if len(b) <= 3 { // nothing but the end of a cut rune
		return b[len(b):]
	}
	return b
}

// EncodeStreams renders stdout and stderr as text when both are valid UTF-8 and text was
// asked for; otherwise both as base64 (encoding says which).
func EncodeStreams(stdout, stderr []byte, wantBase64 bool) (string, string, string) {
	if !wantBase64 && utf8.Valid(stdout) && utf8.Valid(stderr) {
		return string(stdout), string(stderr), "utf-8"
	}
	return base64.StdEncoding.EncodeToString(stdout), base64.StdEncoding.EncodeToString(stderr), "base64"
}
