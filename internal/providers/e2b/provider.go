package e2b

import (
	"context"
	"fmt"
	"log/slog"
	"math"
	"net/http"
	"net/url"
	"os"
	"path"
	"strings"
	"sync"
	"time"

	"github.com/sandgate/sandgate/internal/fault"
	"github.com/sandgate/sandgate/internal/providers"
	"github.com/sandgate/sandgate/internal/providers/e2b/wire"
)

// TypeName is the provider's type name in profiles and the registry.
const TypeName = "e2b"

// Defaults of Config.
const (
	DefaultAPIKeyEnv = "E2B_API_KEY"
	DefaultTemplate  = "base"
	DefaultDomain    = "e2b.app"
	DefaultWorkdir   = "/home/user"
	DefaultPython    = "python3"
	// DefaultIdleTimeout is the sandbox timeout when the profile gives none (the profile
	// default, docs/semantics.md §1).
	DefaultIdleTimeout = 1800 * time.Second
)

// Metadata keys every sandbox is created with.
const (
	MetaManagedBy    = "sandgate.managed-by"   // always "sandgate"
	MetaProfile      = "sandgate.profile"      // the profile's name
	MetaInstallation = "sandgate.installation" // the gateway's installation id, when it has one
)

// Config is the profile's e2b block.
type Config struct {
	// APIKeyEnv names the environment variable holding the team's API key. Default
	// DefaultAPIKeyEnv.
	APIKeyEnv string
	// Template is the template sandboxes are created from. Default DefaultTemplate.
	Template string
	// Domain is E2B's domain (self-hosted E2B: your own). Default DefaultDomain.
	Domain string
	// APIURL is the control plane's base URL. Default https://api.<Domain>.
	APIURL string
	// SandboxURL, when set, is the one base URL of every sandbox's envd and code interpreter
	// (a proxy that routes by the E2b-Sandbox-Id and E2b-Sandbox-Port headers, like the SDKs'
	// E2B_SANDBOX_URL); default https://<port>-<sandbox id>.<domain>.
	SandboxURL string
	// Workdir is the sandbox folder that is the workspace: files, working folders and
	// programs start there. Default DefaultWorkdir (the default user's home).
	Workdir string
	// CodeInterpreter says the template runs E2B's code interpreter (port 49999): code
	// contexts, so stateful profiles, need it.
	CodeInterpreter bool
	// EnvVars are set in every sandbox at creation (E2B envVars).
	EnvVars map[string]string
	// Python is the interpreter of context-less python code. Default DefaultPython.
	Python string
}

// Options configure New.
type Options struct {
	Config
	// Profile names the profile, for sandbox metadata.
	Profile string
	// Installation is the gateway's installation id (providers.NewInstallationID), for
	// sandbox metadata; ListSandboxes keeps to it. "" leaves it out.
	Installation string
	// IdleTimeout becomes E2B's sandbox timeout (docs/semantics.md §12). Default
	// DefaultIdleTimeout.
	IdleTimeout time.Duration
	// LookupEnv reads the API key variable. Default os.LookupEnv.
	LookupEnv func(string) (string, bool)
	// HTTPClient makes every request. Default a client of its own (HTTP/2 over TLS).
	HTTPClient *http.Client
	Logger     *slog.Logger
}

// Provider is the e2b provider.
type Provider struct {
	cfg          Config
	profile      string
	installation string
	idle         time.Duration
	api          *apiClient
	http         *http.Client
	caps         providers.Capabilities
	logger       *slog.Logger

	mu    sync.Mutex
	state map[string]*sandboxState // per sandbox id, while this process knows it
}

var _ providers.Provider = (*Provider)(nil)

// Factory builds the provider of a profile whose type is e2b, from ctx.Options (an Options);
// the profile's name, idle timeout and logger come from ctx. Errors: New's.
func Factory(ctx providers.BuildContext) (providers.Provider, error) {
	opts, err := providers.OptionsOf[Options](ctx, TypeName)
	if err != nil {
		return nil, err
	}
	opts.Profile, opts.Installation, opts.Logger = ctx.Profile, ctx.Installation, ctx.Logger
	if ctx.IdleTimeout > 0 {
		opts.IdleTimeout = ctx.IdleTimeout
	}
	return New(opts)
}

