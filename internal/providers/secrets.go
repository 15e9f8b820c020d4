package providers

import (
	"strings"

	"github.com/sandgate/sandgate/internal/fault"
)

// RefuseSecrets is the refusal of a policy with secrets (Policy.Secrets) by a provider whose
// sandboxes do not reach the network through the egress proxy, which alone keeps a secret's
// value out of the sandbox (issue 39): fault.Policy naming the secrets and what to do; nil
// for a policy without secrets. Such a provider calls it in Create, Attach and Restore, so a
// session bound to secrets never runs on it (fail closed), whatever policy.strict says.
func RefuseSecrets(provider string, pol Policy) error {
	if len(pol.Secrets) == 0 {
		return nil
	}
	names := make([]string, 0, len(pol.Secrets))
	for _, s := range pol.Secrets {
		names = append(names, s.Name)
	}
	return fault.New(fault.Policy, "provider %s cannot keep secrets out of its sandboxes (they do not reach the network through the egress proxy), so the session's secrets (%s) are refused; bind them in a session of a profile whose provider routes egress through the proxy (docker), or leave them out",
		provider, strings.Join(names, ", "))
}
