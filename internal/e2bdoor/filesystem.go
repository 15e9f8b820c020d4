package e2bdoor

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"slices"
	"strings"
	"time"

	"connectrpc.com/connect"

	"github.com/sandgate/sandgate/internal/fault"
	"github.com/sandgate/sandgate/internal/principal"
	"github.com/sandgate/sandgate/internal/providers/e2b/wire"
	"github.com/sandgate/sandgate/internal/sandbox"
)

// envd's filesystem service (packages/envd/spec/filesystem/filesystem.proto) on the session's
// workspace (shown as Home; paths.go). Stat and ListDir read the workspace's listings; MakeDir,
// Move and Remove are the domain's file operations (MakeDir, MoveFile, RemoveAll: done by the
// provider on the paths, never through a command line made of them; ordered with the
// session's executions and writes, audited like them). WatchDir compares listings of the folder every
// Options.WatchInterval and reports what changed between two (a rename shows as a removal and
// a creation; changes undone within one interval are not seen).

// maxListed bounds the entries one ListDir or one watch's listing holds.
const maxListed = 10000

// fileEntry is an entry of a workspace listing (the domain's, ListFiles).
type fileEntry struct {
	Name, Path string // Path: relative to the workspace
	Type       string // fileRegular, fileDir, fileSymlink or "other"
	Size       int64
	Mode       fs.FileMode
	ModTime    time.Time
}

// Types of fileEntry (the domain's names).
const (
	fileRegular = "file"
	fileDir     = "dir"
	fileSymlink = "symlink"
)

// listFiles lists workspace folder dir of the session.
func (h *Handler) listFiles(ctx context.Context, p principal.Principal, sess sandbox.Session, dir string) ([]fileEntry, error) {
	_, entries, err := h.svc.ListFiles(ctx, p, sess.ID, "", dir)
	if err != nil {
		return nil, err
	}
	out := make([]fileEntry, 0, len(entries))
	for _, e := range entries {
		out = append(out, fileEntry{Name: e.Name, Path: e.Path, Type: string(e.Type), Size: e.Size, Mode: e.Mode, ModTime: e.ModTime})
	}
	return out, nil
}

// entryOf is fi, an entry of the workspace, as envd's EntryInfo.
func entryOf(fi fileEntry) *wire.EntryInfo {
	e := &wire.EntryInfo{
		Name: fi.Name, Path: e2bPath(fi.Path), Size: wire.Int64(fi.Size), Mode: uint32(fi.Mode.Perm()),
		Owner: DefaultUser, Group: DefaultUser,
	}
	mode := fi.Mode.Perm()
	switch fi.Type {
	case fileRegular:
		e.Type = wire.FileTypeFile
	case fileDir:
		e.Type, mode = wire.FileTypeDirectory, mode|fs.ModeDir
	case fileSymlink:
		e.Type, mode = wire.FileTypeSymlink, mode|fs.ModeSymlink
	default:
		e.Type = wire.FileTypeUnspecified
	}
	e.Permissions = mode.String()
	if !fi.ModTime.IsZero() {
		e.ModifiedTime = &wire.Timestamp{Time: fi.ModTime}
	}
	return e
}

// homeEntry is the workspace itself.
func homeEntry() *wire.EntryInfo {
	return &wire.EntryInfo{Name: path.Base(Home), Type: wire.FileTypeDirectory, Path: Home, Mode: 0o755,
		Permissions: (fs.ModeDir | 0o755).String(), Owner: DefaultUser, Group: DefaultUser}
}

// statRel reads the entry of workspace path rel ("." the workspace). ok is false when there
// is none.
func (h *Handler) statRel(ctx context.Context, p principal.Principal, sess sandbox.Session, rel string) (fileEntry, bool, error) {
	if rel == "." {
		return fileEntry{Name: path.Base(Home), Path: ".", Type: fileDir, Mode: 0o755}, true, nil
	}
	dir, base := path.Split(rel)
	if dir == "" {
		dir = "."
	}
	entries, err := h.listFiles(ctx, p, sess, strings.TrimSuffix(dir, "/"))
	if fault.KindOf(err) == fault.NotFound {
		return fileEntry{}, false, nil
	}
	if err != nil {
		return fileEntry{}, false, err
	}
	for _, e := range entries {
		if e.Name == base {
			return e, true, nil
		}
	}
	return fileEntry{}, false, nil
}

