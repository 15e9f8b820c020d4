package sandbox

import (
	"encoding/base64"
	"strings"
	"unicode/utf8"
)

// A stored result replayed to a follower (Follower.replay): each stream's kept bytes placed
// at their offsets in the stream — a whole stream from 0; a truncated one's start from 0 and
// its end up to the stream's byte count (Result.StdoutHead splits them). A truncated stream
// whose split is unknown (a result stored before splits were recorded) and dropped output
// (Result.OutputDropped) replay nothing: the follower gets a gap over the stream and the
// result, which says why.

// keptRange is a run of a stream a stored result keeps: the stream's bytes [from, from+n)
// are the result's decoded bytes [at, at+n).
type keptRange struct{ from, at, n int64 }

// storedStream is one stream of a stored result, as a follower replays it.
type storedStream struct {
	name   string
	text   string // as stored: base64 when b64
	b64    bool
	total  int64 // the stream's bytes, dropped ones counted
	ranges []keptRange
}

// storedStreams returns res's stdout and stderr, in that order.
func storedStreams(res *Result) [2]storedStream {
	b64 := res.Encoding == "base64"
	return [2]storedStream{
		newStoredStream(StreamStdout, res.Stdout, b64, res.StdoutBytes, res.StdoutTruncated, res.StdoutHead),
		newStoredStream(StreamStderr, res.Stderr, b64, res.StderrBytes, res.StderrTruncated, res.StderrHead),
	}
}

func newStoredStream(name, text string, b64 bool, total int64, truncated bool, head *int64) storedStream {
	st := storedStream{name: name, text: text, b64: b64, total: total}
	n := int64(len(text))
	if b64 {
		n = int64(len(text)/4*3 - (len(text) - len(strings.TrimRight(text, "="))))
	}
	switch {
	case n == 0:
	case !truncated || total < n:
		st.ranges = []keptRange{{from: 0, at: 0, n: n}}
		st.total = max(total, n)
	case head == nil:
		// Kept, but where its start ends is not known: not replayed.
	default:
		h := min(max(*head, 0), n)
		st.ranges = []keptRange{{from: 0, at: 0, n: h}, {from: total - (n - h), at: h, n: n - h}}
	}
	return st
}

// piece returns the stream's bytes from offset start within range r, at most max of them,
// ending on a UTF-8 character boundary (text) unless r ends first; empty when not even one
// character fits. The bytes are the caller's own.
func (st storedStream) piece(r keptRange, start, max int64) []byte {
	at := r.at + (start - r.from)
	end := min(r.at+r.n, at+max)
	if end <= at {
		return nil
	}
	if !st.b64 {
		if end < r.at+r.n {
			for end > at && !utf8.RuneStart(st.text[end]) {
				end--
			}
		}
		return []byte(st.text[at:end])
	}
	// Four base64 characters are three bytes: decode the quads that hold [at, end).
	q0, q1 := at/3*4, min((end+2)/3*4, int64(len(st.text)))
	buf := make([]byte, base64.StdEncoding.DecodedLen(int(q1-q0)))
	k, err := base64.StdEncoding.Decode(buf, []byte(st.text[q0:q1]))
	if err != nil {
		return nil
	}
	skip := at - at/3*3
	return buf[skip:min(int64(k), skip+end-at)]
}
