package daytona

import (
	"cmp"
	"context"
	"errors"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/sandgate/sandgate/internal/fault"
	"github.com/sandgate/sandgate/internal/providers"
)

// Provider is the daytona provider. Build it with New (or Factory); its exported fields may
// be changed before its first use only.
type Provider struct {
	// PollInterval is the pause between two looks at a sandbox that is being built or
	// started. Zero means 500 ms.
	PollInterval time.Duration
	// KillGrace is the time a timed-out program has between SIGTERM and SIGKILL. Zero means
	// DefaultKillGrace.
	KillGrace time.Duration

	cfg          Config
	profile      string
	installation string
	spec         createSpec
	api          *apiClient
	hc           *http.Client
	key          string
	log          *slog.Logger
	caps         providers.Capabilities
}

var _ providers.Provider = (*Provider)(nil)

// Factory builds the provider of a profile whose type is daytona, for providers.Registry,
// from ctx.Options (an Options; the profile name, policy, idle timeout and logger are taken
// from ctx). A profile without a daytona block is a fault.Config error (docs/semantics.md
// §6); other errors are New's.
func Factory(ctx providers.BuildContext) (providers.Provider, error) {
	opts, err := providers.OptionsOf[Options](ctx, TypeName)
	if err != nil {
		return nil, err
	}
	opts.Profile, opts.Policy, opts.IdleTimeout, opts.Logger = ctx.Profile, ctx.Policy, ctx.IdleTimeout, ctx.Logger
	opts.Installation = ctx.Installation
	return New(opts)
}