// fileNotFound is envd's NotFound for path p.
func fileNotFound(p string) error {
	return connect.NewError(connect.CodeNotFound, fmt.Errorf("file not found: path '%s' does not exist", p))
}

func (h *Handler) stat(ctx context.Context, req *wire.StatRequest) (*wire.StatResponse, error) {
	p, sess := principalOf(ctx), sessionFrom(ctx)
	if err := checkUser(rpcUser(ctx)); err != nil {
		return nil, err
	}
	rel, err := workspacePath(req.Path)
	if err != nil {
		return nil, h.rpcError(ctx, err)
	}
	if rel == "." {
		return &wire.StatResponse{Entry: homeEntry()}, nil
	}
	fi, ok, err := h.statRel(ctx, p, sess, rel)
	if err != nil {
		return nil, h.rpcError(ctx, err)
	}
	if !ok {
		return nil, fileNotFound(req.Path)
	}
	return &wire.StatResponse{Entry: entryOf(fi)}, nil
}

// dirRel resolves req path p to a workspace folder: errors (envd's) when it does not exist
// or is no folder.
func (h *Handler) dirRel(ctx context.Context, p principal.Principal, sess sandbox.Session, e2b string) (string, error) {
	rel, err := workspacePath(e2b)
	if err != nil {
		return "", h.rpcError(ctx, err)
	}
	fi, ok, err := h.statRel(ctx, p, sess, rel)
	switch {
	case err != nil:
		return "", h.rpcError(ctx, err)
	case !ok:
		return "", connect.NewError(connect.CodeNotFound, fmt.Errorf("directory not found: path '%s' does not exist", e2b))
	case fi.Type != fileDir:
		return "", connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("path is not a directory: %s", e2b))
	}
	return rel, nil
}

// walk lists folder rel and, down to depth levels (1: rel's own entries), the folders under
// it, breadth first; fn sees each entry. Symlinked folders are not followed.
func (h *Handler) walk(ctx context.Context, p principal.Principal, sess sandbox.Session, rel string, depth int, fn func(fileEntry) error) error {
	level, n := []string{rel}, 0
	for d := 0; d < depth && len(level) > 0; d++ {
		var next []string
		for _, dir := range level {
			entries, err := h.listFiles(ctx, p, sess, dir)
			if err != nil {
				if dir != rel && fault.KindOf(err) == fault.NotFound {
					continue // removed meanwhile
				}
				return err
			}
			for _, e := range entries {
				if n++; n > maxListed {
					return fault.New(fault.TooLarge, "folder '%s' holds more than %d entries to the depth asked; list a narrower folder or a smaller depth", e2bPath(rel), maxListed)
				}
				if err := fn(e); err != nil {
					return err
				}
				if e.Type == fileDir {
					next = append(next, e.Path)
				}
			}
		}
		level = next
	}
	return nil
}

func (h *Handler) listDir(ctx context.Context, req *wire.ListDirRequest) (*wire.ListDirResponse, error) {
	p, sess := principalOf(ctx), sessionFrom(ctx)
	if err := checkUser(rpcUser(ctx)); err != nil {
		return nil, err
	}
	rel, err := h.dirRel(ctx, p, sess, req.Path)
	if err != nil {
		return nil, err
	}
	depth := max(int(req.Depth), 1)
	out := &wire.ListDirResponse{}
	err = h.walk(ctx, p, sess, rel, depth, func(fi fileEntry) error {
		out.Entries = append(out.Entries, entryOf(fi))
		return nil
	})
	if err != nil {
		return nil, h.rpcError(ctx, err)
	}
	return out, nil
}

// changeTarget begins a call that changes the workspace: the caller, its session and e2b, a
// path of a request, as a workspace path (the user checked first).
func (h *Handler) changeTarget(ctx context.Context, e2b string) (principal.Principal, sandbox.Session, string, error) {
	if err := checkUser(rpcUser(ctx)); err != nil {
		return principal.Principal{}, sandbox.Session{}, "", err
	}
	rel, err := workspacePath(e2b)
	if err != nil {
		return principal.Principal{}, sandbox.Session{}, "", h.rpcError(ctx, err)
	}
	return principalOf(ctx), sessionFrom(ctx), rel, nil
}

