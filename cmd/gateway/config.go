package main

import (
	"flag"
	"fmt"
	"io"
	"strings"

	"github.com/sandgate/sandgate/internal/gateway"
)

func envValue(environ []string, key string) string {
	for _, kv := range environ {
		if k, v, ok := strings.Cut(kv, "="); ok && k == key {
			return v
		}
	}
	return ""
}

func configFlag(fs *flag.FlagSet, environ []string) *string {
	return fs.String("config", envValue(environ, "SANDGATE_CONFIG"), "configuration `file` (YAML)")
}

func cmdConfig(args, environ []string, stdout io.Writer) error {
	if len(args) == 0 {
		return fmt.Errorf("config needs a subcommand: validate, print or schema")
	}
	fs := flag.NewFlagSet("config "+args[0], flag.ContinueOnError)
	path := configFlag(fs, environ)
	if err := fs.Parse(args[1:]); err != nil {
		return err
	}
	switch args[0] {
	case "schema":
		b, err := gateway.Schema()
		if err != nil {
			return err
		}
		_, err = stdout.Write(b)
		return err
	case "validate":
		cfg, err := gateway.LoadConfig(*path, environ, gateway.Builtin())
		if err != nil {
			return err
		}
		// The provider types and queue transport this binary serves, checked as `serve` and
		// `worker` check them before connecting.
		if err := gateway.Check(cfg, gateway.Builtin()); err != nil {
			return err
		}
		fmt.Fprintln(stdout, "configuration is valid")
		return nil
	case "print":
		cfg, err := gateway.LoadConfig(*path, environ, gateway.Builtin())
		if err != nil {
			return err
		}
		b, err := cfg.Redacted().YAML()
		if err != nil {
			return err
		}
		_, err = stdout.Write(b)
		return err
	}
	return fmt.Errorf("unknown config subcommand %q (validate, print, schema)", args[0])
}
