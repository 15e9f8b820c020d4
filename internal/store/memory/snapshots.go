package memory

import (
	"bytes"
	"context"
	"errors"
	"slices"
	"time"

	"github.com/sandgate/sandgate/internal/store"
)

// CreateSnapshotWithin inserts snap unless it is of kind store.SnapshotUser with an owner
// who already has lim.Count such snapshots (store.ErrQuota) or whose snapshots, idle
// captures included, would take more than lim.Bytes with it (store.ErrSnapshotBytes); limits
// ≤ 0 are none. As Postgres: the quota is judged before the row's other constraints, an
// owner must be a recorded principal, a duplicate id is a unique violation.
func (s *Store) CreateSnapshotWithin(ctx context.Context, snap store.Snapshot, lim store.SnapshotLimits) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if snap.OwnerID != "" {
		u, err := uuidText(snap.OwnerID)
		if err != nil {
			return err
		}
		snap.OwnerID = u
		if snap.Kind == store.SnapshotUser {
			if lim.Count > 0 && s.ownedSnapshots(u) >= lim.Count {
				return store.ErrQuota
			}
			if lim.Bytes > 0 && s.snapshotBytes(u)+snap.SizeBytes > lim.Bytes {
				return store.ErrSnapshotBytes
			}
		}
	}
	if _, dup := s.snapshots[snap.ID]; dup {
		return uniqueViolation{"snapshots_pkey"}
	}
	if snap.OwnerID != "" {
		if _, err := s.owner("snapshots", snap.OwnerID); err != nil {
			return err
		}
	}
	snap.CreatedAt = ts(snap.CreatedAt)
	s.snapshots[snap.ID] = &snap
	return nil
}

// ownedSnapshots counts owner's snapshots of kind store.SnapshotUser. Call with mu held.
func (s *Store) ownedSnapshots(owner string) int {
	n := 0
	for _, r := range s.snapshots {
		if r.OwnerID == owner && r.Kind == store.SnapshotUser {
			n++
		}
	}
	return n
}

// snapshotBytes is the size of all owner's snapshots. Call with mu held.
func (s *Store) snapshotBytes(owner string) int64 {
	var n int64
	for _, r := range s.snapshots {
		if r.OwnerID == owner {
			n += r.SizeBytes
		}
	}
	return n
}

// GetSnapshot returns snapshot id, or store.ErrNotFound.
func (s *Store) GetSnapshot(ctx context.Context, id string) (store.Snapshot, error) {
	if err := ctx.Err(); err != nil {
		return store.Snapshot{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	r, ok := s.snapshots[id]
	if !ok {
		return store.Snapshot{}, store.ErrNotFound
	}
	return *r, nil
}

// ListSnapshots returns the owner's snapshots (every one with f.All; none for no owner
// without it), filtered by session, newest first (created_at, then id, descending), after the
// keyset cursor, at most f.Limit (which must be positive).
func (s *Store) ListSnapshots(ctx context.Context, f store.SnapshotFilter) ([]store.Snapshot, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if f.Limit <= 0 {
		return nil, errors.New("store: ListSnapshots needs a positive limit")
	}
	if !f.All && f.OwnerID == "" {
		return []store.Snapshot{}, nil
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
	var rows []store.Snapshot
	for _, r := range s.snapshots {
		switch {
		case !f.All && r.OwnerID != owner,
			f.SessionID != "" && r.SessionID != f.SessionID,
			f.AfterID != "" && !before(r.CreatedAt, r.ID, after, f.AfterID):
			continue
		}
		rows = append(rows, *r)
	}
	slices.SortFunc(rows, func(a, b store.Snapshot) int { return newestFirst(a.CreatedAt, a.ID, b.CreatedAt, b.ID) })
	out := []store.Snapshot{}
	return append(out, rows[:min(len(rows), f.Limit)]...), nil
}

// DeleteSnapshot removes snapshot id; false when there was none.
func (s *Store) DeleteSnapshot(ctx context.Context, id string) (bool, error) {
	if err := ctx.Err(); err != nil {
		return false, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	_, ok := s.snapshots[id]
	delete(s.snapshots, id)
	return ok, nil
}

// SigningKey returns the key named name, recording a copy of candidate as that key when there
// is none yet.
func (s *Store) SigningKey(ctx context.Context, name string, candidate []byte, now time.Time) ([]byte, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if k, ok := s.keys[name]; ok {
		return bytes.Clone(k), nil
	}
	_ = now
	s.keys[name] = bytes.Clone(candidate)
	return bytes.Clone(candidate), nil
}
