// Package web is Sandgate's browser console: a single page of hand-written HTML, CSS and ES
// modules embedded into the gateway binary (no build step, no CDN). It talks only to the
// public REST API with an OIDC bearer token it obtains itself (authorization code + PKCE).
//
// Handler serves the page at "/", its assets under /console/ and the unauthenticated
// /console/config.json that tells the page which issuer and client to sign in with.
package web

import (
	"bytes"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"encoding/json"
	"io/fs"
	"mime"
	"net/http"
	"net/url"
	"path"
	"strings"
	"time"
)

//go:embed console
var files embed.FS

// Config is what the console needs to sign a user in. An empty Issuer or ClientID means
// sign-in is not configured: the page says so instead of offering a button.
type Config struct {
	// Issuer is the OIDC issuer URL; its discovery document names the authorization and token
	// endpoints. A cross-origin issuer must allow the gateway's origin (CORS) on both.
	Issuer string `json:"issuer"`
	// ClientID is the console's public client (no secret) at the issuer.
	ClientID string `json:"client_id"`
	// Scopes requested; default openid, profile, email.
	Scopes []string `json:"scopes"`
}

// DefaultScopes are requested when Config.Scopes is empty.
var DefaultScopes = []string{"openid", "profile", "email"}

type asset struct {
	body  []byte
	ctype string
	etag  string
}

// Handler serves the console for cfg. Mount it for GET and HEAD at "/" and "/console/*"; it
// answers 404 for any other path.
func Handler(cfg Config) http.Handler {
	if len(cfg.Scopes) == 0 {
		cfg.Scopes = DefaultScopes
	}
	cfg.Issuer = strings.TrimSuffix(cfg.Issuer, "/")
	if cfg.Issuer == "" || cfg.ClientID == "" {
		cfg.Issuer, cfg.ClientID = "", ""
	}
	assets := map[string]asset{}
	err := fs.WalkDir(files, "console", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := files.ReadFile(p)
		if err != nil {
			return err
		}
		ctype := mime.TypeByExtension(path.Ext(p))
		if path.Ext(p) == ".mjs" {
			ctype = "text/javascript; charset=utf-8" // not in every system's MIME table
		}
		assets["/"+p] = newAsset(b, ctype)
		return nil
	})
	if err != nil {
		panic("web: embedded console: " + err.Error()) // the embed is fixed at build time
	}
	conf, _ := json.Marshal(cfg)
	assets["/console/config.json"] = newAsset(conf, "application/json")
	assets["/"] = assets["/console/index.html"]
	delete(assets, "/console/index.html")

	csp := contentSecurityPolicy(cfg.Issuer)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		a, ok := assets[r.URL.Path]
		h := w.Header()
		h.Set("X-Content-Type-Options", "nosniff")
		if !ok {
			h.Set("Content-Type", "text/plain; charset=utf-8")
			w.WriteHeader(http.StatusNotFound)
			_, _ = w.Write([]byte("404 not found: no console asset at " + r.URL.Path + "\n"))
			return
		}
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			h.Set("Allow", "GET, HEAD")
			http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
			return
		}
		h.Set("Content-Type", a.ctype)
		h.Set("Cache-Control", "no-cache") // revalidate with the ETag: a new binary, new files
		h.Set("ETag", a.etag)
		h.Set("Content-Security-Policy", csp)
		h.Set("Referrer-Policy", "no-referrer") // the sign-in callback URL carries a code
		h.Set("X-Frame-Options", "DENY")
		http.ServeContent(w, r, "", time.Time{}, bytes.NewReader(a.body))
	})
}

func newAsset(b []byte, ctype string) asset {
	if ctype == "" {
		ctype = "application/octet-stream"
	}
	sum := sha256.Sum256(b)
	return asset{body: b, ctype: ctype, etag: `"` + hex.EncodeToString(sum[:12]) + `"`}
}

// contentSecurityPolicy allows the page's own files, the API on the same origin and the
// issuer's origin (discovery and token endpoints); blob: and data: URLs are for file previews
// and downloads.
func contentSecurityPolicy(issuer string) string {
	connect := "'self'"
	if u, err := url.Parse(issuer); err == nil && u.Scheme != "" && u.Host != "" {
		connect += " " + u.Scheme + "://" + u.Host
	}
	// style-src allows inline styles too: the terminal emulator (xterm.js) writes its theme
	// into <style> elements it makes; scripts stay same-origin only.
	return "default-src 'none'; script-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' blob: data:; " +
		"connect-src " + connect + "; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
}
