package gateway

import (
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/sandgate/sandgate/internal/config"
	"github.com/sandgate/sandgate/internal/fault"
	"github.com/sandgate/sandgate/internal/providers"
)

// Provider blocks (`docker:`, `kubernetes:`, … of a profile or of the shorthand) are not
// internal/config's: it keeps them raw and knows no provider. The composition root decodes each
// through the registry — into the backend's own block type, with its defaults — checks it with
// the backend's validation and the rules every type shares (a served type, a required block,
// the managed/attached matrix of docs/semantics.md §6), and hands the factory the options the
// block returns.

// LoadConfig reads the configuration as config.LoadWith does — the YAML file at path ("":
// none), then the SANDGATE_ variables of environ — and decodes and checks every provider block
// with reg's backends, so that unknown keys, values of the wrong type and invalid blocks are
// reported with the rest, each as a *config.FieldError naming its key. The blocks of the
// configuration returned are the backends' values, defaults applied (`config print` shows them,
// their secrets redacted).
//
// Errors: config.LoadWith's.
func LoadConfig(path string, environ []string, reg *providers.Registry) (*config.Config, error) {
	return config.LoadWith(path, environ, blockDecoder{reg: reg})
}

// blockDecoder is the config.BlockDecoder of a registry.
type blockDecoder struct{ reg *providers.Registry }

func (d blockDecoder) DecodeBlocks(c *config.Config) error {
	blocks, err := decodeBlocks(c, d.reg)
	blocks.store(c)
	return err
}

func (d blockDecoder) ValidateBlocks(c *config.Config) error {
	blocks, err := decodeBlocks(c, d.reg) // decoded already: copies
	if err != nil {
		return err
	}
	return errors.Join(validateBlocks(c, d.reg, blocks)...)
}

// decoded are a configuration's provider blocks as their backends' values, defaults applied.
type decoded struct {
	// sandbox are the shorthand's blocks (sandbox.<type>), by type.
	sandbox map[string]providers.Block
	// profiles are each profile's blocks, by profile name, then type.
	profiles map[string]map[string]providers.Block
}

// decodeBlocks decodes every provider block of c through reg, leaving c as it is: a raw block
// (a map from the file and the environment) strictly, a value of the backend's block type (a
// configuration built in code) copied; then the block's defaults. A profile of a type whose
// block is optional gets one when it has none. The shorthand's profile takes the blocks
// decoded under sandbox.
//
// Errors: the problems, each a *config.FieldError, sorted by key: unknown keys (a key of a
// profile or of sandbox that names no block of reg), values of the wrong type.
func decodeBlocks(c *config.Config, reg *providers.Registry) (decoded, error) {
	d := decoded{sandbox: map[string]providers.Block{}, profiles: map[string]map[string]providers.Block{}}
	var problems []error
	decodeSet := func(prefix string, raw config.Blocks, into map[string]providers.Block, skip func(string) bool) {
		for typ, v := range raw {
			if skip != nil && skip(typ) {
				continue
			}
			b, ok := reg.Backend(typ)
			if !ok || b.NewBlock == nil {
				problems = append(problems, c.UnknownKey(prefix+"."+typ))
				continue
			}
			block := b.NewBlock()
			if err := c.DecodeBlock(prefix+"."+typ, v, block, b.Removed); err != nil {
				problems = append(problems, flatten(err)...)
				continue
			}
			block.ApplyDefaults()
			into[typ] = block
		}
	}
	decodeSet("sandbox", c.Sandbox.Blocks, d.sandbox, nil)
	for name, p := range c.Sandbox.Profiles {
		blocks := map[string]providers.Block{}
		var fromShorthand func(string) bool
		if c.Sandbox.Synthesized() && name == c.Sandbox.DefaultProfile {
			// Decoded (and reported) as sandbox.<type> above.
			fromShorthand = func(typ string) bool {
				if _, ok := c.Sandbox.Blocks[typ]; !ok {
					return false
				}
				if b, ok := d.sandbox[typ]; ok {
					blocks[typ] = b
				}
				return true
			}
		}
		decodeSet(c.Sandbox.ProfileKey(name), p.Blocks, blocks, fromShorthand)
		if b, ok := reg.Backend(p.Type); ok && b.BlockOptional && b.NewBlock != nil {
			if _, has := p.Blocks[p.Type]; !has {
				block := b.NewBlock()
				block.ApplyDefaults()
				blocks[p.Type] = block
			}
		}
		d.profiles[name] = blocks
	}
	sort.SliceStable(problems, func(i, j int) bool { return problemKey(problems[i]) < problemKey(problems[j]) })
	return d, errors.Join(problems...)
}

// store puts the decoded blocks into c in place of the raw ones (those that failed stay raw).
func (d decoded) store(c *config.Config) {
	put := func(raw config.Blocks, blocks map[string]providers.Block) config.Blocks {
		if len(raw) == 0 && len(blocks) == 0 {
			return raw
		}
		out := make(config.Blocks, len(raw)+len(blocks))
		for typ, v := range raw {
			out[typ] = v
		}
		for typ, b := range blocks {
			out[typ] = b
		}
		return out
	}
	c.Sandbox.Blocks = put(c.Sandbox.Blocks, d.sandbox)
	for name, p := range c.Sandbox.Profiles {
		p.Blocks = put(p.Blocks, d.profiles[name])
		c.Sandbox.Profiles[name] = p
	}
}

