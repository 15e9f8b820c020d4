package sandbox

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/url"
	"strings"
	"time"

	"github.com/sandgate/sandgate/internal/fault"
	"github.com/sandgate/sandgate/internal/principal"
	"github.com/sandgate/sandgate/internal/providers"
	"github.com/sandgate/sandgate/internal/store"
)

// FileWritten reports a completed upload.
type FileWritten struct {
	SessionID string
	Path      string
	Size      int64
	SHA256    string
}

// files is the file room: the session resolution and the read lease every file operation
// (Service.WriteFile, ReadFile, ListFiles, DeleteFile, ...) starts with. Service reaches it with
// Service.files.
type files struct{ s *Service }

// files is the file room of s.
func (s *Service) files() *files { return &files{s: s} }

// fileSession resolves a session for a file operation and runs the fail-closed checks.
func (fs *files) fileSession(ctx context.Context, p principal.Principal, id, profile string) (store.Session, *Profile, error) {
	s := fs.s
	sess, prof, ephemeral, err := s.sessions.Resolve(ctx, p, id, profile)
	if err != nil {
		return store.Session{}, nil, err
	}
	if ephemeral {
		return store.Session{}, nil, fault.New(fault.Conflict, "profile '%s' has scope per_call: its sandboxes live for one run and hold no files between calls", prof.Name)
	}
	if !prof.Caps.Files {
		return store.Session{}, nil, fault.Unsupported(prof.Provider.Type(), "files")
	}
	if _, err := s.profiles.Checks(prof, p); err != nil {
		return store.Session{}, nil, err
	}
	return sess, prof, nil
}

// WriteFile streams body into path in the session's workspace, creating the sandbox if need
// be. size is the body's declared length in bytes (an HTTP Content-Length), or < 0 when
// unknown (chunked). The body is streamed, never held whole: memory stays constant whatever
// its size.
//
// A path ending in '/' names a folder: fault.Validation.
// Over sandbox.max_file_bytes: fault.TooLarge and no file — at once, before a byte is read
// or a sandbox is touched, when size says so; else when the stream passes the limit.
// Escapes: fault.Policy. Writes are ordered with the session's executions.
func (s *Service) WriteFile(ctx context.Context, p principal.Principal, id, profile, path string, body io.Reader, size int64) (_ FileWritten, err error) {
	ctx, span := s.obs.Span(ctx, "sandbox.WriteFile")
	defer func() { endSpan(span, err) }()
	if strings.HasSuffix(path, "/") { // cleaning would drop the slash and write a file of that name
		return FileWritten{}, fault.New(fault.Validation,
			"a file path cannot end with '/' ('%s'); to make a folder, write a file inside it (e.g. '%s.keep')", path, path)
	}
	clean, err := providers.CleanPath(path)
	if err != nil {
		return FileWritten{}, err
	}
	if clean == "." {
		return FileWritten{}, fault.New(fault.Validation, "path must name a file, not the workspace root")
	}
	if size > s.cfg.MaxFileBytes {
		return FileWritten{}, fault.New(fault.TooLarge, "file body of %d bytes is over the %d-byte limit (sandbox.max_file_bytes); nothing was written", size, s.cfg.MaxFileBytes)
	}
	sess, prof, err := s.files().fileSession(ctx, p, id, profile)
	if err != nil {
		return FileWritten{}, err
	}
	span.SetAttributes(attrProfile.String(prof.Name), attrProvider.String(prof.Provider.Type()), attrSession.String(sess.ID))
	// Audited from here on: the caller may write in this session, so what it wrote, or
	// tried to, is recorded.
	h := sha256.New()
	var written int64
	sid := sess.ID
	defer func() {
		e := store.AuditEvent{Kind: store.AuditFileWrite, SessionID: sid, Profile: prof.Name, Target: clean}
		if err != nil {
			e.Status, e.ErrorType = "failed", string(fault.KindOf(err))
		} else {
			e.Digest, e.Size = hex.EncodeToString(h.Sum(nil)), written
		}
		s.account.Record(ctx, p, e)
	}()
	l, err := s.leases().lease(ctx, p, prof, sess, leaseOpts{order: orderLock, reach: reachCreate, bind: bindAlways, resetIdle: true})
	if err != nil {
		return FileWritten{}, err
	}
	defer l.Release()
	sb := l.Sandbox
	wctx, cancel := context.WithTimeout(ctx, prof.Policy.Timeout)
	defer cancel()
	err = s.obs.Call(wctx, prof, "write_file", func(ctx context.Context) (err error) {
		written, err = sb.WriteFile(ctx, clean, io.TeeReader(body, h), s.cfg.MaxFileBytes)
		return err
	})
	if err != nil {
		if fault.IsKind(err, fault.TooLarge) {
			return FileWritten{}, fault.New(fault.TooLarge, "file body is over the %d-byte limit (sandbox.max_file_bytes); nothing was written", s.cfg.MaxFileBytes)
		}
		if fault.IsKind(err, fault.Full) {
			return FileWritten{}, workspaceFull(err, prof)
		}
		if wctx.Err() != nil && ctx.Err() == nil {
			return FileWritten{}, fault.New(fault.Timeout, "sandbox operation 'upload_file' exceeded timeout %gs", prof.Policy.Timeout.Seconds())
		}
		return FileWritten{}, classify(err, fault.Provision)
	}
	return FileWritten{SessionID: sess.ID, Path: clean, Size: written, SHA256: hex.EncodeToString(h.Sum(nil))}, nil
}

