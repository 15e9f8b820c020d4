package docker

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"sync"

	"github.com/docker/docker/api/types/container"

	"github.com/sandgate/sandgate/internal/egress"
	"github.com/sandgate/sandgate/internal/fault"
	"github.com/sandgate/sandgate/internal/providers"
)

// The egress proxy (issue 39; egress.go). A sandbox whose policy is network_egress allowlist,
// or allow with secrets, gets no network (network mode none); sandboxd in it forwards
// 127.0.0.1:ProxyPort (an HTTP proxy) and 127.0.0.1:53 (DNS) to two Unix sockets the gateway
// serves in the sandbox's socket folder, with the sandbox's grant: the socket a sandbox
// reaches is what identifies it. Traffic that ignores the proxy has no route.
const (
	// LabelEgress on a container says its traffic goes through the egress proxy ("proxy").
	LabelEgress = "sandgate.egress"
	// ProxyPort is the port of the HTTP proxy on the sandbox's loopback.
	ProxyPort = 3128

	egressProxySocket = "px.sock"       // HTTP proxy protocol (egress.Proxy.Serve)
	egressDNSSocket   = "ns.sock"       // DNS over a stream (egress.Proxy.ServeDNS)
	egressCAFile      = "egress-ca.pem" // the installation's CA, for the bundle
	egressBundleFile  = "ca-bundle.pem" // written by sandboxd at start: system roots + CA
	egressEnvDir      = "SANDBOXD_EGRESS_DIR"
)

// usesProxy reports whether pol's traffic must go through the egress proxy: allowlist, or
// allow with secrets (every host allowed, through the proxy, which substitutes them).
func usesProxy(pol providers.Policy) bool {
	return pol.NetworkEgress == providers.EgressAllowlist || (pol.NetworkEgress == providers.EgressAllow && len(pol.Secrets) > 0)
}

// checkEgress decides whether this provider can honour pol's egress and secrets: through the
// proxy when the gateway runs one and sandboxes use the socket transport. Otherwise a policy
// with secrets is refused (a secret it cannot keep out of the sandbox is never handed in), and
// allowlist is refused under strict (without it: a warning and unrestricted egress, proxy
// reports false).
func (p *Provider) checkEgress(pol providers.Policy) (proxy bool, err error) {
	if !usesProxy(pol) {
		return false, nil
	}
	why := p.noProxy(pol)
	if why == "" {
		if _, err := egress.ParseRules(pol.NetworkAllow); err != nil {
			return false, fault.New(fault.Validation, "%s: %v", TypeName, err)
		}
		for _, s := range pol.Secrets {
			if _, err := egress.ParseRules(s.Hosts); err != nil {
				return false, fault.New(fault.Validation, "%s: secret '%s': %v", TypeName, s.Name, err)
			}
		}
		return true, nil
	}
	if len(pol.Secrets) > 0 {
		return false, fault.New(fault.Policy, "provider '%s' cannot keep the session's secrets out of the sandbox (profile '%s'): %s", TypeName, p.profile, why)
	}
	if pol.Strict {
		return false, fault.New(fault.Policy, "provider '%s' cannot enforce network_egress allowlist (profile '%s', strict): %s; use deny or allow, or set strict: false", TypeName, p.profile, why)
	}
	p.warnAllowOnce.Do(func() {
		p.log.Warn("docker cannot enforce network_egress allowlist here; the sandboxes of this profile have unrestricted egress (strict is false)", "reason", why)
	})
	return false, nil
}

// noProxy says why pol's sandboxes cannot use the egress proxy here ("": they can).
func (p *Provider) noProxy(pol providers.Policy) string {
	switch {
	case p.attachTo != "":
		return "an attached container keeps its own network"
	case p.egress == nil:
		return "the gateway runs no egress proxy for it"
	case p.sd.transport != TransportSocket:
		return "the egress proxy needs docker.sandboxd.transport socket (the exec transport has no socket folder to reach it through)"
	case len(pol.Secrets) > 0 && !p.egress.CanIntercept():
		return "the egress proxy has no CA to substitute secrets with"
	}
	return ""
}

// proxied reports whether pol's sandboxes go through the egress proxy.
func (p *Provider) proxied(pol providers.Policy) bool {
	return usesProxy(pol) && p.noProxy(pol) == ""
}

// EgressEnforcement says how pol's egress is enforced (providers.EgressEnforcer): deny by
// the container's network mode, allowlist (and allow with secrets) by the egress proxy where
// sandboxes can use it, else nothing.
func (p *Provider) EgressEnforcement(pol providers.Policy) string {
	switch {
	case p.proxied(pol):
		return providers.EnforcedByProxy
	case pol.NetworkEgress == providers.EgressDeny:
		return providers.EnforcedByProvider
	}
	return providers.EnforcedByNone
}

var _ providers.EgressEnforcer = (*Provider)(nil)

