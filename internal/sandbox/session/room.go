// Package session is the domain's session room: a session's life as its caller sees it —
// made (or forked from a snapshot), found by id or as the caller's default (with who may see
// it and use its profile), listed, and destroyed (its work cancelled, its sandbox removed, a
// failed removal retried by the sweeper) — and what never changes about a session, remembered
// so that an execution resolves it without a round trip (identities.go).
//
// What it needs of other rooms it takes at construction: the park room (thawing before a
// destroy, forks, lifetimes, the idle capture a destroyed session was parked in), the quota
// and account rooms, and as functions the facade's provider-call wrapper, its spans, and a
// task's cancellation (the execution route's).
package session

import (
	"context"
	"errors"
	"log/slog"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/sandgate/sandgate/internal/fault"
	"github.com/sandgate/sandgate/internal/principal"
	"github.com/sandgate/sandgate/internal/sandbox/account"
	"github.com/sandgate/sandgate/internal/sandbox/clock"
	"github.com/sandgate/sandgate/internal/sandbox/park"
	"github.com/sandgate/sandgate/internal/sandbox/profile"
	"github.com/sandgate/sandgate/internal/sandbox/quota"
	"github.com/sandgate/sandgate/internal/store"
)

// Options build a Room. Every field is required (Park may be set after New, before use:
// the park room is built with this room's functions).
type Options struct {
	Store    store.Store
	Profiles *profile.Set
	Quota    *quota.Room
	Account  *account.Room
	Park     *park.Room
	Clock    clock.Clock
	NewID    func() string
	Log      *slog.Logger

	// Call runs provider call op of prof (f) in a span, counting a provider-side failure.
	Call func(ctx context.Context, prof *profile.Profile, op string, f func(ctx context.Context) error) error
	// StartSpan starts one of the domain's spans; EndSpan ends it, marked failed with err.
	StartSpan func(ctx context.Context, name string, attrs ...attribute.KeyValue) (context.Context, trace.Span)
	EndSpan   func(span trace.Span, err error)
	// Secrets are the bindings a new session of owner ("" shared) in prof keeps for the
	// secrets named and the profile's own: name → placeholder (the secrets room's
	// Placeholders).
	Secrets func(ctx context.Context, owner string, prof *profile.Profile, names []string) (map[string]string, error)
	// CancelTask cancels task id of p's, saying why.
	CancelTask func(ctx context.Context, p principal.Principal, id, why string) error
}

// Room is the session room. Build it with New.
type Room struct {
	*Options
	ids *identities
}

// New returns the room. o stays the room's: a field set on it later (Park) is seen.
func New(o *Options) *Room { return &Room{Options: o, ids: newIdentities()} }

// Forget drops what the room remembers of session id (found gone).
func (sr *Room) Forget(id string) { sr.ids.forget(id) }

// classifyAs keeps a fault's kind, or files an unclassified error under kind with msg.
func classifyAs(err error, kind fault.Kind, msg string) error {
	var fe *fault.Error
	if errors.As(err, &fe) {
		return err
	}
	return fault.Wrap(kind, err, "%s", msg)
}

// classify is classifyAs with the generic message.
func classify(err error, kind fault.Kind) error {
	return classifyAs(err, kind, "sandbox operation failed")
}
