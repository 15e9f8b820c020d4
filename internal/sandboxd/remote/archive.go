//go:build unix

package remote

import (
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/url"
	"strconv"
	"sync"

	"github.com/sandgate/sandgate/internal/fault"
	"github.com/sandgate/sandgate/internal/sandboxd"
)

// Media types of a workspace archive (GET and PUT /v1/workspace/archive).
const (
	ArchiveContentType     = "application/x-tar"
	ArchiveGzipContentType = "application/gzip"
)

// archiveGzipLevel trades ratio for speed: the archive is made inside the sandbox, on its
// CPU budget.
const archiveGzipLevel = gzip.BestSpeed

// archiveTypes maps the media types an archive is sent as to whether it is gzip-compressed.
var archiveTypes = map[string]bool{ArchiveContentType: false, ArchiveGzipContentType: true}

// ReadArchive streams the workspace as a tar archive (sandboxd.Runtime.ArchiveWorkspace),
// gzip-compressed when compressed is set; the caller reads it to its end and closes it. A
// failure after the stream began (a file that shrank, a read error) breaks the stream: the
// reader then returns an error (io.ErrUnexpectedEOF or the connection's) instead of io.EOF,
// so a complete read is a complete archive.
// Errors: the errors of the package doc.
func (c *Client) ReadArchive(ctx context.Context, compressed bool) (io.ReadCloser, error) {
	var q url.Values
	if compressed {
		q = url.Values{"gzip": {"true"}}
	}
	resp, err := c.do(ctx, http.MethodGet, "/v1/workspace/archive", q, nil, nil)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, c.failure(resp)
	}
	want := ArchiveContentType
	if compressed {
		want = ArchiveGzipContentType
	}
	if mt, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type")); mt != want {
		discard(resp)
		return nil, fault.New(fault.Internal, "sandboxd at %s sent an archive as %q, not %s", c.where, mt, want)
	}
	return resp.Body, nil
}

// WriteArchive streams tar archive r (gzip-compressed when compressed is set) into the
// workspace, which must be empty (sandboxd.Runtime.ExtractWorkspace); maxBytes (< 0: no
// limit) bounds the bytes its files take (holes not counted). It returns what was extracted.
// Errors: sandboxd.Runtime.ExtractWorkspace's kinds (fault.Validation also for a body that
// is not gzip when compressed is set); r's error, wrapped, when reading it fails; the
// errors of the package doc.
func (c *Client) WriteArchive(ctx context.Context, r io.Reader, compressed bool, maxBytes int64) (sandboxd.ArchiveStats, error) {
	return c.writeArchive(ctx, r, compressed, maxBytes, false)
}

// ReplaceWorkspace is WriteArchive into a workspace that sandboxd empties first
// (sandboxd.Runtime.ReplaceWorkspace): for a new sandbox whose image put files there. A
// sandboxd that predates it answers fault.Conflict for a workspace that is not empty.
func (c *Client) ReplaceWorkspace(ctx context.Context, r io.Reader, compressed bool, maxBytes int64) (sandboxd.ArchiveStats, error) {
	return c.writeArchive(ctx, r, compressed, maxBytes, true)
}

func (c *Client) writeArchive(ctx context.Context, r io.Reader, compressed bool, maxBytes int64, replace bool) (sandboxd.ArchiveStats, error) {
	var q url.Values
	if replace {
		q = url.Values{"replace": {"true"}}
	}
	body := &trackedReader{r: r}
	resp, err := c.do(ctx, http.MethodPut, "/v1/workspace/archive", q, body, func(h http.Header) {
		h.Set("Content-Type", ArchiveContentType)
		if compressed {
			h.Set("Content-Type", ArchiveGzipContentType)
		}
		if maxBytes >= 0 {
			h.Set(headerMaxBytes, strconv.FormatInt(maxBytes, 10))
		}
	})
	if berr := body.failure(); berr != nil {
		if resp != nil {
			discard(resp)
		}
		return sandboxd.ArchiveStats{}, fmt.Errorf("reading the archive for sandboxd at %s: %w", c.where, berr)
	}
	if err != nil {
		return sandboxd.ArchiveStats{}, err
	}
	if resp.StatusCode != http.StatusOK {
		return sandboxd.ArchiveStats{}, c.failure(resp)
	}
	var st sandboxd.ArchiveStats
	if err := decodeJSON(resp, &st); err != nil {
		return st, fmt.Errorf("sandboxd at %s: %w", c.where, err)
	}
	return st, nil
}

