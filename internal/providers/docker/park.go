package docker

import (
	"context"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/container"

	"github.com/sandgate/sandgate/internal/fault"
	"github.com/sandgate/sandgate/internal/providers"
)

// Pause and resume of managed sandbox containers (providers.Pauser); snapshots are in
// snapshot.go.

var _ providers.Pauser = (*Provider)(nil)

// Pause freezes sandbox id with the cgroup freezer (the engine's pause): its processes keep
// their memory, files and connections and get no CPU until Resume; sandboxd is frozen with
// them, so nothing else may be asked of the sandbox meanwhile (the domain sees to that). A
// paused sandbox stays paused.
//
// Errors: fault.Gone when the container no longer exists or is not this provider's;
// fault.Capability for an attached profile's target (someone else's container);
// fault.Conflict when the container is not running; fault.Provision when the engine fails.
func (p *Provider) Pause(ctx context.Context, id string) error {
	ins, err := p.parkable(ctx, id, "pause")
	if err != nil {
		return err
	}
	st := ins.State
	switch {
	case st.Paused:
		return nil
	case !st.Running || st.Restarting:
		return fault.New(fault.Conflict, "%s: sandbox '%s' is not running (%s); only a running sandbox can be paused", TypeName, id, st.Status)
	}
	if err := p.cli.ContainerPause(ctx, id); err != nil {
		return p.parkErr(err, id, "pausing")
	}
	p.log.Debug("sandbox paused", "sandbox_id", id)
	return nil
}

// Resume thaws sandbox id (the engine's unpause); a running one is left as it is.
//
// Errors: as Pause's.
func (p *Provider) Resume(ctx context.Context, id string) error {
	ins, err := p.parkable(ctx, id, "pause")
	if err != nil {
		return err
	}
	if !ins.State.Paused {
		return nil
	}
	if err := p.cli.ContainerUnpause(ctx, id); err != nil {
		return p.parkErr(err, id, "resuming")
	}
	p.log.Debug("sandbox resumed", "sandbox_id", id)
	return nil
}

// parkable inspects sandbox id for pause, resume or a snapshot (capability names the
// operation): a container this provider made, with a state.
func (p *Provider) parkable(ctx context.Context, id, capability string) (container.InspectResponse, error) {
	if p.attachTo != "" {
		return container.InspectResponse{}, fault.Unsupported(TypeName, capability)
	}
	if err := p.connect(ctx); err != nil {
		return container.InspectResponse{}, err
	}
	ins, err := p.inspectSandbox(ctx, id)
	if err != nil {
		return ins, err
	}
	if ins.State == nil {
		return ins, fault.New(fault.Provision, "%s: container '%s' has no state", TypeName, id)
	}
	if ins.State.Dead || ins.State.Status == container.StateRemoving {
		return ins, fault.New(fault.Gone, "%s: sandbox '%s' is being removed", TypeName, id)
	}
	return ins, nil
}

func (p *Provider) parkErr(err error, id, doing string) error {
	if cerrdefs.IsNotFound(err) {
		return fault.New(fault.Gone, "%s: sandbox '%s' no longer exists", TypeName, id)
	}
	if cerrdefs.IsConflict(err) {
		return fault.Wrap(fault.Conflict, err, "%s: %s sandbox '%s'", TypeName, doing, id)
	}
	return p.engineErr(err, "%s sandbox '%s'", doing, id)
}
