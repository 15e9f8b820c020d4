package e2b

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"io"
	"io/fs"
	"net/http"
	"path"
	"slices"
	"strings"

	"connectrpc.com/connect"

	"github.com/sandgate/sandgate/internal/fault"
	"github.com/sandgate/sandgate/internal/providers"
	"github.com/sandgate/sandgate/internal/providers/e2b/wire"
)

// Files live in the workspace (Config.Workdir) of the sandbox. envd itself confines nothing
// (the micro-VM is the boundary), so the provider resolves every path component by component
// with Stat before it uses it: a symlink is followed only when its target (envd reports it
// resolved) stays in the workspace, otherwise fault.Policy — the same rule sandboxd applies in
// containers. A program in the sandbox may change a link between the check and the use; the
// check keeps callers' paths honest, the VM keeps the host safe.

// resolveMode says what resolve does with a path that does not exist.
type resolveMode int

const (
	forRead  resolveMode = iota // missing → fault.NotFound
	forWrite                    // missing components are fine (they will be made)
)

// inWorkspace reports whether guest path p is the workspace or inside it.
func (s *Sandbox) inWorkspace(p string) bool {
	w := s.p.cfg.Workdir
	return p == w || strings.HasPrefix(p, w+"/")
}

// resolve follows the workspace path rel (already cleaned) through the sandbox's symlinks and
// returns its guest path and entry (nil when it does not exist).
//
// Errors: fault.Policy when a symlink leads out of the workspace (or dangles half-way);
// fault.NotFound (forRead) for a missing component, or a file used as a folder;
// fault.Conflict (forWrite) for a file used as a folder; envd's errors.
func (s *Sandbox) resolve(ctx context.Context, rel string, mode resolveMode) (string, *wire.EntryInfo, error) {
	cur := s.p.cfg.Workdir
	if rel == "" {
		e, err := s.stat(ctx, cur)
		if err != nil {
			return "", nil, envdError(err, "the workspace")
		}
		return cur, e, nil
	}
	parts := strings.Split(rel, "/")
	var e *wire.EntryInfo
	for i, part := range parts {
		next := path.Join(cur, part)
		var err error
		e, err = s.stat(ctx, next)
		if connect.CodeOf(err) == connect.CodeNotFound {
			if mode == forRead {
				return "", nil, fault.New(fault.NotFound, "no file or folder '%s' in the workspace", rel)
			}
			return path.Join(append([]string{next}, parts[i+1:]...)...), nil, nil
		}
		if err != nil {
			return "", nil, envdError(err, "looking up '"+rel+"'")
		}
		if t := e.SymlinkTarget; t != nil {
			target := path.Clean(*t)
			if target == next || e.Type == wire.FileTypeUnspecified && target == path.Clean(e.Path) {
				// A dangling link: nothing it points to can be checked.
				if i == len(parts)-1 && mode == forRead {
					return "", nil, fault.New(fault.NotFound, "'%s' is a symlink that points nowhere", rel)
				}
				return "", nil, fault.New(fault.Policy, "path '%s' goes through a symlink that points nowhere", rel)
			}
			if !s.inWorkspace(target) {
				return "", nil, fault.New(fault.Policy, "path '%s' leads out of the workspace through a symlink", rel)
			}
			next = target
		}
		if i < len(parts)-1 && e.Type != wire.FileTypeDirectory {
			if mode == forRead {
				return "", nil, fault.New(fault.NotFound, "no file or folder '%s' in the workspace ('%s' is not a folder)", rel, strings.Join(parts[:i+1], "/"))
			}
			return "", nil, fault.New(fault.Conflict, "'%s' is not a folder", strings.Join(parts[:i+1], "/"))
		}
		cur = next
	}
	return cur, e, nil
}

// workingDir resolves a working folder (docs/semantics.md §3: a Dir leaving the workspace is
// fault.Policy; one that does not exist is fault.NotFound).
func (s *Sandbox) workingDir(ctx context.Context, dir string) (string, error) {
	rel, err := cleanRel(dir)
	if err != nil {
		return "", err
	}
	if rel == "" {
		return s.p.cfg.Workdir, nil
	}
	g, e, err := s.resolve(ctx, rel, forRead)
	if err != nil {
		return "", err
	}
	if e.Type != wire.FileTypeDirectory {
		return "", fault.New(fault.Conflict, "working folder '%s' is not a folder", rel)
	}
	return g, nil
}

