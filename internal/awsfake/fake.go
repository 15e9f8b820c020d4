// Package awsfake is a local stand-in for the AWS services Sandgate calls: STS (query
// protocol: form-encoded POSTs, XML answers), SSM (JSON 1.1, X-Amz-Target
// AmazonSSM.<Operation>) and S3 (REST-XML, path-style) for the ec2_ssm provider, and SQS
// (JSON 1.0, X-Amz-Target AmazonSQS.<Operation>) for the queue broker's sqs transport, all
// served by one httptest server so that the real aws-sdk-go-v2 clients can be pointed at it
// through their BaseEndpoint.
//
// It implements only the operations Sandgate uses, in the wire shapes of the real services:
// STS AssumeRole and AssumeRoleWithWebIdentity; SSM DescribeInstanceInformation, SendCommand
// (document AWS-RunShellScript), GetCommandInvocation and CancelCommand; S3 ListObjectsV2 and
// GetObject; SQS CreateQueue, GetQueueUrl, DeleteQueue, GetQueueAttributes, SendMessage,
// ReceiveMessage, DeleteMessage and ChangeMessageVisibility.
//
// SQS queues behave as documented for standard and FIFO queues: FIFO deduplication by
// MessageDeduplicationId (or the body's SHA-256 with ContentBasedDeduplication) over five
// minutes; message groups handed out in order, none of a group while one of its messages is
// in flight; receive counts (ApproximateReceiveCount), visibility timeouts, long polling;
// MaximumMessageSize over the body and message attributes; MD5OfMessageBody and
// MD5OfMessageAttributes; only a message's latest receipt handle is valid; and a RedrivePolicy
// that moves a message received maxReceiveCount times to its dead-letter queue on the next
// receive, keeping its attributes and receive count.
//
// Identity is checked, not assumed: every signed request's SigV4 Authorization header is
// parsed (Credential=<access key>/<date>/<region>/<service>/aws4_request), its signature
// recomputed with the secret key the fake issued or was configured with, and its
// X-Amz-Security-Token compared with the session's; unknown keys, wrong tokens, bad
// signatures and expired sessions are refused like AWS refuses them. Every call is recorded
// (Calls) with the identity that made it, so tests can prove whose credentials signed what.
//
// The managed instance is played by the fake too: a command sent with AWS-RunShellScript runs
// on the test's own machine, as the test's own user, with /bin/sh in a temporary folder that
// stands for the instance (Instance.Dir), in its own process group, with stdout and stderr
// going to files the way the SSM agent captures them. Exit codes, output, timeouts and
// cancellation (the process group is killed) are therefore real; the instance's OS, users and
// sudo are not (a `sudo` stand-in on PATH accepts exactly `sudo -n -u <user> sh -c
// <program>`, clears the environment like sudo and exports SANDGATE_FAKE_SUDO_USER=<user>).
// GetCommandInvocation returns at most 24,000 characters of stdout and 8,000 of stderr, and
// only for finished (Success or Failed) invocations, as documented by AWS; with an output
// bucket the full streams are stored in the fake S3 under
// <prefix>/<command id>/<instance id>/awsrunShellScript/0.awsrunshellscript/{stdout,stderr}.
package awsfake

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
	"github.com/aws/aws-sdk-go-v2/credentials"
)

// Defaults of a new Server.
const (
	DefaultRegion  = "us-east-1"
	DefaultAccount = "123456789012"
	// GatewayAccessKeyID is the access key of the gateway's own (static) credentials.
	GatewayAccessKeyID = "AKIAGATEWAYEXAMPLE01"
)

// Identity is one set of credentials the fake knows: the gateway's static key, or a session
// it issued through STS.
type Identity struct {
	AccessKeyID     string
	SecretAccessKey string
	SessionToken    string // "" for the static gateway key
	// Kind is "gateway", "assumed-role" (AssumeRole) or "web-identity"
	// (AssumeRoleWithWebIdentity).
	Kind            string
	RoleARN         string
	RoleSessionName string
	SourceIdentity  string
	// WebIdentitySubject is the token's subject, for web-identity sessions.
	WebIdentitySubject string
	Expires            time.Time // zero: never
	// IssuedBy is the access key that called AssumeRole ("" for web identity and the gateway).
	IssuedBy string
}

