package ec2ssm_test

import (
	"bytes"
	"context"
	"encoding/hex"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sandgate/sandgate/internal/fault"
	"github.com/sandgate/sandgate/internal/providers"
	"github.com/sandgate/sandgate/internal/providers/ec2ssm"
)

func TestCapabilities(t *testing.T) {
	t.Parallel()
	r := newRig(t, rigOpts{})
	assert.Equal(t, providers.Capabilities{
		Isolation: providers.IsolationNone, Shell: true, Languages: []string{"python"},
		Attach: true, AttachesExternal: true, PrincipalUser: true, OneShotCommands: true,
	}, r.p.Capabilities())
	assert.Equal(t, ec2ssm.TypeName, r.p.Type())
}

func TestExitCodesAndStreams(t *testing.T) {
	t.Parallel()
	r := newRig(t, rigOpts{})
	sb := r.attach(t, agent)
	for _, tc := range []struct {
		spec           providers.ExecSpec
		code           int
		stdout, stderr string
	}{
		{providers.ExecSpec{Command: "exit 3"}, 3, "", ""},
		{providers.ExecSpec{Command: "echo kept; echo err >&2; exit 42"}, 42, "kept\n", "err\n"},
		{providers.ExecSpec{Code: "import sys\nprint('kept')\nsys.exit(4)", Language: "python"}, 4, "kept\n", ""},
		{providers.ExecSpec{Code: "raise SystemExit('boom')", Language: "python"}, 1, "", "boom\n"},
	} {
		res := run(t, sb, tc.spec)
		require.NoError(t, res.err)
		assert.Equal(t, tc.code, res.st.ExitCode, "%+v", tc.spec)
		assert.Equal(t, tc.stdout, res.stdout)
		assert.Equal(t, tc.stderr, res.stderr)
		assert.False(t, res.st.TimedOut)
	}
}

// TestPollingKeepsGoing: InvocationDoesNotExist right after SendCommand, then Pending,
// Delayed and InProgress, all mean "poll again".
func TestPollingKeepsGoing(t *testing.T) {
	t.Parallel()
	r := newRig(t, rigOpts{})
	r.fake.HideInvocations(3)
	r.fake.LeadStatuses("Pending", "Delayed", "InProgress")
	sb := r.attach(t, agent)
	res := run(t, sb, providers.ExecSpec{Command: "echo done"})
	require.NoError(t, res.err)
	assert.Equal(t, "done\n", res.stdout)
	polls := r.fake.CallsTo("GetCommandInvocation")
	var missing int
	for _, c := range polls {
		if c.ErrorCode == "InvocationDoesNotExist" {
			missing++
		}
	}
	assert.Equal(t, 3, missing)
	assert.GreaterOrEqual(t, len(polls), 7)
}

func TestThrottlingIsRetriedBySDK(t *testing.T) {
	t.Parallel()
	r := newRig(t, rigOpts{userMode: true})
	r.fake.Throttle("DescribeInstanceInformation", 2)
	r.fake.Throttle("SendCommand", 1)
	r.fake.Throttle("AssumeRole", 1)
	sb := r.attach(t, user("ivy"))
	res := run(t, sb, providers.ExecSpec{Command: "echo after throttling"})
	require.NoError(t, res.err)
	assert.Equal(t, "after throttling\n", res.stdout)
	codes := func(op string) []string {
		var out []string
		for _, c := range r.fake.CallsTo(op) {
			out = append(out, c.ErrorCode)
		}
		return out
	}
	assert.Equal(t, []string{"ThrottlingException", "ThrottlingException", ""}, codes("DescribeInstanceInformation"))
	assert.Equal(t, []string{"ThrottlingException", ""}, codes("SendCommand"))
	assert.Equal(t, []string{"Throttling", ""}, codes("AssumeRole"))
}

