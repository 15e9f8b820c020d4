package providers

import (
	"fmt"
	"slices"
	"strings"
)

// Block is a provider type's configuration block as the backend declares it: the `docker:`
// of a profile (or of the single-backend shorthand), decoded into the backend's own block type
// — a struct whose koanf and json tags spell the file's keys and whose doc comments are the
// schema's descriptions (Backend.BlockSource).
//
// The configuration package keeps blocks raw and knows no provider (dex's storages map is the
// model): the composition root (internal/gateway) decodes each block into a new value of the
// type Backend.NewBlock names, strictly (an unknown key is an error), then calls ApplyDefaults,
// Validate and, to build the provider, Options.
type Block interface {
	// ApplyDefaults fills every unset field with its default. It is idempotent.
	ApplyDefaults()
	// Validate reports what is wrong with the block (defaults applied) in profile p: each
	// Problem's Key is the dotted path under the profile ("docker.pull"; "stateful" for a
	// profile key the block rules out), its Msg what is wrong and what to do. None: usable.
	Validate(p Profile) []Problem
	// Options returns the backend's own options for profile p: the value its Factory reads
	// from BuildContext.Options (docker.Options, …). The fields the options share with the
	// BuildContext (the profile's name, policy, logger, …) are left zero.
	Options(p Profile) any
}

// AttachBlock is a Block with its own attach_to key (docker, kubernetes, ec2_ssm).
type AttachBlock interface {
	Block
	// AttachTarget is the block's attach_to: the target an attached profile binds to; ""
	// when unset (params.attach_to may then name it).
	AttachTarget() string
}

// Profile is what a block sees of the profile that holds it: the keys every profile has, as
// the composition root read them (docs/semantics.md §5 profile fields).
type Profile struct {
	// Name is the profile's name.
	Name string
	// Attached: environment attached (the profile binds to an existing target), not managed.
	Attached bool
	// AttachTo is the profile's attach target: the block's attach_to, else params.attach_to;
	// "" when neither is set. Given whatever the environment (validation refuses a target on
	// a managed profile).
	AttachTo string
	// UserIdentity: identity.mode is user (credentials mapped from the caller's token), not
	// agent.
	UserIdentity bool
	// Stateful is the profile's stateful.
	Stateful bool
	// Policy is the profile's policy, converted once by the composition root.
	Policy Policy
	// Queued: sandbox.broker.flavor is queue, so consecutive executions of one session may run
	// in different worker processes.
	Queued bool
}

// Problem is one thing wrong with a provider block or the profile keys it rules out. Key is
// the dotted path under the profile ("docker.pull", "stateful"); the composition root puts
// the profile's own path in front ("sandbox.profiles.web.docker.pull").
type Problem struct {
	Key string
	Msg string
}

func (p Problem) String() string { return p.Key + ": " + p.Msg }

// Problems collects the Problems of a Validate in the order they are found.
type Problems []Problem

// Add records a problem with key; the message is fmt.Sprintf(format, args...).
func (ps *Problems) Add(key, format string, args ...any) {
	*ps = append(*ps, Problem{Key: key, Msg: fmt.Sprintf(format, args...)})
}

// Enum records a problem with key when value is not one of allowed, naming the allowed
// values (the wording of the configuration's other enumerated keys).
func (ps *Problems) Enum(key, value string, allowed []string) {
	if !slices.Contains(allowed, value) {
		ps.Add(key, "%q is not allowed; use one of: %s", value, strings.Join(allowed, ", "))
	}
}

// Backend is one provider type a Registry knows: its factory and its configuration block (the
// entry of dex's storages map). Provider packages export theirs (docker.Backend(), …); the
// composition root adds them to a Registry in the order messages list the types.
type Backend struct {
	// Type is the provider type: the value of a profile's type key, the name of its block and
	// the key of the Registry.
	Type string
	// Factory builds the provider. Nil reserves the type: its block is accepted (decoded,
	// defaulted, printed) for compatibility, but no profile may name it.
	Factory Factory
	// NewBlock returns a new, zero block of the type (a pointer to the backend's block struct).
	// Nil: the type has no block, and its factory reads the profile's params (a type a test
	// registers with Register).
	NewBlock func() Block
	// BlockOptional: a profile of this type without its block gets one with the defaults
	// (local_subprocess needs nothing). Otherwise a missing block is refused
	// (docs/semantics.md §6: a built-in provider whose config block is missing raises).
	BlockOptional bool
	// Provisions: the type creates sandboxes (environment: managed). Attaches: it runs inside
	// an existing target (environment: attached, attach_to). The matrix of docs/semantics.md §6.
	Provisions, Attaches bool
	// AttachTarget says what attach_to names for this type ("a container id or name"), for
	// messages.
	AttachTarget string
	// Summary is one sentence saying what the type does, the description of its block in the
	// configuration's schema.
	Summary string
	// BlockSource is the Go source that declares the block's types; its comments are their
	// keys' descriptions in the configuration's schema.
	BlockSource []byte
	// SchemaName names the block's definition in the schema ("Docker"); a type the block
	// nests is SchemaName followed by its Go name without the suffix "Block" ("DockerWarmPool"
	// for WarmPoolBlock).
	SchemaName string
	// Removed maps keys of the block that earlier versions read (dotted, under the block:
	// "sandboxd.enabled") to what became of them; decoding names that instead of "unknown
	// key".
	Removed map[string]string
}

// Served reports whether profiles may name the type (it has a Factory).
func (b Backend) Served() bool { return b.Factory != nil }