// workspaceFull is a provider's fault.Full refusal of a write, with the bound that was hit:
// the profile's disk_mb, or the disk under the workspace when the profile sets none.
func workspaceFull(err error, prof *Profile) error {
	var fe *fault.Error
	msg := err.Error()
	if errors.As(err, &fe) {
		msg = fe.Msg
	}
	if mb := prof.Policy.DiskMB; mb > 0 {
		return &fault.Error{Kind: fault.Full, Err: err, Msg: fmt.Sprintf("%s; the workspace of profile '%s' holds at most %d MB (policy disk_mb)", msg, prof.Name, mb)}
	}
	return &fault.Error{Kind: fault.Full, Err: err, Msg: fmt.Sprintf("%s; the disk under the workspace of profile '%s' is full (the profile sets no disk_mb): tell the operator", msg, prof.Name)}
}

// readable attaches to the session's sandbox for a read, without creating one and without
// waiting for running work (a paused session is woken, a parked one restored: orderIfParked).
// ok=false: the session has no sandbox (so no files).
func (fs *files) readable(ctx context.Context, p principal.Principal, id, profile string) (providers.Sandbox, bool, error) {
	s := fs.s
	sess, prof, err := fs.fileSession(ctx, p, id, profile)
	if err != nil {
		return nil, false, err
	}
	l, err := s.leases().lease(ctx, p, prof, sess, leaseOpts{order: orderIfParked, reach: reachAttach})
	if fault.KindOf(err) == fault.Gone {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, err
	}
	if l.Sandbox == nil {
		return nil, false, nil
	}
	_ = s.store.TouchSession(ctx, l.Session.ID, s.now())
	return l.Keep(), true, nil
}

// FileStat is what is known of a file opened for reading, from its folder's listing: Size in
// bytes is -1 when unknown (a symlink, which listings do not follow, or a listing that
// failed), and ModTime is then zero.
type FileStat struct {
	Size    int64
	ModTime time.Time
}

// ReadFile opens path in the session's workspace. Missing: fault.NotFound. The caller closes
// the reader. size is FileStat.Size.
func (s *Service) ReadFile(ctx context.Context, p principal.Principal, id, profile, path string) (io.ReadCloser, int64, error) {
	rc, st, err := s.OpenFile(ctx, p, id, profile, path)
	return rc, st.Size, err
}

