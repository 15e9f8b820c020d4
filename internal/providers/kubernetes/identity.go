package kubernetes

import (
	"errors"
	"slices"
	"strings"

	"k8s.io/client-go/dynamic"
	k8s "k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/sandgate/sandgate/internal/fault"
	"github.com/sandgate/sandgate/internal/providers"
)

// maxCachedIdentities bounds the cache of impersonating clients; it is emptied when full.
const maxCachedIdentities = 1024

// clients are the API clients of one identity.
type clients struct {
	cfg  *rest.Config
	core k8s.Interface
	dyn  dynamic.Interface
	// who names the identity in messages ("the gateway" or "user alice").
	who string
}

func newClients(cfg *rest.Config) (*clients, error) {
	if cfg.QPS == 0 && cfg.Burst == 0 && cfg.RateLimiter == nil {
		// client-go's defaults (5 requests/s, bursts of 10) would throttle a busy gateway,
		// which reads a pod on every operation: an execution took 200 ms after the tenth.
		cfg = rest.CopyConfig(cfg)
		cfg.QPS, cfg.Burst = DefaultQPS, DefaultBurst
	}
	core, err := k8s.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	who := "the gateway"
	if cfg.Impersonate.UserName != "" {
		who = "user " + cfg.Impersonate.UserName
	}
	return &clients{cfg: cfg, core: core, dyn: dyn, who: who}, nil
}

// The client-side rate limit of the provider's API clients when the configuration sets none:
// what kubectl allows itself.
const (
	DefaultQPS   = 50
	DefaultBurst = 300
)

// loadRESTConfig returns the gateway's own client configuration: kubeconfig when set, else the
// in-cluster service account, else the default kubeconfig loading rules.
func loadRESTConfig(kubeconfig string) (*rest.Config, error) {
	if kubeconfig != "" {
		cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
		if err != nil {
			return nil, fault.Wrap(fault.Config, err, "%s: kubeconfig '%s'", TypeName, kubeconfig)
		}
		return cfg, nil
	}
	cfg, err := rest.InClusterConfig()
	if err == nil {
		return cfg, nil
	}
	if !errors.Is(err, rest.ErrNotInCluster) {
		return nil, fault.Wrap(fault.Config, err, "%s: in-cluster configuration", TypeName)
	}
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	cfg, err = clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{}).ClientConfig()
	if err != nil {
		return nil, fault.Wrap(fault.Config, err, "%s: no kubeconfig set, not running in a cluster, and the default kubeconfig does not load", TypeName)
	}
	return cfg, nil
}

// clientsFor returns the clients to act for principal pr with: the gateway's own in agent
// mode, impersonating ones in user mode (cached per identity). A user-mode principal without
// a user is a fault.Policy error.
func (p *Provider) clientsFor(pr providers.Principal) (*clients, error) {
	if pr.Mode != providers.ModeUser {
		return p.gateway, nil
	}
	user := pr.Credentials.User
	if user == "" {
		user = pr.Subject
	}
	if strings.TrimSpace(user) == "" {
		return nil, fault.New(fault.Policy, "%s: user mode needs a Kubernetes user to impersonate, and the principal has none", TypeName)
	}
	groups := pr.Credentials.Groups
	if len(groups) == 0 {
		groups = pr.Groups
	}
	groups = slices.Clone(groups)
	key := user + "\x00" + strings.Join(groups, "\x00")

	p.mu.Lock()
	defer p.mu.Unlock()
	if c, ok := p.users[key]; ok {
		return c, nil
	}
	cfg := rest.CopyConfig(p.gateway.cfg)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: user, Groups: groups}
	c, err := newClients(cfg)
	if err != nil {
		return nil, fault.Wrap(fault.Provision, err, "%s: client impersonating user %s", TypeName, user)
	}
	if len(p.users) >= maxCachedIdentities {
		clear(p.users)
	}
	p.users[key] = c
	return c, nil
}
