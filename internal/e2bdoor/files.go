package e2bdoor

import (
	"compress/gzip"
	"errors"
	"io"
	"mime"
	"mime/multipart"
	"net/http"
	"path"
	"strconv"
	"strings"

	"github.com/sandgate/sandgate/internal/fault"
	"github.com/sandgate/sandgate/internal/providers/e2b/wire"
)

// envd's HTTP files API: GET /files?path=… downloads a file, POST /files uploads one or more
// (a raw application/octet-stream body to ?path=, or multipart/form-data parts named "file",
// each to ?path= or to its own file name), through the domain's file operations — streamed,
// bounded by sandbox.max_file_bytes, ordered with the session's executions, audited. Errors
// are envd's: 400 a bad path or a folder, 404 missing, 507 the workspace is full.

// fileError writes err as envd's files API does.
func (h *Handler) fileError(w http.ResponseWriter, r *http.Request, err error) {
	if fault.KindOf(err) == fault.Conflict {
		// A folder where a file was asked for (OpenFile's Conflict): envd's 400.
		h.apiError(w, r, http.StatusBadRequest, "validation", messageOf(err))
		return
	}
	h.fail(w, r, err)
}

// fileUser refuses a user other than the default one (the username parameter, or Basic).
func fileUser(r *http.Request) error {
	if u := envdUser(r); u != "" && u != DefaultUser {
		return fault.New(fault.Validation, "user '%s' is not offered: Sandgate's sandboxes have one user, E2B's '%s' (docs/e2b-door.md)", u, DefaultUser)
	}
	return nil
}

func (h *Handler) download(w http.ResponseWriter, r *http.Request) {
	p, sess := mustPrincipal(r), sessionFrom(r.Context())
	if err := fileUser(r); err != nil {
		h.fileError(w, r, err)
		return
	}
	for k := range r.URL.Query() {
		if k != "path" && k != "username" {
			h.fileError(w, r, fault.New(fault.Validation, "query parameter %q is not offered (signed URLs are not: docs/e2b-door.md)", k))
			return
		}
	}
	e2b := r.URL.Query().Get("path")
	if e2b == "" {
		h.fileError(w, r, fault.New(fault.Validation, "path is required"))
		return
	}
	rel, err := workspacePath(e2b)
	if err != nil {
		h.fileError(w, r, err)
		return
	}
	rc, st, err := h.svc.OpenFile(r.Context(), p, sess.ID, "", rel)
	if err != nil {
		if fault.KindOf(err) == fault.NotFound {
			err = fault.New(fault.NotFound, "path '%s' does not exist", e2b)
		}
		h.fileError(w, r, err)
		return
	}
	defer rc.Close()
	w.Header().Set("Content-Type", "application/octet-stream")
	if st.Size >= 0 {
		w.Header().Set("Content-Length", strconv.FormatInt(st.Size, 10))
	}
	w.Header().Set("Content-Disposition", mime.FormatMediaType("inline", map[string]string{"filename": path.Base(rel)}))
	w.WriteHeader(http.StatusOK)
	_, _ = io.Copy(w, rc)
}

func (h *Handler) upload(w http.ResponseWriter, r *http.Request) {
	p, sess := mustPrincipal(r), sessionFrom(r.Context())
	if err := fileUser(r); err != nil {
		h.fileError(w, r, err)
		return
	}
	for k := range r.URL.Query() {
		if k != "path" && k != "username" {
			h.fileError(w, r, fault.New(fault.Validation, "query parameter %q is not offered (signed URLs are not: docs/e2b-door.md)", k))
			return
		}
	}
	for k := range r.Header {
		if strings.HasPrefix(http.CanonicalHeaderKey(k), "X-Metadata-") {
			h.fileError(w, r, fault.New(fault.Validation, "file metadata (%s) is not offered by Sandgate's E2B door (docs/e2b-door.md)", k))
			return
		}
	}
	body := io.Reader(r.Body)
	size := r.ContentLength
	switch enc := r.Header.Get("Content-Encoding"); enc {
	case "", "identity":
	case "gzip":
		zr, err := gzip.NewReader(r.Body)
		if err != nil {
			h.fileError(w, r, fault.New(fault.Validation, "the body is not gzip: %v", err))
			return
		}
		defer zr.Close()
		body, size = zr, -1
	default:
		h.fileError(w, r, fault.New(fault.Validation, "Content-Encoding %q is not offered (gzip is)", enc))
		return
	}
	qpath := r.URL.Query().Get("path")
	var written []wire.UploadedEntry
	put := func(e2b string, src io.Reader, n int64) error {
		if e2b == "" {
			return fault.New(fault.Validation, "path is required: give ?path= or name each part's file")
		}
		rel, err := workspacePath(e2b)
		if err != nil {
			return err
		}
		if rel == "." {
			return fault.New(fault.Validation, "path '%s' is a directory", e2b)
		}
		if _, err := h.svc.WriteFile(r.Context(), p, sess.ID, "", rel, src, n); err != nil {
			return err
		}
		written = append(written, wire.UploadedEntry{Path: e2bPath(rel), Name: path.Base(rel), Type: "file"})
		return nil
	}
	mediaType, params, _ := mime.ParseMediaType(r.Header.Get("Content-Type"))
	switch {
	case mediaType == "application/octet-stream":
		if err := put(qpath, body, size); err != nil {
			h.fileError(w, r, err)
			return
		}
	case mediaType == "multipart/form-data":
		mr := multipart.NewReader(body, params["boundary"])
		for {
			part, err := mr.NextPart()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				h.fileError(w, r, fault.New(fault.Validation, "error parsing multipart form: %v", err))
				return
			}
			if part.FormName() != "file" {
				h.fileError(w, r, fault.New(fault.Validation, "multipart part %q is not offered: send files as parts named \"file\"", part.FormName()))
				return
			}
			target := qpath
			if target == "" {
				// The part's own file name, as given: a path (multipart's FileName keeps only
				// its last element).
				_, cd, _ := mime.ParseMediaType(part.Header.Get("Content-Disposition"))
				target = cd["filename"]
			}
			err = put(target, part, -1)
			_ = part.Close()
			if err != nil {
				h.fileError(w, r, err)
				return
			}
		}
	default:
		h.fileError(w, r, fault.New(fault.Validation, "unsupported content type: %s, expected multipart/form-data or application/octet-stream", r.Header.Get("Content-Type")))
		return
	}
	if len(written) == 0 {
		h.fileError(w, r, fault.New(fault.Validation, "no file was sent"))
		return
	}
	writeJSON(w, http.StatusOK, written)
}
