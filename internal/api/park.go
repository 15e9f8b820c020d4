package api

import (
	"context"
	"strings"
	"time"

	"github.com/sandgate/sandgate/internal/api/apigen"
	"github.com/sandgate/sandgate/internal/sandbox"
)

// Pause and resume, snapshots, and share links of preview ports (docs/semantics.md §8).

// PauseSession freezes a session's sandbox.
func (s *Server) PauseSession(ctx context.Context, req apigen.PauseSessionRequestObject) (apigen.PauseSessionResponseObject, error) {
	p, err := caller(ctx)
	if err != nil {
		return nil, err
	}
	sess, warnings, err := s.sandbox.PauseSession(ctx, p, req.SessionId, deref(req.Params.Profile))
	if err != nil {
		return nil, err
	}
	v := sessionView(sess, false, "")
	v.Warnings = nilIfEmpty(warnings)
	return apigen.PauseSession200JSONResponse(v), nil
}

// ResumeSession thaws a paused session.
func (s *Server) ResumeSession(ctx context.Context, req apigen.ResumeSessionRequestObject) (apigen.ResumeSessionResponseObject, error) {
	p, err := caller(ctx)
	if err != nil {
		return nil, err
	}
	sess, err := s.sandbox.ResumeSession(ctx, p, req.SessionId, deref(req.Params.Profile))
	if err != nil {
		return nil, err
	}
	return apigen.ResumeSession200JSONResponse(sessionView(sess, false, "")), nil
}

func snapshotView(r sandbox.Snapshot, owner string) apigen.Snapshot {
	return apigen.Snapshot{
		Id: r.ID, Name: ptr(r.Name), SessionId: r.SessionID, Profile: r.Profile, Provider: r.Provider,
		Kind: apigen.SnapshotKind(r.Kind), SizeBytes: r.SizeBytes, CreatedAt: r.CreatedAt, Owner: ptr(owner),
	}
}

// CreateSnapshot captures a session's sandbox.
func (s *Server) CreateSnapshot(ctx context.Context, req apigen.CreateSnapshotRequestObject) (apigen.CreateSnapshotResponseObject, error) {
	p, err := caller(ctx)
	if err != nil {
		return nil, err
	}
	name := ""
	if req.Body != nil {
		name = deref(req.Body.Name)
	}
	snap, err := s.sandbox.CreateSnapshot(ctx, p, req.SessionId, deref(req.Params.Profile), name)
	if err != nil {
		return nil, err
	}
	return apigen.CreateSnapshot201JSONResponse{
		Body:    snapshotView(snap, ""),
		Headers: apigen.CreateSnapshot201ResponseHeaders{Location: location(ctx, "/v1/snapshots/"+snap.ID)},
	}, nil
}

// ListSnapshots pages through the caller's snapshots.
func (s *Server) ListSnapshots(ctx context.Context, req apigen.ListSnapshotsRequestObject) (apigen.ListSnapshotsResponseObject, error) {
	p, err := caller(ctx)
	if err != nil {
		return nil, err
	}
	q := req.Params
	limit := 50
	if q.Limit != nil {
		limit = *q.Limit
	}
	rows, next, err := s.sandbox.ListSnapshots(ctx, p, sandbox.SnapshotFilter{SessionID: deref(q.SessionId), All: deref(q.All), Limit: limit, Cursor: deref(q.Cursor)})
	if err != nil {
		return nil, err
	}
	out := apigen.ListSnapshots200JSONResponse{Snapshots: []apigen.Snapshot{}, NextCursor: next}
	for _, r := range rows {
		owner := ""
		if p.Admin && r.OwnerID != "" {
			owner = s.sandbox.OwnerLabel(ctx, r.OwnerID)
		}
		out.Snapshots = append(out.Snapshots, snapshotView(r, owner))
	}
	return out, nil
}

// GetSnapshot returns one snapshot.
func (s *Server) GetSnapshot(ctx context.Context, req apigen.GetSnapshotRequestObject) (apigen.GetSnapshotResponseObject, error) {
	p, err := caller(ctx)
	if err != nil {
		return nil, err
	}
	snap, err := s.sandbox.GetSnapshot(ctx, p, req.SnapshotId)
	if err != nil {
		return nil, err
	}
	return apigen.GetSnapshot200JSONResponse(snapshotView(snap, "")), nil
}

// DeleteSnapshot deletes a snapshot and its capture.
func (s *Server) DeleteSnapshot(ctx context.Context, req apigen.DeleteSnapshotRequestObject) (apigen.DeleteSnapshotResponseObject, error) {
	p, err := caller(ctx)
	if err != nil {
		return nil, err
	}
	if err := s.sandbox.DeleteSnapshot(ctx, p, req.SnapshotId); err != nil {
		return nil, err
	}
	return apigen.DeleteSnapshot204Response{}, nil
}

// CreatePortLink signs a link to a preview port: to share, or personal.
func (s *Server) CreatePortLink(ctx context.Context, req apigen.CreatePortLinkRequestObject) (apigen.CreatePortLinkResponseObject, error) {
	p, err := caller(ctx)
	if err != nil {
		return nil, err
	}
	var o sandbox.LinkOptions
	if req.Body != nil {
		if req.Body.TtlS != nil {
			o.TTL = time.Duration(*req.Body.TtlS) * time.Second
		}
		o.Personal = deref(req.Body.Personal)
	}
	link, err := s.sandbox.CreatePortLink(ctx, p, req.SessionId, deref(req.Params.Profile), req.Port, o)
	if err != nil {
		return nil, err
	}
	out := apigen.CreatePortLink201JSONResponse{
		Url: strings.TrimSuffix(s.publicURL, "/") + PreviewPrefix + link.Token + "/", SessionId: link.SessionID, Port: link.Port,
		Personal: link.Personal, ExpiresAt: link.ExpiresAt.UTC(),
	}
	if s.preview.on() {
		out.Url = s.preview.openURL(link, "/")
		if link.Personal {
			openBy := link.OpenBy.UTC()
			out.OpenBy = &openBy
		}
	}
	return out, nil
}
