package api

import (
	"context"

	"github.com/sandgate/sandgate/internal/api/apigen"
	"github.com/sandgate/sandgate/internal/sandbox"
)

// ListAuditEvents pages through the audit log (admins only; docs/semantics.md §14).
func (s *Server) ListAuditEvents(ctx context.Context, req apigen.ListAuditEventsRequestObject) (apigen.ListAuditEventsResponseObject, error) {
	p, err := caller(ctx)
	if err != nil {
		return nil, err
	}
	q := req.Params
	limit := 50
	if q.Limit != nil {
		limit = *q.Limit
	}
	events, next, err := s.sandbox.Audit(ctx, p, sandbox.AuditQuery{
		Principal: deref(q.Principal), SessionID: deref(q.SessionId), Kind: string(deref(q.Kind)), APIKeyID: deref(q.ApiKeyId),
		Since: deref(q.Since), Until: deref(q.Until), Limit: limit, Cursor: deref(q.Cursor),
	})
	if err != nil {
		return nil, err
	}
	out := apigen.ListAuditEvents200JSONResponse{Events: []apigen.AuditEvent{}, NextCursor: next}
	for _, e := range events {
		v := apigen.AuditEvent{
			Id: e.ID, At: e.At, Kind: apigen.AuditKind(e.Kind), PrincipalId: e.PrincipalID, Principal: e.Principal,
			SessionId: e.SessionID, Profile: e.Profile, TaskId: ptr(e.TaskID), Target: ptr(e.Target), Digest: ptr(e.Digest),
			Excerpt: ptr(e.Excerpt), Size: ptr(e.Size), Status: e.Status, ErrorType: ptr(e.ErrorType),
			ExitCode: e.ExitCode, DurationMs: e.DurationMS, FinishedAt: e.FinishedAt, ApiKeyId: ptr(e.APIKeyID),
		}
		if e.Operation != "" {
			op := apigen.AuditEventOperation(e.Operation)
			v.Operation = &op
		}
		out.Events = append(out.Events, v)
	}
	return out, nil
}
