package quota

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/sandgate/sandgate/internal/fault"
	"github.com/sandgate/sandgate/internal/principal"
	"github.com/sandgate/sandgate/internal/providers"
	"github.com/sandgate/sandgate/internal/store"
)

// The contexts quota (sandbox.quotas.contexts) bounds the named stateful contexts one
// principal holds across its sessions. Contexts live in sandboxd, not in Postgres: they are
// made explicitly (POST …/contexts) or implicitly by code naming one, and they die with their
// sandbox (destroyed, idle-reset, recreated) or on DELETE. So that the count holds across
// replicas without a round trip per execution:
//
//   - a context is recorded in the store (HoldContext: one row per session and name, with the
//     sandbox it lives in; the quota is checked in the same statement) when this replica first
//     sees the name used in that sandbox — then remembered here for contextSeenFor, so a
//     stateful execution in a known context costs nothing more;
//   - a row counts only while its sandbox is still its session's, so a reset or replaced
//     sandbox frees its contexts at once; the sweeper deletes such rows, and a destroyed
//     session takes its rows along (ON DELETE CASCADE);
//   - DELETE of a context deletes its row. Another replica that still remembers the name
//     would not record it again if it were used there soon after: the count may then miss
//     that context for at most contextSeenFor, after which the next use records it again.
//
// A session's default context (providers.DefaultContext, stateful profiles) comes with the
// session and is bounded by the sessions quota; it is not counted here. per_call sandboxes
// keep no context past their run and are not counted either.

// contextSeenFor is how long a replica trusts that a context it recorded is still recorded.
const contextSeenFor = time.Minute

// maxSeenContexts bounds the memory of recorded contexts; past it, expired entries go, and
// if none has expired, all of them (they are only a cache of the store).
const maxSeenContexts = 16384

type seenContext struct{ session, sandbox, name string }

// seenContexts remembers the contexts this replica recorded (key → when it stops trusting it).
type seenContexts struct {
	mu   sync.Mutex
	seen map[seenContext]time.Time
}

func (c *seenContexts) known(k seenContext, now time.Time) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	until, ok := c.seen[k]
	return ok && now.Before(until)
}

func (c *seenContexts) remember(k seenContext, now time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.seen == nil {
		c.seen = map[seenContext]time.Time{}
	}
	if len(c.seen) >= maxSeenContexts {
		for key, until := range c.seen {
			if !now.Before(until) {
				delete(c.seen, key)
			}
		}
		if len(c.seen) >= maxSeenContexts {
			clear(c.seen)
		}
	}
	c.seen[k] = now.Add(contextSeenFor)
}

// forget drops every remembered sandbox of session's context name.
func (c *seenContexts) forget(session, name string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for k := range c.seen {
		if k.session == session && k.name == name {
			delete(c.seen, k)
		}
	}
}

// ContextsErr refuses a context of p's past sandbox.quotas.contexts.
func (r *Room) ContextsErr(p principal.Principal) error {
	return fault.OverQuota(ContextRetry,
		"you hold %d named contexts across your sessions, the limit of sandbox.quotas.contexts", r.Contexts(p)).
		WithHint("delete one you no longer need (DELETE /v1/sessions/{id}/contexts/{name}) and try again, or run the code in the session's default context",
			"run the code without naming a context (the session's default context), or in one you already use")
}

// counted reports whether context name counts against the contexts quota.
func counted(name string) bool { return name != "" && name != providers.DefaultContext }

// HoldContext records that p uses context name of session sessionID in sandbox sandboxID,
// unless this replica recorded it recently. Errors: fault.Quota over sandbox.quotas.contexts
// (nothing is recorded then); fault.NotFound for a session destroyed meanwhile; a store
// failure (fault.Broker unless classified).
func (r *Room) HoldContext(ctx context.Context, p principal.Principal, sessionID, sandboxID, name string) error {
	if !counted(name) {
		return nil
	}
	k := seenContext{sessionID, sandboxID, name}
	now := r.clock.Now()
	if r.contexts.known(k, now) {
		return nil
	}
	err := r.store.HoldContext(ctx, store.Context{SessionID: sessionID, Name: name, SandboxID: sandboxID, OwnerID: p.ID, CreatedAt: now}, r.Contexts(p))
	var fe *fault.Error
	switch {
	case errors.Is(err, store.ErrQuota):
		return r.ContextsErr(p)
	case errors.Is(err, store.ErrNotFound):
		return fault.New(fault.NotFound, "sandbox session '%s' was destroyed while this operation ran", sessionID)
	case errors.As(err, &fe):
		return err
	case err != nil:
		return fault.Wrap(fault.Broker, err, "%s", "could not record the context")
	}
	r.contexts.remember(k, now)
	return nil
}

// ReleaseContext forgets context name of session sessionID (it was deleted); a store
// failure is logged (the row stops counting when its sandbox goes).
func (r *Room) ReleaseContext(ctx context.Context, sessionID, name string) {
	if !counted(name) {
		return
	}
	r.contexts.forget(sessionID, name)
	if err := r.store.ReleaseContext(context.WithoutCancel(ctx), sessionID, name); err != nil {
		r.log.Warn("forgetting a deleted context failed", "session_id", sessionID, "context", name, "err", err)
	}
}
