package daytona

import (
	"context"
	"errors"
	"io"
	"io/fs"
	"net/http"
	"path"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/sandgate/sandgate/internal/fault"
	"github.com/sandgate/sandgate/internal/providers"
)

// errTooLarge ends an upload that went past its limit.
var errTooLarge = errors.New("daytona: upload over the size limit")

// limitReader passes at most max bytes of r and fails with errTooLarge at the first byte
// past them, so the request is broken off before the toolbox renames anything into place.
type limitReader struct {
	r   io.Reader
	max int64
	n   int64
}

func (l *limitReader) Read(p []byte) (int, error) {
	n, err := l.r.Read(p)
	l.n += int64(n)
	if l.n > l.max {
		return 0, errTooLarge
	}
	return n, err
}

// WriteFile streams r into path (POST /files/bulk-upload). The toolbox writes to a temporary
// file beside the destination and renames it into place, creating missing parent folders, so
// an upload broken off — r failed, or went past maxBytes (fault.TooLarge) — leaves nothing
// behind and does not touch the file it would have replaced.
//
// Errors: providers.CleanEntry's (fault.Validation for the workspace itself, fault.Policy for
// a path that leaves the workspace lexically); fault.Conflict when path is a folder or a
// parent is a file;
// r's error; fault.Provision for other toolbox failures.
func (s *Sandbox) WriteFile(ctx context.Context, p string, r io.Reader, maxBytes int64) (int64, error) {
	if _, err := providers.CleanEntry(p); err != nil {
		return 0, err
	}
	if err := s.usable(); err != nil {
		return 0, err
	}
	abs, rel, err := s.abs(ctx, p)
	if err != nil {
		return 0, err
	}
	lr := &limitReader{r: r, max: maxBytes}
	err = s.tb.upload(ctx, []uploadFile{{path: abs, r: lr}})
	var se *sourceError
	switch {
	case err == nil:
		return lr.n, nil
	case errors.As(err, &se) && errors.Is(se.err, errTooLarge):
		s.awaitUploadCleanup(ctx, path.Dir(abs))
		return 0, fault.New(fault.TooLarge, "file '%s' is larger than the limit of %d bytes", rel, maxBytes)
	case errors.As(err, &se):
		s.awaitUploadCleanup(ctx, path.Dir(abs))
		return 0, se.err
	case statusOf(err) == http.StatusBadRequest:
		if c := s.conflict(ctx, abs, rel); c != nil {
			return 0, c
		}
	}
	return 0, s.failed(ctx, err, "writing '"+rel+"'")
}

// uploadTemp starts the name of the daemon's temporary file of an upload.
const uploadTemp = ".daytona-upload-"

