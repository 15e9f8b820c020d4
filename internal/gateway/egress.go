package gateway

import (
	"context"
	"crypto/x509"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/sandgate/sandgate/internal/config"
	"github.com/sandgate/sandgate/internal/egress"
	"github.com/sandgate/sandgate/internal/fault"
	"github.com/sandgate/sandgate/internal/providers/docker"
	"github.com/sandgate/sandgate/internal/store"
)

// egressAuditBacklog bounds the refusals waiting to be audited; past it they are logged and
// counted only (a sandbox hammering denied names must not hold up the proxy).
const egressAuditBacklog = 1024

// newEgress builds the egress proxy when a profile's provider routes sandboxes through it
// (docker; nil otherwise): its CA kept in egress.state_dir, the names of egress.hosts, the
// upstream roots of egress.upstream_ca_file, its metric on the gateway's registry, and its
// refusals recorded in the audit log as the sandbox's session's owner's (auditEgress).
func (g *Gateway) newEgress(cfg *config.Config, now func() time.Time) (*egress.Proxy, error) {
	uses := false
	for _, p := range cfg.Sandbox.Profiles {
		uses = uses || p.Type == docker.TypeName
	}
	if !uses {
		return nil, nil
	}
	dir := cfg.Egress.StateDir
	if dir == "" {
		dir = defaultEgressStateDir()
	}
	ca, err := egress.LoadOrCreateCA(dir, g.installation, now)
	if err != nil {
		return nil, fault.Wrap(fault.Config, err, "egress.state_dir (the folder keeping the egress proxy's CA, %s, must be writable: set egress.state_dir or SANDGATE_EGRESS__STATE_DIR to a writable folder)", dir)
	}
	var roots *x509.CertPool
	if f := cfg.Egress.UpstreamCAFile; f != "" {
		pem, err := os.ReadFile(f)
		if err != nil {
			return nil, fault.Wrap(fault.Config, err, "egress.upstream_ca_file")
		}
		roots = x509.NewCertPool()
		if !roots.AppendCertsFromPEM(pem) {
			return nil, fault.New(fault.Config, "egress.upstream_ca_file: %s holds no PEM certificate", f)
		}
	}
	refusals := make(chan egress.Refusal, egressAuditBacklog)
	p, err := egress.New(egress.Config{
		Hosts: cfg.Egress.Hosts, RootCAs: roots, CA: ca, Registerer: g.metrics.Registry(), Logger: g.log.With("component", "egress"),
		RefusedFunc: func(r egress.Refusal) {
			select {
			case refusals <- r:
			default:
				g.log.Warn("egress refusal not audited: too many waiting", "sandbox_id", r.Sandbox, "host", r.Host, "port", r.Port)
			}
		},
	})
	if err != nil {
		return nil, fault.Wrap(fault.Config, err, "egress")
	}
	g.goBG(func(ctx context.Context) {
		for {
			select {
			case <-ctx.Done():
				return
			case r := <-refusals:
				g.auditEgress(ctx, r, now())
			}
		}
	})
	return p, nil
}

// defaultEgressStateDir is egress.state_dir's default: /var/lib/sandgate/egress for root,
// else $XDG_STATE_HOME/sandgate/egress, else ~/.local/state/sandgate/egress.
func defaultEgressStateDir() string {
	if os.Geteuid() == 0 {
		return "/var/lib/sandgate/egress"
	}
	if d := os.Getenv("XDG_STATE_HOME"); d != "" {
		return filepath.Join(d, "sandgate", "egress")
	}
	if home, err := os.UserHomeDir(); err == nil {
		return filepath.Join(home, ".local", "state", "sandgate", "egress")
	}
	return filepath.Join(os.TempDir(), "sandgate-"+strconv.Itoa(os.Geteuid()), "egress")
}

// auditEgress records refusal r as an egress_refused event of the session whose sandbox it
// was, as its owner's. A sandbox no session owns (a shared session's, or one being made) is
// logged only.
func (g *Gateway) auditEgress(ctx context.Context, r egress.Refusal, at time.Time) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	s, err := g.store.SessionOfSandbox(ctx, r.Sandbox)
	if err != nil || s.OwnerID == "" {
		if err != nil && !errors.Is(err, store.ErrNotFound) {
			g.log.Warn("auditing an egress refusal: finding its session failed", "sandbox_id", r.Sandbox, "err", err)
		}
		return
	}
	e := store.AuditEvent{At: at, Kind: store.AuditEgressRefused, PrincipalID: s.OwnerID, SessionID: s.ID, Profile: s.Profile,
		Target: net.JoinHostPort(r.Host, strconv.Itoa(r.Port)), Excerpt: store.ExcerptOf(r.Kind + ": " + r.Reason), Status: "refused"}
	if err := g.store.AppendAudit(ctx, e); err != nil {
		g.log.Error("recording an egress refusal in the audit log failed", "session_id", s.ID, "target", e.Target, "err", err)
	}
}