// New builds the provider. Nothing is contacted.
//
// Errors: fault.Config when the API key variable is unset or empty (seed: a provider's
// API-key variable missing is a configuration error), or when a URL is not absolute http(s).
func New(opts Options) (*Provider, error) {
	cfg := opts.Config
	setDefault(&cfg.APIKeyEnv, DefaultAPIKeyEnv)
	setDefault(&cfg.Template, DefaultTemplate)
	setDefault(&cfg.Domain, DefaultDomain)
	setDefault(&cfg.APIURL, "https://api."+cfg.Domain)
	setDefault(&cfg.Workdir, DefaultWorkdir)
	setDefault(&cfg.Python, DefaultPython)
	cfg.APIURL = strings.TrimRight(cfg.APIURL, "/")
	cfg.SandboxURL = strings.TrimRight(cfg.SandboxURL, "/")
	cfg.Workdir = path.Clean(cfg.Workdir)
	if !path.IsAbs(cfg.Workdir) || cfg.Workdir == "/" {
		return nil, fault.New(fault.Config, "e2b: workdir %q must be an absolute folder other than /", cfg.Workdir)
	}
	for name, u := range map[string]string{"api_url": cfg.APIURL, "sandbox_url": cfg.SandboxURL} {
		if u == "" {
			continue
		}
		if pu, err := url.Parse(u); err != nil || (pu.Scheme != "http" && pu.Scheme != "https") || pu.Host == "" {
			return nil, fault.New(fault.Config, "e2b: %s %q is not an absolute http(s) URL", name, u)
		}
	}
	lookup := opts.LookupEnv
	if lookup == nil {
		lookup = os.LookupEnv
	}
	key, ok := lookup(cfg.APIKeyEnv)
	if !ok || strings.TrimSpace(key) == "" {
		return nil, fault.New(fault.Config, "e2b: the environment variable %s (api_key_env) holds no E2B API key; set it to your team's key", cfg.APIKeyEnv)
	}
	idle := opts.IdleTimeout
	if idle <= 0 {
		idle = DefaultIdleTimeout
	}
	hc := opts.HTTPClient
	if hc == nil {
		hc = &http.Client{Transport: http.DefaultTransport.(*http.Transport).Clone()}
	}
	logger := opts.Logger
	if logger == nil {
		logger = slog.Default()
	}
	p := &Provider{
		cfg: cfg, profile: opts.Profile, installation: opts.Installation, idle: idle, http: hc, logger: logger,
		api:   &apiClient{base: cfg.APIURL, key: key, http: hc},
		state: map[string]*sandboxState{},
		caps: providers.Capabilities{
			Isolation: providers.IsolationMicroVM, Shell: true, Languages: []string{"python", "bash"},
			Files: true, PackageInstall: true, Stateful: cfg.CodeInterpreter, Attach: true, Provisions: true,
			PolicyNetwork: true, Interactive: true, Background: true,
		},
	}
	return p, nil
}

func setDefault(s *string, v string) {
	if *s == "" {
		*s = v
	}
}

// Type returns "e2b".
func (p *Provider) Type() string { return TypeName }

// Capabilities reports the provider's capabilities: micro_vm isolation, shell, python and bash, files, package installs, attach,
// network policy, interactive (an open stdin, and envd's pty for terminals, which every envd
// with the process service has) and background (envd processes outlive the stream that
// started them; see Sandbox.Start); stateful only with a code-interpreter template. cpu and
// memory come from the template, so no resources policy (the domain refuses or warns,
// docs/semantics.md §12).
func (p *Provider) Capabilities() providers.Capabilities { return p.caps }

// timeoutSeconds is the idle timeout in E2B's unit (whole seconds, at least 1).
func (p *Provider) timeoutSeconds() int32 {
	s := math.Ceil(p.idle.Seconds())
	return int32(min(max(s, 1), math.MaxInt32))
}

