package ec2ssm_test

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sandgate/sandgate/internal/awsfake"
	"github.com/sandgate/sandgate/internal/fault"
	"github.com/sandgate/sandgate/internal/providers"
	"github.com/sandgate/sandgate/internal/providers/ec2ssm"
)

func TestAgentModeSignsWithTheGatewayCredentials(t *testing.T) {
	t.Parallel()
	r := newRig(t, rigOpts{})
	sb := r.attach(t, agent)
	res := run(t, sb, providers.ExecSpec{Command: "echo hi"})
	require.NoError(t, res.err)
	require.Equal(t, "hi\n", res.stdout)

	assert.Empty(t, r.fake.CallsTo("AssumeRole"), "agent mode assumes no role")
	calls := ssmCalls(r.fake)
	require.NotEmpty(t, calls)
	for _, c := range calls {
		require.NotNil(t, c.Identity, c.Operation)
		assert.Equal(t, awsfake.GatewayAccessKeyID, c.AccessKeyID, c.Operation)
		assert.Empty(t, c.SessionToken, c.Operation)
	}
}

// TestUserModeAssumesTheRole proves whose identity signed what: STS AssumeRole is signed by
// the gateway and names the user (session name, source identity); every SSM call is signed
// with the assumed-role session's key and token, never the gateway's.
func TestUserModeAssumesTheRole(t *testing.T) {
	t.Parallel()
	r := newRig(t, rigOpts{userMode: true})
	alice := user("alice@example.test")
	sb := r.attach(t, alice)
	for range 3 {
		res := run(t, sb, providers.ExecSpec{Code: "print('as alice')", Language: "python"})
		require.NoError(t, res.err)
		require.Equal(t, "as alice\n", res.stdout)
	}

	assumed := r.fake.CallsTo("AssumeRole")
	require.Len(t, assumed, 1, "credentials are cached per (subject, role)")
	a := assumed[0]
	assert.True(t, a.Signed)
	assert.Equal(t, awsfake.GatewayAccessKeyID, a.AccessKeyID, "AssumeRole is signed by the gateway")
	assert.Equal(t, roleARN, a.Form.Get("RoleArn"))
	assert.Equal(t, "sandgate-alice@example.test", a.Form.Get("RoleSessionName"))
	assert.Equal(t, "alice@example.test", a.Form.Get("SourceIdentity"))

	calls := ssmCalls(r.fake)
	require.GreaterOrEqual(t, len(calls), 7, "describe, then send and polls for each run")
	var session string
	for _, c := range calls {
		require.NotNil(t, c.Identity, c.Operation)
		assert.NotEqual(t, awsfake.GatewayAccessKeyID, c.AccessKeyID, "%s must not be signed by the gateway", c.Operation)
		assert.True(t, strings.HasPrefix(c.AccessKeyID, "ASIA"), c.AccessKeyID)
		assert.Equal(t, "assumed-role", c.Identity.Kind)
		assert.Equal(t, roleARN, c.Identity.RoleARN)
		assert.Equal(t, "sandgate-alice@example.test", c.Identity.RoleSessionName)
		assert.Equal(t, "alice@example.test", c.Identity.SourceIdentity)
		assert.Equal(t, awsfake.GatewayAccessKeyID, c.Identity.IssuedBy)
		assert.Equal(t, c.Identity.SessionToken, c.SessionToken, "X-Amz-Security-Token is the session's")
		if session == "" {
			session = c.AccessKeyID
		}
		assert.Equal(t, session, c.AccessKeyID, "one cached session")
	}

	// Another user gets a session of their own.
	bob := r.attach(t, user("bob"))
	require.NoError(t, run(t, bob, providers.ExecSpec{Command: "true"}).err)
	assumed = r.fake.CallsTo("AssumeRole")
	require.Len(t, assumed, 2)
	assert.Equal(t, "sandgate-bob", assumed[1].Form.Get("RoleSessionName"))
	assert.Equal(t, "bob", assumed[1].Form.Get("SourceIdentity"))
}

