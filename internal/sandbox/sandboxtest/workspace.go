package sandboxtest

import (
	"bytes"
	"path"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/sandgate/sandgate/internal/fault"
	"github.com/sandgate/sandgate/internal/providers"
)

// workspace is a sandbox's files, in memory: clean slash paths relative to the workspace
// ("." is the root, always a folder). There are no symlinks.
type workspace struct {
	now func() time.Time

	mu    sync.Mutex
	nodes map[string]*node
}

type node struct {
	dir  bool
	data []byte
	mod  time.Time
}

func newWorkspace(now func() time.Time) *workspace {
	return &workspace{now: now, nodes: map[string]*node{}}
}

// clean is providers.CleanPath (fault.Policy for escapes and NUL bytes).
func clean(p string) (string, error) { return providers.CleanPath(p) }

// parents returns the folders above p, outermost first ("a/b/c" → "a", "a/b").
func parents(p string) []string {
	var out []string
	for i := 0; i < len(p); i++ {
		if p[i] == '/' {
			out = append(out, p[:i])
		}
	}
	return out
}

// write stores data as file p, creating its parent folders.
// Errors: fault.Validation for the root, fault.Conflict when p is a folder or a parent is a file.
func (w *workspace) write(p string, data []byte) error {
	c, err := clean(p)
	if err != nil {
		return err
	}
	if c == "." {
		return fault.New(fault.Validation, "path must name a file, not the workspace root")
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	ps := parents(c)
	for _, d := range ps {
		if n, ok := w.nodes[d]; ok && !n.dir {
			return fault.New(fault.Conflict, "cannot write '%s': '%s' is a file, not a folder", c, d)
		}
	}
	if n, ok := w.nodes[c]; ok && n.dir {
		return fault.New(fault.Conflict, "cannot write '%s': it is a folder", c)
	}
	now := w.now()
	for _, d := range ps {
		if _, ok := w.nodes[d]; !ok {
			w.nodes[d] = &node{dir: true, mod: now}
		}
	}
	w.nodes[c] = &node{data: bytes.Clone(data), mod: now}
	return nil
}

// read returns file p's content. Errors: fault.NotFound, fault.Conflict for a folder.
func (w *workspace) read(p string) ([]byte, error) {
	c, err := clean(p)
	if err != nil {
		return nil, err
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if c == "." {
		return nil, fault.New(fault.Conflict, "'%s' is a folder, not a file", p)
	}
	n, ok := w.nodes[c]
	switch {
	case !ok:
		return nil, fault.New(fault.NotFound, "no file or folder '%s' in the sandbox workspace", c)
	case n.dir:
		return nil, fault.New(fault.Conflict, "'%s' is a folder, not a file", c)
	}
	return bytes.Clone(n.data), nil
}

// list lists folder p, sorted by name. Errors: fault.NotFound, fault.Conflict for a file.
func (w *workspace) list(p string) ([]providers.FileInfo, error) {
	c, err := clean(p)
	if err != nil {
		return nil, err
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if c != "." {
		n, ok := w.nodes[c]
		switch {
		case !ok:
			return nil, fault.New(fault.NotFound, "no file or folder '%s' in the sandbox workspace", c)
		case !n.dir:
			return nil, fault.New(fault.Conflict, "'%s' is a file, not a folder", c)
		}
	}
	out := []providers.FileInfo{}
	for k, n := range w.nodes {
		if path.Dir(k) != c {
			continue
		}
		fi := providers.FileInfo{Name: path.Base(k), Path: k, Type: providers.FileRegular, Size: int64(len(n.data)), Mode: 0o644, ModTime: n.mod}
		if n.dir {
			fi.Type, fi.Size, fi.Mode = providers.FileDir, 0, 0o755
		}
		out = append(out, fi)
	}
	slices.SortFunc(out, func(a, b providers.FileInfo) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

// remove removes file or empty folder p; a missing one is no error.
// Errors: fault.Validation for the root, fault.Conflict for a folder that is not empty.
func (w *workspace) remove(p string) error {
	c, err := clean(p)
	if err != nil {
		return err
	}
	if c == "." {
		return fault.New(fault.Validation, "path must name a file or folder, not the workspace root")
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	n, ok := w.nodes[c]
	if !ok {
		return nil
	}
	if n.dir {
		for k := range w.nodes {
			if strings.HasPrefix(k, c+"/") {
				return fault.New(fault.Conflict, "folder '%s' is not empty", c)
			}
		}
	}
	delete(w.nodes, c)
	return nil
}

// isDir reports whether p names a folder (the root included).
func (w *workspace) isDir(c string) bool {
	if c == "." {
		return true
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	n, ok := w.nodes[c]
	return ok && n.dir
}