// Create makes a sandbox from the template (POST /sandboxes): timeout = the idle timeout,
// secure (envd demands the sandbox's access token), allowPublicTraffic false (its other
// ports demand its traffic access token), metadata naming Sandgate, the profile and the
// installation, the configured env vars, and the egress policy: deny → allow_internet_access
// false; allowlist → network allowOut = the policy's entries (CIDRs, IPs, domain names) with
// denyOut 0.0.0.0/0. Errors: fault.Provision.
func (p *Provider) Create(ctx context.Context, pr providers.Principal, pol providers.Policy) (providers.Sandbox, error) {
	if err := providers.RefuseSecrets("e2b", pol); err != nil {
		return nil, err
	}
	timeout, secure := p.timeoutSeconds(), true
	req := wire.NewSandbox{
		TemplateID: p.cfg.Template, Timeout: &timeout, Secure: &secure,
		Metadata: p.metadata(),
		EnvVars:  p.cfg.EnvVars,
	}
	// The sandbox's ports other than envd's (the code interpreter) answer only requests that
	// carry its traffic access token.
	no := false
	req.Network = &wire.NetworkConfig{AllowPublicTraffic: &no}
	switch pol.NetworkEgress {
	case providers.EgressDeny:
		req.AllowInternetAccess = &no
	case providers.EgressAllowlist:
		if len(pol.NetworkAllow) == 0 {
			req.AllowInternetAccess = &no
		} else {
			req.Network.AllowOut, req.Network.DenyOut = pol.NetworkAllow, []string{wire.AllTraffic}
		}
	}
	sb, err := p.api.create(ctx, req)
	if err != nil {
		return nil, err
	}
	p.logger.Debug("e2b sandbox created", "sandbox", sb.SandboxID, "template", p.cfg.Template)
	return p.handle(sb), nil
}

// Attach reconnects to sandbox id (POST /sandboxes/{id}/connect, which resumes a paused one
// and extends its timeout to the idle timeout from now: every operation of the domain
// attaches first, so this is the refresh on activity). Errors: fault.Gone when E2B no longer
// knows the sandbox (killed, or its timeout passed), fault.Provision otherwise.
func (p *Provider) Attach(ctx context.Context, id string, _ providers.Principal, pol providers.Policy) (providers.Sandbox, error) {
	if err := providers.RefuseSecrets("e2b", pol); err != nil {
		return nil, err
	}
	if id == "" || strings.ContainsAny(id, "/?#") {
		return nil, fault.New(fault.Gone, "e2b: %q is not a sandbox id", id)
	}
	sb, err := p.api.connect(ctx, id, p.timeoutSeconds())
	if err != nil {
		return nil, err
	}
	return p.handle(sb), nil
}

// Destroy kills sandbox id (DELETE /sandboxes/{id}); an unknown one is fine.
// Errors: fault.Provision.
func (p *Provider) Destroy(ctx context.Context, id string) error {
	p.mu.Lock()
	delete(p.state, id)
	p.mu.Unlock()
	if id == "" || strings.ContainsAny(id, "/?#") {
		return nil
	}
	return p.api.kill(ctx, id)
}

// ListSandboxes lists the running and paused sandboxes this profile of this installation
// created (by metadata). Errors: fault.Provision.
func (p *Provider) ListSandboxes(ctx context.Context) ([]wire.ListedSandbox, error) {
	return p.api.list(ctx, p.metadata())
}

// metadata is the metadata of the profile's sandboxes: managed-by, profile and installation.
func (p *Provider) metadata() map[string]string {
	m := map[string]string{MetaManagedBy: "sandgate", MetaProfile: p.profile}
	if p.installation != "" {
		m[MetaInstallation] = p.installation
	}
	return m
}

// sandboxState is what this process keeps about one sandbox across its handles.
type sandboxState struct {
	mu       sync.Mutex
	contexts map[string]*ctxRecord // nil until loaded from the sandbox

	execMu sync.Mutex
	execs  map[string]*execution // executions this process starts, follows or feeds, by id
}

func (p *Provider) stateOf(id string) *sandboxState {
	p.mu.Lock()
	defer p.mu.Unlock()
	st, ok := p.state[id]
	if !ok {
		st = &sandboxState{}
		p.state[id] = st
	}
	return st
}

// handle makes the handle of sandbox sb.
func (p *Provider) handle(sb wire.Sandbox) providers.Sandbox {
	domain := p.cfg.Domain
	if sb.Domain != nil && *sb.Domain != "" {
		domain = *sb.Domain
	}
	h := &Sandbox{p: p, id: sb.SandboxID, domain: domain, token: sb.EnvdAccessToken, st: p.stateOf(sb.SandboxID)}
	if sb.TrafficAccessToken != nil {
		h.traffic = *sb.TrafficAccessToken
	}
	if p.caps.Stateful {
		return &CodeSandbox{Sandbox: h}
	}
	return h
}

// portURL is the base URL of port in sandbox id.
func (p *Provider) portURL(id, domain string, port int) string {
	if p.cfg.SandboxURL != "" {
		return p.cfg.SandboxURL
	}
	return fmt.Sprintf("https://%d-%s.%s", port, id, domain)
}
