package daytona

import (
	_ "embed"
	"strings"
	"time"

	"github.com/sandgate/sandgate/internal/providers"
)

// Block is a daytona profile's block (`daytona:`) as the configuration file writes it. Its
// comments are the keys' descriptions in config.schema.json.
type Block struct {
	APIKeyEnv string `koanf:"api_key_env" json:"api_key_env"` // environment variable holding the API key; default DAYTONA_API_KEY (missing: the gateway does not start)
	Target    string `koanf:"target" json:"target"`           // region to create sandboxes in (us, eu); default the organization's
	// Image builds sandboxes from this image; exclusive with snapshot. Default: Daytona's
	// default snapshot, or python:3.12-slim when the policy sets cpu or memory_mb (Daytona
	// sizes only sandboxes built from an image).
	Image    string            `koanf:"image" json:"image"`
	Snapshot string            `koanf:"snapshot" json:"snapshot"`               // a Daytona snapshot; exclusive with image and with policy cpu/memory_mb
	EnvVars  map[string]string `koanf:"env_vars" json:"env_vars" secret:"true"` // set in every sandbox; values redacted when printed
	APIURL   string            `koanf:"api_url" json:"api_url"`                 // default https://app.daytona.io/api
	// CreateTimeout bounds creating (building, starting) a sandbox, in seconds; default 300.
	CreateTimeout float64 `koanf:"create_timeout" json:"create_timeout"`
}

//go:embed block.go
var blockSource []byte

// Backend is the daytona provider type for a providers.Registry: its factory and its block.
func Backend() providers.Backend {
	return providers.Backend{
		Type: TypeName, Factory: Factory,
		NewBlock:    func() providers.Block { return new(Block) },
		Provisions:  true,
		Summary:     "Daytona runs sandboxes on Daytona (its cloud or a self-hosted deployment).",
		SchemaName:  "Daytona",
		BlockSource: blockSource,
	}
}

// ApplyDefaults sets api_key_env, api_url and create_timeout when unset.
func (b *Block) ApplyDefaults() {
	if b.APIKeyEnv == "" {
		b.APIKeyEnv = DefaultAPIKeyEnv
	}
	if b.APIURL == "" {
		b.APIURL = DefaultAPIURL
	}
	if b.CreateTimeout == 0 {
		b.CreateTimeout = DefaultCreateTimeout.Seconds()
	}
}

// Validate refuses image with snapshot, a snapshot with policy cpu or memory_mb (Daytona sizes
// only sandboxes built from an image; docs/semantics.md §12, daytona), a negative
// create_timeout and an api_url that is not http(s).
func (b *Block) Validate(p providers.Profile) []providers.Problem {
	var ps providers.Problems
	const key = TypeName
	if b.Image != "" && b.Snapshot != "" {
		ps.Add(key, "image and snapshot are mutually exclusive; set one of them")
	}
	if b.Snapshot != "" && (p.Policy.CPU != 0 || p.Policy.MemoryMB != 0) {
		ps.Add(key+".snapshot", "the policy sets cpu or memory_mb, which Daytona applies only to sandboxes built from an image; remove the snapshot (the image defaults to python:3.12-slim) or the resources")
	}
	if b.CreateTimeout < 0 {
		ps.Add(key+".create_timeout", "must not be negative (got %g)", b.CreateTimeout)
	}
	if b.APIURL != "" && !strings.HasPrefix(b.APIURL, "https://") && !strings.HasPrefix(b.APIURL, "http://") {
		ps.Add(key+".api_url", "must be an http(s) URL (got %q)", b.APIURL)
	}
	return ps
}

// Options returns the Options New is built from: daytona only provisions (validation refuses
// attached profiles); the profile's name, policy and idle timeout are the factory's.
func (b *Block) Options(providers.Profile) any {
	return Options{Config: Config{
		APIKeyEnv: b.APIKeyEnv, APIURL: b.APIURL, Target: b.Target,
		Image: b.Image, Snapshot: b.Snapshot, EnvVars: b.EnvVars,
		CreateTimeout: time.Duration(b.CreateTimeout * float64(time.Second)),
	}}
}
