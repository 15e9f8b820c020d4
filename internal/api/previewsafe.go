package api

import (
	"context"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/sandgate/sandgate/internal/fault"
)

// What keeps a sandbox's server from acting as the gateway (docs/semantics.md §8 "Preview
// ports"): the answers it may send to a browser on the gateway's origin, the redirects it may
// make there, and the requests that would reach the gateway itself.

// originHeaders are the answer header fields a preview never passes on the gateway's origin:
// each acts on the whole origin — the console's — beyond the page that carries it: cookies
// (Set-Cookie), transport rules (HSTS, Alt-Svc, Expect-CT, public key pins), wiping the
// console's storage and so its sign-in (Clear-Site-Data), redirects (Refresh), error and
// report collection for every later request (NEL, Report-To, Reporting-Endpoints), client
// hints asked of every later request (Accept-CH, Critical-CH), and service workers over the
// gateway's paths (Service-Worker-Allowed).
var originHeaders = []string{
	"Set-Cookie", "Set-Cookie2", "Strict-Transport-Security", "Clear-Site-Data", "Alt-Svc", "Refresh",
	"Expect-CT", "Public-Key-Pins", "Public-Key-Pins-Report-Only", "NEL", "Report-To", "Reporting-Endpoints",
	"Accept-CH", "Critical-CH", "Service-Worker-Allowed",
}

// previewCSP is added to every answer proxied on the gateway's origin: the sandbox's pages
// run in an opaque origin, never the gateway's, so they can read neither the console's token
// (web storage) nor register a service worker over the gateway's pages; scripts, forms,
// pop-ups and WebSockets still work.
const previewCSP = "sandbox allow-scripts allow-forms allow-popups allow-popups-to-escape-sandbox allow-modals allow-downloads"

// confineLocation maps a redirect's Location of a preview served under prefix (the escaped
// path up to the port, as in "/preview/{token}") on the gateway's origin into that prefix, as
// an origin-relative reference; ok is false when it leaves the preview. reqPath is the
// request's escaped path (relative references resolve against it), gatewayHost the Host the
// caller asked for, port the sandbox's port. Resolution:
//   - an absolute path under prefix is kept (a server honouring X-Forwarded-Prefix); any
//     other absolute path is the sandbox server's own and is put under prefix;
//   - a relative reference is resolved against reqPath and must stay under prefix;
//   - an absolute URL naming the sandbox server itself (localhost, 127.0.0.1 or [::1] at
//     port) is its own path, put under prefix; one naming the gateway must stay under
//     prefix; any other host, scheme or form (backslashes, control characters, encoded dot
//     segments) leaves.
func confineLocation(loc, reqPath, prefix, gatewayHost string, port int) (string, bool) {
	for i := 0; i < len(loc); i++ {
		if c := loc[i]; c <= ' ' || c == 0x7f || c == '\\' {
			return "", false // browsers drop or reinterpret these: "/\t/x", "/\x" are "//x"
		}
	}
	if strings.HasPrefix(loc, "//") {
		return "", false // another host, however many slashes follow ("///x" is "//x" to a browser)
	}
	u, err := url.Parse(loc)
	if err != nil || u.Opaque != "" || u.User != nil {
		return "", false
	}
	var ref *url.URL
	switch {
	case u.Scheme != "" || u.Host != "":
		if u.Scheme != "" && u.Scheme != "http" && u.Scheme != "https" {
			return "", false
		}
		host := strings.ToLower(u.Host)
		switch {
		case sandboxSelf(host, port):
			ref = underPrefix(prefix, u)
		case host == strings.ToLower(gatewayHost):
			ref = &url.URL{Path: u.Path, RawPath: u.RawPath, RawQuery: u.RawQuery, Fragment: u.Fragment}
		default:
			return "", false
		}
	case strings.HasPrefix(u.Path, "/"):
		if within(u.EscapedPath(), prefix) {
			ref = u
		} else {
			ref = underPrefix(prefix, u)
		}
	default:
		base, err := url.Parse(reqPath)
		if err != nil {
			return "", false
		}
		ref = base.ResolveReference(u)
	}
	// Dot segments go (as a browser would take them) before the check.
	res := (&url.URL{Path: "/"}).ResolveReference(ref)
	esc := res.EscapedPath()
	if !within(esc, prefix) {
		return "", false
	}
	for _, seg := range strings.Split(esc, "/") {
		if d, err := url.PathUnescape(seg); err != nil || d == "." || d == ".." {
			return "", false // "%2e%2e" is ".." to a browser
		}
	}
	res.Scheme, res.Host, res.User = "", "", nil
	return res.String(), true
}

