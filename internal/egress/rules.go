package egress

import (
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"strings"
)

// Rule is one entry of a policy's network_allow: a host name (api.example.com), a wildcard
// (*.example.com: any name below example.com, at any depth, not example.com itself), an IP
// address or a CIDR (10.0.0.0/8), each with an optional port (api.example.com:443,
// 10.0.0.0/8:5432, [fd00::/8]:443). Without a port every port is allowed.
type Rule struct {
	// Name is the lower-case host name without a trailing dot ("" for a CIDR rule);
	// Wildcard says it stands for the names below Name.
	Name     string
	Wildcard bool
	// Prefix is the CIDR (an IP address is its /32 or /128); invalid for a name rule.
	Prefix netip.Prefix
	// Port is the one port allowed, 0 for all.
	Port int
	// Entry is the entry as written.
	Entry string
}

// ParseRule parses one network_allow entry. Errors say what is wrong with the entry and what
// a valid one looks like.
func ParseRule(entry string) (Rule, error) {
	r := Rule{Entry: entry}
	s := strings.TrimSpace(entry)
	if s == "" {
		return r, fmt.Errorf("an empty entry: write a host name (api.example.com), a wildcard (*.example.com) or a CIDR (10.0.0.0/8), each with an optional :port")
	}
	host, port, err := splitPort(s)
	if err != nil {
		return r, fmt.Errorf("%q: %w", entry, err)
	}
	r.Port = port
	if p, err := netip.ParsePrefix(host); err == nil {
		r.Prefix = p.Masked()
		return r, nil
	}
	if a, err := netip.ParseAddr(host); err == nil {
		if a.Zone() != "" {
			return r, fmt.Errorf("%q: an address with a zone is not allowed", entry)
		}
		r.Prefix = netip.PrefixFrom(a.Unmap(), a.Unmap().BitLen())
		return r, nil
	}
	if strings.Contains(host, "/") {
		return r, fmt.Errorf("%q: not a CIDR (write one as 10.0.0.0/8 or fd00::/8)", entry)
	}
	name := strings.TrimSuffix(strings.ToLower(host), ".")
	if rest, ok := strings.CutPrefix(name, "*."); ok {
		r.Wildcard, name = true, rest
		if !strings.Contains(name, ".") {
			return r, fmt.Errorf("%q: a wildcard needs a domain of two labels at least (*.example.com)", entry)
		}
	}
	if err := checkName(name); err != nil {
		return r, fmt.Errorf("%q: %w", entry, err)
	}
	r.Name = name
	return r, nil
}

// splitPort splits host[:port] and [v6 or v6 CIDR]:port. A bare IPv6 address or CIDR has no
// port.
func splitPort(s string) (string, int, error) {
	if strings.HasPrefix(s, "[") {
		end := strings.Index(s, "]")
		if end < 0 {
			return "", 0, fmt.Errorf("a '[' without its ']'")
		}
		host, rest := s[1:end], s[end+1:]
		if rest == "" {
			return host, 0, nil
		}
		p, ok := strings.CutPrefix(rest, ":")
		if !ok {
			return "", 0, fmt.Errorf("only :port may follow ']'")
		}
		n, err := parsePort(p)
		return host, n, err
	}
	if strings.Count(s, ":") > 1 { // a bare IPv6 address or CIDR
		return s, 0, nil
	}
	host, p, ok := strings.Cut(s, ":")
	if !ok {
		return s, 0, nil
	}
	n, err := parsePort(p)
	return host, n, err
}

func parsePort(p string) (int, error) {
	n, err := strconv.Atoi(p)
	if err != nil || n < 1 || n > 65535 {
		return 0, fmt.Errorf("port %q is not a number from 1 to 65535", p)
	}
	return n, nil
}

// checkName checks a host name: labels of letters, digits, '-' and '_', 1 to 63 bytes, not
// starting or ending with '-'; 253 bytes at most.
func checkName(name string) error {
	if name == "" || len(name) > 253 {
		return fmt.Errorf("a host name must have 1 to 253 characters")
	}
	if strings.Contains(name, "*") {
		return fmt.Errorf("'*' may only start a wildcard, as in *.example.com")
	}
	for _, l := range strings.Split(name, ".") {
		if l == "" || len(l) > 63 {
			return fmt.Errorf("label %q of a host name must have 1 to 63 characters", l)
		}
		if l[0] == '-' || l[len(l)-1] == '-' {
			return fmt.Errorf("label %q of a host name may not start or end with '-'", l)
		}
		for _, c := range l {
			if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
				return fmt.Errorf("host name %q has a character other than letters, digits, '-', '_' and '.'", name)
			}
		}
	}
	return nil
}

// Rules are a parsed network_allow.
type Rules []Rule

// ParseRules parses every entry; the error names each bad entry.
func ParseRules(entries []string) (Rules, error) {
	out := make(Rules, 0, len(entries))
	var bad []string
	for _, e := range entries {
		r, err := ParseRule(e)
		if err != nil {
			bad = append(bad, err.Error())
			continue
		}
		out = append(out, r)
	}
	if len(bad) > 0 {
		return nil, fmt.Errorf("network_allow: %s", strings.Join(bad, "; "))
	}
	return out, nil
}

// matchName reports whether host name h (lower-case, no trailing dot) matches r.
func (r Rule) matchName(h string) bool {
	if r.Name == "" {
		return false
	}
	if r.Wildcard {
		return strings.HasSuffix(h, "."+r.Name)
	}
	return h == r.Name
}

// Allows reports whether a connection to host:port is allowed. host is a name or an IP
// literal; an IP literal is allowed only by a CIDR rule, a name only by a name rule.
func (rs Rules) Allows(host string, port int) bool {
	h := NormalizeHost(host)
	a, isIP := parseIP(h)
	for _, r := range rs {
		if r.Port != 0 && r.Port != port {
			continue
		}
		if isIP {
			if r.Prefix.IsValid() && r.Prefix.Contains(a) {
				return true
			}
			continue
		}
		if r.matchName(h) {
			return true
		}
	}
	return false
}

// AllowsName reports whether some rule allows name on some port: what the DNS answer for name
// depends on.
func (rs Rules) AllowsName(name string) bool {
	h := NormalizeHost(name)
	for _, r := range rs {
		if r.matchName(h) {
			return true
		}
	}
	return false
}

// NormalizeHost lower-cases host and strips a trailing dot and IPv6 brackets.
func NormalizeHost(host string) string {
	h := strings.TrimSuffix(strings.ToLower(strings.TrimSpace(host)), ".")
	return strings.TrimSuffix(strings.TrimPrefix(h, "["), "]")
}

func parseIP(h string) (netip.Addr, bool) {
	a, err := netip.ParseAddr(h)
	if err != nil {
		return netip.Addr{}, false
	}
	return a.Unmap(), true
}

// Suggest is the network_allow entry that would allow host:port: the host and port, an IP
// literal as its single-address CIDR.
func Suggest(host string, port int) string {
	h := NormalizeHost(host)
	if a, ok := parseIP(h); ok {
		p := netip.PrefixFrom(a, a.BitLen()).String()
		if a.Is6() {
			return "[" + p + "]:" + strconv.Itoa(port)
		}
		return p + ":" + strconv.Itoa(port)
	}
	return net.JoinHostPort(h, strconv.Itoa(port))
}
