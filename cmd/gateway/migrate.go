package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/sandgate/sandgate/internal/auth/devissuer"
	"github.com/sandgate/sandgate/internal/gateway"
)

func cmdMigrate(ctx context.Context, args, environ []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("migrate", flag.ContinueOnError)
	path := configFlag(fs, environ)
	if err := fs.Parse(args); err != nil {
		return err
	}
	cfg, err := gateway.LoadConfig(*path, environ, gateway.Builtin())
	if err != nil {
		return err
	}
	if cfg.Database.URL == "" {
		return errors.New("database.url is required (or SANDGATE_DATABASE__URL)")
	}
	applied, cur, err := gateway.Migrate(ctx, cfg.Database.URL)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "applied %d migration(s); schema at version %d\n", len(applied), cur)
	return nil
}

// cmdSecrets runs `gateway secrets reseal`: the second step of a key rotation.
func cmdSecrets(ctx context.Context, args, environ []string, stdout io.Writer) error {
	if len(args) == 0 || args[0] != "reseal" {
		return errors.New("usage: gateway secrets reseal [--config FILE]: re-seals every stored secret under the first key of secrets.keys")
	}
	fs := flag.NewFlagSet("secrets reseal", flag.ContinueOnError)
	path := configFlag(fs, environ)
	if err := fs.Parse(args[1:]); err != nil {
		return err
	}
	cfg, err := gateway.LoadConfig(*path, environ, gateway.Builtin())
	if err != nil {
		return err
	}
	if cfg.Database.URL == "" {
		return errors.New("database.url is required (or SANDGATE_DATABASE__URL)")
	}
	n, err := gateway.ResealSecrets(ctx, cfg.Database.URL, cfg.Secrets)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "re-sealed %d secret(s) under key %s\n", n, strings.SplitN(cfg.Secrets.Keys[0], ":", 2)[0])
	return nil
}

// cmdToken mints a development token for the dev gateway found by findDevGateway, naming
// the issuer that gateway serves (its recorded public URL) and signing with its key.
func cmdToken(ctx context.Context, args, environ []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("token", flag.ContinueOnError)
	path := configFlag(fs, environ)
	dataDir := fs.String("data-dir", "", "`folder` of the dev gateway (as given to `gateway dev --data-dir`); default ./"+defaultDataDir+" when it holds a key, else the dev gateway started last")
	sub := fs.String("sub", "dev", "subject (user id)")
	groups := fs.String("groups", "dev", "comma-separated groups")
	email := fs.String("email", "", "email claim")
	ttl := fs.Duration("ttl", 12*time.Hour, "lifetime")
	allowAdmin := fs.Bool("allow-admin", false, "allow the admin groups (auth.admin_groups) in --groups")
	if err := fs.Parse(args); err != nil {
		return err
	}
	target, note, err := findDevGateway(*dataDir, environ)
	if err != nil {
		return err
	}
	fmt.Fprint(stderr, note)
	issuerURL, admins := "", []string(nil)
	if st := target.state; st != nil {
		issuerURL, admins = st.Issuer, st.AdminGroups
		if !st.running() {
			fmt.Fprintf(stderr, "gateway token: the dev gateway of %s (pid %d, %s) is not running; the token is for it once it serves again\n", target.dataDir, st.PID, st.PublicURL)
		}
	} else {
		// No gateway recorded itself there (one from before this record existed): the
		// configuration says where it serves.
		cfg, err := gateway.LoadConfig(*path, environ, gateway.Builtin())
		if err != nil {
			return err
		}
		issuerURL, admins = strings.TrimSuffix(cfg.Server.PublicURL, "/")+"/dev/oidc", cfg.Auth.AdminGroups
	}
	iss, err := devissuer.Load(issuerURL, target.keyFile)
	if err != nil {
		return err
	}
	if target.state == nil || target.state.running() {
		if err := checkIssuer(ctx, iss, target.dataDir, stderr); err != nil {
			return err
		}
	}
	var gs []string
	for _, g := range strings.Split(*groups, ",") {
		if g = strings.TrimSpace(g); g != "" {
			gs = append(gs, g)
		}
	}
	if !*allowAdmin {
		if len(admins) == 0 {
			admins = []string{"admins"} // gateway dev's default
		}
		for _, g := range gs {
			if slices.Contains(admins, g) {
				return fmt.Errorf("group %q is an administrator group; add --allow-admin to mint an administrator's token", g)
			}
		}
	}
	tok, err := iss.Mint(devissuer.Claims{Subject: *sub, Groups: gs, Email: *email, TTL: *ttl})
	if err != nil {
		return err
	}
	fmt.Fprintln(stdout, tok)
	return nil
}