// within: escaped path p is prefix or below it.
func within(p, prefix string) bool {
	return p == prefix || strings.HasPrefix(p, prefix+"/")
}

// underPrefix is u's path, query and fragment (a path of the sandbox's server, whose dot
// segments stop at its root) below prefix.
func underPrefix(prefix string, u *url.URL) *url.URL {
	own := (&url.URL{Path: "/"}).ResolveReference(&url.URL{Path: u.Path, RawPath: u.RawPath})
	esc := own.EscapedPath()
	if !strings.HasPrefix(esc, "/") {
		esc = "/" + esc
	}
	out, err := url.Parse(prefix + esc)
	if err != nil {
		out = &url.URL{Path: prefix + "/"}
	}
	out.RawQuery, out.Fragment = u.RawQuery, u.Fragment
	return out
}

// sandboxSelf: host (lower case) names the sandbox's server as it sees itself, the
// loopback at port (Host of the requests the gateway sends it is localhost:port).
func sandboxSelf(host string, port int) bool {
	h, p, err := net.SplitHostPort(host)
	if err != nil {
		h, p = host, "80"
	}
	if p != strconv.Itoa(port) {
		return false
	}
	switch strings.Trim(h, "[]") {
	case "localhost", "127.0.0.1", "::1":
		return true
	}
	return false
}

// viaPseudonym names the gateway's preview proxy in the Via header of every request it
// sends a sandbox (RFC 9110 §7.6.3), so that a request that comes back through previews can
// be told.
const viaPseudonym = "sandgate-preview"

// maxPreviewHops is how many previews a request may already have passed through: a request
// that went through more is a loop (a sandbox's server forwarding to a preview that leads
// back to it), refused before it costs another connection.
const maxPreviewHops = 4

// previewHops counts the gateway's preview proxy among h's Via entries.
func previewHops(h http.Header) int {
	n := 0
	for _, v := range h.Values("Via") {
		for _, entry := range strings.Split(v, ",") {
			f := strings.Fields(entry)
			if len(f) >= 2 && strings.EqualFold(f[1], viaPseudonym) {
				n++
			}
		}
	}
	return n
}

// loopErr refuses a request that passed through too many previews.
func loopErr(hops int) error {
	return fault.New(fault.Policy, "this request already passed through %d previews (Via: %s): a preview that leads back into previews is a loop, and is refused", hops, viaPseudonym)
}

type serverAddrsKey struct{}

// WithServerAddrs returns ctx holding the addresses the gateway's listeners are bound to
// (the HTTP server's BaseContext): a preview port whose connection turns out to reach one of
// them — a local sandbox's port that is the gateway's own — is refused instead of recursing.
// The address a request arrived on counts as well, set or not.
func WithServerAddrs(ctx context.Context, addrs ...net.Addr) context.Context {
	return context.WithValue(ctx, serverAddrsKey{}, addrs)
}

