package sandbox

import (
	"github.com/sandgate/sandgate/internal/fault"
	"github.com/sandgate/sandgate/internal/providers"
	"github.com/sandgate/sandgate/internal/store"
)

// checkResources refuses the CPU (cores) and memory (MiB) a session asks for at create when
// its profile cannot give them (docs/usage.md "Session options"): more than the profile's
// policy sets (fault.Policy), or a provider that cannot bound resources
// (Capabilities.PolicyResources false: fault.Policy, whatever the profile's strict says —
// the caller asked for a bound by name, and a bound that is not kept is none). Negative
// values are fault.Validation; 0 asks for nothing.
func checkResources(prof *Profile, cpu float64, memoryMB int) error {
	if cpu < 0 || memoryMB < 0 {
		return fault.New(fault.Validation, "cpu and memory_mb must be positive, not %g and %d", cpu, memoryMB)
	}
	if cpu == 0 && memoryMB == 0 {
		return nil
	}
	if !prof.Caps.PolicyResources {
		return fault.New(fault.Policy, "profile '%s' cannot bound a sandbox's cpu or memory (provider '%s' does not enforce resource limits); create the session without cpu and memory_mb, or use a profile whose provider has capabilities.policy_resources",
			prof.Name, prof.Provider.Type())
	}
	if limit := prof.Policy.CPU; limit > 0 && cpu > limit {
		return fault.New(fault.Policy, "cpu %g is over profile '%s''s policy of %g cores; ask for at most %g", cpu, prof.Name, limit, limit)
	}
	if limit := prof.Policy.MemoryMB; limit > 0 && memoryMB > limit {
		return fault.New(fault.Policy, "memory_mb %d is over profile '%s''s policy of %d MiB; ask for at most %d", memoryMB, prof.Name, limit, limit)
	}
	return nil
}

// sessionPolicy is the policy sess's sandboxes are created, attached and restored with: the
// profile's, with the CPU and memory the session asked for at create (checkResources kept
// them within it).
func sessionPolicy(prof *Profile, sess *store.Session) providers.Policy {
	pol := prof.Policy
	if sess != nil && sess.CPU > 0 {
		pol.CPU = sess.CPU
	}
	if sess != nil && sess.MemoryMB > 0 {
		pol.MemoryMB = sess.MemoryMB
	}
	return pol
}
