// Package egress is the egress proxy of sandboxes whose policy is network_egress: allowlist
// (or that use secrets): what a sandbox may reach, decided per sandbox by its Grant, on
// connections the sandbox can make in no other way (the docker provider gives such a
// container no network and a forwarder to a Unix socket this proxy serves; issue 39,
// docs/semantics.md §3).
//
// Rules. network_allow entries are host names, wildcards (*.pypi.org: the names below
// pypi.org), IP addresses and CIDRs, each with an optional port (ParseRule). A name is
// allowed only by a name rule and an IP literal only by a CIDR rule, so an allowed name does
// not open the addresses it resolves to.
//
// HTTP. Proxy.Serve answers the HTTP proxy protocol: a plain request (an absolute http://
// URL) is forwarded by its host, CONNECT host:port is tunnelled. In a tunnel that starts with
// a TLS ClientHello, the server name it carries must be the CONNECT host (peeked, not
// terminated), else the tunnel is closed. A refused request answers 403 with a body naming
// host:port and the network_allow entry that would allow it; every refusal is counted
// (MetricRequests), logged and handed to Config.RefusedFunc (the gateway audits it).
//
// Secrets. A host one of the grant's secrets is bound to is intercepted when reached over
// TLS (plain HTTP requests are forwarded with the placeholder as sent, so a value never
// crosses a network unencrypted): the proxy
// terminates TLS with a leaf certificate of the installation's CA (LoadOrCreateCA; the
// sandbox trusts its certificate, the key never leaves the gateway), replaces the secret's
// placeholder by its value in the request's headers (only there, and only for its hosts), and
// replaces every secret value of the grant by its placeholder in the response's headers and
// body, so an upstream that echoes a header cannot put the value into task output. Responses
// are decoded (the proxy negotiates compression itself) so the scrub sees the bytes. Hosts
// without bound secrets are tunnelled untouched.
//
// DNS. Proxy.ServeDNS answers DNS over a stream: only names a rule allows resolve
// (Config.Hosts first, else the gateway host's resolver); any other name is NXDOMAIN, so no
// question leaves the gateway for a name the sandbox may not reach.
package egress