// errTooLarge ends an upload past its limit.
var errTooLarge = errors.New("over the size limit")

type limitReader struct {
	r     io.Reader
	left  int64
	n     int64
	over  bool
	cause error
}

func (l *limitReader) Read(p []byte) (int, error) {
	if l.left < int64(len(p)) {
		p = p[:l.left+1]
	}
	n, err := l.r.Read(p)
	l.n += int64(n)
	if int64(n) > l.left {
		l.over = true
		return 0, errTooLarge
	}
	l.left -= int64(n)
	if err != nil && err != io.EOF {
		l.cause = err
	}
	return n, err
}

// WriteFile streams r into a hidden temporary file beside the target (POST /files, raw
// bytes; envd makes the parent folders) and renames it into place (Filesystem/Move) only when
// complete and within maxBytes, so a failed or oversized upload leaves no file behind (the
// parent folders may stay). Errors: providers.CleanEntry's (fault.Validation for the
// workspace itself, fault.Policy for an escape), fault.Policy for an escape through a
// symlink, fault.Conflict (a folder is in the way), fault.TooLarge, the reader's error.
func (s *Sandbox) WriteFile(ctx context.Context, p string, r io.Reader, maxBytes int64) (int64, error) {
	rel, err := providers.CleanEntry(p)
	if err != nil {
		return 0, err
	}
	if err := s.open(); err != nil {
		return 0, err
	}
	target, e, err := s.resolve(ctx, rel, forWrite)
	if err != nil {
		return 0, err
	}
	if e != nil && e.Type == wire.FileTypeDirectory {
		return 0, fault.New(fault.Conflict, "'%s' is a folder", rel)
	}
	tmp := path.Join(path.Dir(target), ".sandgate-upload-"+randomHex(8))
	lr := &limitReader{r: r, left: maxBytes}
	resp, err := s.httpFiles(ctx, http.MethodPost, tmp, lr)
	cleanup := func() {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), killGrace)
		defer cancel()
		_, _ = unary[wire.RemoveRequest, wire.Empty](rctx, s, wire.FSRemove, &wire.RemoveRequest{Path: tmp})
	}
	switch {
	case lr.over:
		if resp != nil {
			resp.Body.Close()
		}
		cleanup()
		return 0, fault.New(fault.TooLarge, "the file is over the limit of %d bytes", maxBytes)
	case lr.cause != nil:
		if resp != nil {
			resp.Body.Close()
		}
		cleanup()
		return 0, lr.cause
	case err != nil:
		cleanup()
		return 0, envdError(err, "uploading '"+rel+"'")
	case resp.StatusCode != http.StatusOK && resp.StatusCode != http.StatusNoContent:
		err := filesError(resp, "uploading '"+rel+"'")
		cleanup()
		return 0, err
	}
	resp.Body.Close()
	if _, err := unary[wire.MoveRequest, wire.MoveResponse](ctx, s, wire.FSMove, &wire.MoveRequest{Source: tmp, Destination: target}); err != nil {
		cleanup()
		return 0, envdError(err, "moving '"+rel+"' into place")
	}
	return lr.n, nil
}

// ReadFile streams a file (GET /files), following symlinks that stay in the workspace.
// Errors: fault.NotFound, fault.Conflict for a folder, fault.Policy for an escape.
func (s *Sandbox) ReadFile(ctx context.Context, p string) (io.ReadCloser, error) {
	rel, err := cleanRel(p)
	if err != nil {
		return nil, err
	}
	if err := s.open(); err != nil {
		return nil, err
	}
	target, e, err := s.resolve(ctx, rel, forRead)
	if err != nil {
		return nil, err
	}
	if e.Type == wire.FileTypeDirectory {
		return nil, fault.New(fault.Conflict, "'%s' is a folder, not a file", p)
	}
	resp, err := s.httpFiles(ctx, http.MethodGet, target, nil)
	if err != nil {
		return nil, envdError(err, "reading '"+rel+"'")
	}
	if resp.StatusCode != http.StatusOK {
		return nil, filesError(resp, "reading '"+rel+"'")
	}
	return resp.Body, nil
}

