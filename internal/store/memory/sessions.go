package memory

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/sandgate/sandgate/internal/store"
)

// uniqueViolation is the error of an insert that breaks a unique constraint (Postgres
// 23505), named as in migrations/00001_init.sql.
type uniqueViolation struct{ constraint string }

func (e uniqueViolation) Error() string {
	return fmt.Sprintf("memory: duplicate key value violates unique constraint %q", e.constraint)
}

func copySession(r *store.Session) store.Session {
	s := *r
	s.Labels = maps.Clone(r.Labels)
	if s.Labels == nil {
		s.Labels = map[string]string{}
	}
	s.Env = maps.Clone(r.Env)
	if s.Env == nil {
		s.Env = map[string]string{}
	}
	s.Secrets = maps.Clone(r.Secrets)
	if s.Secrets == nil {
		s.Secrets = map[string]string{}
	}
	return s
}

// CreateSessionWithin inserts sess unless its owner already owns limit sessions — every
// session of the owner counts, its default ones too, as Postgres counts them (limit ≤ 0 or
// a shared session: no limit); then store.ErrQuota. As the Postgres insert, it stores
// last_used_at = created_at and no pending notice, whatever sess says.
func (s *Store) CreateSessionWithin(ctx context.Context, sess store.Session, limit int) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.insertSession(sess, limit)
}

// insertSession is the INSERT … SELECT … WHERE of CreateSessionWithin. Call with mu held.
func (s *Store) insertSession(sess store.Session, limit int) error {
	owner := ""
	if sess.OwnerID != "" {
		u, err := uuidText(sess.OwnerID)
		if err != nil {
			return err
		}
		owner = u
		if limit > 0 && s.ownedSessions(owner) >= limit {
			return store.ErrQuota
		}
	}
	if _, dup := s.sessions[sess.ID]; dup {
		return uniqueViolation{"sessions_pkey"}
	}
	for _, r := range s.sessions {
		switch {
		case r.Status == store.SessionClosed: // the unique indexes leave closed rows out
		case owner != "" && sess.IsDefault && r.OwnerID == owner && r.Profile == sess.Profile && r.IsDefault:
			return uniqueViolation{"sessions_default_per_owner"}
		case owner == "" && r.OwnerID == "" && r.Profile == sess.Profile:
			return uniqueViolation{"sessions_runtime_per_profile"}
		}
	}
	if owner != "" {
		if _, err := s.owner("sessions", owner); err != nil { // checked after the row went in
			return err
		}
	}
	row := sess
	row.OwnerID = owner
	row.Labels = maps.Clone(sess.Labels)
	if row.Labels == nil {
		row.Labels = map[string]string{}
	}
	row.Env = maps.Clone(sess.Env)
	if row.Env == nil {
		row.Env = map[string]string{}
	}
	row.Secrets = maps.Clone(sess.Secrets)
	if row.Secrets == nil {
		row.Secrets = map[string]string{}
	}
	row.PendingNotice = ""
	row.PausedAt, row.PausedIdle, row.ParkedSnapshot = time.Time{}, false, "" // not columns of the INSERT
	row.DestroyAttempts, row.DestroyRetryAt, row.DestroyError = 0, time.Time{}, ""
	row.CreatedAt = ts(sess.CreatedAt)
	row.LastUsedAt = row.CreatedAt
	if !row.ExpiresAt.IsZero() {
		row.ExpiresAt = ts(row.ExpiresAt)
	}
	if row.OnExpiry == "" {
		row.OnExpiry = store.ExpireDestroy
	}
	s.sessions[row.ID] = &row
	return nil
}

// ownedSessions counts owner's sessions. Call with mu held.
func (s *Store) ownedSessions(owner string) int {
	n := 0
	for _, r := range s.sessions {
		if r.OwnerID == owner {
			n++
		}
	}
	return n
}

