package devissuer

import (
	"crypto/rand"
	"html/template"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// grantDeviceCode is the device authorization grant's grant_type (RFC 8628 §3.4).
const grantDeviceCode = "urn:ietf:params:oauth:grant-type:device_code"

const (
	// DeviceCodeTTL is how long a device code waits for its user.
	DeviceCodeTTL = 10 * time.Minute
	// DevicePollInterval is the polling interval the issuer asks for (RFC 8628 §3.2).
	DevicePollInterval = time.Second
	// userCodeLetters are the letters of user codes: consonants only, no look-alikes
	// (RFC 8628 §6.1).
	userCodeLetters = "BCDFGHJKLMNPQRSTVWXZ"
)

// deviceGrant is one pending device authorization.
type deviceGrant struct {
	userCode string
	expires  time.Time
	lastPoll time.Time
	claims   *Claims // set once the user signed in
}

// newUserCode is 8 letters as XXXX-XXXX.
func newUserCode() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	var s strings.Builder
	for k, v := range b {
		if k == 4 {
			s.WriteByte('-')
		}
		s.WriteByte(userCodeLetters[int(v)%len(userCodeLetters)])
	}
	return s.String()
}

// normalizeUserCode drops what a user may type besides the letters (dashes, spaces, case).
func normalizeUserCode(s string) string {
	s = strings.ToUpper(strings.NewReplacer("-", "", " ", "").Replace(s))
	if len(s) == 8 {
		return s[:4] + "-" + s[4:]
	}
	return s
}

// deviceAuthorization answers the device authorization request (RFC 8628 §3.1–3.2).
func (i *Issuer) deviceAuthorization(w http.ResponseWriter, r *http.Request) {
	if err := r.ParseForm(); err != nil {
		tokenError(w, "invalid_request", err.Error())
		return
	}
	if r.PostForm.Get("client_id") != ClientID {
		writeJSON(w, http.StatusUnauthorized, map[string]string{"error": "invalid_client", "error_description": "unknown client_id; the dev issuer knows " + ClientID})
		return
	}
	device, user := rand.Text(), newUserCode()
	now := i.now()
	i.mu.Lock()
	for k, g := range i.devices { // drop expired grants
		if now.After(g.expires) {
			delete(i.devices, k)
		}
	}
	i.devices[device] = &deviceGrant{userCode: user, expires: now.Add(DeviceCodeTTL)}
	i.mu.Unlock()
	writeJSON(w, http.StatusOK, map[string]any{
		"device_code":               device,
		"user_code":                 user,
		"verification_uri":          i.url + "/device",
		"verification_uri_complete": i.url + "/device?user_code=" + url.QueryEscape(user),
		"expires_in":                int(DeviceCodeTTL.Seconds()),
		"interval":                  int(DevicePollInterval.Seconds()),
	})
}

var deviceTmpl = template.Must(template.New("d").Parse(pageHead + `<h1>Sign in a device</h1>{{if .Done}}<p>Signed in as <b>{{.Sub}}</b>. Return to your terminal.</p>{{else}}
<p>This issuer exists only under <code>gateway dev</code>. Check that the code matches the one your terminal shows, and pick who you are.</p>
<form method="post">
<label>Code <input name="user_code" value="{{.Code}}" required autocomplete="off"></label>
<label>Subject <input name="sub" value="dev" required pattern="[A-Za-z0-9._@-]{1,64}" autocomplete="username"></label>
<label>Groups (comma-separated) <input name="groups" value="dev"></label>
<label>Email <input name="email" type="email" value="dev@example.test"></label>
<button type="submit">Sign in</button></form>{{end}}</main></body></html>`))

// deviceForm is the verification page (RFC 8628 §3.3): the user code, prefilled from
// verification_uri_complete, and the sign-in fields.
func (i *Issuer) deviceForm(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	_ = deviceTmpl.Execute(w, map[string]any{"Code": r.URL.Query().Get("user_code")})
}

// deviceApprove signs the user in for the device grant of user_code.
func (i *Issuer) deviceApprove(w http.ResponseWriter, r *http.Request) {
	if err := r.ParseForm(); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	f := r.PostForm
	sub := strings.TrimSpace(f.Get("sub"))
	if sub == "" {
		http.Error(w, "subject is required", http.StatusBadRequest)
		return
	}
	var groups []string
	for _, g := range strings.Split(f.Get("groups"), ",") {
		if g = strings.TrimSpace(g); g != "" {
			groups = append(groups, g)
		}
	}
	if g := i.refusedGroup(groups); g != "" {
		http.Error(w, "group '"+g+"' is an administrator group of this gateway; restart `gateway dev` with --allow-admin to sign in with it", http.StatusForbidden)
		return
	}
	code := normalizeUserCode(f.Get("user_code"))
	now := i.now()
	i.mu.Lock()
	var grant *deviceGrant
	for _, g := range i.devices {
		if g.userCode == code && !now.After(g.expires) && g.claims == nil {
			grant = g
		}
	}
	if grant != nil {
		grant.claims = &Claims{Subject: sub, Groups: groups, Email: f.Get("email")}
	}
	i.mu.Unlock()
	if grant == nil {
		http.Error(w, "unknown, used or expired code; start the sign-in again from your terminal", http.StatusBadRequest)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	_ = deviceTmpl.Execute(w, map[string]any{"Done": true, "Sub": sub})
}

// tokenFromDevice answers the device access token request (RFC 8628 §3.4–3.5):
// authorization_pending until the user signed in, slow_down when polled faster than half
// the interval, expired_token after DeviceCodeTTL; the tokens once, then the code is spent.
func (i *Issuer) tokenFromDevice(w http.ResponseWriter, f url.Values) {
	if f.Get("client_id") != ClientID {
		tokenError(w, "invalid_client", "unknown client_id; the dev issuer knows "+ClientID)
		return
	}
	code := f.Get("device_code")
	now := i.now()
	i.mu.Lock()
	g, ok := i.devices[code]
	var claims *Claims
	tooFast := false
	if ok {
		switch {
		case now.After(g.expires):
			delete(i.devices, code)
		case g.claims != nil:
			claims = g.claims
			delete(i.devices, code) // single use
		default:
			tooFast = !g.lastPoll.IsZero() && now.Sub(g.lastPoll) < DevicePollInterval/2
			g.lastPoll = now
		}
	}
	i.mu.Unlock()
	switch {
	case !ok:
		tokenError(w, "invalid_grant", "unknown or used device_code")
	case claims != nil:
		i.issue(w, *claims)
	case now.After(g.expires):
		tokenError(w, "expired_token", "the device code expired; start the sign-in again")
	case tooFast:
		tokenError(w, "slow_down", "poll at most every interval seconds")
	default:
		tokenError(w, "authorization_pending", "the user has not signed in yet")
	}
}
