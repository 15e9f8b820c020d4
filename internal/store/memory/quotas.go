package memory

import (
	"cmp"
	"context"
	"encoding/json"
	"slices"

	"github.com/sandgate/sandgate/internal/store"
)

// contextKey is a contexts row's primary key (session_id, name).
type contextKey struct{ session, name string }

// HoldContext records context c (its owner must be a principal, its session must exist:
// store.ErrNotFound) unless the owner holds limit live contexts besides it (limit ≤ 0: no
// limit); then store.ErrQuota. Recording it again moves it to c.SandboxID and keeps its owner
// and creation time. A context is live while its sandbox is its session's.
func (s *Store) HoldContext(ctx context.Context, c store.Context, limit int) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	owner, err := uuidText(c.OwnerID)
	if err != nil {
		return err
	}
	if _, ok := s.sessions[c.SessionID]; !ok {
		return store.ErrNotFound
	}
	key := contextKey{c.SessionID, c.Name}
	if limit > 0 && s.liveContexts(owner, key) >= limit {
		return store.ErrQuota
	}
	if r, ok := s.contexts[key]; ok {
		r.SandboxID = c.SandboxID
		return nil
	}
	if owner, err = s.owner("contexts", owner); err != nil {
		return err
	}
	s.contexts[key] = &store.Context{SessionID: c.SessionID, Name: c.Name, SandboxID: c.SandboxID, OwnerID: owner, CreatedAt: ts(c.CreatedAt)}
	return nil
}

// liveContexts counts owner's contexts that live in their session's sandbox, but for
// except. Call with mu held.
func (s *Store) liveContexts(owner string, except contextKey) int {
	n := 0
	for k, r := range s.contexts {
		if k != except && r.OwnerID == owner && s.contextLive(r) {
			n++
		}
	}
	return n
}

// contextLive: r's sandbox is its session's (a session without a sandbox has a NULL one,
// which matches nothing). Call with mu held.
func (s *Store) contextLive(r *store.Context) bool {
	sess, ok := s.sessions[r.SessionID]
	return ok && sess.SandboxID != "" && sess.SandboxID == r.SandboxID
}

// ReleaseContext forgets context name of session sessionID.
func (s *Store) ReleaseContext(ctx context.Context, sessionID, name string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.contexts, contextKey{sessionID, name})
	return nil
}

// DeleteStaleContexts removes the contexts that do not live in their session's sandbox.
func (s *Store) DeleteStaleContexts(ctx context.Context) (int64, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	var n int64
	for k, r := range s.contexts {
		if !s.contextLive(r) {
			delete(s.contexts, k)
			n++
		}
	}
	return n, nil
}

// DropOldestOutputs keeps ownerID's newest finished results (by finished time, then id,
// newest first) whose output bytes add up to at most keep; older ones get blank's keys merged
// into their result (when it is a JSON object, as jsonb's ||) and keep no output bytes.
func (s *Store) DropOldestOutputs(ctx context.Context, ownerID string, keep int64, blank json.RawMessage) (int64, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	owner, err := uuidText(ownerID)
	if err != nil {
		return 0, err
	}
	var over map[string]json.RawMessage
	if err := json.Unmarshal(blank, &over); err != nil {
		return 0, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	var kept []*store.Task
	for id, n := range s.outputs {
		if t := s.tasks[id]; t != nil && n > 0 && t.OwnerID == owner {
			kept = append(kept, t)
		}
	}
	slices.SortFunc(kept, func(a, b *store.Task) int {
		return cmp.Or(b.FinishedAt.Compare(*a.FinishedAt), cmp.Compare(b.ID, a.ID))
	})
	var upto, changed int64
	for _, t := range kept {
		upto += s.outputs[t.ID]
		if upto <= keep {
			continue
		}
		var res map[string]json.RawMessage
		if json.Unmarshal(t.Result, &res) == nil && res != nil {
			for k, v := range over {
				res[k] = v
			}
			if t.Result, err = json.Marshal(res); err != nil {
				return changed, err
			}
		}
		delete(s.outputs, t.ID)
		changed++
	}
	return changed, nil
}

// retained sums the output bytes owner's finished tasks keep. Call with mu held.
func (s *Store) retained(owner string) int64 {
	var n int64
	for id, b := range s.outputs {
		if t := s.tasks[id]; t != nil && t.OwnerID == owner {
			n += b
		}
	}
	return n
}
