package sandbox

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/sandgate/sandgate/internal/fault"
	"github.com/sandgate/sandgate/internal/principal"
	"github.com/sandgate/sandgate/internal/providers"
	"github.com/sandgate/sandgate/internal/store"
)

// Snapshots of sessions' sandboxes (docs/semantics.md §8 "Snapshots"): a capture of the
// workspace (and of whatever else of the sandbox's file system outlives a restart) that a
// new session can start from. They outlive the session they were taken of, belong to the
// principal who took them, and count against sandbox.quotas.snapshots and, with the size
// their provider reports for them (what it stores: a compressed archive in which sparse
// files take their data only), sandbox.quotas.snapshot_bytes.
//
// The captures that park idle sessions (idle_action snapshot) count in the bytes, but no
// limit refuses them: parking replaces a sandbox whose workspace already takes at least as
// much, so refusing it would keep more in use, not less (and the other ways out — keeping
// the sandbox running for ever, or wiping it — are worse). A principal whose parked
// sessions fill the quota sees its own snapshots refused until it uses or destroys them.

// Snapshot is a snapshot as the caller sees it: the store's row as it is (OwnerID "" for the
// idle capture of a shared session; SessionID the session it was taken of, possibly
// destroyed since; Kind store.SnapshotUser — taken by a caller — or store.SnapshotIdle —
// parks an idle session until its next use, not counted against the quota). Ref is the
// provider's handle, for the domain: the edges do not show it.
type Snapshot = store.Snapshot

// CreateSnapshot captures session id's sandbox as a snapshot named name (may be ""), in
// order with the session's executions and writes (it waits for the running one). A paused
// sandbox is captured as it is; a parked session is restored first. The capture is the
// workspace's files: processes, code-context variables and /tmp are not in it.
//
// Errors: fault.Validation for a control character in name (printable); fault.NotFound
// for an unknown or another principal's session; fault.Conflict on
// per_call profiles or for a session without a sandbox; fault.Capability when the provider
// cannot snapshot; fault.Quota over sandbox.quotas.snapshots or, before the capture or with
// it, over sandbox.quotas.snapshot_bytes (nothing is kept); fault.Policy /
// fault.Forbidden as for any use of the profile.
func (s *Service) CreateSnapshot(ctx context.Context, p principal.Principal, id, profile, name string) (Snapshot, error) {
	if err := printable("snapshot name", name); err != nil {
		return Snapshot{}, err
	}
	sess, prof, ephemeral, err := s.resolve(ctx, p, id, profile)
	if err != nil {
		return Snapshot{}, err
	}
	if ephemeral {
		return Snapshot{}, fault.New(fault.Conflict, "profile '%s' has scope per_call: its sandboxes live for one run and are never snapshotted", prof.Name)
	}
	if !prof.Caps.Snapshots {
		return Snapshot{}, fault.Unsupported(prof.Provider.Type(), "snapshots")
	}
	if _, err := s.profiles.Checks(prof, p); err != nil {
		return Snapshot{}, err
	}
	limits := store.SnapshotLimits{Count: s.snapshotLimit(p), Bytes: s.snapshotBytesLimit(p)}
	if limits.Count > 0 || limits.Bytes > 0 {
		// A capture costs: refuse before making one that could not be kept.
		held, err := s.store.Usage(ctx, p.ID)
		if err != nil {
			return Snapshot{}, err
		}
		if limits.Count > 0 && held.Snapshots >= limits.Count {
			return Snapshot{}, s.snapshotQuotaErr(p)
		}
		if limits.Bytes > 0 && held.SnapshotBytes >= limits.Bytes {
			return Snapshot{}, s.snapshotBytesQuotaErr(p, held.SnapshotBytes, -1)
		}
	}
	// Captured as it is (a paused session stays paused), in the session's line: a parked
	// session is restored first.
	l, err := s.lease(ctx, p, prof, sess, leaseOpts{order: orderLock, reach: reachNone, noWake: true})
	if err != nil {
		if errors.As(err, new(orderErr)) && fault.KindOf(err) == fault.NotFound {
			return Snapshot{}, s.sessionErr(store.ErrNotFound, id) // destroyed meanwhile
		}
		return Snapshot{}, err
	}
	defer l.Release()
	sess = l.Session
	if sess.SandboxID == "" {
		return Snapshot{}, fault.New(fault.Conflict, "sandbox session '%s' has no sandbox to snapshot yet (%s)", sess.ID, noSandboxWhy(sess)).
			WithHint("run something in the session first", "run something in the session first")
	}
	row, err := s.captureAs(ctx, prof, sess, p.ID, p.Key(), store.SnapshotUser, name, limits)
	var over *overBytes
	switch {
	case errors.As(err, &over):
		return Snapshot{}, s.snapshotBytesQuotaErr(p, over.held, over.size)
	case errors.Is(err, store.ErrQuota):
		return Snapshot{}, s.snapshotQuotaErr(p)
	}
	if err != nil {
		return Snapshot{}, err
	}
	_ = s.store.TouchSession(ctx, sess.ID, s.now())
	return row, nil
}

