package egress

import (
	"strings"
	"testing"
)

func TestParseRule(t *testing.T) {
	good := []struct {
		in       string
		name     string
		wildcard bool
		prefix   string
		port     int
	}{
		{"api.example.com", "api.example.com", false, "", 0},
		{"API.Example.com.", "api.example.com", false, "", 0},
		{"api.example.com:443", "api.example.com", false, "", 443},
		{"*.pypi.org", "pypi.org", true, "", 0},
		{"*.pypi.org:443", "pypi.org", true, "", 443},
		{"localhost", "localhost", false, "", 0},
		{"10.0.0.0/8", "", false, "10.0.0.0/8", 0},
		{"10.1.2.3/8:5432", "", false, "10.0.0.0/8", 5432},
		{"192.0.2.7", "", false, "192.0.2.7/32", 0},
		{"192.0.2.7:22", "", false, "192.0.2.7/32", 22},
		{"fd00::/8", "", false, "fd00::/8", 0},
		{"[fd00::/8]:443", "", false, "fd00::/8", 443},
		{"[2001:db8::1]:443", "", false, "2001:db8::1/128", 443},
		{"2001:db8::1", "", false, "2001:db8::1/128", 0},
	}
	for _, c := range good {
		r, err := ParseRule(c.in)
		if err != nil {
			t.Errorf("ParseRule(%q): %v", c.in, err)
			continue
		}
		prefix := ""
		if r.Prefix.IsValid() {
			prefix = r.Prefix.String()
		}
		if r.Name != c.name || r.Wildcard != c.wildcard || prefix != c.prefix || r.Port != c.port {
			t.Errorf("ParseRule(%q) = %+v, want name %q wildcard %v prefix %q port %d", c.in, r, c.name, c.wildcard, c.prefix, c.port)
		}
	}
	bad := []struct{ in, says string }{
		{"", "empty"},
		{"*", "may only start"},
		{"*.com", "two labels"},
		{"api.*.com", "'*' may only start"},
		{"api.example.com:0", "1 to 65535"},
		{"api.example.com:http", "1 to 65535"},
		{"api.example.com:70000", "1 to 65535"},
		{"10.0.0.0/33", "not a CIDR"},
		{"exa mple.com", "character"},
		{"-bad.example.com", "start or end"},
		{"a..b", "1 to 63"},
		{"http://example.com", "port"},
		{"[fd00::/8", "without its ']'"},
		{"[fd00::]x", "only :port"},
	}
	for _, c := range bad {
		_, err := ParseRule(c.in)
		if err == nil || !strings.Contains(err.Error(), c.says) {
			t.Errorf("ParseRule(%q) = %v, want an error saying %q", c.in, err, c.says)
		}
	}
	if _, err := ParseRules([]string{"ok.example.com", "bad host", "*.x"}); err == nil || !strings.Contains(err.Error(), `"bad host"`) || !strings.Contains(err.Error(), `"*.x"`) {
		t.Errorf("ParseRules names every bad entry: %v", err)
	}
}

func TestRulesAllows(t *testing.T) {
	rs, err := ParseRules([]string{"api.example.com:443", "*.pypi.org", "10.0.0.0/8:5432", "192.0.2.1"})
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		host string
		port int
		want bool
	}{
		{"api.example.com", 443, true},
		{"API.example.com.", 443, true},
		{"api.example.com", 80, false},
		{"example.com", 443, false},
		{"files.pypi.org", 443, true},
		{"a.b.pypi.org", 80, true},
		{"pypi.org", 443, false},
		{"evilpypi.org", 443, false},
		{"10.3.4.5", 5432, true},
		{"10.3.4.5", 22, false},
		{"192.0.2.1", 8080, true},
		{"[::ffff:192.0.2.1]", 80, true},
		{"192.0.2.2", 80, false},
		{"1.2.3.4", 443, false},
	}
	for _, c := range cases {
		if got := rs.Allows(c.host, c.port); got != c.want {
			t.Errorf("Allows(%q, %d) = %v, want %v", c.host, c.port, got, c.want)
		}
	}
	if !rs.AllowsName("files.pypi.org") || !rs.AllowsName("api.example.com") || rs.AllowsName("denied.test") || rs.AllowsName("10.3.4.5") {
		t.Error("AllowsName: want names of name rules only")
	}
	if got := Suggest("Denied.Test", 443); got != "denied.test:443" {
		t.Errorf("Suggest = %q", got)
	}
	if got := Suggest("192.0.2.9", 443); got != "192.0.2.9/32:443" {
		t.Errorf("Suggest = %q", got)
	}
	if got := Suggest("2001:db8::1", 443); got != "[2001:db8::1/128]:443" {
		t.Errorf("Suggest = %q", got)
	}
	for _, s := range []string{Suggest("denied.test", 443), Suggest("192.0.2.9", 443), Suggest("2001:db8::1", 443)} {
		if _, err := ParseRule(s); err != nil {
			t.Errorf("Suggest's %q does not parse: %v", s, err)
		}
	}
}