// Call is one recorded request.
type Call struct {
	Service   string // "sts", "ssm" or "s3"
	Operation string // e.g. "AssumeRole", "SendCommand", "GetObject"
	// Signed says the request carried a SigV4 Authorization header.
	Signed bool
	// AccessKeyID is the access key of the Authorization header's Credential field.
	AccessKeyID string
	// SessionToken is the X-Amz-Security-Token header.
	SessionToken string
	// Identity is a copy of the identity that signed the request, nil when unsigned or
	// refused.
	Identity *Identity
	// Form holds the STS form parameters and the S3 query.
	Form url.Values
	// Input is the SSM request body.
	Input map[string]any
	// ErrorCode is the AWS error code returned, "" on success.
	ErrorCode string
}

// Server is the fake. Build it with New.
type Server struct {
	URL     string
	Region  string
	Account string

	ts      *httptest.Server
	scripts string // folder holding the commands' scripts and captured streams
	sudoDir string // folder holding the sudo stand-in

	mu                 sync.Mutex
	keys               map[string]*Identity
	instances          map[string]*Instance
	commands           map[string]*command
	calls              []Call
	throttle           map[string]int
	hideInvocation     int
	leadStatuses       []string
	credentialLifetime time.Duration
	deniedRoles        map[string]bool
	webTokens          map[string]string
	buckets            map[string]map[string][]byte
	queues             map[string]*sqsQueue
	noUpload           bool
	wg                 sync.WaitGroup
	closed             bool
}

// New starts a fake whose clean-up (at the end of t) stops the server and kills every
// process its instances still run.
func New(t testing.TB) *Server {
	t.Helper()
	s := &Server{
		Region:      DefaultRegion,
		Account:     DefaultAccount,
		scripts:     t.TempDir(),
		sudoDir:     t.TempDir(),
		keys:        make(map[string]*Identity),
		instances:   make(map[string]*Instance),
		commands:    make(map[string]*command),
		throttle:    make(map[string]int),
		deniedRoles: make(map[string]bool),
		webTokens:   make(map[string]string),
		buckets:     make(map[string]map[string][]byte),
		queues:      make(map[string]*sqsQueue),
	}
	s.keys[GatewayAccessKeyID] = &Identity{AccessKeyID: GatewayAccessKeyID, SecretAccessKey: randomHex(20), Kind: "gateway"}
	if err := os.WriteFile(filepath.Join(s.sudoDir, "sudo"), []byte(sudoShim), 0o755); err != nil {
		t.Fatalf("awsfake: writing the sudo stand-in: %v", err)
	}
	s.ts = httptest.NewServer(http.HandlerFunc(s.serve))
	s.URL = s.ts.URL
	t.Cleanup(s.Close)
	return s
}

// sudoShim stands in for sudo on the fake instance.
const sudoShim = `#!/bin/sh
# awsfake's stand-in for sudo: only "sudo -n -u <user> sh -c <program>" is accepted.
if [ "$#" -ne 6 ] || [ "$1" != -n ] || [ "$2" != -u ] || [ -z "$3" ] || [ "$4" != sh ] || [ "$5" != -c ]; then
	echo "sudo (awsfake): unexpected arguments: $*" >&2
	exit 1
fi
exec env -i PATH="$PATH" HOME="$HOME" LANG=C.UTF-8 SANDGATE_FAKE_SUDO_USER="$3" /bin/sh -c "$6"
`

// Close stops the server and kills the process groups of all commands. It is idempotent.
func (s *Server) Close() {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return
	}
	s.closed = true
	for _, c := range s.commands {
		if c.pgid > 0 {
			_ = syscall.Kill(-c.pgid, syscall.SIGKILL)
		}
	}
	s.mu.Unlock()
	s.ts.Close()
	s.wg.Wait()
}

// GatewayCredentials returns the gateway's static credentials.
func (s *Server) GatewayCredentials() aws.CredentialsProvider {
	s.mu.Lock()
	defer s.mu.Unlock()
	g := s.keys[GatewayAccessKeyID]
	return credentials.NewStaticCredentialsProvider(g.AccessKeyID, g.SecretAccessKey, "")
}