// isServerAddr reports whether remote (where a preview connection went) is one of the
// gateway's own listening addresses: the same port at the same address, or at a loopback
// address when the listener is bound to all addresses.
func isServerAddr(ctx context.Context, remote net.Addr) bool {
	ra, ok := remote.(*net.TCPAddr)
	if !ok {
		return false // a tunnel into a sandbox, not a socket of this host
	}
	addrs, _ := ctx.Value(serverAddrsKey{}).([]net.Addr)
	if la, ok := ctx.Value(http.LocalAddrContextKey).(net.Addr); ok {
		addrs = append(addrs[:len(addrs):len(addrs)], la)
	}
	for _, a := range addrs {
		ta, ok := a.(*net.TCPAddr)
		if !ok || ta.Port != ra.Port {
			continue
		}
		if ta.IP.Equal(ra.IP) || (ta.IP == nil || ta.IP.IsUnspecified()) && ra.IP.IsLoopback() {
			return true
		}
	}
	return false
}

// selfErr refuses a preview port that is the gateway's own listener.
func selfErr(port int) error {
	return fault.New(fault.Policy, "port %d is the gateway's own (this sandbox shares the gateway's host): a preview cannot reach the gateway itself", port)
}

// filterOwnOriginCookies rewrites the Set-Cookie fields of an answer served on a preview's
// own origin: the gateway's own preview cookie (named name) cannot be set or replaced by the
// sandbox, and a Domain attribute goes, so every cookie stays with the preview's host and one
// preview cannot set cookies for the others (or a parent domain).
func filterOwnOriginCookies(h http.Header, name string) {
	vals := h.Values("Set-Cookie")
	if len(vals) == 0 {
		return
	}
	h.Del("Set-Cookie")
	for _, v := range vals {
		parts := strings.Split(v, ";")
		cname, _, _ := strings.Cut(parts[0], "=")
		if strings.TrimSpace(cname) == name {
			continue
		}
		kept := parts[:1]
		for _, attr := range parts[1:] {
			k, _, _ := strings.Cut(attr, "=")
			if strings.EqualFold(strings.TrimSpace(k), "domain") {
				continue
			}
			kept = append(kept, attr)
		}
		h.Add("Set-Cookie", strings.Join(kept, ";"))
	}
}

// dropCookie removes the cookies named name from a request's Cookie fields, keeping the
// others as they were sent.
func dropCookie(h http.Header, name string) {
	vals := h.Values("Cookie")
	if len(vals) == 0 {
		return
	}
	h.Del("Cookie")
	var kept []string
	for _, v := range vals {
		for _, c := range strings.Split(v, ";") {
			n, _, _ := strings.Cut(c, "=")
			if strings.TrimSpace(n) != name && strings.TrimSpace(c) != "" {
				kept = append(kept, strings.TrimSpace(c))
			}
		}
	}
	if len(kept) > 0 {
		h.Set("Cookie", strings.Join(kept, "; "))
	}
}

// siteWideClear lists what Clear-Site-Data "*" asks, less "cookies".
var siteWideClear = []string{`"cache"`, `"storage"`, `"executionContexts"`}

// filterClearSiteData keeps a preview's Clear-Site-Data to its own origin: browsers clear
// cookies for the whole site (the registrable domain), which every preview — and maybe the
// console's identity provider — shares, so "cookies" goes and "*" means the rest.
func filterClearSiteData(h http.Header) {
	vals := h.Values("Clear-Site-Data")
	if len(vals) == 0 {
		return
	}
	h.Del("Clear-Site-Data")
	var kept []string
	add := func(d string) {
		for _, k := range kept {
			if k == d {
				return
			}
		}
		kept = append(kept, d)
	}
	for _, v := range vals {
		for _, d := range strings.Split(v, ",") {
			switch d = strings.TrimSpace(d); d {
			case `"cookies"`, "":
			case `"*"`:
				for _, x := range siteWideClear {
					add(x)
				}
			default:
				add(d)
			}
		}
	}
	if len(kept) > 0 {
		h.Set("Clear-Site-Data", strings.Join(kept, ", "))
	}
}
