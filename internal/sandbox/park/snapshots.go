package park

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/sandgate/sandgate/internal/fault"
	"github.com/sandgate/sandgate/internal/principal"
	"github.com/sandgate/sandgate/internal/providers"
	"github.com/sandgate/sandgate/internal/sandbox/names"
	"github.com/sandgate/sandgate/internal/sandbox/page"
	"github.com/sandgate/sandgate/internal/sandbox/profile"
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
func (pk *Room) CreateSnapshot(ctx context.Context, p principal.Principal, id, profName, name string) (Snapshot, error) {
	if err := names.Printable("snapshot name", name); err != nil {
		return Snapshot{}, err
	}
	sess, prof, ephemeral, err := pk.Resolve(ctx, p, id, profName)
	if err != nil {
		return Snapshot{}, err
	}
	if ephemeral {
		return Snapshot{}, fault.New(fault.Conflict, "profile '%s' has scope per_call: its sandboxes live for one run and are never snapshotted", prof.Name)
	}
	if !prof.Caps.Snapshots {
		return Snapshot{}, fault.Unsupported(prof.Provider.Type(), "snapshots")
	}
	if _, err := pk.Profiles.Checks(prof, p); err != nil {
		return Snapshot{}, err
	}
	limits := pk.Quota.SnapshotLimits(p)
	if err := pk.snapshotRoom(ctx, p, limits); err != nil {
		return Snapshot{}, err
	}
	// Captured as it is (a paused session stays paused), in the session's line: a parked
	// session is restored first.
	sess, release, err := pk.Hold(ctx, p, prof, sess)
	if errors.Is(err, store.ErrNotFound) {
		return Snapshot{}, sessionErr(err, id) // destroyed meanwhile
	}
	if err != nil {
		return Snapshot{}, err
	}
	defer release()
	if sess.SandboxID == "" {
		return Snapshot{}, fault.New(fault.Conflict, "sandbox session '%s' has no sandbox to snapshot yet (%s)", sess.ID, noSandboxWhy(sess)).
			WithHint("run something in the session first", "run something in the session first")
	}
	row, err := pk.captureAs(ctx, prof, sess, p.ID, p.Key(), store.SnapshotUser, name, limits)
	var over *overBytes
	switch {
	case errors.As(err, &over):
		return Snapshot{}, pk.Quota.SnapshotBytesErr(p, over.held, over.size)
	case errors.Is(err, store.ErrQuota):
		return Snapshot{}, pk.Quota.SnapshotsErr(p)
	}
	if err != nil {
		return Snapshot{}, err
	}
	_ = pk.Store.TouchSession(ctx, sess.ID, pk.Clock.Now())
	return row, nil
}

// snapshotRoom refuses a snapshot of p's that could not be kept within limits, before a
// capture that costs is made: fault.Quota over sandbox.quotas.snapshots or snapshot_bytes.
func (pk *Room) snapshotRoom(ctx context.Context, p principal.Principal, limits store.SnapshotLimits) error {
	if limits.Count <= 0 && limits.Bytes <= 0 {
		return nil
	}
	held, err := pk.Store.Usage(ctx, p.ID)
	if err != nil {
		return err
	}
	if limits.Count > 0 && held.Snapshots >= limits.Count {
		return pk.Quota.SnapshotsErr(p)
	}
	if limits.Bytes > 0 && held.SnapshotBytes >= limits.Bytes {
		return pk.Quota.SnapshotBytesErr(p, held.SnapshotBytes, -1)
	}
	return nil
}

// capture snapshots sess's sandbox as kind (the session's owner owns it) and records it
// within lim (store.ErrQuota, or *overBytes; the capture is then deleted).
func (pk *Room) capture(ctx context.Context, prof *profile.Profile, sess store.Session, kind, name string, lim store.SnapshotLimits) (store.Snapshot, error) {
	label := ""
	if sess.OwnerID != "" {
		label = pk.Account.OwnerLabel(ctx, sess.OwnerID)
	}
	return pk.captureAs(ctx, prof, sess, sess.OwnerID, label, kind, name, lim)
}

// overBytes is captureAs's refusal of a capture of size bytes whose owner held held bytes
// of snapshots (-1: unknown): past store.SnapshotLimits.Bytes. It is store.ErrSnapshotBytes.
type overBytes struct{ held, size int64 }

func (o *overBytes) Error() string {
	return fmt.Sprintf("a snapshot of %d bytes over the %d its owner holds: %v", o.size, o.held, store.ErrSnapshotBytes)
}

func (o *overBytes) Unwrap() error { return store.ErrSnapshotBytes }