// awaitUploadCleanup waits (at most 5 s) until the toolbox has removed the temporary file of
// an upload this handle broke off: it does so when it notices the broken request, which may
// be after WriteFile returned otherwise. A busy toolbox may also not have made the file yet
// when the first listing is taken, so the folder must show none in three listings in a row.
func (s *Sandbox) awaitUploadCleanup(ctx context.Context, dir string) {
	const settled = 3
	absent := 0
	for i := 0; i < 50 && absent < settled; i++ {
		list, err := s.tb.list(ctx, dir)
		if err != nil {
			return
		}
		if slices.ContainsFunc(list, func(e fileInfoDTO) bool { return strings.HasPrefix(e.Name, uploadTemp) }) {
			absent = 0
		} else if absent++; absent == settled {
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// conflict explains a refused write: the destination is a folder, or one of its parents is
// a file. It returns nil when neither is the case.
func (s *Sandbox) conflict(ctx context.Context, abs, rel string) error {
	if fi, err := s.tb.info(ctx, abs); err == nil && fi.IsDir {
		return fault.New(fault.Conflict, "'%s' is a folder", rel)
	}
	for dir := path.Dir(rel); dir != "."; dir = path.Dir(dir) {
		fi, err := s.tb.info(ctx, strings.TrimSuffix(abs, rel)+dir)
		if err == nil && !fi.IsDir {
			return fault.New(fault.Conflict, "'%s' is a file, not a folder", dir)
		}
	}
	return nil
}

// ReadFile opens path (GET /files/download); the caller closes it.
//
// Errors: fault.Policy for a path that leaves the workspace (lexically); fault.NotFound when
// it does not exist; fault.Conflict for a folder; fault.Provision for other failures.
func (s *Sandbox) ReadFile(ctx context.Context, p string) (io.ReadCloser, error) {
	if _, err := providers.CleanPath(p); err != nil {
		return nil, err
	}
	if err := s.usable(); err != nil {
		return nil, err
	}
	abs, rel, err := s.abs(ctx, p)
	if err != nil {
		return nil, err
	}
	rc, err := s.tb.download(ctx, abs)
	switch st := statusOf(err); {
	case err == nil:
		return rc, nil
	case st == http.StatusNotFound:
		return nil, fault.New(fault.NotFound, "file '%s' does not exist", rel)
	case st == http.StatusBadRequest:
		// A folder, or a path through a file.
		if fi, ierr := s.tb.info(ctx, abs); ierr == nil && fi.IsDir {
			return nil, fault.New(fault.Conflict, "'%s' is a folder", rel)
		}
		return nil, fault.New(fault.NotFound, "file '%s' does not exist", rel)
	}
	return nil, s.failed(ctx, err, "reading '"+rel+"'")
}

// ListFiles lists folder dir (GET /files), sorted by name. Daytona describes each entry
// after following symlinks: a link is reported as what it points to, and a dangling one is
// left out (see the package doc).
//
// Errors: fault.Policy for a path that leaves the workspace (lexically); fault.NotFound when
// dir does not exist; fault.Conflict when it is a file; fault.Provision for other failures.
func (s *Sandbox) ListFiles(ctx context.Context, dir string) ([]providers.FileInfo, error) {
	if _, err := providers.CleanPath(dir); err != nil {
		return nil, err
	}
	if err := s.usable(); err != nil {
		return nil, err
	}
	abs, rel, err := s.abs(ctx, dir)
	if err != nil {
		return nil, err
	}
	list, err := s.tb.list(ctx, abs)
	switch st := statusOf(err); {
	case err == nil:
	case st == http.StatusNotFound:
		return nil, fault.New(fault.NotFound, "folder '%s' does not exist", rel)
	case st == http.StatusBadRequest:
		if fi, ierr := s.tb.info(ctx, abs); ierr == nil && !fi.IsDir {
			return nil, fault.New(fault.Conflict, "'%s' is a file, not a folder", rel)
		}
		return nil, fault.New(fault.NotFound, "folder '%s' does not exist", rel)
	default:
		return nil, s.failed(ctx, err, "listing '"+rel+"'")
	}
	out := make([]providers.FileInfo, 0, len(list))
	for _, e := range list {
		fi := providers.FileInfo{Name: e.Name, Path: e.Name, Size: e.Size, Type: fileType(e)}
		if rel != "." {
			fi.Path = rel + "/" + e.Name
		}
		if perm, err := strconv.ParseUint(strings.TrimPrefix(e.Permissions, "0"), 8, 32); err == nil {
			fi.Mode = fs.FileMode(perm) & fs.ModePerm
		}
		if t, err := time.Parse(time.RFC3339Nano, e.ModTime); err == nil {
			fi.ModTime = t
		}
		out = append(out, fi)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// fileType reads the type from Go's mode string the toolbox sends ("-rw-r--r--",
// "drwxr-xr-x", "Lrwxrwxrwx", …).
func fileType(e fileInfoDTO) providers.FileType {
	if e.IsDir {
		return providers.FileDir
	}
	switch {
	case strings.HasPrefix(e.Mode, "-"):
		return providers.FileRegular
	case strings.HasPrefix(e.Mode, "L"):
		return providers.FileSymlink
	case strings.HasPrefix(e.Mode, "d"):
		return providers.FileDir
	}
	return providers.FileOther
}

// RemoveFile removes a file or an empty folder (DELETE /files); a missing path is not an
// error.
//
// Errors: providers.CleanEntry's (fault.Validation for the workspace itself, fault.Policy for
// a path that leaves the workspace lexically); fault.Conflict for a folder that is not empty;
// fault.Provision for other failures.
func (s *Sandbox) RemoveFile(ctx context.Context, p string) error {
	if _, err := providers.CleanEntry(p); err != nil {
		return err
	}
	if err := s.usable(); err != nil {
		return err
	}
	abs, rel, err := s.abs(ctx, p)
	if err != nil {
		return err
	}
	fi, err := s.tb.info(ctx, abs)
	switch st := statusOf(err); {
	case st == http.StatusNotFound || st == http.StatusBadRequest:
		return nil
	case err != nil:
		return s.failed(ctx, err, "removing '"+rel+"'")
	}
	recursive := false
	if fi.IsDir {
		list, err := s.tb.list(ctx, abs)
		if err != nil {
			return s.failed(ctx, err, "removing '"+rel+"'")
		}
		if len(list) > 0 {
			return fault.New(fault.Conflict, "folder '%s' is not empty", rel)
		}
		recursive = true // the toolbox removes a folder only with recursive
	}
	if err := s.tb.remove(ctx, abs, recursive); err != nil && statusOf(err) != http.StatusNotFound {
		return s.failed(ctx, err, "removing '"+rel+"'")
	}
	return nil
}
