package ec2ssm

import (
	"context"
	"log/slog"
	"regexp"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awsconfig "github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/ssm"
	ssmtypes "github.com/aws/aws-sdk-go-v2/service/ssm/types"

	"github.com/sandgate/sandgate/internal/fault"
	"github.com/sandgate/sandgate/internal/providers"
)

// TypeName is the provider's type name in profiles and the registry.
const TypeName = "ec2_ssm"

// Defaults of the Provider's tuning fields.
const (
	DefaultPollInterval = time.Second
	DefaultCancelWait   = 5 * time.Second
	DefaultS3Wait       = 15 * time.Second
	DefaultExpiryWindow = 2 * time.Minute
)

// Inline output limits of GetCommandInvocation (StandardOutputContent, StandardErrorContent).
const (
	StdoutInlineLimit = 24000
	StderrInlineLimit = 8000
)

// instanceID matches EC2 instance ids and the ids of hybrid managed nodes.
var instanceID = regexp.MustCompile(`^m?i-[0-9a-f]{8,17}$`)

// DefaultPython is the default of Config.Python.
const DefaultPython = "python3"

// Config is an ec2_ssm profile's settings (its ec2_ssm block); zero fields take their
// defaults.
type Config struct {
	// Region is the AWS region of the instance; default the region of the gateway's AWS
	// configuration (AWS_REGION, the shared config file).
	Region string
	// EndpointURL replaces the AWS endpoints of SSM, STS and S3 (VPC endpoints, LocalStack,
	// tests); default the public endpoints of Region.
	EndpointURL string
	// WebIdentity (user mode only) assumes the caller's role with AssumeRoleWithWebIdentity
	// and the caller's own OIDC token, so the gateway needs no AWS credentials of its own;
	// default AssumeRole with the gateway's credentials.
	WebIdentity bool
	// OutputS3Bucket, when set, makes SSM also write each command's full output to this
	// bucket; the provider reads it back when the inline output (StdoutInlineLimit,
	// StderrInlineLimit) was cut.
	OutputS3Bucket string
	// OutputS3Prefix is the key prefix of that output (requires OutputS3Bucket).
	OutputS3Prefix string
	// Python is the interpreter on the instance for language "python". Default DefaultPython.
	Python string
}

// Options configure New.
type Options struct {
	// Config is the profile's ec2_ssm settings.
	Config Config
	// AttachTo is the instance id (the block's attach_to, else the profile's
	// params.attach_to). Empty: Create fails with fault.Config.
	AttachTo string
	// UserMode says the profile's identity.mode is user (required by web_identity). Whether
	// a call acts for a user is decided by the principal each call is handed.
	UserMode bool
	// Logger defaults to slog.Default().
	Logger *slog.Logger
	// AWSConfig, when set, is the gateway's AWS configuration instead of
	// config.LoadDefaultConfig (tests, programs embedding the provider). Config.Region, when
	// set, still wins.
	AWSConfig *aws.Config
}

// Provider is the ec2_ssm provider. Build it with New (or Factory); its exported fields may be
// changed before its first use only.
type Provider struct {
	// PollInterval is the pause between two GetCommandInvocation calls. Zero means
	// DefaultPollInterval.
	PollInterval time.Duration
	// CancelWait is how long Exec keeps polling a cancelled command for the output SSM may
	// still report. Zero means DefaultCancelWait.
	CancelWait time.Duration
	// S3Wait is how long Exec waits for the full output to appear in S3 once SSM reported the
	// command finished. Zero means DefaultS3Wait.
	S3Wait time.Duration
	// ExpiryWindow is how long before their expiry assumed-role credentials are refreshed.
	// Zero means DefaultExpiryWindow.
	ExpiryWindow time.Duration

	cfg      Config
	instance string
	aws      aws.Config // the gateway's own configuration
	caps     providers.Capabilities
	logger   *slog.Logger

	agentOnce sync.Once
	agent     *clients

	mu    sync.Mutex
	users map[string]*clients // user-mode clients by identity
}

var _ providers.Provider = (*Provider)(nil)

