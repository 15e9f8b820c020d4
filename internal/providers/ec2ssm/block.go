package ec2ssm

import (
	_ "embed"
	"net/url"

	"github.com/sandgate/sandgate/internal/providers"
)

// Block is an ec2_ssm profile's block (`ec2_ssm:`) as the configuration file writes it. Its
// comments are the keys' descriptions in config.schema.json.
type Block struct {
	// Region is the AWS region of the instance; default the region of the gateway's AWS
	// configuration (AWS_REGION, the shared config file).
	Region   string `koanf:"region" json:"region"`
	AttachTo string `koanf:"attach_to" json:"attach_to"` // instance id
	// EndpointURL replaces the AWS endpoints of SSM, STS and S3 (VPC endpoints, LocalStack,
	// tests); default the public endpoints of Region.
	EndpointURL string `koanf:"endpoint_url" json:"endpoint_url"`
	// WebIdentity (identity.mode user only) assumes the caller's role with
	// AssumeRoleWithWebIdentity and the caller's own OIDC token, so the gateway needs no AWS
	// credentials of its own; default false (AssumeRole with the gateway's credentials).
	WebIdentity bool `koanf:"web_identity" json:"web_identity"`
	// OutputS3Bucket, when set, makes SSM also write each command's full output to this
	// bucket; the provider reads it back when the inline output (24,000 characters of
	// stdout, 8,000 of stderr) was cut.
	OutputS3Bucket string `koanf:"output_s3_bucket" json:"output_s3_bucket"`
	// OutputS3Prefix is the key prefix of that output (requires OutputS3Bucket).
	OutputS3Prefix string `koanf:"output_s3_prefix" json:"output_s3_prefix"`
	// Python is the interpreter on the instance for language "python"; default "python3".
	Python string `koanf:"python" json:"python"`
}

//go:embed block.go
var blockSource []byte

// Backend is the ec2_ssm provider type for a providers.Registry: its factory and its block. It
// only attaches (to a registered instance).
func Backend() providers.Backend {
	return providers.Backend{
		Type: TypeName, Factory: Factory,
		NewBlock:     func() providers.Block { return new(Block) },
		Attaches:     true,
		AttachTarget: "an EC2 instance id",
		Summary:      "EC2SSM runs commands on a registered EC2 instance through AWS Systems Manager (attach-only).",
		SchemaName:   "EC2SSM",
		BlockSource:  blockSource,
	}
}

// ApplyDefaults sets python when unset.
func (b *Block) ApplyDefaults() {
	if b.Python == "" {
		b.Python = DefaultPython
	}
}

// AttachTarget is attach_to.
func (b *Block) AttachTarget() string { return b.AttachTo }

// Validate checks the endpoint URL, the keys that need others (web_identity needs
// identity.mode user, output_s3_prefix needs output_s3_bucket), and refuses stateful: commands
// run through SSM keep no interpreter between executions.
func (b *Block) Validate(p providers.Profile) []providers.Problem {
	var ps providers.Problems
	if p.Stateful {
		ps.Add("stateful", "provider %s keeps no interpreter state between executions; stateful needs local_subprocess, docker, kubernetes (sandboxd keeps contexts), daytona, or e2b with a code-interpreter template", TypeName)
	}
	const key = TypeName
	if b.EndpointURL != "" {
		u, err := url.Parse(b.EndpointURL)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			ps.Add(key+".endpoint_url", "must be an http:// or https:// URL (got %q)", b.EndpointURL)
		}
	}
	if b.WebIdentity && !p.UserIdentity {
		ps.Add(key+".web_identity", "needs identity.mode: user: the role is assumed with the caller's own token, which agent mode does not use")
	}
	if b.OutputS3Prefix != "" && b.OutputS3Bucket == "" {
		ps.Add(key+".output_s3_prefix", "is set without output_s3_bucket; set the bucket too, or remove the prefix")
	}
	return ps
}

// Options returns the Options New is built from. ec2_ssm only attaches, so its target is
// taken whatever the environment (validation requires attached). Logger is the factory's.
func (b *Block) Options(p providers.Profile) any {
	return Options{
		Config: Config{
			Region: b.Region, EndpointURL: b.EndpointURL, WebIdentity: b.WebIdentity,
			OutputS3Bucket: b.OutputS3Bucket, OutputS3Prefix: b.OutputS3Prefix, Python: b.Python,
		},
		AttachTo: p.AttachTo,
		UserMode: p.UserIdentity,
	}
}
