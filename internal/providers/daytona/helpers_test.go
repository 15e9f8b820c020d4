package daytona_test

import (
	"bytes"
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sandgate/sandgate/internal/providers"
	"github.com/sandgate/sandgate/internal/providers/daytona"
	"github.com/sandgate/sandgate/internal/providers/daytona/daytonafake"
)

// In every test of this package Daytona is played by daytonafake: its control plane and
// toolbox speak Daytona's wire protocol on loopback, and programs run through Sandgate's
// sandboxd runtime in a temporary folder standing for each sandbox.

var (
	agent = providers.Principal{Mode: "agent", Subject: "sandgate"}
	pol   = providers.Policy{NetworkEgress: providers.EgressAllow, Timeout: time.Minute, Strict: true}
)

// newProvider builds a provider against fake with opts (APIURL, Getenv and Profile filled in
// when unset).
func newProvider(t *testing.T, fake *daytonafake.Server, opts daytona.Options) *daytona.Provider {
	t.Helper()
	if opts.Config.APIURL == "" {
		opts.Config.APIURL = fake.URL
	}
	if opts.Getenv == nil {
		opts.Getenv = func(name string) string {
			if name == daytona.DefaultAPIKeyEnv {
				return fake.APIKey
			}
			return ""
		}
	}
	if opts.Profile == "" {
		opts.Profile = "test"
	}
	if opts.Policy.Timeout == 0 {
		opts.Policy = pol
	}
	if opts.IdleTimeout == 0 {
		opts.IdleTimeout = 30 * time.Minute
	}
	opts.Logger = slog.New(slog.DiscardHandler)
	p, err := daytona.New(opts)
	require.NoError(t, err)
	p.PollInterval = 20 * time.Millisecond
	p.KillGrace = time.Second
	return p
}

// result is how one execution went.
type result struct {
	st             providers.ExitStatus
	err            error
	stdout, stderr string
}

// run executes spec in sb, collecting both streams.
func run(t *testing.T, sb providers.Sandbox, spec providers.ExecSpec) result {
	t.Helper()
	var out, errb bytes.Buffer
	spec.Stdout, spec.Stderr = &out, &errb
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	st, err := sb.Exec(ctx, spec)
	return result{st: st, err: err, stdout: out.String(), stderr: errb.String()}
}

// create makes a sandbox that is destroyed when the test ends.
func create(t *testing.T, p *daytona.Provider) providers.Sandbox {
	t.Helper()
	sb, err := p.Create(t.Context(), agent, pol)
	require.NoError(t, err)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		_ = p.Destroy(ctx, sb.ID())
	})
	return sb
}
