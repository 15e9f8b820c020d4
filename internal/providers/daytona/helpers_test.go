package daytona_test

import (
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