// Factory builds the provider of a profile whose type is ec2_ssm, for providers.Registry,
// from ctx.Options (an Options; Logger is taken from ctx). A profile without an ec2_ssm block
// is a fault.Config error (docs/semantics.md §6); other errors are New's.
func Factory(ctx providers.BuildContext) (providers.Provider, error) {
	opts, err := providers.OptionsOf[Options](ctx, TypeName)
	if err != nil {
		return nil, err
	}
	opts.Logger = ctx.Logger
	lctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return New(lctx, opts)
}

// New builds the provider. Unless opts.AWSConfig is set, the gateway's AWS configuration is
// loaded with config.LoadDefaultConfig (environment, shared files, container and instance
// roles); credentials are only resolved by the first AWS call, and not at all for user-mode
// web-identity profiles.
//
// Errors: fault.Config when no region is known (neither Config.Region nor the AWS
// configuration), when attach_to is not an instance id ("i-…" or "mi-…"), when web_identity
// is set outside user mode, or when the AWS configuration does not load.
func New(ctx context.Context, opts Options) (*Provider, error) {
	cfg := opts.Config
	logger := opts.Logger
	if logger == nil {
		logger = slog.Default()
	}
	if opts.AttachTo != "" && !instanceID.MatchString(opts.AttachTo) {
		return nil, fault.New(fault.Config, "%s: attach_to '%s' is not an instance id (i-… or mi-…)", TypeName, opts.AttachTo)
	}
	if cfg.WebIdentity && !opts.UserMode {
		return nil, fault.New(fault.Config, "%s: web_identity needs identity.mode: user", TypeName)
	}
	if cfg.OutputS3Prefix != "" && cfg.OutputS3Bucket == "" {
		return nil, fault.New(fault.Config, "%s: output_s3_prefix is set without output_s3_bucket", TypeName)
	}
	var awsCfg aws.Config
	if opts.AWSConfig != nil {
		awsCfg = opts.AWSConfig.Copy()
	} else {
		var lopts []func(*awsconfig.LoadOptions) error
		if cfg.Region != "" {
			lopts = append(lopts, awsconfig.WithRegion(cfg.Region))
		}
		var err error
		if awsCfg, err = awsconfig.LoadDefaultConfig(ctx, lopts...); err != nil {
			return nil, fault.Wrap(fault.Config, err, "%s: loading the AWS configuration", TypeName)
		}
	}
	if cfg.Region != "" {
		awsCfg.Region = cfg.Region
	}
	if awsCfg.Region == "" {
		return nil, fault.New(fault.Config, "%s: no AWS region: set ec2_ssm.region (or AWS_REGION for the gateway)", TypeName)
	}
	if cfg.Python == "" {
		cfg.Python = DefaultPython
	}
	p := &Provider{
		cfg:      cfg,
		instance: opts.AttachTo,
		aws:      awsCfg,
		logger:   logger,
		users:    make(map[string]*clients),
		caps: providers.Capabilities{
			Isolation:        providers.IsolationNone,
			Shell:            true,
			OneShotCommands:  true,
			Languages:        []string{"python"},
			Attach:           true,
			AttachesExternal: true,
			PrincipalUser:    true,
		},
	}
	return p, nil
}

// Type returns "ec2_ssm".
func (p *Provider) Type() string { return TypeName }

// Capabilities reports the provider's capabilities: isolation none; shell; language python; attach; attaches_external;
// principal_user. Not provisions (attach-only), not files, package_install or stateful (each
// execution is a separate process), no policy dimension (docs/semantics.md §12).
func (p *Provider) Capabilities() providers.Capabilities {
	c := p.caps
	c.Languages = append([]string(nil), p.caps.Languages...)
	return c
}

// Instance returns the instance id the provider attaches to ("" when none is configured).
func (p *Provider) Instance() string { return p.instance }