// trackedReader keeps the first error of its reader that is not io.EOF: the caller's source
// failing, told apart from the transport failing. The transport may still be reading it
// (from its own goroutine) when the answer is in, hence the lock.
type trackedReader struct {
	r   io.Reader
	mu  sync.Mutex
	err error
}

func (t *trackedReader) Read(p []byte) (int, error) {
	n, err := t.r.Read(p)
	if err != nil && !errors.Is(err, io.EOF) {
		t.mu.Lock()
		if t.err == nil {
			t.err = err
		}
		t.mu.Unlock()
	}
	return n, err
}

func (t *trackedReader) failure() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.err
}

// readArchive is GET /v1/workspace/archive[?gzip=true].
func (s *server) readArchive(w http.ResponseWriter, r *http.Request) {
	compressed := false
	switch v := r.URL.Query().Get("gzip"); v {
	case "", "false":
	case "true":
		compressed = true
	default:
		writeProblem(w, newProblem(http.StatusBadRequest, string(fault.Validation), "gzip must be true or false"))
		return
	}
	ct := ArchiveContentType
	if compressed {
		ct = ArchiveGzipContentType
	}
	out := &lazyHeader{w: w, contentType: ct}
	var dst io.Writer = out
	var zw *gzip.Writer
	if compressed {
		zw, _ = gzip.NewWriterLevel(out, archiveGzipLevel)
		dst = zw
	}
	st, err := s.rt.ArchiveWorkspace(r.Context(), dst)
	if err == nil && zw != nil {
		err = zw.Close()
	}
	if err != nil {
		if r.Context().Err() != nil {
			s.log.Debug("sandboxd: the archive's reader went away", "error", err)
			panic(http.ErrAbortHandler)
		}
		if !out.begun {
			s.fail(w, err)
			return
		}
		// The status line is gone: break the stream, so the client cannot take a partial
		// archive for a whole one.
		s.log.Warn("sandboxd: archiving the workspace failed midway; the stream is broken off", "error", err)
		panic(http.ErrAbortHandler)
	}
	out.begin() // an empty archive has been written, at least its end blocks
	s.log.Debug("sandboxd: workspace archived", "entries", st.Entries, "bytes", st.Bytes)
}

// lazyHeader sends the status line and headers with the first byte of the body.
type lazyHeader struct {
	w           http.ResponseWriter
	contentType string
	begun       bool
}

func (l *lazyHeader) begin() {
	if l.begun {
		return
	}
	l.begun = true
	h := l.w.Header()
	h.Set("Content-Type", l.contentType)
	h.Set("Cache-Control", "no-store")
	h.Set("X-Content-Type-Options", "nosniff")
	l.w.WriteHeader(http.StatusOK)
}

func (l *lazyHeader) Write(p []byte) (int, error) {
	l.begin()
	return l.w.Write(p)
}

// writeArchive is PUT /v1/workspace/archive[?replace=true].
func (s *server) writeArchive(w http.ResponseWriter, r *http.Request) {
	extract := s.rt.ExtractWorkspace
	switch v := r.URL.Query().Get("replace"); v {
	case "", "false":
	case "true":
		extract = s.rt.ReplaceWorkspace
	default:
		writeProblem(w, newProblem(http.StatusBadRequest, string(fault.Validation), "replace must be true or false"))
		return
	}
	mt, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type"))
	compressed, ok := archiveTypes[mt]
	if !ok {
		writeProblem(w, newProblem(http.StatusBadRequest, string(fault.Validation),
			"the body must be "+ArchiveContentType+" or "+ArchiveGzipContentType))
		return
	}
	maxBytes, ok := maxBytesOf(w, r)
	if !ok {
		return
	}
	var src io.Reader = r.Body
	if compressed {
		zr, err := gzip.NewReader(r.Body)
		if err != nil {
			writeProblem(w, newProblem(http.StatusBadRequest, string(fault.Validation), "the body is not gzip-compressed: "+err.Error()))
			return
		}
		defer zr.Close()
		src = zr
	}
	st, err := extract(r.Context(), &gzipErrs{r: src}, maxBytes)
	if err != nil {
		s.fail(w, err)
		return
	}
	writeJSON(w, http.StatusOK, st)
}

// gzipErrs turns the decompressor's complaints about its input into fault.Validation.
type gzipErrs struct{ r io.Reader }

func (g *gzipErrs) Read(p []byte) (int, error) {
	n, err := g.r.Read(p)
	if errors.Is(err, gzip.ErrChecksum) || errors.Is(err, gzip.ErrHeader) {
		err = fault.Wrap(fault.Validation, err, "the archive's compression is corrupt")
	}
	return n, err
}
