package ec2ssm_test

import (
	"log/slog"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sandgate/sandgate/internal/providers"
	"github.com/sandgate/sandgate/internal/providers/ec2ssm"
	"github.com/sandgate/sandgate/internal/providers/providertest"
)

// TestLive runs against real AWS, only when SANDGATE_EC2SSM_INSTANCE names an SSM-managed
// instance (and the default credential chain has credentials allowed to use it). Optional:
// SANDGATE_EC2SSM_REGION (else AWS_REGION), SANDGATE_EC2SSM_ROLE_ARN (adds a user-mode run
// assuming that role), SANDGATE_EC2SSM_BUCKET (output bucket), SANDGATE_EC2SSM_RUN_AS (a user
// the instance lets the SSM agent sudo to).
func TestLive(t *testing.T) {
	instance := os.Getenv("SANDGATE_EC2SSM_INSTANCE")
	if instance == "" {
		t.Skip("set SANDGATE_EC2SSM_INSTANCE (and AWS credentials) to run against real AWS")
	}
	block := ec2ssm.Config{Region: os.Getenv("SANDGATE_EC2SSM_REGION"), OutputS3Bucket: os.Getenv("SANDGATE_EC2SSM_BUCKET")}
	build := func(t *testing.T, mode string) *ec2ssm.Provider {
		p, err := ec2ssm.Factory(providers.BuildContext{
			Type: ec2ssm.TypeName, Profile: "live",
			Options: ec2ssm.Options{Config: block, AttachTo: instance, UserMode: mode == providers.ModeUser},
			Logger:  slog.Default(),
		})
		require.NoError(t, err)
		return p.(*ec2ssm.Provider)
	}

	t.Run("agent", func(t *testing.T) {
		p := build(t, providers.ModeAgent)
		sb, err := p.Create(t.Context(), agent, pol)
		require.NoError(t, err)
		res := run(t, sb, providers.ExecSpec{Command: "echo out; echo err >&2; exit 3"})
		require.NoError(t, res.err)
		assert.Equal(t, 3, res.st.ExitCode)
		assert.Equal(t, "out\n", res.stdout)
		assert.Equal(t, "err\n", res.stderr)
		res = run(t, sb, providers.ExecSpec{Code: "print('SANDGATE_EOF')\nimport sys; print(sys.stdin.read())", Language: "python", Stdin: strings.NewReader("fed")})
		require.NoError(t, res.err)
		assert.Equal(t, "SANDGATE_EOF\nfed\n", res.stdout, res.stderr)
		res = run(t, sb, providers.ExecSpec{Command: "sleep 120", Timeout: 5 * time.Second})
		require.NoError(t, res.err)
		assert.True(t, res.st.TimedOut)
		_, err = p.Attach(t.Context(), "i-00000000000000000", agent, pol)
		require.Error(t, err)
	})

	t.Run("contract", func(t *testing.T) {
		p := build(t, providers.ModeAgent)
		providertest.Run(t, providertest.Harness{
			New:  func(*testing.T) providers.Provider { return p },
			Skip: skips(map[string]string{"exec/large_output_is_complete": "16 MiB through SSM is slow and needs an output bucket"}),
		})
	})

	role := os.Getenv("SANDGATE_EC2SSM_ROLE_ARN")
	if role == "" {
		return
	}
	t.Run("user", func(t *testing.T) {
		p := build(t, providers.ModeUser)
		pr := providers.Principal{Mode: "user", Subject: "sandgate-live-test", Credentials: providers.Credentials{RoleARN: role, RunAs: os.Getenv("SANDGATE_EC2SSM_RUN_AS")}}
		sb, err := p.Create(t.Context(), pr, pol)
		require.NoError(t, err)
		res := run(t, sb, providers.ExecSpec{Command: "id -un"})
		require.NoError(t, res.err)
		t.Logf("ran as %q (stderr %q)", res.stdout, res.stderr)
	})
}