// capture snapshots sess's sandbox as kind (the session's owner owns it) and records it
// within lim (store.ErrQuota, or *overBytes; the capture is then deleted).
func (s *Service) capture(ctx context.Context, prof *Profile, sess store.Session, kind, name string, lim store.SnapshotLimits) (store.Snapshot, error) {
	label := ""
	if sess.OwnerID != "" {
		label = s.OwnerLabel(ctx, sess.OwnerID)
	}
	return s.captureAs(ctx, prof, sess, sess.OwnerID, label, kind, name, lim)
}

// overBytes is captureAs's refusal of a capture of size bytes whose owner held held bytes
// of snapshots (-1: unknown): past store.SnapshotLimits.Bytes. It is store.ErrSnapshotBytes.
type overBytes struct{ held, size int64 }

func (o *overBytes) Error() string {
	return fmt.Sprintf("a snapshot of %d bytes over the %d its owner holds: %v", o.size, o.held, store.ErrSnapshotBytes)
}

func (o *overBytes) Unwrap() error { return store.ErrSnapshotBytes }

func (s *Service) captureAs(ctx context.Context, prof *Profile, sess store.Session, ownerID, ownerLabel, kind, name string, lim store.SnapshotLimits) (store.Snapshot, error) {
	snapper, ok := prof.Provider.(providers.Snapshotter)
	if !ok || !prof.Caps.Snapshots {
		return store.Snapshot{}, fault.Unsupported(prof.Provider.Type(), "snapshots")
	}
	id := s.newID()
	info, err := snapper.Snapshot(ctx, sess.SandboxID, providers.SnapshotMeta{ID: id, Owner: ownerLabel, SessionID: sess.ID, Profile: prof.Name})
	if err != nil {
		return store.Snapshot{}, s.parkErr(err, sess, "captured")
	}
	row := store.Snapshot{
		ID: id, OwnerID: ownerID, SessionID: sess.ID, Profile: prof.Name, Provider: prof.Provider.Type(), Name: name,
		Kind: kind, Ref: info.Ref, SizeBytes: info.SizeBytes, CreatedAt: s.now(),
	}
	if err := s.store.CreateSnapshotWithin(ctx, row, lim); err != nil {
		s.deleteCapture(ctx, prof, info.Ref)
		if errors.Is(err, store.ErrSnapshotBytes) {
			over := &overBytes{held: -1, size: info.SizeBytes}
			if held, uerr := s.store.Usage(ctx, ownerID); uerr == nil {
				over.held = held.SnapshotBytes
			}
			return store.Snapshot{}, over
		}
		return store.Snapshot{}, err
	}
	return row, nil
}

// deleteCapture deletes a provider's capture, logging a failure (an image or folder is
// left behind).
func (s *Service) deleteCapture(ctx context.Context, prof *Profile, ref string) {
	snapper, ok := prof.Provider.(providers.Snapshotter)
	if !ok {
		return
	}
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Minute)
	defer cancel()
	if err := snapper.DeleteSnapshot(dctx, ref); err != nil {
		s.log.Warn("deleting a snapshot's capture failed", "profile", prof.Name, "ref", ref, "err", err)
	}
}

