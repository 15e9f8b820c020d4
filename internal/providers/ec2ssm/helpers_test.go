package ec2ssm_test

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	"github.com/stretchr/testify/require"

	"github.com/sandgate/sandgate/internal/awsfake"
	"github.com/sandgate/sandgate/internal/fault"
	"github.com/sandgate/sandgate/internal/providers"
	"github.com/sandgate/sandgate/internal/providers/ec2ssm"
)

// In every test of this package the EC2 instance is played by awsfake: SendCommand runs the
// script with /bin/sh on the test machine, in a temporary folder standing for the instance.
// The AWS SDK clients are the real ones, pointed at the fake through endpoint_url.

const (
	instanceID = "i-0123456789abcdef0"
	roleARN    = "arn:aws:iam::123456789012:role/sandgate-users"
)

var (
	agent = providers.Principal{Mode: "agent", Subject: "sandgate"}
	pol   = providers.Policy{NetworkEgress: providers.EgressAllow, Timeout: time.Minute, Strict: true}
)

func user(subject string) providers.Principal {
	return providers.Principal{Mode: "user", Subject: subject, Credentials: providers.Credentials{RoleARN: roleARN}}
}

// rig is a fake AWS with one registered instance and a provider for it.
type rig struct {
	fake *awsfake.Server
	inst *awsfake.Instance
	p    *ec2ssm.Provider
}

type rigOpts struct {
	userMode    bool
	webIdentity bool
	bucket      string
	prefix      string
	noGatewayID bool // the gateway has no AWS credentials at all
}

// fastRetries keeps the SDK's standard retryer (same retryable errors, same attempts) with
// short back-offs.
func fastRetries() aws.Retryer {
	return retry.NewStandard(func(o *retry.StandardOptions) { o.MaxBackoff = 50 * time.Millisecond })
}

func newRig(t *testing.T, o rigOpts) *rig {
	t.Helper()
	fake := awsfake.New(t)
	inst := fake.AddInstance(instanceID)
	return &rig{fake: fake, inst: inst, p: newProvider(t, fake, o)}
}

func newProvider(t *testing.T, fake *awsfake.Server, o rigOpts) *ec2ssm.Provider {
	t.Helper()
	cfg := fake.Config(fake.GatewayCredentials())
	if o.noGatewayID {
		cfg.Credentials = nil
	}
	cfg.Retryer = fastRetries
	p, err := ec2ssm.New(context.Background(), ec2ssm.Options{
		Config: ec2ssm.Config{
			Region: fake.Region, EndpointURL: fake.URL,
			WebIdentity: o.webIdentity, OutputS3Bucket: o.bucket, OutputS3Prefix: o.prefix,
		},
		AttachTo: instanceID, UserMode: o.userMode || o.webIdentity, AWSConfig: &cfg, Logger: slog.New(slog.DiscardHandler),
	})
	require.NoError(t, err)
	p.PollInterval = 20 * time.Millisecond
	p.CancelWait = time.Second
	p.S3Wait = 2 * time.Second
	return p
}

func (r *rig) attach(t *testing.T, pr providers.Principal) providers.Sandbox {
	t.Helper()
	sb, err := r.p.Attach(t.Context(), instanceID, pr, pol)
	require.NoError(t, err)
	return sb
}

type result struct {
	st             providers.ExitStatus
	err            error
	stdout, stderr string
	elapsed        time.Duration
}

func run(t *testing.T, sb providers.Sandbox, spec providers.ExecSpec) result {
	t.Helper()
	var out, errOut bytes.Buffer
	if spec.Stdout == nil {
		spec.Stdout = &out
	}
	if spec.Stderr == nil {
		spec.Stderr = &errOut
	}
	if spec.Timeout == 0 {
		spec.Timeout = time.Minute
	}
	start := time.Now()
	st, err := sb.Exec(t.Context(), spec)
	return result{st: st, err: err, stdout: out.String(), stderr: errOut.String(), elapsed: time.Since(start)}
}

func requireKind(t *testing.T, err error, k fault.Kind) {
	t.Helper()
	require.Error(t, err)
	require.Truef(t, fault.IsKind(err, k), "want %s, got %s: %v", k, fault.KindOf(err), err)
}

// markingWriter is an output writer implementing ec2ssm.TruncationMarker.
type markingWriter struct {
	mu     sync.Mutex
	buf    bytes.Buffer
	marked bool
}

func (m *markingWriter) Write(p []byte) (int, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.buf.Write(p)
}

func (m *markingWriter) MarkTruncated() {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.marked = true
}

var _ ec2ssm.TruncationMarker = (*markingWriter)(nil)
var _ io.Writer = (*markingWriter)(nil)

// ssmCalls returns the recorded SSM calls.
func ssmCalls(f *awsfake.Server) []awsfake.Call {
	var out []awsfake.Call
	for _, c := range f.Calls() {
		if c.Service == "ssm" {
			out = append(out, c)
		}
	}
	return out
}

// sentScript returns the script of the last SendCommand.
func sentScript(t *testing.T, f *awsfake.Server) string {
	t.Helper()
	calls := f.CallsTo("SendCommand")
	require.NotEmpty(t, calls)
	params := calls[len(calls)-1].Input["Parameters"].(map[string]any)
	cmds := params["commands"].([]any)
	require.Len(t, cmds, 1)
	return cmds[0].(string)
}

// awsConfigWithoutRegion is an AWS configuration with the fake gateway's kind of static
// credentials and no region.
func awsConfigWithoutRegion() aws.Config {
	return aws.Config{Credentials: aws.AnonymousCredentials{}}
}