// EnsureDefaultSession returns the default session of (candidate.OwnerID,
// candidate.Profile) — for OwnerID "" the profile's shared session, default or not; never a
// closed one — inserting candidate (as a default session) when there is none. Like the Postgres store it
// returns candidate itself after an insert, not the row as read back.
func (s *Store) EnsureDefaultSession(ctx context.Context, candidate store.Session) (store.Session, error) {
	if err := ctx.Err(); err != nil {
		return store.Session{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	owner := ""
	if candidate.OwnerID != "" {
		u, err := uuidText(candidate.OwnerID)
		if err != nil {
			return store.Session{}, err
		}
		owner = u
	}
	for _, r := range s.sessions {
		if r.OwnerID == owner && r.Profile == candidate.Profile && (owner == "" || r.IsDefault) && r.Status != store.SessionClosed {
			return copySession(r), nil
		}
	}
	candidate.IsDefault = true
	err := s.insertSession(candidate, 0)
	if err == nil {
		return candidate, nil
	}
	if errors.As(err, new(uniqueViolation)) {
		// Postgres reads again after a unique violation, finds no default session (the
		// conflict was the id) and gives up after three tries.
		return store.Session{}, errors.New("store: could not create the default session")
	}
	return store.Session{}, err
}

// GetSession returns session id, or store.ErrNotFound.
func (s *Store) GetSession(ctx context.Context, id string) (store.Session, error) {
	if err := ctx.Err(); err != nil {
		return store.Session{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	r, ok := s.sessions[id]
	if !ok {
		return store.Session{}, store.ErrNotFound
	}
	return copySession(r), nil
}

// ListSessions returns the owner's sessions and the shared ones (every session with f.All),
// filtered, newest first (created_at, then id, descending), after the keyset cursor, at most
// f.Limit of them (LIMIT 0: none).
func (s *Store) ListSessions(ctx context.Context, f store.SessionFilter) ([]store.Session, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if err := checkLimit(f.Limit); err != nil {
		return nil, err
	}
	owner := ""
	if !f.All {
		u, err := uuidText(f.OwnerID)
		if err != nil {
			return nil, err
		}
		owner = u
	}
	after := ts(f.AfterCreated)
	s.mu.Lock()
	defer s.mu.Unlock()
	var rows []*store.Session
	for _, r := range s.sessions {
		switch {
		case !f.All && r.OwnerID != owner && r.OwnerID != "":
		case f.Profile != "" && r.Profile != f.Profile:
		case f.Status != "" && r.Status != f.Status:
		case f.Conversation != "" && r.Labels["conversation"] != f.Conversation:
		case !hasLabels(r.Labels, f.Labels):
		case f.AfterID != "" && !before(r.CreatedAt, r.ID, after, f.AfterID):
		default:
			rows = append(rows, r)
		}
	}
	slices.SortFunc(rows, func(a, b *store.Session) int { return newestFirst(a.CreatedAt, a.ID, b.CreatedAt, b.ID) })
	out := []store.Session{}
	for _, r := range rows[:min(len(rows), f.Limit)] {
		out = append(out, copySession(r))
	}
	return out, nil
}

// hasLabels reports whether labels carry every pair of want (jsonb @>).
func hasLabels(labels, want map[string]string) bool {
	for k, v := range want {
		if got, ok := labels[k]; !ok || got != v {
			return false
		}
	}
	return true
}

// before is the row comparison (t, id) < (t0, id0).
func before(t time.Time, id string, t0 time.Time, id0 string) bool {
	return t.Before(t0) || (t.Equal(t0) && id < id0)
}

// newestFirst orders by (t, id) descending.
func newestFirst(ta time.Time, ida string, tb time.Time, idb string) int {
	if c := tb.Compare(ta); c != 0 {
		return c
	}
	return cmp.Compare(idb, ida)
}

// IdleSessions returns up to limit sessions of profile that have a sandbox that is not
// paused, were last used before cutoff and have no unfinished task, least recently used
// first; closed ones not.
func (s *Store) IdleSessions(ctx context.Context, profile string, cutoff time.Time, limit int) ([]store.Session, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if err := checkLimit(limit); err != nil {
		return nil, err
	}
	cutoff = ts(cutoff)
	s.mu.Lock()
	defer s.mu.Unlock()
	var rows []*store.Session
	for _, r := range s.sessions {
		if r.SandboxID != "" && r.PausedAt.IsZero() && r.Profile == profile && r.LastUsedAt.Before(cutoff) && !s.busy(r.ID) && r.Status != store.SessionClosed {
			rows = append(rows, r)
		}
	}
	slices.SortFunc(rows, func(a, b *store.Session) int {
		return cmp.Or(a.LastUsedAt.Compare(b.LastUsedAt), cmp.Compare(a.ID, b.ID))
	})
	out := []store.Session{}
	for _, r := range rows[:min(len(rows), limit)] {
		out = append(out, copySession(r))
	}
	return out, nil
}

// busy reports whether session id has an unfinished task. Call with mu held.
func (s *Store) busy(id string) bool {
	for _, t := range s.tasks {
		if t.SessionID == id && t.FinishedAt == nil {
			return true
		}
	}
	return false
}

// UpdateSessionBackend records the session's sandbox ("" = none), status and last use
// (never moving it back), clears its pending notice, and makes it neither paused nor parked.
// An unknown id is no error; a closed session is left as it is.
func (s *Store) UpdateSessionBackend(ctx context.Context, id, sandboxID, status string, lastUsed time.Time) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if r, ok := s.sessions[id]; ok && r.Status != store.SessionClosed {
		r.SandboxID, r.Status, r.PendingNotice = sandboxID, status, ""
		r.PausedAt, r.PausedIdle, r.ParkedSnapshot = time.Time{}, false, ""
		r.LastUsedAt = later(r.LastUsedAt, ts(lastUsed))
	}
	return nil
}

// PauseSession marks session id paused at at (idle: by the sweeper) and, unless notice is
// "", leaves it — only while its sandbox is ifSandbox (a session without one never matches)
// and it is not paused.
func (s *Store) PauseSession(ctx context.Context, id, ifSandbox string, at time.Time, idle bool, notice string) (bool, error) {
	if err := ctx.Err(); err != nil {
		return false, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	r, ok := s.sessions[id]
	if !ok || r.SandboxID == "" || r.SandboxID != ifSandbox || !r.PausedAt.IsZero() {
		return false, nil
	}
	r.PausedAt, r.PausedIdle = ts(at), idle
	if notice != "" {
		r.PendingNotice = notice
	}
	return true, nil
}

// RestoreSession records sandboxID as session id's sandbox (active, a use at lastUsed, never
// moving it back), neither parked nor paused, keeping its pending notice. An unknown id is no
// error; a closed session is left as it is.
func (s *Store) RestoreSession(ctx context.Context, id, sandboxID string, lastUsed time.Time) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if r, ok := s.sessions[id]; ok && r.Status != store.SessionClosed {
		r.SandboxID, r.Status = sandboxID, "active"
		r.PausedAt, r.PausedIdle, r.ParkedSnapshot = time.Time{}, false, ""
		r.LastUsedAt = later(r.LastUsedAt, ts(lastUsed))
	}
	return nil
}

// ResumeSession marks session id no longer paused. An unknown id is no error.
func (s *Store) ResumeSession(ctx context.Context, id string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if r, ok := s.sessions[id]; ok {
		r.PausedAt, r.PausedIdle = time.Time{}, false
	}
	return nil
}

// ParkSession forgets session id's sandbox, if it is still ifSandbox, for snapshotID to be
// restored on its next use, leaving notice ("" = none); it is no longer paused.
func (s *Store) ParkSession(ctx context.Context, id, ifSandbox, snapshotID, notice string) (bool, error) {
	if err := ctx.Err(); err != nil {
		return false, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	r, ok := s.sessions[id]
	if !ok || r.SandboxID == "" || r.SandboxID != ifSandbox {
		return false, nil
	}
	r.SandboxID, r.ParkedSnapshot, r.PendingNotice = "", snapshotID, notice
	r.PausedAt, r.PausedIdle = time.Time{}, false
	return true, nil
}

// TouchSession sets last_used_at to t unless it is later already.
func (s *Store) TouchSession(ctx context.Context, id string, t time.Time) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if r, ok := s.sessions[id]; ok {
		r.LastUsedAt = later(r.LastUsedAt, ts(t))
	}
	return nil
}

// ResetSession forgets the session's sandbox if it is still ifSandbox — a session without a
// sandbox never matches, not even ifSandbox "" (sandbox_id is NULL then) — makes it active,
// restarts it at createdAt and leaves notice ("" = none) for its next operation.
func (s *Store) ResetSession(ctx context.Context, id, notice string, createdAt time.Time, ifSandbox string) (bool, error) {
	return s.reset(ctx, id, notice, createdAt, ifSandbox, nil)
}

// ResetIdleSession is ResetSession that also needs the session unused since before cutoff
// and without an unfinished task.
func (s *Store) ResetIdleSession(ctx context.Context, id, notice string, createdAt time.Time, ifSandbox string, cutoff time.Time) (bool, error) {
	return s.reset(ctx, id, notice, createdAt, ifSandbox, &cutoff)
}

func (s *Store) reset(ctx context.Context, id, notice string, createdAt time.Time, ifSandbox string, cutoff *time.Time) (bool, error) {
	if err := ctx.Err(); err != nil {
		return false, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	r, ok := s.sessions[id]
	if !ok || r.SandboxID == "" || r.SandboxID != ifSandbox || r.Status == store.SessionClosed {
		return false, nil
	}
	if cutoff != nil && (!r.LastUsedAt.Before(ts(*cutoff)) || s.busy(id)) {
		return false, nil
	}
	r.SandboxID, r.Status, r.CreatedAt, r.PendingNotice = "", "active", ts(createdAt), notice
	r.PausedAt, r.PausedIdle = time.Time{}, false
	return true, nil
}

// SessionOfSandbox returns the session whose sandbox is sandboxID (the newest if several).
func (s *Store) SessionOfSandbox(ctx context.Context, sandboxID string) (store.Session, error) {
	if err := ctx.Err(); err != nil {
		return store.Session{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	var found *store.Session
	for _, r := range s.sessions {
		if sandboxID == "" || r.SandboxID != sandboxID {
			continue
		}
		c := copySession(r)
		if found == nil || c.CreatedAt.After(found.CreatedAt) || (c.CreatedAt.Equal(found.CreatedAt) && c.ID < found.ID) {
			found = &c
		}
	}
	if found == nil {
		return store.Session{}, store.ErrNotFound
	}
	return *found, nil
}

// SandboxInUse reports whether a session refers to sandbox id — or whether any unfinished
// task belongs to no session (a per_call run, whose sandbox nobody records), whatever id is.
func (s *Store) SandboxInUse(ctx context.Context, id string) (bool, error) {
	if err := ctx.Err(); err != nil {
		return false, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, r := range s.sessions {
		if r.SandboxID != "" && r.SandboxID == id {
			return true, nil
		}
	}
	for _, t := range s.tasks {
		if _, ok := s.sessions[t.SessionID]; t.FinishedAt == nil && !ok {
			return true, nil
		}
	}
	return false, nil
}

// DestroyFailed closes session id while its sandbox is still sandboxID: status closed, one
// more failed attempt, the next due at retryAt, why as its last error, no pending notice, its
// contexts released; false when it is gone or its sandbox moved on.
func (s *Store) DestroyFailed(ctx context.Context, id, sandboxID, why string, retryAt time.Time) (bool, error) {
	if err := ctx.Err(); err != nil {
		return false, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	r, ok := s.sessions[id]
	if !ok || r.SandboxID == "" || r.SandboxID != sandboxID {
		return false, nil
	}
	r.Status, r.DestroyAttempts, r.DestroyRetryAt, r.DestroyError, r.PendingNotice = store.SessionClosed, r.DestroyAttempts+1, ts(retryAt), why, ""
	for k := range s.contexts {
		if k.session == id {
			delete(s.contexts, k)
		}
	}
	return true, nil
}

// DestroyRetries returns up to limit closed sessions whose next destroy attempt is due at
// now, the longest due first.
func (s *Store) DestroyRetries(ctx context.Context, now time.Time, limit int) ([]store.Session, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if err := checkLimit(limit); err != nil {
		return nil, err
	}
	now = ts(now)
	s.mu.Lock()
	defer s.mu.Unlock()
	var rows []*store.Session
	for _, r := range s.sessions {
		if r.Status == store.SessionClosed && !r.DestroyRetryAt.After(now) {
			rows = append(rows, r)
		}
	}
	slices.SortFunc(rows, func(a, b *store.Session) int {
		return cmp.Or(a.DestroyRetryAt.Compare(b.DestroyRetryAt), cmp.Compare(a.ID, b.ID))
	})
	out := []store.Session{}
	for _, r := range rows[:min(len(rows), limit)] {
		out = append(out, copySession(r))
	}
	return out, nil
}

// DeleteSession removes session id and its contexts (its tasks stay). An unknown id is no
// error.
func (s *Store) DeleteSession(ctx context.Context, id string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.sessions, id)
	for k := range s.contexts { // ON DELETE CASCADE
		if k.session == id {
			delete(s.contexts, k)
		}
	}
	return nil
}

// SetSessionExpiry sets when session id's lifetime ends (zero: none) and, unless onExpiry is
// "", what ends it; store.ErrNotFound for an unknown or closed session.
func (s *Store) SetSessionExpiry(ctx context.Context, id string, at time.Time, onExpiry string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	r, ok := s.sessions[id]
	if !ok || r.Status == store.SessionClosed {
		return store.ErrNotFound
	}
	r.ExpiresAt = time.Time{}
	if !at.IsZero() {
		r.ExpiresAt = ts(at)
	}
	if onExpiry != "" {
		r.OnExpiry = onExpiry
	}
	return nil
}

// EditSession changes session id's name and labels as edit says, under the store's lock.
func (s *Store) EditSession(ctx context.Context, id string, edit func(sess *store.Session) error) (store.Session, error) {
	if err := ctx.Err(); err != nil {
		return store.Session{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	r, ok := s.sessions[id]
	if !ok {
		return store.Session{}, store.ErrNotFound
	}
	c := copySession(r)
	if err := edit(&c); err != nil {
		return store.Session{}, err
	}
	r.Name, r.Labels = c.Name, maps.Clone(c.Labels)
	if r.Labels == nil {
		r.Labels = map[string]string{}
	}
	return copySession(r), nil
}

// ExpiredSessions returns up to limit sessions, not closed, whose lifetime ended at now or
// before, the longest ended first.
func (s *Store) ExpiredSessions(ctx context.Context, now time.Time, limit int) ([]store.Session, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if err := checkLimit(limit); err != nil {
		return nil, err
	}
	now = ts(now)
	s.mu.Lock()
	defer s.mu.Unlock()
	var rows []*store.Session
	for _, r := range s.sessions {
		if r.Status != store.SessionClosed && !r.ExpiresAt.IsZero() && !r.ExpiresAt.After(now) {
			rows = append(rows, r)
		}
	}
	slices.SortFunc(rows, func(a, b *store.Session) int {
		return cmp.Or(a.ExpiresAt.Compare(b.ExpiresAt), cmp.Compare(a.ID, b.ID))
	})
	out := []store.Session{}
	for _, r := range rows[:min(len(rows), limit)] {
		out = append(out, copySession(r))
	}
	return out, nil
}
