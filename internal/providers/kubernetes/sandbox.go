package kubernetes

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/sandgate/sandgate/internal/fault"
	"github.com/sandgate/sandgate/internal/providers"
)

// Sandbox is a handle on one sandbox pod. It holds no API resources of its own and is safe
// for concurrent use.
type Sandbox struct {
	p         *Provider
	id        string   // "<namespace>/<pod>" or, in agent-sandbox mode, "<namespace>/<claim>"
	ns, pod   string   // the pod
	container string   // the container programs run in
	ws        string   // the workspace folder in the container
	c         *clients // the identity executions run as
	closed    atomic.Bool
}

var _ providers.Sandbox = (*Sandbox)(nil)

// open returns a handle on sandbox id, served by pod, acting as c.
func (p *Provider) open(c *clients, id string, pod *corev1.Pod) *Sandbox {
	return &Sandbox{p: p, id: id, ns: pod.Namespace, pod: pod.Name, container: sandboxContainer(pod), ws: p.cfg.Workspace, c: c}
}

// sandboxContainer returns the container named ContainerName, else the first one.
func sandboxContainer(pod *corev1.Pod) string {
	for _, c := range pod.Spec.Containers {
		if c.Name == ContainerName {
			return c.Name
		}
	}
	if len(pod.Spec.Containers) > 0 {
		return pod.Spec.Containers[0].Name
	}
	return ContainerName
}

// ID returns "<namespace>/<pod>" (in agent-sandbox mode "<namespace>/<claim>").
func (s *Sandbox) ID() string { return s.id }

// Pod returns the namespace and name of the pod that serves the sandbox.
func (s *Sandbox) Pod() (namespace, name string) { return s.ns, s.pod }

// Close marks the handle closed; the pod keeps running for a later Attach (docs/semantics.md §3).
// Idempotent; other methods of a closed handle return fault.Conflict.
func (s *Sandbox) Close() error {
	s.closed.Store(true)
	return nil
}

func (s *Sandbox) usable() error {
	if s.closed.Load() {
		return fault.New(fault.Conflict, "%s: the handle on sandbox '%s' is closed", TypeName, s.id)
	}
	return nil
}

// simple runs one file operation of the helper and returns its result frame.
func (s *Sandbox) simple(ctx context.Context, h header, what string) ([]byte, error) {
	var result []byte
	var herr *helperError
	res := s.stream(ctx, newToken(), call{h: h, onFrame: func(kind byte, payload []byte) error {
		switch kind {
		case frameResult:
			result = payload
		case frameError:
			herr = &helperError{}
			return json.Unmarshal(payload, herr)
		}
		return nil
	}})
	if herr != nil {
		return nil, herr.fault()
	}
	if result == nil {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		return nil, s.streamFailure(res, what)
	}
	return result, nil
}

// WriteFile streams r into workspace path p, creating parent folders, through the helper:
// the data lands in a hidden temporary file next to the target, renamed into place only when
// complete and within maxBytes (< 0: no limit), so an oversized or broken upload leaves
// nothing behind. A symlink target inside the workspace is written through.
//
// Errors: fault.Policy when p escapes the workspace (also through symlinks), fault.Conflict
// when p is a folder or a parent is a file, fault.TooLarge beyond maxBytes, r's error
// (wrapped), fault.Conflict on a closed handle, ctx.Err().
func (s *Sandbox) WriteFile(ctx context.Context, p string, r io.Reader, maxBytes int64) (int64, error) {
	clean, err := providers.CleanPath(p)
	if err != nil {
		return 0, err
	}
	if clean == "." {
		return 0, fault.New(fault.Conflict, "path '%s' is the workspace folder, not a file", p)
	}
	if err := s.usable(); err != nil {
		return 0, err
	}
	var (
		mu      sync.Mutex
		readErr error
		tooBig  bool
	)
	limit := maxBytes
	feed := func(fw frameWriter) error {
		buf := make([]byte, chunkSize)
		var n int64
		for {
			k, err := r.Read(buf)
			if k > 0 {
				n += int64(k)
				if maxBytes >= 0 && n > maxBytes {
					mu.Lock()
					tooBig = true
					mu.Unlock()
					return fw.frame(frameAbort, nil)
				}
				if werr := fw.frame(frameData, buf[:k]); werr != nil {
					return werr
				}
			}
			if errors.Is(err, io.EOF) {
				return fw.frame(frameDataEnd, nil)
			}
			if err != nil {
				mu.Lock()
				readErr = err
				mu.Unlock()
				return fw.frame(frameAbort, nil)
			}
		}
	}
	var written *struct {
		Written int64 `json:"written"`
	}
	var herr *helperError
	res := s.stream(ctx, newToken(), call{
		h:    header{Op: "write", WS: s.ws, Path: clean, Max: &limit},
		feed: feed,
		onFrame: func(kind byte, payload []byte) error {
			switch kind {
			case frameResult:
				written = &struct {
					Written int64 `json:"written"`
				}{}
				return json.Unmarshal(payload, written)
			case frameError:
				herr = &helperError{}
				return json.Unmarshal(payload, herr)
			}
			return nil
		},
	})
	mu.Lock()
	defer mu.Unlock()
	switch {
	case tooBig:
		return 0, fault.New(fault.TooLarge, "file '%s' is larger than %d bytes", p, maxBytes)
	case readErr != nil:
		return 0, fmt.Errorf("%s: reading the upload of '%s': %w", TypeName, p, readErr)
	case herr != nil:
		return 0, herr.fault()
	case written != nil:
		return written.Written, nil
	case ctx.Err() != nil:
		return 0, ctx.Err()
	}
	return 0, s.streamFailure(res, "write a file")
}