func TestGoneInstances(t *testing.T) {
	t.Parallel()
	r := newRig(t, rigOpts{})

	// Not this profile's instance: Gone without any call.
	for _, id := range []string{"i-0fedcba9876543210", "nonexistent-id", ""} {
		_, err := r.p.Attach(t.Context(), id, agent, pol)
		requireKind(t, err, fault.Gone)
	}
	assert.Empty(t, r.fake.Calls())

	sb := r.attach(t, agent)
	r.fake.RemoveInstance(instanceID)
	_, err := r.p.Attach(t.Context(), instanceID, agent, pol)
	requireKind(t, err, fault.Gone)
	assert.Equal(t, "instance '"+instanceID+"' is not registered with SSM", err.Error())
	assert.True(t, fault.IsKind(err, fault.Provision), "gone is a kind of provision failure")

	// A handle attached earlier: SendCommand answers InvalidInstanceId.
	res := run(t, sb, providers.ExecSpec{Command: "true"})
	requireKind(t, res.err, fault.Gone)
	assert.Contains(t, res.err.Error(), "InvalidInstanceId")

	// Create binds to attach_to, so it is Gone too.
	_, err = r.p.Create(t.Context(), agent, pol)
	requireKind(t, err, fault.Gone)
}

func TestCreateIsAttachOnly(t *testing.T) {
	t.Parallel()
	r := newRig(t, rigOpts{})
	sb, err := r.p.Create(t.Context(), agent, pol)
	require.NoError(t, err)
	assert.Equal(t, instanceID, sb.ID())
	require.NoError(t, sb.Close())
	require.NoError(t, sb.Close())
	require.NoError(t, r.p.Destroy(t.Context(), instanceID), "destroy never touches the instance")
	_, err = r.p.Attach(t.Context(), instanceID, agent, pol)
	require.NoError(t, err, "still attachable after destroy")

	cfg := r.fake.Config(r.fake.GatewayCredentials())
	p, err := ec2ssm.New(context.Background(), ec2ssm.Options{Config: ec2ssm.Config{Region: r.fake.Region, EndpointURL: r.fake.URL}, AWSConfig: &cfg})
	require.NoError(t, err)
	_, err = p.Create(t.Context(), agent, pol)
	requireKind(t, err, fault.Config)
	assert.Contains(t, err.Error(), "attach-only")
}

func TestWorkingFolderIsRefused(t *testing.T) {
	t.Parallel()
	r := newRig(t, rigOpts{})
	sb := r.attach(t, agent)
	res := run(t, sb, providers.ExecSpec{Command: "pwd", Dir: "sub"})
	requireKind(t, res.err, fault.Validation)
	res = run(t, sb, providers.ExecSpec{Command: "pwd", Dir: "../.."})
	requireKind(t, res.err, fault.Policy)
	res = run(t, sb, providers.ExecSpec{Command: "echo ok", Dir: "."})
	require.NoError(t, res.err)
	assert.Empty(t, r.fake.CallsTo("SendCommand")[1:], "refused specs send nothing")
}

// TestTimeoutCancelsTheCommand: at the timeout the command is cancelled (the fake kills its
// process group), the status says TimedOut, and no grandchild outlives it.
func TestTimeoutCancelsTheCommand(t *testing.T) {
	t.Parallel()
	r := newRig(t, rigOpts{})
	sb := r.attach(t, agent)
	start := time.Now()
	res := run(t, sb, providers.ExecSpec{
		Command: "(sleep 3; echo late > late1.txt) &\n(trap '' TERM; sleep 3; echo late > late2.txt) &\necho started\nsleep 600",
		Timeout: time.Second,
	})
	require.NoError(t, res.err, "a timeout is a status")
	assert.True(t, res.st.TimedOut)
	assert.Less(t, res.elapsed, 3*time.Second)
	cancels := r.fake.CallsTo("CancelCommand")
	require.Len(t, cancels, 1)
	assert.Equal(t, []any{instanceID}, cancels[0].Input["InstanceIds"])
	params := r.fake.CallsTo("SendCommand")[0].Input["Parameters"].(map[string]any)
	assert.Equal(t, []any{"31"}, params["executionTimeout"], "the agent-side backstop: timeout + 30 s")

	time.Sleep(time.Until(start.Add(4 * time.Second)))
	for _, f := range []string{"late1.txt", "late2.txt"} {
		_, err := os.Stat(filepath.Join(r.inst.Dir, f))
		assert.True(t, os.IsNotExist(err), "%s was written: a grandchild outlived the cancelled command", f)
	}
	assert.Zero(t, r.fake.Running())
}

