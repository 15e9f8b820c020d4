package gateway

import (
	"context"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sandgate/sandgate/internal/config"
	"github.com/sandgate/sandgate/internal/egress"
	"github.com/sandgate/sandgate/internal/store"
	"github.com/sandgate/sandgate/internal/telemetry"
	"github.com/sandgate/sandgate/internal/testutil/pgtest"
)

// TestEgressRefusalsAreAudited: the gateway's egress proxy (made for a docker profile, its
// CA kept in egress.state_dir) records a refusal as an egress_refused event of the session
// whose sandbox was refused, as its owner's.
func TestEgressRefusalsAreAudited(t *testing.T) {
	st := pgtest.Store(t)
	ctx := t.Context()
	g := &Gateway{store: st, log: slog.New(slog.DiscardHandler), metrics: telemetry.New(telemetry.Options{}), installation: "0123456789abcdef"}
	g.bg, g.stopBG = context.WithCancel(context.Background())
	defer func() { g.stopBG(); g.wg.Wait() }()

	alice, err := st.UpsertPrincipal(ctx, store.Principal{Issuer: "https://i", Subject: "alice"}, time.Now())
	require.NoError(t, err)
	now := time.Now().UTC().Truncate(time.Millisecond)
	require.NoError(t, st.CreateSessionWithin(ctx, store.Session{ID: "s01", OwnerID: alice.ID, Profile: "box", Provider: "docker", Scope: "per_session",
		Labels: map[string]string{}, Status: "active", CreatedAt: now, LastUsedAt: now}, 0))
	require.NoError(t, st.UpdateSessionBackend(ctx, "s01", "sb-1", "active", now))

	dir := filepath.Join(t.TempDir(), "egress")
	cfg := &config.Config{Sandbox: config.Sandbox{Profiles: map[string]config.Profile{"box": {Type: "docker"}}},
		Egress: config.Egress{StateDir: dir}}
	proxy, err := g.newEgress(cfg, time.Now)
	require.NoError(t, err)
	require.NotNil(t, proxy)
	defer proxy.Close()
	require.FileExists(t, filepath.Join(dir, "egress-ca-key.pem"))

	// A refused request through the proxy, for sandbox sb-1.
	rules, err := egress.ParseRules([]string{"allowed.test"})
	require.NoError(t, err)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = proxy.Serve(l, &egress.Grant{Sandbox: "sb-1", Owner: "alice", Rules: rules})
	}()
	defer func() { l.Close(); <-done }()
	c := &http.Client{Transport: &http.Transport{Proxy: http.ProxyURL(&url.URL{Scheme: "http", Host: l.Addr().String()})}}
	resp, err := c.Get("http://denied.test:8080/x")
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusForbidden, resp.StatusCode)

	var got []store.AuditEvent
	require.Eventually(t, func() bool {
		got, err = st.ListAudit(ctx, store.AuditFilter{Kind: store.AuditEgressRefused, Limit: 10})
		return err == nil && len(got) == 1
	}, time.Minute, 20*time.Millisecond, "the refusal is audited")
	e := got[0]
	require.Equal(t, alice.ID, e.PrincipalID)
	require.Equal(t, "https://i#alice", e.Principal)
	require.Equal(t, "s01", e.SessionID)
	require.Equal(t, "box", e.Profile)
	require.Equal(t, "denied.test:8080", e.Target)
	require.Equal(t, "refused", e.Status)
	require.Contains(t, e.Excerpt, "http: no network_allow entry")

	// A sandbox no session has is logged, not audited.
	g.auditEgress(ctx, egress.Refusal{Sandbox: "sb-unknown", Kind: "dns", Host: "x.test"}, time.Now())
	got, err = st.ListAudit(ctx, store.AuditFilter{Kind: store.AuditEgressRefused, Limit: 10})
	require.NoError(t, err)
	require.Len(t, got, 1)
}