// OpenFile opens path in the session's workspace, with its size and modification time when
// known (FileStat). Missing: fault.NotFound; a folder: fault.Conflict, hinting at the
// listing. The caller closes the reader.
func (s *Service) OpenFile(ctx context.Context, p principal.Principal, id, profile, path string) (io.ReadCloser, FileStat, error) {
	st := FileStat{Size: -1}
	clean, err := providers.CleanPath(path)
	if err != nil {
		return nil, st, err
	}
	sb, ok, err := s.files().readable(ctx, p, id, profile)
	if err != nil {
		return nil, st, err
	}
	if !ok {
		return nil, st, fault.New(fault.NotFound, "file '%s' not found: the session has no sandbox yet", clean)
	}
	folder := clean == "."
	if dir, base := splitPath(clean); base != "" && !folder {
		if entries, err := sb.ListFiles(ctx, dir); err == nil {
			for _, e := range entries {
				if e.Name == base && e.Type == providers.FileRegular {
					st = FileStat{Size: e.Size, ModTime: e.ModTime}
				}
				folder = folder || e.Name == base && e.Type == providers.FileDir
			}
		}
	}
	if folder {
		_ = sb.Close()
		return nil, st, fault.New(fault.Conflict, "'%s' is a folder, not a file", clean).WithHint(
			fmt.Sprintf("list it with GET /v1/sessions/%s/files?dir=%s", id, url.QueryEscape(clean)),
			fmt.Sprintf("list it with list_sandbox_files(path=%q)", clean))
	}
	rc, err := sb.ReadFile(ctx, clean)
	if err != nil {
		_ = sb.Close()
		return nil, FileStat{Size: -1}, err
	}
	return &closeBoth{ReadCloser: rc, sb: sb}, st, nil
}

func splitPath(p string) (dir, base string) {
	for i := len(p) - 1; i >= 0; i-- {
		if p[i] == '/' {
			return p[:i], p[i+1:]
		}
	}
	return ".", p
}

type closeBoth struct {
	io.ReadCloser
	sb providers.Sandbox
}

func (c *closeBoth) Close() error {
	err := c.ReadCloser.Close()
	_ = c.sb.Close()
	return err
}

// ListFiles lists folder dir of the session's workspace.
func (s *Service) ListFiles(ctx context.Context, p principal.Principal, id, profile, dir string) (string, []providers.FileInfo, error) {
	clean, err := providers.CleanPath(dir)
	if err != nil {
		return "", nil, err
	}
	sb, ok, err := s.files().readable(ctx, p, id, profile)
	if err != nil {
		return "", nil, err
	}
	if !ok {
		if clean == "." {
			return clean, []providers.FileInfo{}, nil
		}
		return "", nil, fault.New(fault.NotFound, "folder '%s' not found: the session has no sandbox yet", clean)
	}
	defer func() { _ = sb.Close() }()
	entries, err := sb.ListFiles(ctx, clean)
	if err != nil {
		return "", nil, err
	}
	return clean, entries, nil
}

// DeleteFile removes a file or empty folder (missing: no error). Ordered like writes.
func (s *Service) DeleteFile(ctx context.Context, p principal.Principal, id, profile, path string) error {
	clean, err := entryPath(path)
	if err != nil {
		return err
	}
	return s.files().change(ctx, p, id, profile, false, nil, []fileEvent{{store.AuditFileDelete, clean}}, func(ctx context.Context, sb providers.Sandbox, _ *Profile) error {
		return sb.RemoveFile(ctx, clean)
	})
}

// MakeDir makes folder path of the session's workspace and its missing parents, creating the
// sandbox if need be; a folder already there is no error. Ordered like writes; audited as a
// file_write of the folder.
//
// Errors: fault.Validation for the workspace itself; fault.Policy for an escape; fault.Conflict
// when path or a parent is not a folder; fault.Capability when the provider makes no folders
// (providers.FileTree).
func (s *Service) MakeDir(ctx context.Context, p principal.Principal, id, profile, path string) error {
	clean, err := entryPath(path)
	if err != nil {
		return err
	}
	return s.files().tree(ctx, p, id, profile, true, nil, []fileEvent{{store.AuditFileWrite, clean}}, func(ctx context.Context, t providers.FileTree) error {
		return t.MakeDir(ctx, clean)
	})
}

