package client

import (
	"context"
	"net/http"
)

// Pause freezes a session's sandbox (POST /v1/sessions/{id}/pause) and answers the session
// as it is now. Refused (409) while an execution runs in it and on per_call and attached
// profiles; a provider that cannot pause answers 422 capability on a strict profile (on a
// lenient one the session is held all the same and Warnings says so).
func (c *Client) Pause(ctx context.Context, sessionID string, editors ...RequestEditorFn) (*Session, error) {
	return want[Session](http.StatusOK)(c.Raw.PauseSession(ctx, sessionID, nil, editors...))
}

// Resume thaws a paused session (POST /v1/sessions/{id}/resume) and answers the session
// as it is now.
func (c *Client) Resume(ctx context.Context, sessionID string, editors ...RequestEditorFn) (*Session, error) {
	return want[Session](http.StatusOK)(c.Raw.ResumeSession(ctx, sessionID, nil, editors...))
}

// CreateSnapshot snapshots a session's workspace (POST /v1/sessions/{id}/snapshots, 201);
// name may be "". A session starts from it with CreateSessionRequest.FromSnapshot.
func (c *Client) CreateSnapshot(ctx context.Context, sessionID, name string, editors ...RequestEditorFn) (*Snapshot, error) {
	var req SnapshotRequest
	if name != "" {
		req.Name = &name
	}
	return want[Snapshot](http.StatusCreated)(c.Raw.CreateSnapshot(ctx, sessionID, nil, req, editors...))
}

// Snapshots lists one page of the caller's snapshots (GET /v1/snapshots); pass the page's
// NextCursor as params.Cursor for the next. params may be nil.
func (c *Client) Snapshots(ctx context.Context, params *ListSnapshotsParams, editors ...RequestEditorFn) (*SnapshotList, error) {
	return want[SnapshotList](http.StatusOK)(c.Raw.ListSnapshots(ctx, params, editors...))
}

// DeleteSnapshot deletes a snapshot (DELETE /v1/snapshots/{id}, 204).
func (c *Client) DeleteSnapshot(ctx context.Context, snapshotID string, editors ...RequestEditorFn) error {
	resp, err := c.Raw.DeleteSnapshot(ctx, snapshotID, editors...)
	return noContent(resp, err)
}

// PortLink signs a link to a preview port of a session (POST
// /v1/sessions/{id}/ports/{port}/links, 201) that works without a bearer token until it
// expires: to share, or with req.Personal to open in one's own browser.
func (c *Client) PortLink(ctx context.Context, sessionID string, port int, req PortLinkRequest, editors ...RequestEditorFn) (*PortLink, error) {
	return want[PortLink](http.StatusCreated)(c.Raw.CreatePortLink(ctx, sessionID, port, nil, req, editors...))
}

// UpdateSession renames, relabels or sets the lifetime of a session (PATCH
// /v1/sessions/{id}, a JSON merge patch, RFC 7396) and answers the session as it is now.
// patch.Name "" clears the name; a nil value in patch.Labels removes that label; patch.TimeoutS
// ends the session that many seconds from now (0: no lifetime). Another principal's session
// is 404.
func (c *Client) UpdateSession(ctx context.Context, sessionID string, patch SessionPatch, editors ...RequestEditorFn) (*Session, error) {
	return want[Session](http.StatusOK)(c.Raw.UpdateSessionWithApplicationMergePatchPlusJSONBody(ctx, sessionID, nil, patch, editors...))
}
