package gateway

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"

	"github.com/sandgate/sandgate/internal/auth/devissuer"
	"github.com/sandgate/sandgate/internal/config"
	"github.com/sandgate/sandgate/internal/devdb"
	"github.com/sandgate/sandgate/internal/providers/docker"
	"github.com/sandgate/sandgate/internal/providers/local"
	"github.com/sandgate/sandgate/internal/sandbox"
	"github.com/sandgate/sandgate/internal/sandbox/secret"
)

// DevDockerImage is the sandbox image scripts/docker-setup.sh builds without a registry.
const DevDockerImage = "sandgate/sandbox-python:latest"

// DevSetup fills in what `gateway dev` provides on top of cfg, keeping its state under
// dataDir: a listen address on 127.0.0.1 when server.addr names no host, a throwaway Postgres when database.url is empty, the completion spool in dataDir/spool when
// sandbox.broker.spool.dir is unset, the development issuer (trusted,
// and returned for New's Options.DevIssuer), admin group "admins" when none is set, a
// secrets key kept in dataDir/secrets-key when secrets.keys is empty, the egress proxy's CA in
// dataDir/egress when egress.state_dir is unset, and —
// when no profile is configured — stateful local profiles plus a docker profile whenever a
// Docker engine answers. It applies defaults and validates the result. stop stops the
// throwaway Postgres (a no-op otherwise); call it after the gateway is closed.
func DevSetup(ctx context.Context, cfg *config.Config, dataDir string, log *slog.Logger) (iss *devissuer.Issuer, stop func(), err error) {
	stop = func() {}
	// Loopback unless told where: the development issuer signs anyone in, and the local
	// profiles run code on this machine without isolation.
	if host, port, err := net.SplitHostPort(cfg.Server.Addr); err == nil && host == "" {
		cfg.Server.Addr = net.JoinHostPort("127.0.0.1", port)
		log.Info("development mode listens on 127.0.0.1 only; set server.addr (e.g. 0.0.0.0:"+port+") to listen on other interfaces", "addr", cfg.Server.Addr)
	}
	if cfg.Database.URL == "" {
		log.Info("starting a development Postgres", "dir", filepath.Join(dataDir, "pg"))
		inst, err := devdb.Start(ctx, filepath.Join(dataDir, "pg"))
		if err != nil {
			return nil, stop, err
		}
		cfg.Database.URL = inst.URL("sandgate")
		stop = func() {
			if err := inst.Stop(); err != nil {
				log.Warn("stopping the development Postgres failed", "err", err)
			}
		}
	}
	if cfg.Sandbox.Broker.Spool.Dir == "" {
		if cfg.Sandbox.Broker.Spool.Dir, err = filepath.Abs(filepath.Join(dataDir, "spool")); err != nil {
			return nil, stop, err
		}
	}
	iss, err = devissuer.Open(strings.TrimSuffix(cfg.Server.PublicURL, "/")+"/dev/oidc", filepath.Join(dataDir, "issuer-key.pem"))
	if err != nil {
		return nil, stop, err
	}
	cfg.Auth.Issuers = append(cfg.Auth.Issuers, config.Issuer{URL: iss.URL(), Audiences: []string{devissuer.Audience}})
	if len(cfg.Secrets.Keys) == 0 {
		path := filepath.Join(dataDir, devSecretsKeyFile)
		spec, err := devSecretsKey(path)
		if err != nil {
			return nil, stop, err
		}
		cfg.Secrets.Keys = []string{spec}
		log.Warn("development mode seals secrets with a key kept in its data folder; a deployment sets secrets.keys", "file", path)
	}
	if cfg.Egress.StateDir == "" {
		// The egress proxy's CA lives with the rest of the development state: the default
		// (/var/lib/sandgate/egress for root) is read-only in containers (docker-compose.yml).
		if cfg.Egress.StateDir, err = filepath.Abs(filepath.Join(dataDir, "egress")); err != nil {
			return nil, stop, err
		}
	}
	if len(cfg.Auth.AdminGroups) == 0 {
		cfg.Auth.AdminGroups = []string{"admins"}
	}
	if len(cfg.Sandbox.Profiles) == 0 {
		workdir, err := filepath.Abs(filepath.Join(dataDir, "sandboxes"))
		if err != nil {
			return nil, stop, err
		}
		if err := os.MkdirAll(workdir, 0o755); err != nil {
			return nil, stop, err
		}
		localName := cfg.Sandbox.DefaultProfile // "default" unless the caller picked docker or oneshot
		if localName == "docker" || localName == "oneshot" {
			localName = "local"
		}
		cfg.Sandbox.Profiles = map[string]config.Profile{
			localName: {Type: local.TypeName, Stateful: true, Blocks: config.Blocks{local.TypeName: &local.Block{Workdir: workdir}}},
			"oneshot": {Type: local.TypeName, Scope: sandbox.ScopePerCall, Blocks: config.Blocks{local.TypeName: &local.Block{Workdir: workdir}}},
		}
		// Offer container isolation whenever a Docker engine answers.
		if docker.Available(ctx, "") {
			cfg.Sandbox.Profiles["docker"] = config.Profile{Type: docker.TypeName, Stateful: true, Blocks: config.Blocks{
				docker.TypeName: &docker.Block{Image: DevDockerImage, Pull: docker.PullNever},
			}}
			log.Info("Docker engine found: profile 'docker' runs sandboxes in containers", "image", DevDockerImage)
		} else {
			log.Info("no Docker engine answers: only the local profiles are offered (for profile 'docker', run scripts/docker-setup.sh and restart)")
		}
	}
	cfg.ApplyDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, stop, err
	}
	return iss, stop, nil
}

// devSecretsKeyFile, in a dev gateway's data folder, is the key its secrets are sealed with.
const devSecretsKeyFile = "secrets-key"

// devSecretsKey is the secrets.keys entry of a development gateway: read from path, or made
// there (mode 0600) the first time, so secrets set in one run open in the next.
func devSecretsKey(path string) (string, error) {
	if b, err := os.ReadFile(path); err == nil {
		return strings.TrimSpace(string(b)), nil
	} else if !errors.Is(err, fs.ErrNotExist) {
		return "", fmt.Errorf("reading the development secrets key: %w", err)
	}
	var k [secret.KeyBytes]byte
	if _, err := rand.Read(k[:]); err != nil {
		return "", err
	}
	spec := "dev:" + base64.StdEncoding.EncodeToString(k[:])
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return "", err
	}
	if err := os.WriteFile(path, []byte(spec+"\n"), 0o600); err != nil {
		return "", fmt.Errorf("writing the development secrets key: %w", err)
	}
	return spec, nil
}
