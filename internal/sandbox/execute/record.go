package execute

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
)

// TrimToRecord makes res fit a serialized record of at most limit bytes (a transport's hard
// message limit; see queue.ResultLimiter), keeping what fits of each stream as the capture
// does — its head and its tail, the middle dropped, *_truncated set and the total byte counts
// unchanged — and never emptying a stream that had output while other fields fit. The longer
// stream gives up bytes first. Base64 streams are cut in their decoded bytes and re-encoded;
// text is cut on UTF-8 boundaries.
func TrimToRecord(res *Result, limit int) {
	if limit <= 0 {
		return
	}
	size := func() int { b, _ := json.Marshal(res); return len(b) }
	if size() <= limit {
		return
	}
	// Rich results go first, the largest first, each whole (kept as dropped, named).
	for dropped := false; size() > limit; {
		i := -1
		for j, r := range res.Results {
			if r.Dropped == nil && (i < 0 || r.Size() > res.Results[i].Size()) {
				i = j
			}
		}
		if i < 0 {
			break
		}
		res.Results[i] = (&Budget{}).Take(res.Results[i]) // a budget of 0 drops it
		if !dropped {
			dropped = true
			res.Notice = JoinNotice(res.Notice, fmt.Sprintf("rich results dropped to fit the %d-byte record limit of the queue transport; save charts and tables to files to keep them", limit))
		}
	}
	if size() <= limit {
		return
	}
	note := fmt.Sprintf("output cut to its head and tail to fit the %d-byte record limit of the queue transport; redirect output to a file to keep all of it", limit)
	if res.Notice != "" {
		res.Notice += "; " + note
	} else {
		res.Notice = note
	}
	b64 := res.Encoding == "base64"
	decode := func(s string) []byte {
		if b64 {
			if d, err := base64.StdEncoding.DecodeString(s); err == nil {
				return d
			}
		}
		return []byte(s)
	}
	encode := func(b []byte) string {
		if b64 {
			return base64.StdEncoding.EncodeToString(b)
		}
		return string(b)
	}
	out, errOut := decode(res.Stdout), decode(res.Stderr)
	outHead, errHead := headOf(res.StdoutTruncated, res.StdoutHead, len(out)), headOf(res.StderrTruncated, res.StderrHead, len(errOut))
	// Bisect on the bytes kept per stream: the record is monotone in it.
	render := func(keep int) int {
		o, oh, oc := keepEnds(out, outHead, keep, !b64)
		e, eh, ec := keepEnds(errOut, errHead, keep, !b64)
		res.Stdout, res.Stderr = encode(o), encode(e)
		res.StdoutTruncated = res.StdoutTruncated || oc
		res.StderrTruncated = res.StderrTruncated || ec
		res.StdoutHead, res.StderrHead = splitAt(oh), splitAt(eh)
		return size()
	}
	wasOut, wasErr := res.StdoutTruncated, res.StderrTruncated
	lo, hi := 0, max(len(out), len(errOut))
	for lo < hi {
		mid := (lo + hi + 1) / 2
		res.StdoutTruncated, res.StderrTruncated = wasOut, wasErr
		if render(mid) <= limit {
			lo = mid
		} else {
			hi = mid - 1
		}
	}
	res.StdoutTruncated, res.StderrTruncated = wasOut, wasErr
	render(lo)
}

// Head splits of keepEnds besides a byte count: a whole stream, and a truncated one whose
// split is not known (a result stored before splits were recorded).
const (
	wholeStream  = -1
	unknownSplit = -2
)

// headOf is the head split of a stream's n kept bytes (Result.StdoutHead): wholeStream,
// unknownSplit, or how many of them are the stream's start.
func headOf(truncated bool, head *int64, n int) int {
	switch {
	case !truncated:
		return wholeStream
	case head == nil:
		return unknownSplit
	}
	return int(min(max(*head, 0), int64(n)))
}

// splitAt is Result.StdoutHead for keepEnds's head split h.
func splitAt(h int) *int64 {
	if h < 0 {
		return nil
	}
	v := int64(h)
	return &v
}

// keepEnds keeps at most keep bytes of b: its first and last halves, the middle dropped.
// head is b's split (headOf): when known, the first head bytes of b are its stream's start
// and the rest its end, and each half comes from its own part, so every byte kept stays
// where it was in the stream (the end gives way first). text keeps UTF-8 sequences whole.
// It returns the bytes, their split, and whether anything was dropped.
func keepEnds(b []byte, head, keep int, text bool) (_ []byte, headLen int, cut bool) {
	if len(b) <= keep {
		return b, head, false
	}
	headN, tailN := keep/2, keep-keep/2
	if head >= 0 {
		tailN = min(tailN, len(b)-head)
		headN = min(head, keep-tailN)
	}
	h, t := b[:headN], b[len(b)-tailN:]
	if text {
		h, t = trimPartialEnd(h), trimPartialStart(t)
	}
	out := make([]byte, 0, len(h)+len(t))
	headLen = len(h)
	if head == unknownSplit {
		headLen = unknownSplit
	}
	return append(append(out, h...), t...), headLen, true
}
