package api

import (
	"net/http"
	"net/netip"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/sandgate/sandgate/internal/sandbox"
)

func TestConfineLocation(t *testing.T) {
	t.Parallel()
	const prefix = "/preview/tok"
	for _, tc := range []struct{ loc, want string }{
		{"/", "/preview/tok/"},
		{"/a/b?c=1#d", "/preview/tok/a/b?c=1#d"},
		{"/preview/tok", "/preview/tok"},
		{"/preview/tok/x", "/preview/tok/x"},
		{"/preview/tokx", "/preview/tok/preview/tokx"},
		{"/a/../../b", "/preview/tok/b"},
		{"/%7Euser/", "/preview/tok/%7Euser/"},
		{"next", "/preview/tok/dir/next"},
		{"./next", "/preview/tok/dir/next"},
		{"../up", "/preview/tok/up"},
		{"../../out", ""},
		{"?q=1", "/preview/tok/dir/page?q=1"},
		{"#frag", "/preview/tok/dir/page#frag"},
		{"http://localhost:8000/in", "/preview/tok/in"},
		{"HTTP://LOCALHOST:8000/in", "/preview/tok/in"},
		{"http://[::1]:8000/in", "/preview/tok/in"},
		{"http://localhost/in", ""}, // port 80, not the sandbox's 8000
		{"http://gw.example:8443/preview/tok/in", "/preview/tok/in"},
		{"https://gw.example:8443/preview/tok", "/preview/tok"},
		{"http://gw.example:8443/v1/me", ""},
		{"http://gw.example:8443/preview/tok/../../v1/me", ""},
		{"https://evil.example/", ""},
		{"//evil.example", ""},
		{"///evil.example", ""},
		{`\\evil.example`, ""},
		{`/\evil.example`, ""},
		{"/\t/evil.example", ""},
		{"/ /evil.example", ""},
		{"/%2e%2e/%2e%2e/v1/me", ""},
		{"/%2E%2E/x", ""},
		{"javascript:alert(1)", ""},
		{"data:text/html,hi", ""},
		{"http://user@localhost:8000/", ""},
		{"ftp://localhost:8000/", ""},
	} {
		got, ok := confineLocation(tc.loc, "/preview/tok/dir/page", prefix, "gw.example:8443", 8000)
		if tc.want == "" {
			assert.False(t, ok, "%q is refused (got %q)", tc.loc, got)
			continue
		}
		if assert.True(t, ok, "%q", tc.loc) {
			assert.Equal(t, tc.want, got, "%q", tc.loc)
		}
	}
}

func TestPreviewHeaderFilters(t *testing.T) {
	t.Parallel()
	h := http.Header{}
	h.Add("Set-Cookie", "a=1; Domain=example.com; Path=/; Secure")
	h.Add("Set-Cookie", "sandgate_preview=forged; Path=/")
	h.Add("Set-Cookie", "b=2;domain=.x;HttpOnly")
	h.Add("Set-Cookie", " sandgate_preview =forged")
	filterOwnOriginCookies(h, "sandgate_preview")
	assert.Equal(t, []string{"a=1; Path=/; Secure", "b=2;HttpOnly"}, h.Values("Set-Cookie"))

	for in, want := range map[string]string{
		`"*"`:                      `"cache", "storage", "executionContexts"`,
		`"cookies"`:                "",
		`"cookies", "cache"`:       `"cache"`,
		`"storage","*"`:            `"storage", "cache", "executionContexts"`,
		`"executionContexts"`:      `"executionContexts"`,
		`"cache", "cache", "junk"`: `"cache", "junk"`,
	} {
		h := http.Header{"Clear-Site-Data": {in}}
		filterClearSiteData(h)
		assert.Equal(t, want, h.Get("Clear-Site-Data"), in)
	}

	req := http.Header{"Cookie": {"a=1; sandgate_preview=tok; b=2", "sandgate_preview=other"}}
	dropCookie(req, "sandgate_preview")
	assert.Equal(t, []string{"a=1; b=2"}, req.Values("Cookie"))
	req = http.Header{"Cookie": {"sandgate_preview=tok"}}
	dropCookie(req, "sandgate_preview")
	assert.Empty(t, req.Values("Cookie"))

	assert.Equal(t, 0, previewHops(http.Header{"Via": {"1.1 ingress, 1.0 fred"}}))
	assert.Equal(t, 3, previewHops(http.Header{"Via": {"1.1 sandgate-preview, 1.1 ingress", "2 Sandgate-Preview,1.1 sandgate-preview (comment)"}}))
}

