package mcp

import (
	"context"
	"encoding/json"
	"errors"
	"math"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/sandgate/sandgate/internal/fault"
	"github.com/sandgate/sandgate/internal/principal"
)

// CodeQuota is the JSON-RPC error code of an initialize refused because the caller holds
// sandbox.quotas.mcp_sessions MCP sessions on this replica (an implementation-defined server
// error, -32000 to -32099). Its data is QuotaErrorData.
const CodeQuota = -32029

// QuotaErrorData is the data of a CodeQuota error.
type QuotaErrorData struct {
	// Type is the problem type REST would answer with (…/problems/quota).
	Type string `json:"type"`
	// RetryAfter is in seconds, as HTTP's Retry-After.
	RetryAfter int `json:"retry_after"`
}

// quotaProblemType is the REST problem type of fault.Quota (internal/api maps kinds to
// https://sandgate.dev/problems/<kind>).
const quotaProblemType = "https://sandgate.dev/problems/" + string(fault.Quota)

// holdSessions is srv's receiving middleware that counts each MCP session against its
// principal's sandbox.quotas.mcp_sessions when it initializes (sandbox.Service.HoldMCPSession):
// the initialize handshake is what opens a lasting session (the protocol versions this
// server negotiates all begin with it; a probe without one, such as server/discover, leaves no
// session behind). Over the quota the initialize fails with CodeQuota and the SDK closes the
// half-made session; a session counts until it closes.
func (h *Handler) holdSessions(srv *sdk.Server) sdk.Middleware {
	return func(next sdk.MethodHandler) sdk.MethodHandler {
		return func(ctx context.Context, method string, req sdk.Request) (sdk.Result, error) {
			if method != "initialize" {
				return next(ctx, method, req)
			}
			p, ok := principalOfRequest(req)
			ss, isServer := req.GetSession().(*sdk.ServerSession)
			if !ok || !isServer {
				return next(ctx, method, req)
			}
			release, err := h.svc.HoldMCPSession(p, func() bool { return open(srv, ss) })
			if err != nil {
				return nil, quotaRPCError(err)
			}
			res, err := next(ctx, method, req)
			if err != nil {
				release()
			}
			return res, err
		}
	}
}

// open reports whether ss is one of srv's open sessions (the SDK forgets closed ones).
func open(srv *sdk.Server, ss *sdk.ServerSession) bool {
	for s := range srv.Sessions() {
		if s == ss {
			return true
		}
	}
	return false
}

// principalOfRequest is the principal of the HTTP request that carried req (bindPrincipal).
func principalOfRequest(req sdk.Request) (principal.Principal, bool) {
	extra := req.GetExtra()
	if extra == nil || extra.TokenInfo == nil {
		return principal.Principal{}, false
	}
	p, ok := extra.TokenInfo.Extra[principalKey].(principal.Principal)
	return p, ok && p.Key() == extra.TokenInfo.UserID
}

// quotaRPCError renders a fault.Quota refusal as the JSON-RPC error an MCP client reports.
func quotaRPCError(err error) error {
	var fe *fault.Error
	if !errors.As(err, &fe) || fe.Kind != fault.Quota {
		return err
	}
	data, _ := json.Marshal(QuotaErrorData{Type: quotaProblemType, RetryAfter: int(math.Ceil(fe.RetryAfter.Seconds()))})
	return &jsonrpc.Error{Code: CodeQuota, Message: fault.ForTool(err), Data: data}
}
