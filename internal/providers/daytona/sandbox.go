package daytona

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"net/http"
	"regexp"
	"strings"
	"sync"
	"time"

	"github.com/sandgate/sandgate/internal/fault"
	"github.com/sandgate/sandgate/internal/providers"
)

// Sandbox is a handle on one Daytona sandbox.
type Sandbox struct {
	p  *Provider
	id string
	tb *toolboxClient

	mu        sync.Mutex
	closed    bool
	workspace string // absolute, from /work-dir
	scratch   string // absolute, the provider's own folder outside the workspace
}

var (
	_ providers.Sandbox  = (*Sandbox)(nil)
	_ providers.Contexts = (*Sandbox)(nil)
)

// ID returns Daytona's sandbox id.
func (s *Sandbox) ID() string { return s.id }

// Close forgets the handle; the sandbox keeps running. It is idempotent.
func (s *Sandbox) Close() error {
	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()
	return nil
}

func (s *Sandbox) usable() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return fault.New(fault.Conflict, "%s: the handle on sandbox '%s' is closed", TypeName, s.id)
	}
	return nil
}

// scratchPath is what a scratch folder must look like: /process/execute splits commands at
// spaces, so the provider's own commands naming it must not need quoting.
var scratchPath = regexp.MustCompile(`^/[A-Za-z0-9._/+-]+$`)

// scratchCommand makes the provider's folder under the sandbox's TMPDIR (else /tmp) and
// prints its real path. It is split by the toolbox at spaces outside quotes.
const scratchCommand = `sh -c 'd="${TMPDIR:-/tmp}/sandgate" && mkdir -p "$d" && chmod 700 "$d" && cd "$d" && pwd -P'`

// paths returns the workspace (the sandbox's work dir) and the provider's scratch folder,
// asking the sandbox once per handle. A sandbox that cannot be reached is an error wrapping
// providers.ErrUnreached: nothing ran.
func (s *Sandbox) paths(ctx context.Context) (workspace, scratch string, err error) {
	s.mu.Lock()
	ws, sc := s.workspace, s.scratch
	s.mu.Unlock()
	if ws != "" && sc != "" {
		return ws, sc, nil
	}
	if ws, err = s.tb.workDir(ctx); err != nil {
		return "", "", s.unreached(ctx, err, "finding the sandbox's work dir")
	}
	if !strings.HasPrefix(ws, "/") {
		return "", "", fault.New(fault.Provision, "%s: sandbox '%s' reports a work dir that is not absolute: %q", TypeName, s.id, ws)
	}
	if ws != "/" {
		ws = strings.TrimRight(ws, "/")
	}
	code, out, err := s.tb.execute(ctx, scratchCommand, time.Minute)
	if err != nil {
		return "", "", s.unreached(ctx, err, "making the provider's folder")
	}
	sc = strings.TrimSpace(out)
	if code != 0 || !scratchPath.MatchString(sc) {
		return "", "", fault.New(fault.Provision, "%s: could not make a folder for the provider's files in sandbox '%s' (exit %d): %.200s", TypeName, s.id, code, out)
	}
	s.mu.Lock()
	s.workspace, s.scratch = ws, sc
	s.mu.Unlock()
	return ws, sc, nil
}

// unreached classifies an error of a call before anything ran: ctx.Err() when ctx ended,
// fault.Gone when the sandbox no longer exists, else fault.Provision; both carry
// providers.ErrUnreached so the domain attaches again (and starts a stopped sandbox).
func (s *Sandbox) unreached(ctx context.Context, err error, what string) error {
	if ctx.Err() != nil {
		return ctx.Err()
	}
	kind := fault.Provision
	if st := statusOf(err); st == http.StatusNotFound || st == http.StatusGone {
		kind = fault.Gone
	}
	return fault.Wrap(kind, errors.Join(providers.ErrUnreached, err), "%s: sandbox '%s': %s", TypeName, s.id, what)
}

// failed classifies an error of a call after something may have run.
func (s *Sandbox) failed(ctx context.Context, err error, what string) error {
	if ctx.Err() != nil {
		return ctx.Err()
	}
	var fe *fault.Error
	if errors.As(err, &fe) {
		return err
	}
	kind := fault.Provision
	if st := statusOf(err); st == http.StatusNotFound || st == http.StatusGone {
		kind = fault.Gone
	}
	return fault.Wrap(kind, err, "%s: sandbox '%s': %s", TypeName, s.id, what)
}

// abs maps a workspace path onto the sandbox's file system, confined lexically
// (providers.CleanPath: fault.Policy for "..", absolute paths and NUL bytes). It also
// returns the clean relative path ("." for the workspace).
func (s *Sandbox) abs(ctx context.Context, p string) (string, string, error) {
	rel, err := providers.CleanPath(p)
	if err != nil {
		return "", "", err
	}
	ws, _, err := s.paths(ctx)
	if err != nil {
		return "", "", err
	}
	if rel == "." {
		return ws, rel, nil
	}
	if ws == "/" {
		return "/" + rel, rel, nil
	}
	return ws + "/" + rel, rel, nil
}

// newID returns 16 random hex digits.
func newID() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// shQuote quotes s for POSIX sh: inside single quotes nothing is interpreted.
func shQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// background returns a context for clean-up that outlives the caller's, bounded.
func background() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), 30*time.Second)
}