// ReadFile opens workspace file p for reading; the content streams from the pod as it is
// read. Close ends the transfer. Errors: fault.Policy when p escapes the workspace,
// fault.NotFound when it is missing, fault.Conflict when it is a folder or not a regular
// file, fault.Conflict on a closed handle, ctx.Err().
func (s *Sandbox) ReadFile(ctx context.Context, p string) (io.ReadCloser, error) {
	clean, err := providers.CleanPath(p)
	if err != nil {
		return nil, err
	}
	if err := s.usable(); err != nil {
		return nil, err
	}
	// The transfer outlives this call: it ends with Close or the end of the file.
	sctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	pr, pw := io.Pipe()
	first := make(chan error, 1)
	started := false
	var ended atomic.Bool // the whole file was received
	go func() {
		defer cancel() // the stream has ended: release its context
		res := s.stream(sctx, newToken(), call{
			h: header{Op: "read", WS: s.ws, Path: clean},
			onFrame: func(kind byte, payload []byte) error {
				switch kind {
				case frameResult:
					started = true
					first <- nil
				case frameError:
					var e helperError
					if err := json.Unmarshal(payload, &e); err != nil {
						return err
					}
					first <- e.fault()
					return errors.New("done")
				case frameData:
					if _, err := pw.Write(payload); err != nil {
						return err // the reader was closed
					}
				case frameDataEnd:
					ended.Store(true)
					_ = pw.Close()
				}
				return nil
			},
		})
		if !started {
			select {
			case first <- s.streamFailure(res, "read a file"):
			default:
			}
			return
		}
		if !ended.Load() {
			_ = pw.CloseWithError(s.streamFailure(res, "read a file"))
		}
	}()
	select {
	case err := <-first:
		if err != nil {
			return nil, err // the helper has reported and exits; the stream ends by itself
		}
		return &fileReader{PipeReader: pr, cancel: cancel, ended: &ended}, nil
	case <-ctx.Done():
		cancel()
		return nil, ctx.Err()
	}
}

// fileReader is ReadFile's stream; Close abandons a transfer that has not ended (one that
// has ends by itself a moment later, when the helper exits).
type fileReader struct {
	*io.PipeReader
	cancel context.CancelFunc
	ended  *atomic.Bool
	once   sync.Once
}

func (f *fileReader) Close() error {
	f.once.Do(func() {
		_ = f.PipeReader.Close()
		if !f.ended.Load() {
			f.cancel()
		}
	})
	return nil
}

// listEntry is one record of the helper's listing.
type listEntry struct {
	Name    string `json:"name"` // hex of the raw name
	Type    string `json:"type"`
	Size    int64  `json:"size"`
	Mode    uint32 `json:"mode"`
	MtimeNS int64  `json:"mtime_ns"`
}

// ListFiles lists workspace folder dir without following symlinks in it, sorted by name.
// Errors: fault.Policy when dir escapes the workspace, fault.NotFound when it is missing,
// fault.Conflict when it is a file, fault.Conflict on a closed handle, ctx.Err().
func (s *Sandbox) ListFiles(ctx context.Context, dir string) ([]providers.FileInfo, error) {
	clean, err := providers.CleanPath(dir)
	if err != nil {
		return nil, err
	}
	if err := s.usable(); err != nil {
		return nil, err
	}
	raw, err := s.simple(ctx, header{Op: "list", WS: s.ws, Path: clean}, "list files")
	if err != nil {
		return nil, err
	}
	var entries []listEntry
	if err := json.Unmarshal(raw, &entries); err != nil {
		return nil, fmt.Errorf("%s: malformed listing from the pod: %w", TypeName, err)
	}
	out := make([]providers.FileInfo, 0, len(entries))
	for _, e := range entries {
		nb, err := hex.DecodeString(e.Name)
		if err != nil {
			return nil, fmt.Errorf("%s: malformed listing from the pod: %w", TypeName, err)
		}
		name := string(nb)
		rel := name
		if clean != "." {
			rel = path.Join(clean, name)
		}
		typ := providers.FileOther
		switch e.Type {
		case "file":
			typ = providers.FileRegular
		case "dir":
			typ = providers.FileDir
		case "symlink":
			typ = providers.FileSymlink
		}
		out = append(out, providers.FileInfo{
			Name: name, Path: rel, Type: typ, Size: e.Size,
			Mode: fs.FileMode(e.Mode & 0o7777), ModTime: time.Unix(0, e.MtimeNS),
		})
	}
	slices.SortFunc(out, func(a, b providers.FileInfo) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

// RemoveFile removes a file, a symlink (not its target) or an empty folder; a missing one is
// no error. Errors: fault.Policy when p escapes the workspace, fault.Conflict for a folder
// that is not empty, fault.Validation for the workspace itself, fault.Conflict on a closed
// handle, ctx.Err().
func (s *Sandbox) RemoveFile(ctx context.Context, p string) error {
	clean, err := providers.CleanPath(p)
	if err != nil {
		return err
	}
	if clean == "." {
		return fault.New(fault.Validation, "the workspace folder itself cannot be removed")
	}
	if err := s.usable(); err != nil {
		return err
	}
	_, err = s.simple(ctx, header{Op: "remove", WS: s.ws, Path: clean}, "remove a file")
	return err
}