// New builds the provider. It reads the API key from the environment variable the block
// names and calls nothing: the first Create (or Attach) is the first call to Daytona.
//
// Errors (fault.Config unless said): the API key's variable is missing or empty (seed: a
// provider's API-key environment variable missing raises at start); image and snapshot are
// both set; the policy sets cpu or memory_mb with a snapshot; under strict, resources
// Daytona cannot give exactly (it allocates whole cores and whole GiB); an image name with a
// line break; api_url is not an http(s) URL; fault.Policy under strict for network_allow
// entries that are not CIDRs.
func New(opts Options) (*Provider, error) {
	log := opts.Logger
	if log == nil {
		log = slog.Default()
	}
	cfg := opts.Config
	cfg.APIKeyEnv = cmp.Or(cfg.APIKeyEnv, DefaultAPIKeyEnv)
	cfg.APIURL = strings.TrimRight(cmp.Or(cfg.APIURL, DefaultAPIURL), "/")
	cfg.CreateTimeout = cmp.Or(cfg.CreateTimeout, DefaultCreateTimeout)
	if !strings.HasPrefix(cfg.APIURL, "https://") && !strings.HasPrefix(cfg.APIURL, "http://") {
		return nil, fault.New(fault.Config, "%s: api_url '%s' is not an http(s) URL", TypeName, cfg.APIURL)
	}
	if strings.ContainsAny(cfg.Image, "\r\n") {
		return nil, fault.New(fault.Config, "%s: the image name contains a line break", TypeName)
	}
	getenv := opts.Getenv
	if getenv == nil {
		getenv = os.Getenv
	}
	key := strings.TrimSpace(getenv(cfg.APIKeyEnv))
	if key == "" {
		return nil, fault.New(fault.Config, "%s: the API key variable %s is not set; set it to a Daytona API key (or name another variable with api_key_env)", TypeName, cfg.APIKeyEnv)
	}
	spec, err := resolveCreate(Options{Config: cfg, Policy: opts.Policy, IdleTimeout: opts.IdleTimeout}, log)
	if err != nil {
		return nil, err
	}
	hc := opts.HTTPClient
	if hc == nil {
		hc = &http.Client{Transport: &http.Transport{
			Proxy:                 http.ProxyFromEnvironment,
			DialContext:           (&net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
			ForceAttemptHTTP2:     true,
			MaxIdleConnsPerHost:   16,
			IdleConnTimeout:       90 * time.Second,
			TLSHandshakeTimeout:   10 * time.Second,
			ResponseHeaderTimeout: 5 * time.Minute,
		}}
	}
	p := &Provider{
		cfg: cfg, profile: opts.Profile, installation: opts.Installation, spec: spec, hc: hc, key: key, log: log,
		caps: providers.Capabilities{
			Isolation:      providers.IsolationContainer,
			Shell:          true,
			Languages:      []string{"python", "bash"},
			Files:          true,
			PackageInstall: true,
			Stateful:       true,
			Attach:         true,
			Provisions:     true,
			PolicyNetwork:  true,
			// Resources are enforceable only on sandboxes built from an image, which the
			// provider makes sure of when the policy sets them (New refuses a snapshot).
			PolicyResources: cfg.Snapshot == "",
		},
	}
	p.api = &apiClient{httpDo: p.httpDo(), base: cfg.APIURL}
	return p, nil
}

func (p *Provider) httpDo() httpDo {
	return httpDo{hc: p.hc, key: p.key, headers: map[string]string{
		"X-Daytona-Source":      "sandgate",
		"X-Daytona-SDK-Version": wireVersion,
	}}
}

// Type returns "daytona".
func (p *Provider) Type() string { return TypeName }

// Capabilities reports the provider's capabilities: isolation container; shell; languages python and bash; files;
// package_install; stateful (python contexts are Daytona interpreter contexts, bash contexts
// keep their exported variables and working folder in the sandbox); attach; provisions;
// network policy; resources policy unless the profile pins a snapshot. Not attaches_external
// or principal_user (one API key, the gateway's), not filesystem policy
// (docs/semantics.md §12).
func (p *Provider) Capabilities() providers.Capabilities {
	c := p.caps
	c.Languages = append([]string(nil), p.caps.Languages...)
	return c
}

func (p *Provider) pollInterval() time.Duration { return cmp.Or(p.PollInterval, 500*time.Millisecond) }
func (p *Provider) killGrace() time.Duration    { return cmp.Or(p.KillGrace, DefaultKillGrace) }

// labels are the labels of the profile's sandboxes: managed-by, profile and installation.
func (p *Provider) labels() map[string]string {
	l := map[string]string{labelManagedBy: managedBy, labelProfile: p.profile}
	if p.installation != "" {
		l[labelInstallation] = p.installation
	}
	return l
}

// Create makes a sandbox for the profile (POST /sandbox) and waits until it has started, at
// most Config.CreateTimeout: from Config.Snapshot, else from an image (Config.Image, or
// DefaultImage when the policy sets resources) that Daytona builds, else from Daytona's
// default snapshot. The request carries the block's env_vars and target, the policy's
// resources (whole cores, whole GiB) and network (networkBlockAll for deny, a comma-joined
// networkAllowList for allowlist), autoStopInterval = ceil(idle_timeout / 1 min) and the
// labels app.kubernetes.io/managed-by=sandgate, sandgate.io/profile=<profile> and
// sandgate.io/installation=<installation id>.
//
// Errors: ctx.Err(); fault.Provision when Daytona refuses, the sandbox ends in an error
// state (it is then deleted) or does not start in time (likewise).
func (p *Provider) Create(ctx context.Context, _ providers.Principal, pol providers.Policy) (providers.Sandbox, error) {
	if err := providers.RefuseSecrets("daytona", pol); err != nil {
		return nil, err
	}
	s := p.spec
	labels := p.labels()
	labels[labelLanguage] = "python"
	req := createSandbox{
		Snapshot: s.snapshot, Env: maps.Clone(p.cfg.EnvVars), Labels: labels, Target: p.cfg.Target,
		CPU: s.cpu, Memory: s.memoryGiB,
		NetworkBlockAll: s.blockAll, NetworkAllowList: s.allowList,
	}
	if s.autoStopMinutes > 0 {
		req.AutoStopInterval = &s.autoStopMinutes
	}
	if s.image != "" {
		req.BuildInfo = &buildInfo{DockerfileContent: dockerfileFor(s.image)}
	}
	cctx, cancel := context.WithTimeout(ctx, p.cfg.CreateTimeout)
	defer cancel()
	dto, err := p.api.create(cctx, req)
	if err != nil {
		return nil, p.provisionErr(ctx, err, "creating a sandbox")
	}
	p.log.Info("daytona: sandbox created", "sandbox_id", dto.ID, "state", dto.State)
	dto, err = p.waitStarted(cctx, dto)
	if err != nil {
		p.cleanup(dto.ID)
		return nil, p.provisionErr(ctx, err, "starting sandbox '%s'", dto.ID)
	}
	return p.open(ctx, dto)
}

// cleanup deletes a sandbox Create could not finish, in the background of the caller's
// context (which may be what ended).
func (p *Provider) cleanup(id string) {
	if id == "" {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := p.api.delete(ctx, id); err != nil && statusOf(err) != http.StatusNotFound {
		p.log.Warn("daytona: could not delete a sandbox that failed to start", "sandbox_id", id, "error", err)
	}
}

// provisionErr classifies a control-plane error: ctx.Err() when ctx ended, else
// fault.Provision.
func (p *Provider) provisionErr(ctx context.Context, err error, format string, args ...any) error {
	if ctx.Err() != nil {
		return ctx.Err()
	}
	var fe *fault.Error
	if errors.As(err, &fe) {
		return err
	}
	return fault.Wrap(fault.Provision, err, TypeName+": "+format, args...)
}

// waitStarted polls the sandbox until it is started. An error state or a sandbox that
// vanished is an error, as is ctx ending.
func (p *Provider) waitStarted(ctx context.Context, dto sandboxDTO) (sandboxDTO, error) {
	for {
		switch dto.State {
		case stateStarted:
			return dto, nil
		case stateError, stateBuildFailed, stateDestroyed, stateDestroying:
			return dto, fault.New(fault.Provision, "%s: sandbox '%s' is %s: %s", TypeName, dto.ID, dto.State, cmp.Or(dto.ErrorReason, "no reason given"))
		}
		select {
		case <-ctx.Done():
			return dto, fault.Wrap(fault.Provision, ctx.Err(), "%s: sandbox '%s' did not start (last state %q)", TypeName, dto.ID, dto.State)
		case <-time.After(p.pollInterval()):
		}
		next, err := p.api.get(ctx, dto.ID)
		if err != nil {
			if statusOf(err) == http.StatusNotFound {
				return dto, fault.Wrap(fault.Gone, err, "%s: sandbox '%s' vanished while it started", TypeName, dto.ID)
			}
			return dto, err
		}
		dto = next
	}
}

// Attach reconnects to sandbox id (GET /sandbox/{id}). A stopped or archived sandbox (auto-
// stop after idle_timeout) is started again and waited for.
//
// Errors: ctx.Err(); fault.Gone when Daytona does not know the sandbox, when it is destroyed,
// being destroyed or failed, or when it does not carry the label
// app.kubernetes.io/managed-by=sandgate; fault.Provision otherwise.
func (p *Provider) Attach(ctx context.Context, id string, _ providers.Principal, pol providers.Policy) (providers.Sandbox, error) {
	if err := providers.RefuseSecrets("daytona", pol); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if id == "" {
		return nil, fault.New(fault.Gone, "%s: no sandbox id", TypeName)
	}
	dto, err := p.api.get(ctx, id)
	if err != nil {
		if statusOf(err) == http.StatusNotFound {
			return nil, fault.Wrap(fault.Gone, err, "%s: sandbox '%s' does not exist", TypeName, id)
		}
		return nil, p.provisionErr(ctx, err, "looking up sandbox '%s'", id)
	}
	if dto.Labels[labelManagedBy] != managedBy {
		return nil, fault.New(fault.Gone, "%s: sandbox '%s' is not managed by Sandgate", TypeName, id)
	}
	switch dto.State {
	case stateDestroyed, stateDestroying, stateError, stateBuildFailed:
		return nil, fault.New(fault.Gone, "%s: sandbox '%s' is %s", TypeName, id, dto.State)
	case stateStopped, stateArchived:
		p.log.Info("daytona: starting a stopped sandbox", "sandbox_id", id, "state", dto.State)
		if dto, err = p.api.start(ctx, id); err != nil {
			return nil, p.provisionErr(ctx, err, "starting sandbox '%s'", id)
		}
	}
	wctx, cancel := context.WithTimeout(ctx, p.cfg.CreateTimeout)
	defer cancel()
	if dto, err = p.waitStarted(wctx, dto); err != nil {
		if fault.IsKind(err, fault.Gone) {
			return nil, err
		}
		return nil, p.provisionErr(ctx, err, "waiting for sandbox '%s'", id)
	}
	return p.open(ctx, dto)
}

// open returns a handle on a started sandbox; it finds its toolbox URL when the sandbox
// does not carry it.
func (p *Provider) open(ctx context.Context, dto sandboxDTO) (*Sandbox, error) {
	base := dto.ToolboxProxyURL
	if base == "" {
		u, err := p.api.toolboxProxyURL(ctx, dto.ID)
		if err != nil {
			return nil, p.provisionErr(ctx, err, "finding the toolbox of sandbox '%s'", dto.ID)
		}
		base = u
	}
	tb := &toolboxClient{httpDo: p.httpDo(), base: strings.TrimRight(base, "/") + "/" + dto.ID}
	return &Sandbox{p: p, id: dto.ID, tb: tb}, nil
}

// Destroy deletes sandbox id (DELETE /sandbox/{id}). An unknown sandbox is a no-op, and so
// is one not managed by Sandgate (it is left alone, with a warning).
//
// Errors: fault.Provision when Daytona refuses.
func (p *Provider) Destroy(ctx context.Context, id string) error {
	if id == "" {
		return nil
	}
	dto, err := p.api.get(ctx, id)
	if err != nil {
		if statusOf(err) == http.StatusNotFound || statusOf(err) == http.StatusBadRequest {
			return nil
		}
		return p.provisionErr(ctx, err, "looking up sandbox '%s'", id)
	}
	if dto.Labels[labelManagedBy] != managedBy {
		p.log.Warn("daytona: not deleting a sandbox Sandgate did not create", "sandbox_id", id)
		return nil
	}
	if dto.State == stateDestroyed {
		return nil
	}
	if err := p.api.delete(ctx, id); err != nil && statusOf(err) != http.StatusNotFound {
		return p.provisionErr(ctx, err, "deleting sandbox '%s'", id)
	}
	p.log.Info("daytona: sandbox deleted", "sandbox_id", id)
	return nil
}

// SandboxInfo describes one of the profile's sandboxes.
type SandboxInfo struct {
	ID    string
	State string // Daytona's state: started, stopped, archived, …
}

// List returns the sandboxes of this profile that Daytona knows (label
// sandgate.io/profile=<profile> and the managed-by label), for operators and clean-up.
//
// Errors: fault.Provision when Daytona refuses.
func (p *Provider) List(ctx context.Context) ([]SandboxInfo, error) {
	items, err := p.api.list(ctx, p.labels())
	if err != nil {
		return nil, p.provisionErr(ctx, err, "listing sandboxes")
	}
	out := make([]SandboxInfo, 0, len(items))
	for _, it := range items {
		if it.State == stateDestroyed {
			continue
		}
		out = append(out, SandboxInfo{ID: it.ID, State: it.State})
	}
	return out, nil
}
