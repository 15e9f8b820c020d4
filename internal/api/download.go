package api

import (
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"

	"github.com/sandgate/sandgate/internal/sandbox"
)

// File downloads (GET and HEAD /v1/sessions/{id}/files/{path}): conditional requests on the
// file's ETag and single byte ranges (RFC 9110 §13, §14).

// fileETag is the entity tag of a file: its size and modification time (ns), both in hex.
// It changes whenever the file is written (a write renames a new file into place, with a new
// modification time). A file of unknown size has none ("").
func fileETag(st sandbox.FileStat) string {
	if st.Size < 0 || st.ModTime.IsZero() {
		return ""
	}
	return fmt.Sprintf(`"%x-%x"`, st.Size, st.ModTime.UnixNano())
}

// etagMatches reports whether an If-None-Match or If-Range list names etag ("*" matches any).
// Weak comparison (RFC 9110 §8.8.3.2): a W/ prefix is ignored.
func etagMatches(header, etag string) bool {
	if header == "" || etag == "" {
		return false
	}
	for _, t := range strings.Split(header, ",") {
		t = strings.TrimPrefix(strings.TrimSpace(t), "W/")
		if t == "*" || t == etag {
			return true
		}
	}
	return false
}

// byteRange is the first and last byte (inclusive) of a range.
type byteRange struct{ first, last int64 }

// parseRange reads a Range header for a file of size bytes. ok=false: serve the whole file
// (no header, another unit, several ranges, or a malformed value, which RFC 9110 §14.2 lets
// a server ignore). unsatisfiable: the one range starts past the end.
func parseRange(header string, size int64) (r byteRange, ok, unsatisfiable bool) {
	spec, found := strings.CutPrefix(strings.TrimSpace(header), "bytes=")
	if !found || strings.Contains(spec, ",") {
		return r, false, false
	}
	a, b, found := strings.Cut(strings.TrimSpace(spec), "-")
	if !found {
		return r, false, false
	}
	a, b = strings.TrimSpace(a), strings.TrimSpace(b)
	switch {
	case a == "" && b == "": // "bytes=-"
		return r, false, false
	case a == "": // suffix: the last n bytes
		n, err := strconv.ParseInt(b, 10, 64)
		if err != nil || n < 0 {
			return r, false, false
		}
		if n == 0 || size == 0 {
			return r, false, true
		}
		return byteRange{first: max(0, size-n), last: size - 1}, true, false
	default:
		first, err := strconv.ParseInt(a, 10, 64)
		if err != nil || first < 0 {
			return r, false, false
		}
		last := size - 1
		if b != "" {
			if last, err = strconv.ParseInt(b, 10, 64); err != nil || last < first {
				return r, false, false
			}
			last = min(last, size-1)
		}
		if first >= size {
			return r, false, true
		}
		return byteRange{first: first, last: last}, true, false
	}
}

// fileDownload answers readFile: 200 with the file, 206 with one range of it, 304 when the
// caller's ETag matches, 416 for a range past the end; HEAD gets the header fields only.
type fileDownload struct {
	rc     io.ReadCloser
	stat   sandbox.FileStat
	r      *http.Request
	params struct{ rng, ifNoneMatch, ifRange string }
}

// VisitReadFileResponse writes the answer and closes the file.
func (d fileDownload) VisitReadFileResponse(w http.ResponseWriter) error {
	defer func() { _ = d.rc.Close() }()
	h := w.Header()
	etag := fileETag(d.stat)
	if etag != "" {
		h.Set("ETag", etag)
		h.Set("Last-Modified", d.stat.ModTime.UTC().Format(http.TimeFormat))
		h.Set("Accept-Ranges", "bytes")
	}
	if etagMatches(d.params.ifNoneMatch, etag) {
		w.WriteHeader(http.StatusNotModified)
		return nil
	}
	head := d.r != nil && d.r.Method == http.MethodHead
	size := d.stat.Size
	if etag != "" && d.params.rng != "" && (d.params.ifRange == "" || etagMatches(d.params.ifRange, etag)) {
		rng, ok, unsatisfiable := parseRange(d.params.rng, size)
		if unsatisfiable {
			h.Set("Content-Range", fmt.Sprintf("bytes */%d", size))
			writeProblem(w, d.r, Problem{Type: ProblemTypeBase + "range-not-satisfiable", Title: "Range not satisfiable",
				Status: http.StatusRequestedRangeNotSatisfiable,
				Detail: fmt.Sprintf("the range %s asks for bytes past the end of the file (%d bytes)", d.params.rng, size)})
			return nil
		}
		if ok {
			n := rng.last - rng.first + 1
			h.Set("Content-Type", "application/octet-stream")
			h.Set("Content-Range", fmt.Sprintf("bytes %d-%d/%d", rng.first, rng.last, size))
			h.Set("Content-Length", strconv.FormatInt(n, 10))
			w.WriteHeader(http.StatusPartialContent)
			if head {
				return nil
			}
			if _, err := io.CopyN(io.Discard, d.rc, rng.first); err != nil {
				return nil // the header is out: all that is left is to stop
			}
			_, _ = io.CopyN(w, d.rc, n)
			return nil
		}
	}
	h.Set("Content-Type", "application/octet-stream")
	if size >= 0 {
		h.Set("Content-Length", strconv.FormatInt(size, 10))
	}
	w.WriteHeader(http.StatusOK)
	if head {
		return nil
	}
	_, _ = io.Copy(w, d.rc)
	return nil
}