// egressSpec adds to s what a proxied sandbox needs: no network, the loopback's low ports for
// sandboxd's DNS forwarder, a resolver at 127.0.0.1, the proxy and CA variables every common
// tool reads, and the secrets' placeholders.
func egressSpec(s *containerSpec, pol providers.Policy) {
	s.hc.NetworkMode = "none"
	s.hc.Sysctls = map[string]string{"net.ipv4.ip_unprivileged_port_start": "0"}
	s.hc.DNS = []string{"127.0.0.1"}
	proxy := fmt.Sprintf("http://127.0.0.1:%d", ProxyPort)
	bundle := sandboxRun + "/" + egressBundleFile
	s.cfg.Env = append(s.cfg.Env,
		egressEnvDir+"="+sandboxRun,
		"HTTP_PROXY="+proxy, "HTTPS_PROXY="+proxy, "http_proxy="+proxy, "https_proxy="+proxy,
		"NO_PROXY=localhost,127.0.0.1", "no_proxy=localhost,127.0.0.1",
		"SSL_CERT_FILE="+bundle, "REQUESTS_CA_BUNDLE="+bundle, "CURL_CA_BUNDLE="+bundle,
		"NODE_EXTRA_CA_CERTS="+bundle, "PIP_CERT="+bundle,
	)
	for _, sec := range pol.Secrets {
		s.cfg.Env = append(s.cfg.Env, sec.EnvName+"="+sec.Placeholder)
	}
}

// grants are the egress grants this provider serves, by container id. serving is held
// across the whole of a (re)serve, so two attaches of one sandbox cannot leave the sockets
// of one grant while the map records the other's.
type grants struct {
	serving sync.Mutex
	mu      sync.Mutex
	by      map[string]*served
}

// served is one sandbox's grant on its two sockets in folder.
type served struct {
	grant  *egress.Grant
	folder string
	ls     []net.Listener
	wg     sync.WaitGroup
}

func (s *served) stop() {
	for _, l := range s.ls {
		_ = l.Close()
	}
	s.wg.Wait()
}

// replaced stops s, whose socket paths a new grant now serves: its listeners are closed
// without unlinking those paths (the new grant's sockets).
func (s *served) replaced() {
	for _, l := range s.ls {
		if ul, ok := l.(*net.UnixListener); ok {
			ul.SetUnlinkOnClose(false)
		}
	}
	s.stop()
}

// grantOf is the grant container id is served with for pol: grantFor's, or nothing allowed
// for a policy that does not use the proxy (fail closed).
func grantOf(id, owner string, pol providers.Policy) *egress.Grant {
	if !usesProxy(pol) {
		return &egress.Grant{Sandbox: id, Owner: owner}
	}
	return grantFor(id, owner, pol)
}

// grantFor builds the grant of container id for pol (rules already checked by checkEgress;
// a bad one here allows nothing).
func grantFor(id, owner string, pol providers.Policy) *egress.Grant {
	g := &egress.Grant{Sandbox: id, Owner: owner}
	if pol.NetworkEgress == providers.EgressAllowlist {
		g.Rules, _ = egress.ParseRules(pol.NetworkAllow)
	} else if pol.NetworkEgress == providers.EgressAllow {
		g.AllowAll = true
	}
	for _, s := range pol.Secrets {
		hosts, err := egress.ParseRules(s.Hosts)
		if err != nil {
			continue
		}
		g.Secrets = append(g.Secrets, egress.Secret{Name: s.Name, Placeholder: s.Placeholder, Value: slices.Clone(s.Value), Hosts: hosts})
	}
	return g
}

// writeEgressCA puts the installation's CA certificate into a socket folder, where sandboxd
// reads it at start to write the sandbox's trust bundle.
func (p *Provider) writeEgressCA(folder string) error {
	if p.egress == nil || p.egress.CA() == nil {
		return nil
	}
	tmp := filepath.Join(folder, ".ca-"+randomHex(6))
	if err := os.WriteFile(tmp, p.egress.CA().CertPEM(), 0o644); err != nil {
		return fault.Wrap(fault.Provision, err, "%s: writing the egress CA into the socket folder", TypeName)
	}
	if err := os.Rename(tmp, filepath.Join(folder, egressCAFile)); err != nil {
		_ = os.Remove(tmp)
		return fault.Wrap(fault.Provision, err, "%s: writing the egress CA into the socket folder", TypeName)
	}
	return nil
}

// serveEgress serves the grant of container ins (labelled LabelEgress) on the sockets of its
// folder, replacing any this provider served for it. pol is the sandbox's policy; owner the
// subject it acts for.
func (p *Provider) serveEgress(ins container.InspectResponse, owner string, pol providers.Policy) error {
	if p.egress == nil {
		return fault.New(fault.Provision, "%s: sandbox '%s' reaches the network through the egress proxy, which this gateway does not run", TypeName, ins.ID)
	}
	p.grants.serving.Lock()
	defer p.grants.serving.Unlock()
	folder, ok := p.sd.folder(ins.Config.Labels)
	if !ok {
		return fault.New(fault.Provision, "%s: container '%s' has a malformed %s label", TypeName, ins.ID, LabelSandboxd)
	}
	return p.serveGrant(ins.ID, folder, grantOf(ins.ID, owner, pol))
}