// dropSnapshot deletes snapshot r: its row, then its capture.
func (s *Service) dropSnapshot(ctx context.Context, prof *Profile, r store.Snapshot) {
	if _, err := s.store.DeleteSnapshot(context.WithoutCancel(ctx), r.ID); err != nil {
		s.log.Warn("forgetting a snapshot failed", "snapshot_id", r.ID, "err", err)
		return
	}
	s.deleteCapture(ctx, prof, r.Ref)
}

// SnapshotFilter selects snapshots.
type SnapshotFilter struct {
	SessionID string
	All       bool // admins only: every principal's
	Limit     int
	Cursor    string
}

// ListSnapshots returns a page of p's snapshots (every principal's for an admin with All),
// newest first, and the cursor of the next page ("" on the last).
func (s *Service) ListSnapshots(ctx context.Context, p principal.Principal, f SnapshotFilter) ([]Snapshot, string, error) {
	if f.All && !p.Admin {
		return nil, "", fault.New(fault.Forbidden, "all=true lists every principal's snapshots and needs membership of an admin group")
	}
	t, id, err := decodeCursor(f.Cursor)
	if err != nil {
		return nil, "", err
	}
	if f.Limit <= 0 {
		f.Limit = 50
	}
	rows, err := s.store.ListSnapshots(ctx, store.SnapshotFilter{OwnerID: p.ID, All: f.All, SessionID: f.SessionID, Limit: f.Limit + 1, AfterCreated: t, AfterID: id})
	if err != nil {
		return nil, "", err
	}
	out := append([]Snapshot{}, rows[:min(len(rows), f.Limit)]...)
	next := ""
	if len(rows) > f.Limit {
		last := rows[f.Limit-1]
		next = encodeCursor(last.CreatedAt, last.ID)
	}
	return out, next, nil
}

// snapshot returns snapshot id when p may see it (its owner, or an admin): fault.NotFound
// otherwise.
func (s *Service) snapshot(ctx context.Context, p principal.Principal, id string) (store.Snapshot, error) {
	r, err := s.store.GetSnapshot(ctx, id)
	if errors.Is(err, store.ErrNotFound) || (err == nil && !p.Admin && (r.OwnerID == "" || r.OwnerID != p.ID)) {
		return store.Snapshot{}, fault.New(fault.NotFound, "unknown snapshot '%s'", id)
	}
	if err == nil {
		err = keyRefusal(p, r.Profile)
	}
	return r, err
}

// GetSnapshot returns snapshot id. Errors: fault.NotFound for an unknown or another
// principal's snapshot.
func (s *Service) GetSnapshot(ctx context.Context, p principal.Principal, id string) (Snapshot, error) {
	r, err := s.snapshot(ctx, p, id)
	if err != nil {
		return Snapshot{}, err
	}
	return r, nil
}

// DeleteSnapshot deletes snapshot id and its capture. Sessions started from it keep their
// files.
//
// Errors: fault.NotFound for an unknown or another principal's snapshot; fault.Conflict for
// the capture an idle session is parked in (use or destroy the session instead).
func (s *Service) DeleteSnapshot(ctx context.Context, p principal.Principal, id string) error {
	r, err := s.snapshot(ctx, p, id)
	if err != nil {
		return err
	}
	if r.Kind == store.SnapshotIdle {
		if sess, err := s.store.GetSession(ctx, r.SessionID); err == nil && sess.ParkedSnapshot == r.ID {
			return fault.New(fault.Conflict, "snapshot '%s' holds the workspace of idle session '%s', restored on its next use", r.ID, r.SessionID).
				WithHint("use the session (it is restored and the snapshot goes) or destroy it", "use or destroy the session instead")
		}
	}
	if _, err := s.store.DeleteSnapshot(ctx, r.ID); err != nil {
		return err
	}
	if prof, ok := s.profiles.Lookup(r.Profile); ok {
		s.deleteCapture(ctx, prof, r.Ref)
	} else {
		s.log.Warn("a deleted snapshot's profile is no longer configured: its capture stays", "snapshot_id", r.ID, "profile", r.Profile, "ref", r.Ref)
	}
	return nil
}