func TestContextCancelCancelsTheCommand(t *testing.T) {
	t.Parallel()
	r := newRig(t, rigOpts{})
	sb := r.attach(t, agent)
	ctx, cancel := context.WithTimeout(t.Context(), 500*time.Millisecond)
	defer cancel()
	_, err := sb.Exec(ctx, providers.ExecSpec{Command: "sleep 600", Timeout: time.Minute, Output: providers.Output{Stdout: &bytes.Buffer{}, Stderr: &bytes.Buffer{}}})
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.Len(t, r.fake.CallsTo("CancelCommand"), 1)
	require.Eventually(t, func() bool { return r.fake.Running() == 0 }, 5*time.Second, 20*time.Millisecond)
}

// TestHeredocDelimiterNeverCollides: code whose lines equal SANDGATE_EOF and SANDGATE_EOF_1
// still runs exactly, through the delimiter SANDGATE_EOF_2.
func TestHeredocDelimiterNeverCollides(t *testing.T) {
	t.Parallel()
	r := newRig(t, rigOpts{})
	sb := r.attach(t, agent)
	code := "text = '''\nSANDGATE_EOF\nSANDGATE_EOF_1\n'''\nprint(text.split())\nprint('$HOME `id` \\'q\\' \"dq\"')"
	res := run(t, sb, providers.ExecSpec{Code: code, Language: "python"})
	require.NoError(t, res.err)
	require.Equal(t, 0, res.st.ExitCode, res.stderr)
	assert.Equal(t, "['SANDGATE_EOF', 'SANDGATE_EOF_1']\n$HOME `id` 'q' \"dq\"\n", res.stdout)
	script := sentScript(t, r.fake)
	assert.Contains(t, script, "'python3' - <<'SANDGATE_EOF_2'\n")
	assert.True(t, strings.HasSuffix(script, "\nSANDGATE_EOF_2"), script)
}

// TestRunAs: with Credentials.RunAs the program runs through `sudo -n -u <user> sh -c
// '<program>'` (the fake's sudo stand-in clears the environment like sudo and names the user),
// quoting survives, and the environment is set inside the sudo'd shell.
func TestRunAs(t *testing.T) {
	t.Parallel()
	r := newRig(t, rigOpts{userMode: true})
	pr := user("judy")
	pr.Credentials.RunAs = "deploy"
	sb := r.attach(t, pr)
	res := run(t, sb, providers.ExecSpec{
		Command: `printf '%s|%s|%s\n' "$SANDGATE_FAKE_SUDO_USER" "$VALUE" 'it'"'"'s'`,
		Env:     map[string]string{"VALUE": "a 'quoted' $(value) `x`"},
	})
	require.NoError(t, res.err)
	require.Equal(t, 0, res.st.ExitCode, res.stderr)
	assert.Equal(t, "deploy|a 'quoted' $(value) `x`|it's\n", res.stdout)
	assert.True(t, strings.HasPrefix(sentScript(t, r.fake), "sudo -n -u deploy sh -c '"))

	res = run(t, sb, providers.ExecSpec{Code: "import os\nprint(os.environ['SANDGATE_FAKE_SUDO_USER'])", Language: "python", Stdin: strings.NewReader("in")})
	require.NoError(t, res.err)
	assert.Equal(t, "deploy\n", res.stdout, res.stderr)

	for _, bad := range []string{"-u root", "a b", "root;id", "x'y", "9lives", strings.Repeat("a", 33)} {
		pr.Credentials.RunAs = bad
		_, err := r.p.Attach(t.Context(), instanceID, pr, pol)
		requireKind(t, err, fault.Policy)
	}
	// In agent mode run_as does not apply.
	asAgent := r.attach(t, agent)
	res = run(t, asAgent, providers.ExecSpec{Command: "echo ${SANDGATE_FAKE_SUDO_USER:-none}"})
	require.NoError(t, res.err)
	assert.Equal(t, "none\n", res.stdout)
}

