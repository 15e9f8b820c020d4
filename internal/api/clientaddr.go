package api

import (
	"net"
	"net/http"
	"net/netip"
	"strings"
)

// clientAddrs tells a request's client address: its peer, or — when the peer is one of the
// trusted reverse proxies (server.trusted_proxies) — the last X-Forwarded-For address that is
// not one of them (the one the nearest untrusted hop gave, which no client can forge).
type clientAddrs struct {
	trusted []netip.Prefix
}

// of returns r's client address as text ("" when its peer cannot be read).
func (c clientAddrs) of(r *http.Request) string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		host = r.RemoteAddr
	}
	peer, err := netip.ParseAddr(host)
	if err != nil {
		return host
	}
	peer = peer.Unmap()
	if !c.isTrusted(peer) {
		return peer.String()
	}
	hops := strings.Split(strings.Join(r.Header.Values("X-Forwarded-For"), ","), ",")
	for i := len(hops) - 1; i >= 0; i-- {
		a, err := netip.ParseAddr(strings.TrimSpace(hops[i]))
		if err != nil {
			break // a garbled entry: what is left of it is the client's own word
		}
		a = a.Unmap()
		if !c.isTrusted(a) {
			return a.String()
		}
		peer = a
	}
	return peer.String()
}

// addrBucket is what one client address is counted as: itself, or for IPv6 its /64 (the
// least a host is usually given, so that one host cannot take a fresh bucket per address).
func addrBucket(addr string) string {
	a, err := netip.ParseAddr(addr)
	if err != nil || !a.Is6() || a.Is4In6() {
		return addr
	}
	p, _ := a.Prefix(64)
	return p.String()
}

func (c clientAddrs) isTrusted(a netip.Addr) bool {
	for _, p := range c.trusted {
		if p.Contains(a) {
			return true
		}
	}
	return false
}
