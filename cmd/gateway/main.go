// Command gateway is Sandgate: an OIDC-authenticated REST gateway that runs code for its
// callers in permission-bounded sandboxes.
//
//	gateway serve   [--config FILE]   run the gateway (needs database.url and auth.issuers)
//	gateway dev     [--config FILE]   run it with a throwaway Postgres and a development issuer
//	gateway worker  [--config FILE]   run queued operations (broker flavor queue)
//	gateway migrate [--config FILE]   apply database migrations
//	gateway token   --sub NAME [--groups a,b] [--email E] [--ttl 12h]   mint a dev token
//	gateway config validate|print|schema [--config FILE]
//	gateway secrets reseal [--config FILE]   re-seal secrets under the first of secrets.keys
//	gateway version
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Environ(), os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "gateway:", err)
		os.Exit(1)
	}
}

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

func run(ctx context.Context, args, environ []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return fmt.Errorf("a subcommand is required")
	}
	cmd, rest := args[0], args[1:]
	switch cmd {
	case "serve":
		return cmdServe(ctx, rest, environ, stdout, stderr, false)
	case "dev":
		return cmdServe(ctx, rest, environ, stdout, stderr, true)
	case "worker":
		return cmdWorker(ctx, rest, environ, stderr)
	case "migrate":
		return cmdMigrate(ctx, rest, environ, stdout)
	case "token":
		return cmdToken(ctx, rest, environ, stdout, stderr)
	case "config":
		return cmdConfig(rest, environ, stdout)
	case "secrets":
		return cmdSecrets(ctx, rest, environ, stdout)
	case "version", "--version", "-v":
		fmt.Fprintln(stdout, "sandgate gateway", version)
		return nil
	case "help", "--help", "-h":
		fmt.Fprint(stdout, usage)
		return nil
	}
	fmt.Fprint(stderr, usage)
	return fmt.Errorf("unknown subcommand %q", cmd)
}

const usage = `Usage: gateway <command> [flags]

Commands:
  serve            run the gateway (needs database.url and at least one auth issuer)
  dev              run the gateway with a throwaway Postgres and a development OIDC issuer
  worker           run queued operations (sandbox.broker.flavor: queue) against providers
  migrate          apply pending database migrations
  token            mint a development token (--sub NAME [--groups a,b] [--email E] [--ttl 12h])
  config validate  check a configuration file
  config print     print the effective configuration (secrets redacted)
  config schema    print the configuration file's JSON Schema
  secrets reseal   re-seal stored secrets under the first key of secrets.keys (key rotation)
  version          print the version

Every command takes --config FILE (default: $SANDGATE_CONFIG). Any key can be overridden
with SANDGATE_<SECTION>__<KEY>, e.g. SANDGATE_DATABASE__URL=postgres://...
`
