package kubernetes_test

import (
	"github.com/sandgate/sandgate/internal/config"
	"github.com/sandgate/sandgate/internal/gateway"
	"github.com/sandgate/sandgate/internal/providers/kubernetes"
)

// The gateway's loader, for this package's own tests (see kubernetes.LoadGatewayConfig).
func init() {
	kubernetes.LoadGatewayConfig = func(path string, environ []string) (*config.Config, error) {
		return gateway.LoadConfig(path, environ, gateway.Builtin())
	}
}