func TestSessionNamesAreSanitised(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("x", 100)
	for _, tc := range []struct{ subject, session, source string }{
		{"alice", "sandgate-alice", "alice"},
		{"Alice Smith/ops:42", "sandgate-Alice_Smith_ops_42", "Alice_Smith_ops_42"},
		{"aws:root", "sandgate-aws_root", "aws_root"},
		{"ünï+=,.@-_", "sandgate-_n_+=,.@-_", "_n_+=,.@-_"},
		{long, "sandgate-" + long[:55], long[:64]},
		{"x", "sandgate-x", "sandgate-x"},
		{"🦀", "sandgate-_", "sandgate-_"},
	} {
		assert.Equal(t, tc.session, ec2ssm.RoleSessionName(tc.subject), "session name of %q", tc.subject)
		assert.Equal(t, tc.source, ec2ssm.SourceIdentity(tc.subject), "source identity of %q", tc.subject)
		assert.LessOrEqual(t, len(ec2ssm.RoleSessionName(tc.subject)), 64)
	}

	// STS (the fake enforces its documented constraints) accepts what the provider sends.
	r := newRig(t, rigOpts{userMode: true})
	for _, subject := range []string{"Alice Smith/ops:42", long, "🦀"} {
		sb := r.attach(t, user(subject))
		require.NoError(t, run(t, sb, providers.ExecSpec{Command: "true"}).err, subject)
	}
	for _, c := range r.fake.CallsTo("AssumeRole") {
		assert.Empty(t, c.ErrorCode, "%s refused: %s", c.Form.Get("RoleSessionName"), c.ErrorCode)
	}
}

func TestUserModeWithoutRoleFailsBeforeAnyCall(t *testing.T) {
	t.Parallel()
	r := newRig(t, rigOpts{userMode: true})
	_, err := r.p.Attach(t.Context(), instanceID, providers.Principal{Mode: "user", Subject: "carol"}, pol)
	requireKind(t, err, fault.Policy)
	assert.Contains(t, err.Error(), "requires a role ARN on the principal")
	_, err = r.p.Create(t.Context(), providers.Principal{Mode: "user", Subject: "carol"}, pol)
	requireKind(t, err, fault.Policy)
	assert.Empty(t, r.fake.Calls(), "no AWS call without a role")
}

func TestAccessDeniedIsPolicy(t *testing.T) {
	t.Parallel()
	r := newRig(t, rigOpts{userMode: true})
	r.fake.DenyRole(roleARN)
	_, err := r.p.Attach(t.Context(), instanceID, user("mallory"), pol)
	requireKind(t, err, fault.Policy)
	assert.Contains(t, err.Error(), "AccessDenied")
	assert.Empty(t, ssmCalls(r.fake), "SSM is never called without the user's credentials")
	calls := r.fake.CallsTo("AssumeRole")
	require.NotEmpty(t, calls)
	assert.Equal(t, "AccessDenied", calls[0].ErrorCode)
}