// MoveFile renames workspace path from to to as Go's os.Rename does — a symlink moved itself,
// a file at to replaced (a folder at to never), to's missing parents made. Ordered like writes;
// audited as a file_delete of from and a file_write of to.
//
// Errors: fault.Validation for the workspace itself as either, and a folder moved into
// itself; fault.Policy for an escape; fault.NotFound when from does not exist (also when the
// session has no sandbox yet); fault.Conflict for a folder at to (empty or not), or a
// folder moved onto a file; fault.Capability as MakeDir's.
func (s *Service) MoveFile(ctx context.Context, p principal.Principal, id, profile, from, to string) error {
	src, err := entryPath(from)
	if err != nil {
		return err
	}
	dst, err := entryPath(to)
	if err != nil {
		return err
	}
	none := fault.New(fault.NotFound, "'%s' not found: the session has no sandbox yet", src)
	return s.files().tree(ctx, p, id, profile, false, none, []fileEvent{{store.AuditFileDelete, src}, {store.AuditFileWrite, dst}}, func(ctx context.Context, t providers.FileTree) error {
		return t.Move(ctx, src, dst)
	})
}

// RemoveAll removes workspace path path and, for a folder, everything in it (symlinks
// themselves, never followed); missing is no error. Ordered like writes; audited as a
// file_delete.
//
// Errors: fault.Validation for the workspace itself; fault.Policy for an escape;
// fault.Capability as MakeDir's.
func (s *Service) RemoveAll(ctx context.Context, p principal.Principal, id, profile, path string) error {
	clean, err := entryPath(path)
	if err != nil {
		return err
	}
	return s.files().tree(ctx, p, id, profile, false, nil, []fileEvent{{store.AuditFileDelete, clean}}, func(ctx context.Context, t providers.FileTree) error {
		return t.RemoveAll(ctx, clean)
	})
}

// entryPath is path as a workspace entry: cleaned, never the workspace itself.
func entryPath(path string) (string, error) {
	clean, err := providers.CleanPath(path)
	if err != nil {
		return "", err
	}
	if clean == "." {
		return "", fault.New(fault.Validation, "path must name a file or folder in the workspace, not the workspace root")
	}
	return clean, nil
}

// tree is change with op on the sandbox's folder operations (providers.FileTree):
// fault.Capability when its provider has none.
func (fs *files) tree(ctx context.Context, p principal.Principal, id, profile string, create bool, none error, events []fileEvent, op func(context.Context, providers.FileTree) error) error {
	return fs.change(ctx, p, id, profile, create, none, events, func(ctx context.Context, sb providers.Sandbox, prof *Profile) error {
		t, ok := sb.(providers.FileTree)
		if !ok {
			return fault.Unsupported(prof.Provider.Type(), "files (folders made, moved, or removed with what they hold)")
		}
		return op(ctx, t)
	})
}

// fileEvent is an audit event a change of the workspace records: its kind and target.
type fileEvent struct{ kind, target string }

// change runs fn on the session's sandbox, ordered like writes, and records events (failed
// when fn, or reaching the sandbox, fails). create makes the sandbox if the session has none
// (and resets an idle one, as writes do); without it, for a session with no sandbox fn does
// not run and change answers none (nil: nothing to change is no error).
func (fs *files) change(ctx context.Context, p principal.Principal, id, profile string, create bool, none error, events []fileEvent, fn func(context.Context, providers.Sandbox, *Profile) error) (err error) {
	s := fs.s
	sess, prof, err := fs.fileSession(ctx, p, id, profile)
	if err != nil {
		return err
	}
	sid := sess.ID
	defer func() {
		for _, ev := range events {
			e := store.AuditEvent{Kind: ev.kind, SessionID: sid, Profile: prof.Name, Target: ev.target}
			if err != nil {
				e.Status, e.ErrorType = "failed", string(fault.KindOf(err))
			}
			s.account.Record(ctx, p, e)
		}
	}()
	o := leaseOpts{order: orderLock, reach: reachAttach}
	if create {
		o = leaseOpts{order: orderLock, reach: reachCreate, bind: bindAlways, resetIdle: true}
	}
	l, err := s.leases().lease(ctx, p, prof, sess, o)
	if fault.KindOf(err) == fault.Gone {
		return none
	}
	if err != nil {
		return err
	}
	defer l.Release()
	if l.Sandbox == nil {
		return none
	}
	_ = s.store.TouchSession(ctx, l.Session.ID, s.now())
	return fn(ctx, l.Sandbox, prof)
}