// GatewaySecret returns the secret key of the gateway's static credentials.
func (s *Server) GatewaySecret() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.keys[GatewayAccessKeyID].SecretAccessKey
}

// Config returns an AWS configuration for the fake's region signing with creds.
func (s *Server) Config(creds aws.CredentialsProvider) aws.Config {
	return aws.Config{Region: s.Region, Credentials: creds}
}

// DenyRole makes AssumeRole and AssumeRoleWithWebIdentity of roleARN fail with AccessDenied.
func (s *Server) DenyRole(roleARN string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.deniedRoles[roleARN] = true
}

// TrustWebIdentityToken makes AssumeRoleWithWebIdentity accept token as subject's; any
// other token is InvalidIdentityToken.
func (s *Server) TrustWebIdentityToken(token, subject string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.webTokens[token] = subject
}

// Throttle makes the next n calls of operation (e.g. "SendCommand") fail with
// ThrottlingException (SSM) or Throttling (STS).
func (s *Server) Throttle(operation string, n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.throttle[operation] += n
}

// HideInvocations makes the first n GetCommandInvocation calls of every command sent from now
// on answer InvocationDoesNotExist, as SSM does right after SendCommand.
func (s *Server) HideInvocations(n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.hideInvocation = n
}

// LeadStatuses makes GetCommandInvocation report these statuses (e.g. "Pending", "Delayed")
// first, one per call, for every command sent from now on, whatever the command does
// meanwhile.
func (s *Server) LeadStatuses(statuses ...string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.leadStatuses = append([]string(nil), statuses...)
}

// SetCredentialLifetime makes STS issue sessions that expire after d (default: the requested
// DurationSeconds).
func (s *Server) SetCredentialLifetime(d time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.credentialLifetime = d
}

// FailOutputUploads makes the instance fail to write command output to S3 from now on (as
// when its instance profile may not write the bucket); GetCommandInvocation is unchanged.
func (s *Server) FailOutputUploads() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.noUpload = true
}

// Calls returns the calls recorded so far, oldest first.
func (s *Server) Calls() []Call {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Call(nil), s.calls...)
}

// CallsTo returns the recorded calls of operation, oldest first.
func (s *Server) CallsTo(operation string) []Call {
	var out []Call
	for _, c := range s.Calls() {
		if c.Operation == operation {
			out = append(out, c)
		}
	}
	return out
}

// Object returns the content of an S3 object.
func (s *Server) Object(bucket, key string) ([]byte, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	b, ok := s.buckets[bucket][key]
	return b, ok
}

// PutObject stores an S3 object (a bucket is created on first use).
func (s *Server) PutObject(bucket, key string, data []byte) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.buckets[bucket] == nil {
		s.buckets[bucket] = make(map[string][]byte)
	}
	s.buckets[bucket][key] = bytes.Clone(data)
}

// serve routes a request: SSM and SQS by their X-Amz-Target, STS by its form Action, S3
// otherwise.
func (s *Server) serve(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	switch {
	case strings.HasPrefix(r.Header.Get("X-Amz-Target"), "AmazonSSM."):
		s.serveSSM(w, r, body)
	case strings.HasPrefix(r.Header.Get("X-Amz-Target"), "AmazonSQS."):
		s.serveSQS(w, r, body)
	case r.Method == http.MethodPost && strings.HasPrefix(r.Header.Get("Content-Type"), "application/x-www-form-urlencoded"):
		s.serveSTS(w, r, body)
	default:
		s.serveS3(w, r, body)
	}
}

// authError is a refused signature or identity, with the code each service uses.
type authError struct {
	sts, ssm, s3 string
	msg          string
}