func TestStdin(t *testing.T) {
	t.Parallel()
	r := newRig(t, rigOpts{})
	sb := r.attach(t, agent)
	data := []byte("line one\x00\xff\nSANDGATE_EOF\n'quoted' $(x)\n")
	res := run(t, sb, providers.ExecSpec{Command: "od -An -v -tx1 | tr -d ' \\n'", Stdin: bytes.NewReader(data)})
	require.NoError(t, res.err)
	assert.Equal(t, hex.EncodeToString(data), res.stdout, "binary standard input arrives exactly")
	res = run(t, sb, providers.ExecSpec{Code: "import sys\nprint(repr(sys.stdin.buffer.read()))", Language: "python", Stdin: bytes.NewReader(data)})
	require.NoError(t, res.err)
	assert.Equal(t, "b\"line one\\x00\\xff\\nSANDGATE_EOF\\n'quoted' $(x)\\n\"\n", res.stdout, res.stderr)
	// The temporary file holding the input is unlinked before the program starts.
	res = run(t, sb, providers.ExecSpec{Command: `ls "$TMPDIR"`, Stdin: strings.NewReader("x")})
	require.NoError(t, res.err)
	assert.Equal(t, "_script.sh\nstderr\nstdout\n", res.stdout)

	var err error
	_, err = sb.Exec(t.Context(), providers.ExecSpec{Command: "cat", Stdin: bytes.NewReader(make([]byte, 1<<20+1)), Output: providers.Output{Stdout: &bytes.Buffer{}, Stderr: &bytes.Buffer{}}})
	requireKind(t, err, fault.TooLarge)
}

// TestInlineOutputLimit: without an output bucket, SSM's inline limit cuts stdout at 24,000
// and stderr at 8,000 characters. Exec writes exactly what SSM returned and reports the cut:
// through TruncationMarker when the writer implements it, else by a notice on stderr.
func TestInlineOutputLimit(t *testing.T) {
	t.Parallel()
	r := newRig(t, rigOpts{})
	sb := r.attach(t, agent)
	code := "import sys\nsys.stdout.write('o' * 30000)\nsys.stderr.write('e' * 9000)"

	out, errOut := &markingWriter{}, &markingWriter{}
	res := run(t, sb, providers.ExecSpec{Code: code, Language: "python", Output: providers.Output{Stdout: out, Stderr: errOut}})
	require.NoError(t, res.err)
	assert.Equal(t, strings.Repeat("o", ec2ssm.StdoutInlineLimit), out.buf.String())
	assert.Equal(t, strings.Repeat("e", ec2ssm.StderrInlineLimit), errOut.buf.String())
	assert.True(t, out.marked)
	assert.True(t, errOut.marked)

	res = run(t, sb, providers.ExecSpec{Code: code, Language: "python"})
	require.NoError(t, res.err)
	assert.Equal(t, strings.Repeat("o", ec2ssm.StdoutInlineLimit), res.stdout)
	assert.True(t, strings.HasPrefix(res.stderr, strings.Repeat("e", ec2ssm.StderrInlineLimit)+"\nsandgate: stdout was cut"), res.stderr[8000:])
	assert.Contains(t, res.stderr, "sandgate: stderr was cut")

	// Output under the limit is not marked.
	small := &markingWriter{}
	res = run(t, sb, providers.ExecSpec{Command: "echo small", Output: providers.Output{Stdout: small}})
	require.NoError(t, res.err)
	assert.Equal(t, "small\n", small.buf.String())
	assert.False(t, small.marked)
}

// TestS3OutputIsComplete: with an output bucket, SSM stores the full streams in S3 and Exec
// reads a cut stream back, signed by the same (user) identity as the SSM calls.
func TestS3OutputIsComplete(t *testing.T) {
	t.Parallel()
	r := newRig(t, rigOpts{userMode: true, bucket: "sandgate-out", prefix: "team/"})
	sb := r.attach(t, user("kim"))
	out := &markingWriter{}
	res := run(t, sb, providers.ExecSpec{Code: "import sys\nsys.stdout.write('x' * 100000)\nprint('err', file=sys.stderr)", Language: "python", Output: providers.Output{Stdout: out, Stderr: &bytes.Buffer{}}})
	require.NoError(t, res.err)
	assert.Equal(t, 100000, out.buf.Len())
	assert.False(t, out.marked, "full output is not cut")

	send := r.fake.CallsTo("SendCommand")[0].Input
	assert.Equal(t, "sandgate-out", send["OutputS3BucketName"])
	assert.Equal(t, "team/", send["OutputS3KeyPrefix"])
	var s3 int
	for _, c := range r.fake.Calls() {
		if c.Service != "s3" {
			continue
		}
		s3++
		require.NotNil(t, c.Identity)
		assert.Equal(t, "sandgate-kim", c.Identity.RoleSessionName, c.Operation)
		assert.True(t, strings.HasPrefix(c.Form.Get("prefix"), "team/") || c.Operation == "GetObject")
	}
	assert.GreaterOrEqual(t, s3, 2, "list, then get")

	// When the output never reaches S3, the inline output is returned and marked.
	r.p.S3Wait = 300 * time.Millisecond
	r.fake.FailOutputUploads()
	out = &markingWriter{}
	res = run(t, sb, providers.ExecSpec{Code: "print('y' * 30000)", Language: "python", Output: providers.Output{Stdout: out}})
	require.NoError(t, res.err)
	assert.Equal(t, ec2ssm.StdoutInlineLimit, out.buf.Len())
	assert.True(t, out.marked)
}