// Create binds to the configured instance (seed AttachedEnvironmentProvider.create): it is
// Attach of attach_to. Errors: fault.Config when no attach_to is configured, else Attach's.
func (p *Provider) Create(ctx context.Context, pr providers.Principal, pol providers.Policy) (providers.Sandbox, error) {
	if err := providers.RefuseSecrets("ec2_ssm", pol); err != nil {
		return nil, err
	}
	if p.instance == "" {
		return nil, fault.New(fault.Config, "%s is attach-only: configure the profile's attach_to with the id of the instance to connect to", TypeName)
	}
	return p.Attach(ctx, p.instance, pr, pol)
}

// Attach checks that instance id is registered with SSM, as pr, and returns a handle whose
// executions run as pr. Errors: ctx.Err(); fault.Gone when id is not the profile's instance,
// is not registered with SSM or SSM calls it invalid; fault.Policy when pr's identity cannot
// be used (no role in user mode, access denied); fault.Provision otherwise.
func (p *Provider) Attach(ctx context.Context, id string, pr providers.Principal, pol providers.Policy) (providers.Sandbox, error) {
	if err := providers.RefuseSecrets("ec2_ssm", pol); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if id == "" || id != p.instance {
		return nil, fault.New(fault.Gone, "%s: instance '%s' is not the instance of this profile", TypeName, id)
	}
	c, err := p.clientsFor(pr)
	if err != nil {
		return nil, err
	}
	out, err := c.ssm.DescribeInstanceInformation(ctx, &ssm.DescribeInstanceInformationInput{
		Filters: []ssmtypes.InstanceInformationStringFilter{{Key: aws.String("InstanceIds"), Values: []string{id}}},
	})
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, classify(err, "%s: checking that instance '%s' is registered with SSM, as %s", TypeName, id, c.who)
	}
	var info *ssmtypes.InstanceInformation
	for i := range out.InstanceInformationList {
		if aws.ToString(out.InstanceInformationList[i].InstanceId) == id {
			info = &out.InstanceInformationList[i]
		}
	}
	if info == nil {
		return nil, fault.New(fault.Gone, "instance '%s' is not registered with SSM", id)
	}
	if info.PingStatus != ssmtypes.PingStatusOnline {
		p.logger.Warn("ec2_ssm: the instance's SSM agent is not online; commands may not be delivered",
			"instance", id, "ping_status", string(info.PingStatus))
	}
	runAs := ""
	if pr.Mode == providers.ModeUser {
		runAs = pr.Credentials.RunAs
		if runAs != "" && !validUser(runAs) {
			return nil, fault.New(fault.Policy, "%s: run_as user %q is not a valid user name", TypeName, runAs)
		}
	}
	return &Sandbox{
		NoFiles:          providers.NoFiles{Subject: TypeName},
		NoPackageInstall: providers.NoPackageInstall{Subject: TypeName},
		p:                p, id: id, c: c, runAs: runAs,
	}, nil
}

// Destroy is a no-op: the instance is never stopped, changed or terminated by the gateway.
func (p *Provider) Destroy(context.Context, string) error { return nil }

// validUser reports whether name is a plausible POSIX user name: it starts with a letter or
// an underscore and continues with letters, digits, '_', '-' or '.', 32 characters at most.
// Such a name needs no quoting and cannot be taken for an option.
func validUser(name string) bool {
	if name == "" || len(name) > 32 {
		return false
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		switch {
		case c == '_', 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z':
		case i > 0 && ('0' <= c && c <= '9' || c == '-' || c == '.'):
		default:
			return false
		}
	}
	return !strings.HasSuffix(name, ".")
}

func (p *Provider) pollInterval() time.Duration {
	if p.PollInterval > 0 {
		return p.PollInterval
	}
	return DefaultPollInterval
}

func (p *Provider) cancelWait() time.Duration {
	if p.CancelWait > 0 {
		return p.CancelWait
	}
	return DefaultCancelWait
}

func (p *Provider) s3Wait() time.Duration {
	if p.S3Wait > 0 {
		return p.S3Wait
	}
	return DefaultS3Wait
}

func (p *Provider) expiryWindow() time.Duration {
	if p.ExpiryWindow > 0 {
		return p.ExpiryWindow
	}
	return DefaultExpiryWindow
}