// entryAfter is the entry of workspace path rel (e2b as the request named it) once a call
// made it: fault.Internal when it is not listed.
func (h *Handler) entryAfter(ctx context.Context, p principal.Principal, sess sandbox.Session, rel, e2b, what string) (*wire.EntryInfo, error) {
	fi, ok, err := h.statRel(ctx, p, sess, rel)
	if err != nil || !ok {
		return nil, h.rpcError(ctx, errors.Join(err, fault.New(fault.Internal, "%s was %s but is not listed", e2b, what)))
	}
	return entryOf(fi), nil
}

func (h *Handler) makeDir(ctx context.Context, req *wire.MakeDirRequest) (*wire.MakeDirResponse, error) {
	p, sess, rel, err := h.changeTarget(ctx, req.Path)
	if err != nil {
		return nil, err
	}
	fi, ok, err := h.statRel(ctx, p, sess, rel)
	switch {
	case err != nil:
		return nil, h.rpcError(ctx, err)
	case ok && fi.Type == fileDir:
		return nil, connect.NewError(connect.CodeAlreadyExists, fmt.Errorf("directory already exists: %s", req.Path))
	case ok:
		return nil, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("path already exists but it is not a directory: %s", req.Path))
	}
	if err := h.svc.MakeDir(ctx, p, sess.ID, "", rel); err != nil {
		return nil, h.rpcError(ctx, err)
	}
	e, err := h.entryAfter(ctx, p, sess, rel, req.Path, "made")
	if err != nil {
		return nil, err
	}
	return &wire.MakeDirResponse{Entry: e}, nil
}

// move renames Source to Destination as envd does (os.Rename: a file at the destination is
// replaced, a folder there is not; the destination's parents are made).
func (h *Handler) move(ctx context.Context, req *wire.MoveRequest) (*wire.MoveResponse, error) {
	p, sess, src, err := h.changeTarget(ctx, req.Source)
	if err != nil {
		return nil, err
	}
	dst, err := workspacePath(req.Destination)
	if err != nil {
		return nil, h.rpcError(ctx, err)
	}
	if src == "." || dst == "." {
		return nil, connect.NewError(connect.CodePermissionDenied, fmt.Errorf("the workspace (%s) itself cannot be moved, nor replaced", Home))
	}
	if _, ok, err := h.statRel(ctx, p, sess, src); err != nil {
		return nil, h.rpcError(ctx, err)
	} else if !ok {
		return nil, connect.NewError(connect.CodeNotFound, fmt.Errorf("source file not found: path '%s' does not exist", req.Source))
	}
	if err := h.svc.MoveFile(ctx, p, sess.ID, "", src, dst); err != nil {
		return nil, h.rpcError(ctx, err)
	}
	e, err := h.entryAfter(ctx, p, sess, dst, req.Destination, "moved")
	if err != nil {
		return nil, err
	}
	return &wire.MoveResponse{Entry: e}, nil
}

// remove removes a file, or a folder with what it holds (envd: os.RemoveAll); a missing path
// is no error.
func (h *Handler) remove(ctx context.Context, req *wire.RemoveRequest) (*wire.Empty, error) {
	p, sess, rel, err := h.changeTarget(ctx, req.Path)
	if err != nil {
		return nil, err
	}
	if rel == "." {
		return nil, connect.NewError(connect.CodePermissionDenied, fmt.Errorf("the workspace (%s) itself cannot be removed", Home))
	}
	fi, ok, err := h.statRel(ctx, p, sess, rel)
	switch {
	case err != nil:
		return nil, h.rpcError(ctx, err)
	case !ok:
		return &wire.Empty{}, nil
	}
	remove := h.svc.DeleteFile // a file or a symlink: every provider removes those
	if fi.Type == fileDir {
		remove = h.svc.RemoveAll
	}
	if err := remove(ctx, p, sess.ID, "", rel); err != nil {
		return nil, h.rpcError(ctx, err)
	}
	return &wire.Empty{}, nil
}

// watched is what a watch knows of one entry.
type watched struct {
	fi fileEntry
}

