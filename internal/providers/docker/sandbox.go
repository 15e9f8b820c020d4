package docker

import (
	"context"
	"strconv"
	"strings"
	"time"

	cerrdefs "github.com/containerd/errdefs"

	"github.com/sandgate/sandgate/internal/fault"
	"github.com/sandgate/sandgate/internal/providers"
	"github.com/sandgate/sandgate/internal/providers/sdadapter"
	"github.com/sandgate/sandgate/internal/sandboxd/remote"
)

// Sandbox is a handle on one sandbox container: its executions, files, contexts and ports go
// to the container's sandboxd through the shared adapter (sdadapter: the faults are the same
// as kubernetes'), the provider supplying the client it keeps for the container and what a
// broken connection means (the engine is asked whether the container is gone). It holds no
// engine resources of its own and is safe for concurrent use.
type Sandbox struct {
	*sdadapter.Sandbox

	p  *Provider
	ws string // the workspace inside the container
}

var (
	_ providers.Sandbox    = (*Sandbox)(nil)
	_ providers.Contexts   = (*Sandbox)(nil)
	_ providers.Executions = (*Sandbox)(nil)
	_ providers.PortDialer = (*Sandbox)(nil)
)

// handle returns a handle on container id (its full id), whose sandboxd c reaches. A
// container without a sandboxd daemon of its own (an attach_to target, reached with
// `sandboxd stdio` per connection) is sdadapter.Config.Transient: no contexts, no kept or
// held executions.
func (p *Provider) handle(id string, c sdConn) *Sandbox {
	return &Sandbox{p: p, ws: c.ws, Sandbox: sdadapter.New(sdadapter.Config{
		Subject:       TypeName,
		ID:            id,
		CapsFunc:      p.Capabilities,
		ClientFunc:    func() *remote.Client { return c.rt },
		Transient:     !c.daemon,
		UnreachedFunc: func() { p.forgetClient(id) },
		BrokenFunc:    func(err error) error { return p.broken(id, err) },
		Running:       &p.sd.running,
		Logger:        p.log,
	})}
}

// Workspace returns the folder inside the container that files are confined to.
func (s *Sandbox) Workspace() string { return s.ws }

// Close marks the handle closed; the container keeps running for a later Attach
// (docs/semantics.md §3). Idempotent; other methods of a closed handle return fault.Conflict.
// A handle that outlived its provider's Close releases the connections its calls opened.
func (s *Sandbox) Close() error {
	_ = s.Sandbox.Close()
	s.p.releaseIfClosed()
	return nil
}

// broken is what a connection to container id's sandboxd that broke during a request means:
// the kept client is forgotten (the next call dials anew), and the engine says whether the
// container is gone — fault.Gone when it no longer exists or does not run, else
// fault.Provision.
func (p *Provider) broken(id string, err error) error {
	p.forgetClient(id)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ins, ierr := p.cli.ContainerInspect(ctx, id)
	switch {
	case cerrdefs.IsNotFound(ierr):
		return fault.Wrap(fault.Gone, err, "%s: sandbox '%s' no longer exists", TypeName, id)
	case ierr == nil && ins.State != nil && !ins.State.Running:
		return fault.Wrap(fault.Gone, err, "%s: sandbox '%s' is not running (%s)", TypeName, id, ins.State.Status)
	}
	return fault.Wrap(fault.Provision, err, "%s: sandboxd in sandbox '%s' failed", TypeName, id)
}

// numericUser parses a user given as "uid" or "uid:gid"; a bare uid gets group 0, as the
// runtime gives a uid its passwd file does not list.
func numericUser(user string) (uid, gid int, ok bool) {
	u, g, hasGroup := strings.Cut(user, ":")
	uid, err := strconv.Atoi(u)
	if err != nil || uid < 0 {
		return 0, 0, false
	}
	if hasGroup {
		if gid, err = strconv.Atoi(g); err != nil || gid < 0 {
			return 0, 0, false
		}
	}
	return uid, gid, true
}
