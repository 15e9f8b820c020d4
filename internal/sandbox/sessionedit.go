package sandbox

import (
	"context"
	"time"

	"github.com/sandgate/sandgate/internal/fault"
	"github.com/sandgate/sandgate/internal/principal"
	"github.com/sandgate/sandgate/internal/sandbox/names"
	"github.com/sandgate/sandgate/internal/store"
)

// MaxSessionLabels bounds the labels of a session (openapi.yaml, CreateSessionRequest and
// SessionPatch: maxProperties 32).
const MaxSessionLabels = 32

// SessionEdit is a change of a session's name, labels and lifetime (PATCH /v1/sessions/{id},
// a JSON merge patch, RFC 7396). Nil fields are kept.
type SessionEdit struct {
	// Name replaces the name ("" clears it).
	Name *string
	// ClearLabels removes every label before Labels applies.
	ClearLabels bool
	// Labels merge into the labels: a nil value removes that label.
	Labels map[string]*string
	// Lifetime ends the session this long from now, as its OnExpiry says (0: no lifetime);
	// SetSessionLifetime's rules.
	Lifetime *time.Duration
}

// EditSession applies e to session id and returns the session as it then stands. The name
// and labels change in one step, the row locked, so concurrent edits of different labels all
// apply.
//
// Errors: those of GetSession (fault.NotFound for an unknown or another principal's
// session); fault.Conflict for a per_call profile; fault.Forbidden for the shared session of
// a per_runtime profile but for admins; fault.Conflict for a lifetime of a default session;
// fault.Validation for a control character in the name
// or a label, or more than MaxSessionLabels labels; with Lifetime, those of
// SetSessionLifetime (checked first: a refused lifetime changes nothing).
func (s *Service) EditSession(ctx context.Context, p principal.Principal, id, profile string, e SessionEdit) (Session, error) {
	sess, prof, ephemeral, err := s.sessions.Resolve(ctx, p, id, profile)
	if err != nil {
		return Session{}, err
	}
	if ephemeral {
		return Session{}, fault.New(fault.Conflict, "profile '%s' has scope per_call and keeps no sessions", prof.Name)
	}
	if sess.OwnerID == "" && !p.Admin {
		return Session{}, fault.New(fault.Forbidden, "sandbox session '%s' is the one session of per_runtime profile '%s', shared by every caller; only an administrator may change it", sess.ID, prof.Name)
	}
	if e.Lifetime != nil {
		if sess.IsDefault {
			return Session{}, fault.New(fault.Conflict, "a default session has no lifetime; create a session with timeout_s")
		}
		if _, err := s.SetSessionLifetime(ctx, p, sess.ID, profile, *e.Lifetime, false); err != nil {
			return Session{}, err
		}
	}
	row, err := s.store.EditSession(ctx, sess.ID, func(r *store.Session) error {
		if e.Name != nil {
			r.Name = *e.Name
		}
		if e.ClearLabels {
			r.Labels = map[string]string{}
		}
		for k, v := range e.Labels {
			if v == nil {
				delete(r.Labels, k)
			} else {
				r.Labels[k] = *v
			}
		}
		if len(r.Labels) > MaxSessionLabels {
			return fault.New(fault.Validation, "a session has at most %d labels, and this change would leave %d; remove some (set them to null)", MaxSessionLabels, len(r.Labels))
		}
		return names.Session(r.Name, r.Labels)
	})
	if err != nil {
		return Session{}, sessionErr(err, id)
	}
	return view(row), nil
}