var (
	errUnknownKey   = &authError{"InvalidClientTokenId", "UnrecognizedClientException", "InvalidAccessKeyId", "The security token included in the request is invalid."}
	errBadToken     = &authError{"InvalidClientTokenId", "UnrecognizedClientException", "InvalidToken", "The security token included in the request is invalid."}
	errExpired      = &authError{"ExpiredToken", "ExpiredTokenException", "ExpiredToken", "The security token included in the request is expired"}
	errBadSignature = &authError{"SignatureDoesNotMatch", "InvalidSignatureException", "SignatureDoesNotMatch", "The request signature we calculated does not match the signature you provided."}
	errMalformed    = &authError{"IncompleteSignature", "IncompleteSignatureException", "AuthorizationHeaderMalformed", "The Authorization header is malformed."}
)

// authenticate checks the request's SigV4 signature. It returns signed=false for a request
// without an Authorization header; otherwise the identity that signed it, or why it was
// refused.
func (s *Server) authenticate(r *http.Request, body []byte, service string) (call Call, id *Identity, aerr *authError) {
	call.SessionToken = r.Header.Get("X-Amz-Security-Token")
	auth := r.Header.Get("Authorization")
	if auth == "" {
		return call, nil, nil
	}
	call.Signed = true
	rest, ok := strings.CutPrefix(auth, "AWS4-HMAC-SHA256 ")
	if !ok {
		return call, nil, errMalformed
	}
	var cred, signedHeaders, signature string
	for _, part := range strings.Split(rest, ",") {
		k, v, _ := strings.Cut(strings.TrimSpace(part), "=")
		switch k {
		case "Credential":
			cred = v
		case "SignedHeaders":
			signedHeaders = v
		case "Signature":
			signature = v
		}
	}
	scope := strings.Split(cred, "/")
	if len(scope) != 5 || scope[4] != "aws4_request" || signedHeaders == "" || signature == "" {
		return call, nil, errMalformed
	}
	call.AccessKeyID = scope[0]
	if scope[2] != s.Region || scope[3] != service {
		return call, nil, errMalformed
	}
	s.mu.Lock()
	known, ok := s.keys[call.AccessKeyID]
	var ident Identity
	if ok {
		ident = *known
	}
	s.mu.Unlock()
	if !ok {
		return call, nil, errUnknownKey
	}
	if ident.SessionToken != call.SessionToken {
		return call, nil, errBadToken
	}
	signingTime, err := time.Parse("20060102T150405Z", r.Header.Get("X-Amz-Date"))
	if err != nil {
		return call, nil, errMalformed
	}
	if !ident.Expires.IsZero() && time.Now().After(ident.Expires) {
		return call, nil, errExpired
	}

	// Recompute the signature over exactly the signed headers.
	clone, err := http.NewRequest(r.Method, "http://"+r.Host+r.URL.RequestURI(), bytes.NewReader(body))
	if err != nil {
		return call, nil, errMalformed
	}
	clone.Host = r.Host
	for _, h := range strings.Split(signedHeaders, ";") {
		if h == "host" || h == "content-length" {
			continue
		}
		clone.Header[http.CanonicalHeaderKey(h)] = r.Header.Values(h)
	}
	payloadHash := r.Header.Get("X-Amz-Content-Sha256")
	if payloadHash == "" {
		sum := sha256.Sum256(body)
		payloadHash = hex.EncodeToString(sum[:])
	}
	signer := v4.NewSigner(func(o *v4.SignerOptions) { o.DisableURIPathEscaping = service == "s3" })
	creds := aws.Credentials{AccessKeyID: ident.AccessKeyID, SecretAccessKey: ident.SecretAccessKey, SessionToken: ident.SessionToken}
	if err := signer.SignHTTP(context.Background(), creds, clone, payloadHash, service, s.Region, signingTime); err != nil {
		return call, nil, errMalformed
	}
	if got := clone.Header.Get("Authorization"); !strings.HasSuffix(got, "Signature="+signature) {
		return call, nil, errBadSignature
	}
	call.Identity = &ident
	return call, &ident, nil
}

// record appends a call.
func (s *Server) record(c Call) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls = append(s.calls, c)
}

// throttled consumes one pending throttle of operation.
func (s *Server) throttled(operation string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.throttle[operation] > 0 {
		s.throttle[operation]--
		return true
	}
	return false
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

func requestID() string {
	b := randomHex(16)
	return fmt.Sprintf("%s-%s-%s-%s-%s", b[:8], b[8:12], b[12:16], b[16:20], b[20:32])
}