// ListFiles lists a folder (Filesystem/ListDir, depth 1): symlinks are reported, not
// followed; sorted by name. Errors: fault.NotFound, fault.Conflict for a file, fault.Policy.
func (s *Sandbox) ListFiles(ctx context.Context, dir string) ([]providers.FileInfo, error) {
	rel, err := cleanRel(dir)
	if err != nil {
		return nil, err
	}
	if err := s.open(); err != nil {
		return nil, err
	}
	target, e, err := s.resolve(ctx, rel, forRead)
	if err != nil {
		return nil, err
	}
	if e.Type != wire.FileTypeDirectory {
		return nil, fault.New(fault.Conflict, "'%s' is a file, not a folder", dir)
	}
	res, err := unary[wire.ListDirRequest, wire.ListDirResponse](ctx, s, wire.FSListDir, &wire.ListDirRequest{Path: target, Depth: 1})
	if err != nil {
		return nil, envdError(err, "listing '"+rel+"'")
	}
	out := make([]providers.FileInfo, 0, len(res.Entries))
	for _, e := range res.Entries {
		if e == nil || e.Name == "" || strings.HasPrefix(e.Name, ".sandgate-upload-") {
			continue
		}
		fi := providers.FileInfo{Name: e.Name, Path: path.Join(rel, e.Name), Size: int64(e.Size), Mode: fs.FileMode(e.Mode) & fs.ModePerm}
		if e.ModifiedTime != nil {
			fi.ModTime = e.ModifiedTime.Time
		}
		switch {
		case e.SymlinkTarget != nil:
			fi.Type = providers.FileSymlink
		case e.Type == wire.FileTypeFile:
			fi.Type = providers.FileRegular
		case e.Type == wire.FileTypeDirectory:
			fi.Type = providers.FileDir
		default:
			fi.Type = providers.FileOther
		}
		out = append(out, fi)
	}
	slices.SortFunc(out, func(a, b providers.FileInfo) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

// RemoveFile removes a file, a symlink (not its target) or an empty folder; a missing path
// (also one below a file) is fine. envd removes recursively, so a folder is listed first.
// Errors: providers.CleanEntry's (fault.Validation for the workspace itself, fault.Policy for
// an escape), fault.Policy for an escape through a symlink, fault.Conflict for a folder that
// is not empty.
func (s *Sandbox) RemoveFile(ctx context.Context, p string) error {
	rel, err := providers.CleanEntry(p)
	if err != nil {
		return err
	}
	if err := s.open(); err != nil {
		return err
	}
	parent, dir, err := s.resolve(ctx, path.Dir(rel), forRead)
	if path.Dir(rel) == "." {
		parent, dir, err = s.p.cfg.Workdir, nil, nil
	}
	if fault.IsKind(err, fault.NotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	if dir != nil && dir.Type != wire.FileTypeDirectory {
		return nil // below a file: nothing there (envd's lstat would fail with ENOTDIR)
	}
	target := path.Join(parent, path.Base(rel))
	e, err := s.stat(ctx, target)
	if connect.CodeOf(err) == connect.CodeNotFound {
		return nil
	}
	if err != nil {
		return envdError(err, "looking up '"+rel+"'")
	}
	if e.SymlinkTarget == nil && e.Type == wire.FileTypeDirectory {
		res, err := unary[wire.ListDirRequest, wire.ListDirResponse](ctx, s, wire.FSListDir, &wire.ListDirRequest{Path: target, Depth: 1})
		if err != nil {
			return envdError(err, "listing '"+rel+"'")
		}
		if len(res.Entries) > 0 {
			return fault.New(fault.Conflict, "folder '%s' is not empty", rel)
		}
	}
	if _, err := unary[wire.RemoveRequest, wire.Empty](ctx, s, wire.FSRemove, &wire.RemoveRequest{Path: target}); err != nil {
		return envdError(err, "removing '"+rel+"'")
	}
	return nil
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// cleanRel is providers.CleanPath with the workspace itself as "".
func cleanRel(p string) (string, error) {
	c, err := providers.CleanPath(p)
	if c == "." {
		c = ""
	}
	return c, err
}
