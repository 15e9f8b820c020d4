package ec2ssm

import (
	"errors"
	"strings"
	"sync"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials/stscreds"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/ssm"
	"github.com/aws/aws-sdk-go-v2/service/sts"

	"github.com/sandgate/sandgate/internal/fault"
	"github.com/sandgate/sandgate/internal/providers"
)

// maxCachedIdentities bounds the cache of user-mode clients; it is emptied when full.
const maxCachedIdentities = 1024

// sessionPrefix starts every role session name.
const sessionPrefix = "sandgate-"

// clients are the AWS clients of one identity.
type clients struct {
	ssm *ssm.Client
	s3  *s3.Client // nil unless output_s3_bucket is set
	// who names the identity in messages ("the gateway" or "alice as arn:…").
	who string
	// token holds the caller's latest OIDC token (web identity only).
	token *tokenHolder
}

// clientsFor returns the clients to act for pr with: the gateway's own in agent mode,
// assumed-role ones in user mode (cached per subject and role). A user-mode principal without
// a role ARN, or (web identity) without its token, is a fault.Policy error; no AWS call is
// made then.
func (p *Provider) clientsFor(pr providers.Principal) (*clients, error) {
	if pr.Mode != providers.ModeUser {
		p.agentOnce.Do(func() {
			p.agent = p.newClients(p.aws.Credentials, "the gateway", nil)
		})
		return p.agent, nil
	}
	role := strings.TrimSpace(pr.Credentials.RoleARN)
	if role == "" {
		return nil, fault.New(fault.Policy, "ec2_ssm user mode requires a role ARN on the principal (credentials.aws_role_arn from the issuer's claim mappings or group_roles); none is mapped for '%s'", pr.Subject)
	}
	if !strings.HasPrefix(role, "arn:") {
		return nil, fault.New(fault.Policy, "ec2_ssm: the principal's role %q is not an ARN", role)
	}
	if strings.TrimSpace(pr.Subject) == "" {
		return nil, fault.New(fault.Policy, "ec2_ssm user mode needs the principal's subject, and it is empty")
	}
	web := p.cfg.WebIdentity
	if web && pr.Credentials.WebIdentityToken == "" {
		return nil, fault.New(fault.Policy, "ec2_ssm web_identity needs the caller's own OIDC token, and this execution does not carry it (queued executions and requests made with an API key never do); send your OIDC token, or use web_identity: false or a broker flavor other than queue")
	}
	key := pr.Subject + "\x00" + role
	p.mu.Lock()
	defer p.mu.Unlock()
	c, ok := p.users[key]
	if !ok {
		c = p.newUserClients(pr.Subject, role, web)
		if len(p.users) >= maxCachedIdentities {
			clear(p.users)
		}
		p.users[key] = c
	}
	if web {
		c.token.set(pr.Credentials.WebIdentityToken)
	}
	return c, nil
}

// newUserClients builds the clients of subject acting as role: credentials from STS
// (AssumeRole signed by the gateway, or AssumeRoleWithWebIdentity with the caller's token and
// no gateway credentials), cached and refreshed before they expire.
func (p *Provider) newUserClients(subject, role string, web bool) *clients {
	sessionName := RoleSessionName(subject)
	var (
		provider aws.CredentialsProvider
		token    *tokenHolder
	)
	if web {
		token = &tokenHolder{}
		stsClient := sts.NewFromConfig(p.aws, func(o *sts.Options) {
			o.Credentials = aws.AnonymousCredentials{} // no gateway identity at all
			p.endpoint(&o.BaseEndpoint)
		})
		provider = stscreds.NewWebIdentityRoleProvider(stsClient, role, token, func(o *stscreds.WebIdentityRoleOptions) {
			o.RoleSessionName = sessionName
		})
	} else {
		stsClient := sts.NewFromConfig(p.aws, func(o *sts.Options) { p.endpoint(&o.BaseEndpoint) })
		provider = stscreds.NewAssumeRoleProvider(stsClient, role, func(o *stscreds.AssumeRoleOptions) {
			o.RoleSessionName = sessionName
			o.SourceIdentity = aws.String(SourceIdentity(subject))
		})
	}
	cache := aws.NewCredentialsCache(provider, func(o *aws.CredentialsCacheOptions) {
		o.ExpiryWindow = p.expiryWindow()
	})
	return p.newClients(cache, subject+" as "+role, token)
}

// newClients builds the SSM (and S3) clients signing with creds.
func (p *Provider) newClients(creds aws.CredentialsProvider, who string, token *tokenHolder) *clients {
	c := &clients{who: who, token: token}
	c.ssm = ssm.NewFromConfig(p.aws, func(o *ssm.Options) {
		o.Credentials = creds
		p.endpoint(&o.BaseEndpoint)
	})
	if p.cfg.OutputS3Bucket != "" {
		c.s3 = s3.NewFromConfig(p.aws, func(o *s3.Options) {
			o.Credentials = creds
			if p.cfg.EndpointURL != "" {
				o.BaseEndpoint = aws.String(p.cfg.EndpointURL)
				o.UsePathStyle = true
			}
		})
	}
	return c
}

// endpoint applies endpoint_url.
func (p *Provider) endpoint(base **string) {
	if p.cfg.EndpointURL != "" {
		*base = aws.String(p.cfg.EndpointURL)
	}
}

// tokenHolder hands the caller's latest OIDC token to the web identity provider. The token
// stays in memory only.
type tokenHolder struct {
	mu  sync.Mutex
	tok string
}

func (h *tokenHolder) set(tok string) {
	h.mu.Lock()
	h.tok = tok
	h.mu.Unlock()
}

// GetIdentityToken implements stscreds.IdentityTokenRetriever.
func (h *tokenHolder) GetIdentityToken() ([]byte, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.tok == "" {
		return nil, errors.New("no OIDC token of the caller is available")
	}
	return []byte(h.tok), nil
}

// RoleSessionName is the STS role session name for subject: "sandgate-<subject>" with every
// character outside [A-Za-z0-9_+=,.@-] replaced by "_", cut to 64 characters, and "sandgate"
// should that be shorter than 2 (seed: "ak-sandbox-" + subject).
func RoleSessionName(subject string) string {
	return sanitizeSTS(sessionPrefix+subject, "sandgate")
}

// SourceIdentity is the STS source identity for subject: subject sanitised like
// RoleSessionName, or "sandgate-<subject>" should it be shorter than 2 characters. Since ':'
// is replaced, it can never start with the reserved "aws:".
func SourceIdentity(subject string) string {
	return sanitizeSTS(subject, sanitizeSTS(sessionPrefix+subject, "sandgate"))
}

// sanitizeSTS keeps the characters STS allows in session names and source identities
// ([\w+=,.@-]), replacing every other character (each rune) with '_', cuts the result to 64
// characters and returns fallback when it is shorter than 2.
func sanitizeSTS(s, fallback string) string {
	var b strings.Builder
	for _, r := range s {
		if b.Len() == 64 {
			break
		}
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9':
			b.WriteRune(r)
		case strings.ContainsRune("_+=,.@-", r):
			b.WriteRune(r)
		default:
			b.WriteByte('_')
		}
	}
	if b.Len() < 2 {
		return fallback
	}
	return b.String()
}