// TestWebIdentity: the caller's own OIDC token is exchanged by an unsigned
// AssumeRoleWithWebIdentity; the gateway has no AWS credentials at all.
func TestWebIdentity(t *testing.T) {
	t.Parallel()
	r := newRig(t, rigOpts{webIdentity: true, noGatewayID: true})
	const token = "eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiJkYXZlIn0.c2lnbmF0dXJl"
	r.fake.TrustWebIdentityToken(token, "dave")
	dave := user("dave")
	dave.Credentials.WebIdentityToken = token
	sb := r.attach(t, dave)
	res := run(t, sb, providers.ExecSpec{Command: "echo web"})
	require.NoError(t, res.err)
	require.Equal(t, "web\n", res.stdout)

	assert.Empty(t, r.fake.CallsTo("AssumeRole"))
	web := r.fake.CallsTo("AssumeRoleWithWebIdentity")
	require.Len(t, web, 1)
	assert.False(t, web[0].Signed, "AssumeRoleWithWebIdentity is unsigned")
	assert.Empty(t, web[0].AccessKeyID)
	assert.Equal(t, token, web[0].Form.Get("WebIdentityToken"), "the caller's own token")
	assert.Equal(t, roleARN, web[0].Form.Get("RoleArn"))
	assert.Equal(t, "sandgate-dave", web[0].Form.Get("RoleSessionName"))
	for _, c := range ssmCalls(r.fake) {
		require.NotNil(t, c.Identity, c.Operation)
		assert.Equal(t, "web-identity", c.Identity.Kind, c.Operation)
		assert.Equal(t, "dave", c.Identity.WebIdentitySubject)
		assert.Equal(t, c.Identity.SessionToken, c.SessionToken)
	}

	// Without the token (a queued execution) it fails closed, before any call.
	before := len(r.fake.Calls())
	_, err := r.p.Attach(t.Context(), instanceID, user("erin"), pol)
	requireKind(t, err, fault.Policy)
	assert.Contains(t, err.Error(), "OIDC token")
	assert.Len(t, r.fake.Calls(), before)

	// A token STS rejects is a policy failure.
	frank := user("frank")
	frank.Credentials.WebIdentityToken = "not-trusted"
	_, err = r.p.Attach(t.Context(), instanceID, frank, pol)
	requireKind(t, err, fault.Policy)
}

func TestCredentialsAreRefreshedBeforeExpiry(t *testing.T) {
	t.Parallel()
	r := newRig(t, rigOpts{userMode: true})
	r.p.ExpiryWindow = time.Minute
	// Sessions expire 3 s after the refresh window opens: the first is used until then.
	r.fake.SetCredentialLifetime(time.Minute + 3*time.Second)
	sb := r.attach(t, user("grace"))
	require.NoError(t, run(t, sb, providers.ExecSpec{Command: "true"}).err)
	require.NoError(t, run(t, sb, providers.ExecSpec{Command: "true"}).err)
	require.Len(t, r.fake.CallsTo("AssumeRole"), 1)
	time.Sleep(3500 * time.Millisecond)
	require.NoError(t, run(t, sb, providers.ExecSpec{Command: "true"}).err)
	require.Len(t, r.fake.CallsTo("AssumeRole"), 2, "refreshed once inside the expiry window")
	for _, c := range ssmCalls(r.fake) {
		assert.Empty(t, c.ErrorCode, "%s: an expired session was used", c.Operation)
	}
}

func TestUnknownKeysAndBadSignaturesAreRefused(t *testing.T) {
	t.Parallel()
	fake := awsfake.New(t)
	fake.AddInstance(instanceID)
	for name, creds := range map[string]credentials.StaticCredentialsProvider{
		"wrong secret": credentials.NewStaticCredentialsProvider(awsfake.GatewayAccessKeyID, "not-the-secret", ""),
		"unknown key":  credentials.NewStaticCredentialsProvider("AKIAUNKNOWN000000000", "whatever", ""),
	} {
		cfg := fake.Config(creds)
		cfg.Retryer = fastRetries
		p, err := ec2ssm.New(context.Background(), ec2ssm.Options{Config: ec2ssm.Config{Region: fake.Region, EndpointURL: fake.URL},
			AttachTo: instanceID, AWSConfig: &cfg, Logger: slog.New(slog.DiscardHandler)})
		require.NoError(t, err)
		_, err = p.Attach(t.Context(), instanceID, agent, pol)
		require.Error(t, err, name)
	}
	var codes []string
	for _, c := range fake.Calls() {
		codes = append(codes, c.ErrorCode)
	}
	assert.Contains(t, codes, "InvalidSignatureException")
	assert.Contains(t, codes, "UnrecognizedClientException")
	assert.NotContains(t, codes, "", "no request with bad credentials succeeded")
}
