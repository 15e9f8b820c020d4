package e2b

import (
	_ "embed"
	"net/url"
	"path"
	"strings"

	"github.com/sandgate/sandgate/internal/providers"
	"github.com/sandgate/sandgate/internal/wspath"
)

// Block is an e2b profile's block (`e2b:`) as the configuration file writes it. Its comments
// are the keys' descriptions in config.schema.json.
type Block struct {
	// APIKeyEnv names the environment variable holding the team's API key; default
	// E2B_API_KEY. A missing or empty variable stops start-up.
	APIKeyEnv string `koanf:"api_key_env" json:"api_key_env"`
	// Template is the template sandboxes are created from; default base. Stateful profiles need
	// a template that runs E2B's code interpreter (code-interpreter-v1 or one built on it).
	Template string `koanf:"template" json:"template"`
	// Domain is E2B's domain; default e2b.app (self-hosted E2B: yours).
	Domain string `koanf:"domain" json:"domain"`
	// APIURL is the control plane's base URL; default https://api.<domain>.
	APIURL string `koanf:"api_url" json:"api_url"`
	// SandboxURL is one base URL for every sandbox's envd and code interpreter, a proxy that
	// routes by the E2b-Sandbox-Id and E2b-Sandbox-Port headers (like the SDKs'
	// E2B_SANDBOX_URL); default https://<port>-<sandbox id>.<domain>.
	SandboxURL string `koanf:"sandbox_url" json:"sandbox_url"`
	// Workdir is the sandbox folder that is the workspace; default /home/user.
	Workdir string `koanf:"workdir" json:"workdir"`
	// CodeInterpreter says the template runs E2B's code interpreter (stateful code
	// contexts); default true for templates whose name starts with code-interpreter.
	CodeInterpreter *bool `koanf:"code_interpreter" json:"code_interpreter,omitempty"`
	// EnvVars are set in every sandbox when it is created (values redacted when printed).
	EnvVars map[string]string `koanf:"env_vars" json:"env_vars" secret:"true"`
	// Python is the interpreter of python code run outside a context; default python3.
	Python string `koanf:"python" json:"python"`
}

//go:embed block.go
var blockSource []byte

// Backend is the e2b provider type for a providers.Registry: its factory and its block.
func Backend() providers.Backend {
	return providers.Backend{
		Type: TypeName, Factory: Factory,
		NewBlock:    func() providers.Block { return new(Block) },
		Provisions:  true,
		Summary:     "E2B runs each sandbox as an E2B micro-VM (e2b.dev, or a self-hosted E2B).",
		SchemaName:  "E2B",
		BlockSource: blockSource,
	}
}

// ApplyDefaults sets api_key_env, template, domain, workdir and python when unset, and
// code_interpreter to whether the template's name starts with code-interpreter.
func (b *Block) ApplyDefaults() {
	setDefault(&b.APIKeyEnv, DefaultAPIKeyEnv)
	setDefault(&b.Template, DefaultTemplate)
	setDefault(&b.Domain, DefaultDomain)
	setDefault(&b.Workdir, DefaultWorkdir)
	setDefault(&b.Python, DefaultPython)
	if b.CodeInterpreter == nil {
		ci := b.runsCodeInterpreter()
		b.CodeInterpreter = &ci
	}
}

// runsCodeInterpreter is code_interpreter, or its default: whether the template's name starts
// with code-interpreter.
func (b *Block) runsCodeInterpreter() bool {
	if b.CodeInterpreter != nil {
		return *b.CodeInterpreter
	}
	return strings.HasPrefix(b.Template, "code-interpreter")
}

// Validate refuses stateful without the code interpreter, URLs that are not absolute
// http(s), a workspace that is not an absolute folder other than /, and an api_key_env that
// is not a variable name.
func (b *Block) Validate(p providers.Profile) []providers.Problem {
	var ps providers.Problems
	if p.Stateful && !b.runsCodeInterpreter() {
		ps.Add("stateful", "an e2b profile keeps code state only in E2B's code interpreter: use a code-interpreter template (e2b.template, e.g. code-interpreter-v1) and e2b.code_interpreter: true, or remove stateful")
	}
	const key = TypeName
	for _, u := range []struct{ name, value string }{{"api_url", b.APIURL}, {"sandbox_url", b.SandboxURL}} {
		if u.value == "" {
			continue
		}
		if pu, err := url.Parse(u.value); err != nil || (pu.Scheme != "http" && pu.Scheme != "https") || pu.Host == "" {
			ps.Add(key+"."+u.name, "must be an absolute http or https URL (got %q)", u.value)
		}
	}
	if b.Workdir != "" && (!strings.HasPrefix(b.Workdir, "/") || path.Clean(b.Workdir) == "/") {
		ps.Add(key+".workdir", "must be an absolute folder other than / (got %q)", b.Workdir)
	}
	if b.APIKeyEnv != "" && !wspath.ValidEnvName(b.APIKeyEnv) {
		ps.Add(key+".api_key_env", "must be the name of an environment variable (got %q)", b.APIKeyEnv)
	}
	return ps
}

// Options returns the Options New is built from (Profile, Installation, IdleTimeout and
// Logger are the factory's).
func (b *Block) Options(providers.Profile) any {
	return Options{Config: Config{
		APIKeyEnv: b.APIKeyEnv, Template: b.Template, Domain: b.Domain, APIURL: b.APIURL,
		SandboxURL: b.SandboxURL, Workdir: b.Workdir, EnvVars: b.EnvVars, Python: b.Python,
		CodeInterpreter: b.runsCodeInterpreter(),
	}}
}
