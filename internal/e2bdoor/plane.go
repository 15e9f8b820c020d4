package e2bdoor

import (
	"context"
	"fmt"
	"net/http"
	"strconv"

	"github.com/sandgate/sandgate/internal/fault"
	"github.com/sandgate/sandgate/internal/providers/e2b/wire"
	"github.com/sandgate/sandgate/internal/sandbox"
)

// The sandbox plane: E2B's SDKs send every request for a sandbox to E2B_SANDBOX_URL with
// E2b-Sandbox-Id and E2b-Sandbox-Port (49983 envd, 49999 the code interpreter), as to E2B's
// own sandbox proxy. The door finds the caller's session of that id and serves the port's
// API through the domain. Like E2B's proxy, it answers 502 for a sandbox that does not exist
// (or not for this caller: never reachable by another principal) or is paused, which the SDKs
// report as a sandbox that timed out.

type sessionKey struct{}

// sessionFrom is the session the sandbox-plane request was routed to.
func sessionFrom(ctx context.Context) sandbox.Session {
	return ctx.Value(sessionKey{}).(sandbox.Session)
}

func (h *Handler) serveSandbox(w http.ResponseWriter, r *http.Request) {
	id, port := r.Header.Get(wire.SandboxIDHeader), r.Header.Get(wire.SandboxPortHeader)
	var mux *http.ServeMux
	switch port {
	case strconv.Itoa(wire.EnvdPort):
		mux = h.envd
	case strconv.Itoa(wire.CodeInterpreterPort):
		mux = h.interp
	default:
		h.apiError(w, r, http.StatusBadRequest, "validation", fmt.Sprintf(
			"Sandgate's E2B door serves ports %d (envd) and %d (the code interpreter) of a sandbox, not %q; reach a program's own port through a preview link (POST /v1/sessions/{id}/ports/{port}/links)",
			wire.EnvdPort, wire.CodeInterpreterPort, port))
		return
	}
	sess, err := h.session(r, id)
	if err != nil {
		if fault.KindOf(err) == fault.NotFound {
			h.apiError(w, r, http.StatusBadGateway, "not-found", fmt.Sprintf("The sandbox %s was not found", id))
			return
		}
		h.fail(w, r, err)
		return
	}
	if sess.State == sandbox.StatePaused {
		if prof := h.profileNamed(mustPrincipal(r), sess.Profile); prof == nil || !prof.AutoResume {
			h.apiError(w, r, http.StatusBadGateway, "paused", fmt.Sprintf("The sandbox %s is paused: resume it with Sandbox.connect", id))
			return
		}
	}
	mux.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), sessionKey{}, sess)))
}