func (pk *Room) captureAs(ctx context.Context, prof *profile.Profile, sess store.Session, ownerID, ownerLabel, kind, name string, lim store.SnapshotLimits) (store.Snapshot, error) {
	snapper, ok := prof.Provider.(providers.Snapshotter)
	if !ok || !prof.Caps.Snapshots {
		return store.Snapshot{}, fault.Unsupported(prof.Provider.Type(), "snapshots")
	}
	id := pk.NewID()
	info, err := snapper.Snapshot(ctx, sess.SandboxID, providers.SnapshotMeta{ID: id, Owner: ownerLabel, SessionID: sess.ID, Profile: prof.Name})
	if err != nil {
		return store.Snapshot{}, parkErr(err, sess, "captured")
	}
	row := store.Snapshot{
		ID: id, OwnerID: ownerID, SessionID: sess.ID, Profile: prof.Name, Provider: prof.Provider.Type(), Name: name,
		Kind: kind, Ref: info.Ref, SizeBytes: info.SizeBytes, CreatedAt: pk.Clock.Now(),
	}
	if err := pk.Store.CreateSnapshotWithin(ctx, row, lim); err != nil {
		pk.deleteCapture(ctx, prof, info.Ref)
		if errors.Is(err, store.ErrSnapshotBytes) {
			over := &overBytes{held: -1, size: info.SizeBytes}
			if held, uerr := pk.Store.Usage(ctx, ownerID); uerr == nil {
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
func (pk *Room) deleteCapture(ctx context.Context, prof *profile.Profile, ref string) {
	snapper, ok := prof.Provider.(providers.Snapshotter)
	if !ok {
		return
	}
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Minute)
	defer cancel()
	if err := snapper.DeleteSnapshot(dctx, ref); err != nil {
		pk.Log.Warn("deleting a snapshot's capture failed", "profile", prof.Name, "ref", ref, "err", err)
	}
}

// DropSnapshot deletes snapshot r: its row, then its capture.
func (pk *Room) DropSnapshot(ctx context.Context, prof *profile.Profile, r store.Snapshot) {
	if _, err := pk.Store.DeleteSnapshot(context.WithoutCancel(ctx), r.ID); err != nil {
		pk.Log.Warn("forgetting a snapshot failed", "snapshot_id", r.ID, "err", err)
		return
	}
	pk.deleteCapture(ctx, prof, r.Ref)
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
func (pk *Room) ListSnapshots(ctx context.Context, p principal.Principal, f SnapshotFilter) ([]Snapshot, string, error) {
	if f.All && !p.Admin {
		return nil, "", fault.New(fault.Forbidden, "all=true lists every principal's snapshots and needs membership of an admin group")
	}
	t, id, err := page.Decode(f.Cursor)
	if err != nil {
		return nil, "", err
	}
	if f.Limit <= 0 {
		f.Limit = 50
	}
	rows, err := pk.Store.ListSnapshots(ctx, store.SnapshotFilter{OwnerID: p.ID, All: f.All, SessionID: f.SessionID, Limit: f.Limit + 1, AfterCreated: t, AfterID: id})
	if err != nil {
		return nil, "", err
	}
	out := append([]Snapshot{}, rows[:min(len(rows), f.Limit)]...)
	next := ""
	if len(rows) > f.Limit {
		last := rows[f.Limit-1]
		next = page.Encode(last.CreatedAt, last.ID)
	}
	return out, next, nil
}

// snapshot returns snapshot id when p may see it (its owner, or an admin): fault.NotFound
// otherwise.
func (pk *Room) snapshot(ctx context.Context, p principal.Principal, id string) (store.Snapshot, error) {
	r, err := pk.Store.GetSnapshot(ctx, id)
	if errors.Is(err, store.ErrNotFound) || (err == nil && !p.Admin && (r.OwnerID == "" || r.OwnerID != p.ID)) {
		return store.Snapshot{}, fault.New(fault.NotFound, "unknown snapshot '%s'", id)
	}
	if err == nil {
		err = profile.KeyRefusal(p, r.Profile)
	}
	return r, err
}

// GetSnapshot returns snapshot id. Errors: fault.NotFound for an unknown or another
// principal's snapshot.
func (pk *Room) GetSnapshot(ctx context.Context, p principal.Principal, id string) (Snapshot, error) {
	r, err := pk.snapshot(ctx, p, id)
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
func (pk *Room) DeleteSnapshot(ctx context.Context, p principal.Principal, id string) error {
	r, err := pk.snapshot(ctx, p, id)
	if err != nil {
		return err
	}
	if r.Kind == store.SnapshotIdle {
		if sess, err := pk.Store.GetSession(ctx, r.SessionID); err == nil && sess.ParkedSnapshot == r.ID {
			return fault.New(fault.Conflict, "snapshot '%s' holds the workspace of idle session '%s', restored on its next use", r.ID, r.SessionID).
				WithHint("use the session (it is restored and the snapshot goes) or destroy it", "use or destroy the session instead")
		}
	}
	if _, err := pk.Store.DeleteSnapshot(ctx, r.ID); err != nil {
		return err
	}
	if prof, ok := pk.Profiles.Lookup(r.Profile); ok {
		pk.deleteCapture(ctx, prof, r.Ref)
	} else {
		pk.Log.Warn("a deleted snapshot's profile is no longer configured: its capture stays", "snapshot_id", r.ID, "profile", r.Profile, "ref", r.Ref)
	}
	return nil
}

// ForkProfile returns snapshot snapshotID of p's and the profile a session forked from it is
// made in (CreateSession with FromSnapshot): the snapshot's, which p must still be allowed
// and whose provider must restore snapshots. Errors: fault.NotFound for an unknown or
// another principal's snapshot; fault.Config for another profile than profName ("": any);
// fault.Capability; the checks every use of the profile makes.
func (pk *Room) ForkProfile(ctx context.Context, p principal.Principal, snapshotID, profName string) (store.Snapshot, *profile.Profile, error) {
	snap, err := pk.snapshot(ctx, p, snapshotID)
	if err != nil {
		return store.Snapshot{}, nil, err
	}
	if profName != "" && profName != snap.Profile {
		return store.Snapshot{}, nil, fault.New(fault.Config, "snapshot '%s' was taken in profile '%s', but profile '%s' was requested; omit profile to start from the snapshot in its own", snap.ID, snap.Profile, profName)
	}
	prof, err := pk.Profiles.Resolve(p, snap.Profile)
	if err != nil {
		return store.Snapshot{}, nil, err
	}
	if !prof.Caps.Snapshots {
		return store.Snapshot{}, nil, fault.Unsupported(prof.Provider.Type(), "snapshots")
	}
	if _, err := pk.Profiles.Checks(prof, p); err != nil {
		return store.Snapshot{}, nil, err
	}
	return snap, prof, nil
}

// RestoreInto gives new session row a sandbox restored from snap and records the binding.
func (pk *Room) RestoreInto(ctx context.Context, p principal.Principal, prof *profile.Profile, row *store.Session, snap store.Snapshot) error {
	pol, err := pk.Policy(ctx, prof, *row)
	if err != nil {
		return err
	}
	sb, err := prof.Provider.(providers.Snapshotter).Restore(ctx, snap.Ref, profile.ProviderPrincipal(prof, p), pol)
	if fault.KindOf(err) == fault.NotFound {
		return fault.New(fault.NotFound, "the capture of snapshot '%s' no longer exists on provider %s", snap.ID, prof.Provider.Type())
	}
	if err != nil {
		return classify(err, fault.Provision)
	}
	defer func() { _ = sb.Close() }()
	row.SandboxID = sb.ID()
	if err := pk.Store.UpdateSessionBackend(ctx, row.ID, sb.ID(), "active", pk.Clock.Now()); err != nil {
		_ = pk.DestroyBackend(ctx, prof, row.ID, sb.ID())
		return err
	}
	return nil
}

// Unpark restores sess's sandbox from the idle snapshot it is parked in, records the binding
// (keeping the pending notice) and then forgets the snapshot. A snapshot (or capture) that is gone leaves a new empty
// sandbox (made by create) with a notice saying so. Call holding the session lock (the lease does).
func (pk *Room) Unpark(ctx context.Context, prof *profile.Profile, sess *store.Session, pp providers.Principal, create func(context.Context) (providers.Sandbox, error)) (providers.Sandbox, string, error) {
	snap, err := pk.Store.GetSnapshot(ctx, sess.ParkedSnapshot)
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
		pol, perr := pk.Policy(ctx, prof, *sess)
		if perr != nil {
			return nil, "", perr
		}
		sb, err = snapper.Restore(ctx, snap.Ref, pp, pol)
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
	if err := pk.Store.RestoreSession(ctx, sess.ID, sb.ID(), pk.Clock.Now()); err != nil {
		_ = sb.Close()
		_ = pk.DestroyBackend(ctx, prof, sess.ID, sb.ID())
		return nil, "", err
	}
	parked := sess.ParkedSnapshot
	sess.SandboxID, sess.ParkedSnapshot, sess.Status = sb.ID(), "", "active"
	if snap.ID == parked {
		pk.DropSnapshot(ctx, prof, snap) // restored: the capture has served
	}
	return sb, notice, nil
}