func TestNew(t *testing.T) {
	t.Parallel()
	for name, tc := range map[string]struct {
		opts ec2ssm.Options
		want string
	}{
		"bad instance id":        {ec2ssm.Options{Config: ec2ssm.Config{Region: "eu-west-1"}, AttachTo: "web-1"}, "not an instance id"},
		"web identity in agent":  {ec2ssm.Options{Config: ec2ssm.Config{Region: "eu-west-1", WebIdentity: true}}, "web_identity needs identity.mode: user"},
		"prefix without bucket":  {ec2ssm.Options{Config: ec2ssm.Config{Region: "eu-west-1", OutputS3Prefix: "p"}}, "output_s3_prefix"},
		"no region at all":       {ec2ssm.Options{}, "no AWS region"},
		"hybrid managed node ok": {ec2ssm.Options{Config: ec2ssm.Config{Region: "eu-west-1"}, AttachTo: "mi-0123456789abcdef0"}, ""},
	} {
		cfg := awsConfigWithoutRegion()
		tc.opts.AWSConfig = &cfg
		_, err := ec2ssm.New(context.Background(), tc.opts)
		if tc.want == "" {
			assert.NoError(t, err, name)
			continue
		}
		requireKind(t, err, fault.Config)
		assert.Contains(t, err.Error(), tc.want, name)
	}
	_, err := ec2ssm.Factory(providers.BuildContext{Type: ec2ssm.TypeName, Profile: "p"})
	requireKind(t, err, fault.Config)
	assert.Contains(t, err.Error(), "no ec2_ssm block")
}

// TestFactoryUsesTheDefaultCredentialChain builds the provider as the gateway does (Factory,
// config.LoadDefaultConfig) with credentials and region from the environment, and checks that
// the SSM calls are signed with them.
func TestFactoryUsesTheDefaultCredentialChain(t *testing.T) {
	r := newRig(t, rigOpts{})
	t.Setenv("AWS_ACCESS_KEY_ID", "AKIAGATEWAYEXAMPLE01")
	t.Setenv("AWS_SECRET_ACCESS_KEY", r.fake.GatewaySecret())
	t.Setenv("AWS_SESSION_TOKEN", "")
	t.Setenv("AWS_REGION", r.fake.Region)
	t.Setenv("AWS_PROFILE", "")
	t.Setenv("AWS_CONFIG_FILE", filepath.Join(t.TempDir(), "none"))
	t.Setenv("AWS_SHARED_CREDENTIALS_FILE", filepath.Join(t.TempDir(), "none"))
	prov, err := ec2ssm.Factory(providers.BuildContext{
		Type: ec2ssm.TypeName, Profile: "ec2",
		Options: ec2ssm.Options{Config: ec2ssm.Config{EndpointURL: r.fake.URL}, AttachTo: instanceID},
		Logger:  slog.New(slog.DiscardHandler),
	})
	require.NoError(t, err)
	prov.(*ec2ssm.Provider).PollInterval = 20 * time.Millisecond
	sb, err := prov.Create(t.Context(), agent, pol)
	require.NoError(t, err)
	res := run(t, sb, providers.ExecSpec{Command: "echo chain"})
	require.NoError(t, res.err)
	assert.Equal(t, "chain\n", res.stdout)
	for _, c := range ssmCalls(r.fake) {
		assert.Equal(t, "AKIAGATEWAYEXAMPLE01", c.AccessKeyID)
		require.NotNil(t, c.Identity)
	}
}