// fork creates session row from snapshot snapshotID for p (CreateSession with
// FromSnapshot): the snapshot's profile, a sandbox restored from it at once.
func (s *Service) forkProfile(ctx context.Context, p principal.Principal, snapshotID, profile string) (store.Snapshot, *Profile, error) {
	snap, err := s.snapshot(ctx, p, snapshotID)
	if err != nil {
		return store.Snapshot{}, nil, err
	}
	if profile != "" && profile != snap.Profile {
		return store.Snapshot{}, nil, fault.New(fault.Config, "snapshot '%s' was taken in profile '%s', but profile '%s' was requested; omit profile to start from the snapshot in its own", snap.ID, snap.Profile, profile)
	}
	prof, err := s.profiles.Resolve(p, snap.Profile)
	if err != nil {
		return store.Snapshot{}, nil, err
	}
	if !prof.Caps.Snapshots {
		return store.Snapshot{}, nil, fault.Unsupported(prof.Provider.Type(), "snapshots")
	}
	if _, err := s.profiles.Checks(prof, p); err != nil {
		return store.Snapshot{}, nil, err
	}
	return snap, prof, nil
}

// restoreInto gives new session row a sandbox restored from snap and records the binding.
func (s *Service) restoreInto(ctx context.Context, p principal.Principal, prof *Profile, row *store.Session, snap store.Snapshot) error {
	sb, err := prof.Provider.(providers.Snapshotter).Restore(ctx, snap.Ref, providerPrincipal(prof, p), sessionPolicy(prof, row))
	if fault.KindOf(err) == fault.NotFound {
		return fault.New(fault.NotFound, "the capture of snapshot '%s' no longer exists on provider %s", snap.ID, prof.Provider.Type())
	}
	if err != nil {
		return classify(err, fault.Provision)
	}
	defer func() { _ = sb.Close() }()
	row.SandboxID = sb.ID()
	if err := s.store.UpdateSessionBackend(ctx, row.ID, sb.ID(), "active", s.now()); err != nil {
		_ = s.destroyBackend(ctx, prof, row.ID, sb.ID())
		return err
	}
	return nil
}

// unpark restores sess's sandbox from the idle snapshot it is parked in, records the binding
// (keeping the pending notice) and then forgets the snapshot. A snapshot (or capture) that is gone leaves a new empty
// sandbox (made by create) with a notice saying so. Call holding the session lock (reachSandbox).
func (s *Service) unpark(ctx context.Context, prof *Profile, sess *store.Session, pp providers.Principal, create func(context.Context) (providers.Sandbox, error)) (providers.Sandbox, string, error) {
	snap, err := s.store.GetSnapshot(ctx, sess.ParkedSnapshot)
	var sb providers.Sandbox
	switch {
	case errors.Is(err, store.ErrNotFound):
	case err != nil:
		return nil, "", err
	default:
		snapper, ok := prof.Provider.(providers.Snapshotter)
		if !ok {
			return nil, "", fault.Unsupported(prof.Provider.Type(), "snapshots")
		}
		sb, err = snapper.Restore(ctx, snap.Ref, pp, sessionPolicy(prof, sess))
		if err != nil && fault.KindOf(err) != fault.NotFound {
			return nil, "", classify(err, fault.Provision)
		}
	}
	notice := ""
	if sb == nil {
		if sb, err = create(ctx); err != nil {
			return nil, "", err
		}
		notice = fmt.Sprintf("the snapshot session '%s' was parked in while idle no longer exists: its sandbox was recreated empty", sess.ID)
	}
	// The binding keeps the sweeper's notice for the next execution: a read may restore it.
	if err := s.store.RestoreSession(ctx, sess.ID, sb.ID(), s.now()); err != nil {
		_ = sb.Close()
		_ = s.destroyBackend(ctx, prof, sess.ID, sb.ID())
		return nil, "", err
	}
	parked := sess.ParkedSnapshot
	sess.SandboxID, sess.ParkedSnapshot, sess.Status = sb.ID(), "", "active"
	if snap.ID == parked {
		s.dropSnapshot(ctx, prof, snap) // restored: the capture has served
	}
	return sb, notice, nil
}
