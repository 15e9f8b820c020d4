package api

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"time"

	"github.com/sandgate/sandgate/internal/api/apigen"
	"github.com/sandgate/sandgate/internal/fault"
	"github.com/sandgate/sandgate/internal/sandbox"
)

// UpdateSession applies a JSON merge patch (RFC 7396) to a session's name, labels and
// lifetime. The generated body type cannot tell a member set to null from one left out, so
// the patch is read from the body as the gate validated it.
func (s *Server) UpdateSession(ctx context.Context, req apigen.UpdateSessionRequestObject) (apigen.UpdateSessionResponseObject, error) {
	p, err := caller(ctx)
	if err != nil {
		return nil, err
	}
	edit, err := sessionEdit(bodyOf(ctx))
	if err != nil {
		return nil, err
	}
	sess, err := s.sandbox.EditSession(ctx, p, req.SessionId, deref(req.Params.Profile), edit)
	if err != nil {
		return nil, err
	}
	owner := ""
	if p.Admin && sess.OwnerID != "" && sess.OwnerID != p.ID {
		owner = s.sandbox.OwnerLabel(ctx, sess.OwnerID)
	}
	return apigen.UpdateSession200JSONResponse(sessionView(sess, owner != "", owner)), nil
}

// sessionEdit reads a SessionPatch body (openapi.yaml; already validated against it) into
// the domain's edit, keeping null apart from absent.
func sessionEdit(body []byte) (sandbox.SessionEdit, error) {
	var members map[string]json.RawMessage
	if err := json.Unmarshal(body, &members); err != nil || members == nil {
		return sandbox.SessionEdit{}, fault.New(fault.Validation, "the body must be a JSON object (a merge patch of the session: name, labels, timeout_s)")
	}
	null := func(raw json.RawMessage) bool { return bytes.Equal(bytes.TrimSpace(raw), []byte("null")) }
	var e sandbox.SessionEdit
	if raw, ok := members["name"]; ok {
		name := ""
		if !null(raw) {
			if err := json.Unmarshal(raw, &name); err != nil {
				return e, fault.New(fault.Validation, "name must be a string or null")
			}
		}
		e.Name = &name
	}
	if raw, ok := members["labels"]; ok {
		if null(raw) {
			e.ClearLabels = true
		} else if err := json.Unmarshal(raw, &e.Labels); err != nil {
			return e, fault.New(fault.Validation, "labels must be an object of strings (null removes a label)")
		}
	}
	if raw, ok := members["timeout_s"]; ok {
		var secs int
		if !null(raw) {
			if err := json.Unmarshal(raw, &secs); err != nil {
				return e, fault.New(fault.Validation, "timeout_s must be a whole number of seconds or null")
			}
		}
		d := time.Duration(secs) * time.Second
		e.Lifetime = &d
	}
	return e, nil
}

// labelSelector reads the `label` query parameters (openapi.yaml, LabelSelector): each
// `key=value`, split at the first "=", all to match. A selector without "=" or with an empty
// key, or one key asked for two values, is a fault.Validation naming it.
func labelSelector(sel *apigen.LabelSelector) (map[string]string, error) {
	if sel == nil || len(*sel) == 0 {
		return nil, nil
	}
	out := make(map[string]string, len(*sel))
	for _, s := range *sel {
		k, v, ok := strings.Cut(s, "=")
		if !ok || k == "" {
			return nil, fault.New(fault.Validation, "label selector '%s' must be key=value, e.g. ?label=team=ml (repeat label= to require several)", s)
		}
		if prev, dup := out[k]; dup && prev != v {
			return nil, fault.New(fault.Validation, "label selectors ask for label '%s' to be both '%s' and '%s'; no session carries both", k, prev, v)
		}
		out[k] = v
	}
	return out, nil
}