func TestClientAddress(t *testing.T) {
	t.Parallel()
	c := clientAddrs{trusted: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("::1/128")}}
	for _, tc := range []struct {
		peer, xff, want string
	}{
		{"192.0.2.1:5000", "203.0.113.9", "192.0.2.1"},                // an untrusted peer's X-Forwarded-For is its own word
		{"10.1.2.3:5000", "", "10.1.2.3"},                             // a proxy that names nobody
		{"10.1.2.3:5000", "203.0.113.9", "203.0.113.9"},               // the ingress names the client
		{"10.1.2.3:5000", "198.51.100.1, 203.0.113.9", "203.0.113.9"}, // the client's own entry before it is ignored
		{"10.1.2.3:5000", "203.0.113.9, 10.4.4.4", "203.0.113.9"},     // two trusted hops
		{"[::1]:5000", "10.4.4.4, 10.5.5.5", "10.4.4.4"},              // trusted all the way: the first
		{"10.1.2.3:5000", "garbage, 203.0.113.9", "203.0.113.9"},      // garbage left of the hops that count
		{"10.1.2.3:5000", "203.0.113.9, garbage", "10.1.2.3"},         // a garbled hop: no further
		{"[::ffff:10.1.2.3]:5000", "203.0.113.9", "203.0.113.9"},      // a mapped IPv4 peer
		{"10.1.2.3:5000", "[2001:db8::1]:443, 203.0.113.9", "203.0.113.9"},
	} {
		r := &http.Request{RemoteAddr: tc.peer, Header: http.Header{}}
		if tc.xff != "" {
			r.Header.Set("X-Forwarded-For", tc.xff)
		}
		assert.Equal(t, tc.want, c.of(r), "%s via %q", tc.peer, tc.xff)
	}
}

func TestAddressBuckets(t *testing.T) {
	t.Parallel()
	assert.Equal(t, "192.0.2.1", addrBucket("192.0.2.1"))
	assert.Equal(t, "2001:db8:1:2::/64", addrBucket("2001:db8:1:2:aaaa::1"))
	assert.Equal(t, addrBucket("2001:db8:1:2::1"), addrBucket("2001:db8:1:2:ffff:ffff:ffff:ffff"), "one /64, one bucket")
	assert.NotEqual(t, addrBucket("2001:db8:1:2::1"), addrBucket("2001:db8:1:3::1"))
	assert.Equal(t, "not an address", addrBucket("not an address"))
}

func TestPreviewSite(t *testing.T) {
	t.Parallel()
	sid := "0123456789abcdef0123456789abcdef"
	s := newPreviewSite("Preview.Example.com", "https://sandgate.example.com")
	assert.Equal(t, "https://8000-"+sid+".preview.example.com", s.origin(sid, 8000))
	assert.Equal(t, "__Host-sandgate_preview", s.cookie)
	assert.Equal(t, "https://8000-"+sid+".preview.example.com/__sandgate/open?path=%2Fa%3Fb&token=v2.x",
		s.openURL(sandbox.PortLink{Token: "v2.x", SessionID: sid, Port: 8000}, "/a?b"))
	dev := newPreviewSite("preview.localhost", "http://localhost:8080")
	assert.Equal(t, "http://1-"+sid+".preview.localhost:8080", dev.origin(sid, 1))
	assert.Equal(t, "sandgate_preview", dev.cookie)
	assert.Equal(t, "https://8000-"+sid+".p.example", newPreviewSite("p.example:443", "https://gw.example:8443").origin(sid, 8000))
	assert.Equal(t, "https://8000-"+sid+".p.example:9443", newPreviewSite("p.example:9443", "https://gw.example").origin(sid, 8000))

	for host, want := range map[string]bool{
		"8000-" + sid + ".preview.example.com":      true,
		"8000-" + sid + ".PREVIEW.example.com.:443": true,
		"65535-" + sid + ".preview.example.com":     true,
		"0-" + sid + ".preview.example.com":         false,
		"08000-" + sid + ".preview.example.com":     false,
		"65536-" + sid + ".preview.example.com":     false,
		"8000-" + sid[1:] + ".preview.example.com":  false,
		"8000-" + sid + "0.preview.example.com":     false,
		"8000_" + sid + ".preview.example.com":      false,
		"8000-" + sid + ".x.preview.example.com":    false,
		"x.8000-" + sid + ".preview.example.com":    false,
		"preview.example.com":                       false,
		"sandgate.example.com":                      false,
	} {
		_, _, ok := s.parseHost(host)
		assert.Equal(t, want, ok, host)
	}
	gotSID, gotPort, _ := s.parseHost("8000-" + sid + ".preview.example.com:443")
	assert.Equal(t, sid, gotSID)
	assert.Equal(t, 8000, gotPort)
	assert.True(t, s.serves("x.preview.example.com"))
	assert.True(t, s.serves("preview.example.com:443"))
	assert.False(t, s.serves("xpreview.example.com"))
	assert.False(t, s.serves("sandgate.example.com"))
	assert.False(t, previewSite{}.serves("preview.example.com"))

	for in, want := range map[string]string{
		"/a?b#c": "/a?b#c", "": "/", "a": "/", "//evil": "/", `/\evil`: "/", "/\t/evil": "/", "https://evil": "/",
	} {
		assert.Equal(t, want, localPath(in), in)
	}
}
