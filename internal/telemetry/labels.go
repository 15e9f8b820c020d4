package telemetry

import (
	"net/http"
	"strconv"
	"strings"

	"github.com/go-chi/chi/v5"

	"github.com/sandgate/sandgate/internal/auth"
	"github.com/sandgate/sandgate/internal/broker"
	"github.com/sandgate/sandgate/internal/fault"
	"github.com/sandgate/sandgate/internal/store"
)

// Every label value of every metric comes from a set fixed when the process starts; a value
// outside its set is reported as LabelOther. A metric's series are then bounded by the
// configuration and the code, never by what a caller sends: an HTTP method, a path, a status
// code a sandbox's server answers with, a tool name (issue 33: 20 requests with made-up
// method names grew /metrics from 438 KB to 28 MB).
const (
	// LabelOther stands for any value outside a label's fixed set.
	LabelOther = "other"
	// RouteUnmatched is the route of a request no route of the router matched (404, or a
	// method the router does not route: 405).
	RouteUnmatched = "unmatched"
)

// labelSet is a label's fixed set of values.
type labelSet map[string]bool

func newLabelSet(values ...string) labelSet {
	s := make(labelSet, len(values))
	for _, v := range values {
		s[v] = true
	}
	return s
}

// of is v when the set holds it, else LabelOther.
func (s labelSet) of(v string) string {
	if s[v] {
		return v
	}
	return LabelOther
}

var (
	// httpMethods are the methods of RFC 9110 §9 and PATCH (RFC 5789): the HTTP metrics'
	// `method` label, and the method in server spans' names.
	httpMethods = newLabelSet(http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodPatch,
		http.MethodDelete, http.MethodConnect, http.MethodOptions, http.MethodTrace)
	taskStatuses = newLabelSet(TaskStatuses...)
	// faultKinds are internal/fault's kinds (the provider errors' `kind`).
	faultKinds = newLabelSet(string(fault.Config), string(fault.Capability), string(fault.Policy), string(fault.Timeout),
		string(fault.Provision), string(fault.Gone), string(fault.NotFound), string(fault.Broker), string(fault.Validation),
		string(fault.Forbidden), string(fault.Conflict), string(fault.Paused), string(fault.TooLarge), string(fault.Quota),
		string(fault.Unavailable), string(fault.Internal))
	// providerOps are the provider calls the domain counts failures of (sandbox.Observer).
	providerOps = newLabelSet("create", "attach", "exec", "write_file", "destroy")
	authReasons = newLabelSet(auth.ReasonMissing, auth.ReasonMalformed, auth.ReasonUntrustedIssuer, auth.ReasonSignature, auth.ReasonExpired, auth.ReasonNotYetValid, auth.ReasonAudience, auth.ReasonClaims, auth.ReasonIssuerUnavailable, auth.ReasonPrincipalUnrecorded,
		auth.ReasonUnknownKey, auth.ReasonRevoked, auth.ReasonKeysUnavailable)
	deliveries   = newLabelSet(broker.DeliveryRun, broker.DeliveryDuplicate, broker.DeliveryDeferred, broker.DeliveryFailed)
	sessionState = newLabelSet(store.SessionProvisioned, store.SessionUnprovisioned, store.SessionDestroyFailed)
)

// methodLabel is m when it is one of the standard methods (case matters: RFC 9110 §9.1),
// else LabelOther.
func methodLabel(m string) string { return httpMethods.of(m) }

// codeLabel is the status code's decimal form when Go knows the code (http.StatusText), else
// LabelOther: a preview port passes on any code from 100 to 999 its sandbox's server sends.
func codeLabel(code int) string {
	if http.StatusText(code) == "" {
		return LabelOther
	}
	return strconv.Itoa(code)
}

// routeSet is the set of route patterns of router h as chi reports the pattern a request
// matched (chi.Context.RoutePattern), sub-routers and mounted handlers included; nil when h
// is no chi router.
func routeSet(h http.Handler) labelSet {
	routes, ok := h.(chi.Routes)
	if !ok {
		return nil
	}
	s := labelSet{}
	var walk func(r chi.Routes, parent string)
	walk = func(r chi.Routes, parent string) {
		for _, rt := range r.Routes() {
			if rt.SubRoutes != nil {
				walk(rt.SubRoutes, parent+rt.Pattern)
				continue
			}
			s[routePattern(parent+rt.Pattern)] = true
		}
	}
	walk(routes, "")
	return s
}

// routePattern writes a joined pattern as chi.Context.RoutePattern does: "/a/*/b" is "/a/b",
// and a trailing "/" goes (but for "/" itself).
func routePattern(p string) string {
	for strings.Contains(p, "/*/") {
		p = strings.ReplaceAll(p, "/*/", "/")
	}
	if p != "/" {
		p = strings.TrimSuffix(p, "//")
		p = strings.TrimSuffix(p, "/")
	}
	return p
}