// serveGrant serves g for container id on the sockets of its socket folder, replacing the
// grant served there before; the caller holds p.grants.serving.
func (p *Provider) serveGrant(id, folder string, g *egress.Grant) error {
	s := &served{grant: g, folder: folder}
	for _, sock := range []struct {
		name  string
		serve func(net.Listener, *egress.Grant) error
	}{{egressProxySocket, p.egress.Serve}, {egressDNSSocket, p.egress.ServeDNS}} {
		path := filepath.Join(folder, sock.name)
		if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
			s.stop()
			return fault.Wrap(fault.Provision, err, "%s: replacing the egress socket", TypeName)
		}
		l, err := net.Listen("unix", path)
		if err != nil {
			s.stop()
			return fault.Wrap(fault.Provision, err, "%s: serving the egress proxy", TypeName)
		}
		// The container's users connect to it; the folder's sticky bit keeps them from
		// replacing it.
		if err := os.Chmod(path, 0o666); err != nil {
			_ = l.Close()
			s.stop()
			return fault.Wrap(fault.Provision, err, "%s: serving the egress proxy", TypeName)
		}
		s.ls = append(s.ls, l)
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			if err := sock.serve(l, g); err != nil {
				p.log.Warn("egress proxy socket ended", "sandbox_id", id, "socket", sock.name, "err", err)
			}
		}()
	}
	p.grants.mu.Lock()
	old := p.grants.by[id]
	if p.grants.by == nil {
		p.grants.by = map[string]*served{}
	}
	p.grants.by[id] = s
	p.grants.mu.Unlock()
	if old != nil {
		old.replaced()
	}
	return nil
}

// ensureEgress serves the grant of a container labelled LabelEgress for pol, unless this
// provider serves that very grant already: an Attach after a gateway restart serves it
// again, and one whose policy changed since — a session's secret replaced or deleted (its
// binding's value or hosts, or the binding itself, gone), which docs/semantics.md §15 says
// takes effect from the sandbox's next attach — serves the new grant in its place.
// Connections already open keep the grant they were accepted with.
func (p *Provider) ensureEgress(ins container.InspectResponse, pr providers.Principal, pol providers.Policy) error {
	if ins.Config == nil || ins.Config.Labels[LabelEgress] == "" {
		return nil
	}
	if p.egress == nil {
		return p.serveEgress(ins, pr.Subject, pol) // refused there, with the reason
	}
	owner := pr.Subject
	if owner == "" {
		owner = ins.Config.Labels[LabelOwner]
	}
	p.grants.serving.Lock()
	defer p.grants.serving.Unlock()
	p.grants.mu.Lock()
	cur := p.grants.by[ins.ID]
	p.grants.mu.Unlock()
	g := grantOf(ins.ID, owner, pol)
	if cur != nil && reflect.DeepEqual(cur.grant, g) {
		return nil
	}
	folder, ok := p.sd.folder(ins.Config.Labels)
	if !ok {
		return fault.New(fault.Provision, "%s: container '%s' has a malformed %s label", TypeName, ins.ID, LabelSandboxd)
	}
	return p.serveGrant(ins.ID, folder, g)
}

// refreshEgress is ensureEgress for a sandbox this provider already talks to (Attach without
// asking the engine): the grant it serves for id is replaced when pol's differs. A sandbox
// it serves no grant for is not behind the proxy (or its grant is served by the Attach that
// inspects it).
func (p *Provider) refreshEgress(id string, pr providers.Principal, pol providers.Policy) error {
	p.grants.mu.Lock()
	cur := p.grants.by[id]
	p.grants.mu.Unlock()
	if cur == nil {
		return nil
	}
	owner := pr.Subject
	if owner == "" {
		owner = cur.grant.Owner
	}
	g := grantOf(id, owner, pol)
	if reflect.DeepEqual(cur.grant, g) {
		return nil
	}
	p.grants.serving.Lock()
	defer p.grants.serving.Unlock()
	p.grants.mu.Lock()
	now := p.grants.by[id]
	p.grants.mu.Unlock()
	if now == nil || reflect.DeepEqual(now.grant, g) {
		return nil // stopped (destroyed) or replaced by a concurrent attach meanwhile
	}
	return p.serveGrant(id, now.folder, g)
}

// stopEgress stops serving container id's grant (Destroy, sweeps).
func (p *Provider) stopEgress(id string) {
	p.grants.mu.Lock()
	s := p.grants.by[id]
	delete(p.grants.by, id)
	p.grants.mu.Unlock()
	if s != nil {
		s.stop()
	}
}

// stopAllEgress stops every grant (Close).
func (p *Provider) stopAllEgress() {
	p.grants.mu.Lock()
	all := p.grants.by
	p.grants.by = nil
	p.grants.mu.Unlock()
	for _, s := range all {
		s.stop()
	}
}