func (a watched) written(b watched) bool {
	return a.fi.Type != fileDir && (a.fi.Size != b.fi.Size || !a.fi.ModTime.Equal(b.fi.ModTime))
}

// listing lists what a watch of rel sees: its entries (recursive: the folders' under it too)
// by their path relative to rel.
func (h *Handler) listing(ctx context.Context, p principal.Principal, sess sandbox.Session, rel string, recursive bool) (map[string]watched, error) {
	depth := 1
	if recursive {
		depth = maxListed
	}
	out := map[string]watched{}
	err := h.walk(ctx, p, sess, rel, depth, func(fi fileEntry) error {
		name := fi.Path
		if rel != "." {
			name = strings.TrimPrefix(fi.Path, rel+"/")
		}
		out[name] = watched{fi: fi}
		return nil
	})
	return out, err
}

func (h *Handler) watchDir(ctx context.Context, req *connect.Request[wire.WatchDirRequest], stream *connect.ServerStream[wire.WatchDirResponse]) error {
	p, sess := principalOf(ctx), sessionFrom(ctx)
	if err := checkUser(envdUserOf(req.Header())); err != nil {
		return err
	}
	m := req.Msg
	if m.AllowNetworkMounts {
		return connect.NewError(connect.CodeInvalidArgument, errors.New("allowNetworkMounts is not offered: a workspace has no network mounts"))
	}
	rel, err := h.dirRel(ctx, p, sess, m.Path)
	if err != nil {
		return err
	}
	seen, err := h.listing(ctx, p, sess, rel, m.Recursive)
	if err != nil {
		return h.rpcError(ctx, err)
	}
	if err := stream.Send(&wire.WatchDirResponse{Start: &struct{}{}}); err != nil {
		return err
	}
	poll := time.NewTicker(h.watchPoll)
	defer poll.Stop()
	keepalive := time.NewTicker(keepaliveEvery(req.Header()))
	defer keepalive.Stop()
	for {
		select {
		case <-ctx.Done():
			if errors.Is(ctx.Err(), context.DeadlineExceeded) {
				return nil // the watch's time is up: its stream ends, as envd's does
			}
			return ctx.Err()
		case <-keepalive.C:
			if err := stream.Send(&wire.WatchDirResponse{Keepalive: &struct{}{}}); err != nil {
				return err
			}
		case <-poll.C:
			now, err := h.listing(ctx, p, sess, rel, m.Recursive)
			if err != nil {
				return h.rpcError(ctx, err)
			}
			for _, ev := range changes(seen, now, m.IncludeEntry) {
				if err := stream.Send(&wire.WatchDirResponse{Filesystem: ev}); err != nil {
					return err
				}
			}
			seen = now
		}
	}
}

// changes are the events between listings before and after: removals, then creations, then
// writes and mode changes, each sorted by name.
func changes(before, after map[string]watched, withEntry bool) []*wire.FilesystemEvent {
	var removed, created, changed []*wire.FilesystemEvent
	ev := func(name string, t wire.EventType, w watched) *wire.FilesystemEvent {
		e := &wire.FilesystemEvent{Name: name, Type: t}
		if withEntry && t != wire.EventRemove {
			e.Entry = entryOf(w.fi)
		}
		return e
	}
	for name, w := range before {
		if _, ok := after[name]; !ok {
			removed = append(removed, ev(name, wire.EventRemove, w))
		}
	}
	for name, w := range after {
		old, ok := before[name]
		switch {
		case !ok:
			created = append(created, ev(name, wire.EventCreate, w))
		case old.fi.Type != w.fi.Type:
			removed = append(removed, ev(name, wire.EventRemove, old))
			created = append(created, ev(name, wire.EventCreate, w))
		case old.written(w):
			changed = append(changed, ev(name, wire.EventWrite, w))
		case old.fi.Mode != w.fi.Mode:
			changed = append(changed, ev(name, wire.EventChmod, w))
		}
	}
	byName := func(a, b *wire.FilesystemEvent) int { return strings.Compare(a.Name, b.Name) }
	for _, list := range [][]*wire.FilesystemEvent{removed, created, changed} {
		slices.SortFunc(list, byName)
	}
	return slices.Concat(removed, created, changed)
}