// validateBlocks checks what config.Validate cannot see, per profile (docs/semantics.md §6):
// its type is one reg serves; the block of its type is there unless optional; the block's own
// rules (providers.Block.Validate); params.attach_to is a string; the environment matrix
// (managed needs a type that provisions and no attach target, attached a type that attaches
// and a target). Problems are *config.FieldError, in profile order.
func validateBlocks(c *config.Config, reg *providers.Registry, d decoded) []error {
	var problems []error
	add := func(key, format string, args ...any) {
		problems = append(problems, &config.FieldError{Key: key, Msg: fmt.Sprintf(format, args...)})
	}
	types := strings.Join(reg.Types(), ", ")
	names := make([]string, 0, len(c.Sandbox.Profiles))
	for name := range c.Sandbox.Profiles {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		p := c.Sandbox.Profiles[name]
		prefix := c.Sandbox.ProfileKey(name)
		b, known := reg.Backend(p.Type)
		switch {
		case p.Type == "":
			add(prefix+".type", "required: the provider, one of: %s", types)
			continue
		case !known:
			add(prefix+".type", "unknown provider %q; built-in providers: %s", p.Type, types)
			continue
		case !b.Served():
			add(prefix+".type", "no %s provider has shipped: the block is accepted for compatibility but cannot back a profile; use one of: %s", p.Type, types)
			continue
		}
		block := d.profiles[name][p.Type]
		if block == nil && b.NewBlock != nil {
			add(prefix+"."+p.Type, "missing: a profile of type %s needs the %s block (write \"%s: {}\" for its defaults)", p.Type, p.Type, p.Type)
		}
		target, targetKey := attachTarget(p, prefix, block)
		if block != nil {
			for _, pr := range block.Validate(blockProfile(c, name, target)) {
				add(prefix+"."+pr.Key, "%s", pr.Msg)
			}
		}
		if raw, ok := p.Params["attach_to"]; ok {
			if _, isString := raw.(string); !isString {
				add(prefix+".params.attach_to", "must be a string (got %T)", raw)
			}
		}
		switch p.Environment {
		case config.EnvironmentManaged:
			if !b.Provisions {
				add(prefix+".environment", "provider %s is attach-only: it cannot create sandboxes; set environment: attached and give %s.attach_to (%s)",
					p.Type, p.Type, b.AttachTarget)
			} else if target != "" {
				add(targetKey, "is set on a managed profile, which creates its own sandboxes; set environment: attached to use the existing target, or remove attach_to")
			}
		case config.EnvironmentAttached:
			if !b.Attaches {
				add(prefix+".environment", "provider %s cannot attach to an existing environment; use environment: managed", p.Type)
			} else if target == "" {
				add(prefix+"."+p.Type+".attach_to", "the attached profile has no attach_to target; set %s.attach_to (or params.attach_to) to %s",
					p.Type, b.AttachTarget)
			}
		}
	}
	return problems
}

// attachTarget is what profile p (written under prefix) binds to when attached, and the key
// that names it: its block's attach_to, else params.attach_to; "" when neither is set.
func attachTarget(p config.Profile, prefix string, block providers.Block) (target, key string) {
	if ab, ok := block.(providers.AttachBlock); ok && ab.AttachTarget() != "" {
		return ab.AttachTarget(), prefix + "." + p.Type + ".attach_to"
	}
	if s, ok := p.Params["attach_to"].(string); ok && s != "" {
		return s, prefix + ".params.attach_to"
	}
	return "", ""
}

// blockProfile is what the blocks of profile name see of it.
func blockProfile(c *config.Config, name, target string) providers.Profile {
	p := c.Sandbox.Profiles[name]
	return providers.Profile{
		Name:         name,
		Attached:     p.Environment == config.EnvironmentAttached,
		AttachTo:     target,
		UserIdentity: p.Identity.Mode == config.IdentityUser,
		Stateful:     p.Stateful,
		Policy:       policy(p.Policy),
		Queued:       c.Sandbox.Broker.Flavor == config.FlavorQueue,
	}
}

// checkBlocks decodes and validates cfg's provider blocks (a configuration built in code, or
// loaded without LoadConfig).
//
// Errors: fault.Config listing the problems, one *config.FieldError per line.
func checkBlocks(cfg *config.Config, reg *providers.Registry) (decoded, error) {
	d, err := decodeBlocks(cfg, reg)
	if err == nil {
		err = errors.Join(validateBlocks(cfg, reg, d)...)
	}
	if err != nil {
		return decoded{}, &fault.Error{Kind: fault.Config, Msg: "invalid configuration:\n" + err.Error(), Err: err}
	}
	return d, nil
}

// buildContext is the BuildContext of profile name for its provider: the options are what the
// block of its type returns (none for a type without a block, which reads Params).
func buildContext(c *config.Config, d decoded, name, installation string, log *slog.Logger) providers.BuildContext {
	pc := c.Sandbox.Profiles[name]
	block := d.profiles[name][pc.Type]
	target, _ := attachTarget(pc, "", block)
	bp := blockProfile(c, name, target)
	bc := providers.BuildContext{
		Type: pc.Type, Profile: name, Params: pc.Params, Installation: installation,
		Policy: bp.Policy, IdleTimeout: time.Duration(pc.IdleTimeout) * time.Second, Stateful: pc.Stateful, Logger: log,
	}
	if block != nil {
		bc.Options = block.Options(bp)
	}
	return bc
}

// flatten splits joined problems.
func flatten(err error) []error {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		var out []error
		for _, e := range j.Unwrap() {
			out = append(out, flatten(e)...)
		}
		return out
	}
	return []error{err}
}

// problemKey is the key a problem names, for sorting.
func problemKey(err error) string {
	var fe *config.FieldError
	if errors.As(err, &fe) {
		return fe.Key
	}
	return ""
}
