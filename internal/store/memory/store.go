// Package memory is an in-memory response store (store.Store) with the Postgres store's
// semantics, for tests of the domain and of what is built on it that should run without
// Postgres. The conformance suite (../storetest) holds it to the Postgres store's behaviour.
package memory

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/sandgate/sandgate/internal/store"
)

// Store is an in-memory store.Store that behaves as the Postgres store (../postgres)
// does, statement for statement: the same quota conditions, NULL semantics, ordering,
// first-completion-wins, lock order. Times are kept as Postgres keeps timestamptz values:
// truncated to the microsecond, read back in the local zone. Where the Postgres store takes
// a time argument, that time is used (never the wall clock), so a test's manual clock
// (sandboxtest.Clock) drives everything. It is safe for concurrent use and starts no
// goroutine.
//
// Like the database it stands for, one Store is shared by every replica of a test: give
// two Services the same Store to model two gateway processes.
//
// The queue flavor's statements (CreateQueuedTask, BeginAttempt, EarlierUnfinished) are
// not part of store.Store and not implemented (store.Queue): queued tasks stay Postgres-only.
type Store struct {
	mu         sync.Mutex
	principals map[string]*store.Principal // by id
	identities map[identity]string         // (issuer, subject) → id
	sessions   map[string]*store.Session
	tasks      map[string]*store.Task
	snapshots  map[string]*store.Snapshot
	keys       map[string][]byte             // signing_keys
	processes  map[string]bool               // background processes that started (StartedProcess): Postgres has their pid not null
	outputs    map[string]int64              // tasks.output_bytes of finished tasks keeping output (> 0)
	contexts   map[contextKey]*store.Context // the contexts table
	runners    map[string]runner
	seq        int64                 // the tasks.seq bigserial
	lockSeq    int64                 // the session_locks.ticket bigserial (BeginTask's places)
	changed    chan struct{}         // closed and replaced whenever a task finishes or goes
	locks      map[string]*lockQueue // session locks (store_locks.go)
	exclusive  map[int64]bool        // TryExclusive keys held
	// finishFailures is how many FinishTask calls still fail (FailFinish).
	finishFailures int
	audit          []store.AuditEvent          // the audit log, by id (store_audit.go)
	apiKeys        map[string]*store.APIKey    // by id (apikeys.go)
	secrets        map[secretKey]*store.Secret // by owner and name (secrets.go)
	auditSeq       int64                       // the audit_events.id bigserial
	// deferred says, by task id, which of its writes were deferred (Deferred).
	deferred map[string]DeferredWrites
}

// DeferredWrites says which of a task's writes its caller let skip the disk: its row
// (store.Admission.Deferred) and its stored completion (store.Completion.Deferred). This
// store keeps nothing on disk; it remembers the flags for the tests of who may defer.
type DeferredWrites struct {
	Row, Completion bool
}

// Deferred is what BeginTask and the stored completion of task id were told of deferral.
func (s *Store) Deferred(id string) DeferredWrites {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.deferred[id]
}

// ErrUnavailable is what a call the test made fail returns (FailFinish): the response store
// not answering.
var ErrUnavailable = errors.New("memory: the store is unavailable")

// FailFinish makes the next n FinishTask calls fail with ErrUnavailable without recording
// anything, as a response store in an outage would.
func (s *Store) FailFinish(n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.finishFailures = n
}

var _ store.Store = (*Store)(nil)

type identity struct{ issuer, subject string }

type runner struct {
	hostname               string
	startedAt, heartbeatAt time.Time
}

// New returns an empty store.
func New() *Store {
	return &Store{
		principals: map[string]*store.Principal{}, identities: map[identity]string{},
		sessions: map[string]*store.Session{}, tasks: map[string]*store.Task{}, snapshots: map[string]*store.Snapshot{}, keys: map[string][]byte{}, processes: map[string]bool{}, runners: map[string]runner{},
		outputs: map[string]int64{}, contexts: map[contextKey]*store.Context{}, apiKeys: map[string]*store.APIKey{},
		secrets: map[secretKey]*store.Secret{},
		changed: make(chan struct{}), locks: map[string]*lockQueue{}, exclusive: map[int64]bool{},
		deferred: map[string]DeferredWrites{},
	}
}

// ts is t as a timestamptz column gives it back: truncated to the microsecond (pgx sends
// microseconds), without a monotonic reading, in the local zone.
func ts(t time.Time) time.Time { return t.Truncate(time.Microsecond).Local() }

func tsPtr(t *time.Time) *time.Time {
	if t == nil {
		return nil
	}
	v := *t
	return &v
}

func later(a, b time.Time) time.Time { // GREATEST(a, b)
	if b.After(a) {
		return b
	}
	return a
}

// uuidText parses a uuid as Postgres's uuid input does (any case, optional braces, hyphens
// anywhere between groups of four digits, approximately) and returns its canonical text;
// anything else is the error Postgres gives for a uuid parameter that is not one.
func uuidText(s string) (string, error) {
	bad := fmt.Errorf("memory: invalid input syntax for type uuid: %q", s)
	in := s
	if strings.HasPrefix(in, "{") || strings.HasSuffix(in, "}") {
		if len(in) < 2 || !strings.HasPrefix(in, "{") || !strings.HasSuffix(in, "}") {
			return "", bad
		}
		in = in[1 : len(in)-1]
	}
	if strings.HasPrefix(in, "-") || strings.HasSuffix(in, "-") || strings.Contains(in, "--") {
		return "", bad
	}
	b, err := hex.DecodeString(strings.ReplaceAll(in, "-", ""))
	if err != nil || len(b) != 16 {
		return "", bad
	}
	h := hex.EncodeToString(b)
	return h[:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:], nil
}

func newUUID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	b[6] = b[6]&0x0f | 0x40 // version 4, as gen_random_uuid()
	b[8] = b[8]&0x3f | 0x80
	h := hex.EncodeToString(b[:])
	return h[:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:]
}

// owner resolves an owner_id parameter that references principals: its canonical text, or
// the foreign-key error Postgres reports for an id that is no principal's. Call with mu held.
func (s *Store) owner(table, id string) (string, error) {
	u, err := uuidText(id)
	if err != nil {
		return "", err
	}
	if _, ok := s.principals[u]; !ok {
		return "", fmt.Errorf("memory: insert on table %q violates foreign key constraint: principal %s does not exist", table, u)
	}
	return u, nil
}

// notify wakes WaitTask callers. Call with mu held.
func (s *Store) notify() {
	close(s.changed)
	s.changed = make(chan struct{})
}

// checkLimit is Postgres's error for a negative LIMIT.
func checkLimit(n int) error {
	if n < 0 {
		return errors.New("memory: LIMIT must not be negative")
	}
	return nil
}

// Principals.

// UpsertPrincipal records that (issuer, subject) was seen at now, refreshing its username,
// email and groups; first_seen_at stays, last_seen_at never moves back.
func (s *Store) UpsertPrincipal(ctx context.Context, p store.Principal, now time.Time) (store.Principal, error) {
	if err := ctx.Err(); err != nil {
		return store.Principal{}, err
	}
	if p.Groups == nil {
		p.Groups = []string{}
	}
	now = ts(now)
	s.mu.Lock()
	defer s.mu.Unlock()
	key := identity{p.Issuer, p.Subject}
	row, ok := s.principals[s.identities[key]]
	if !ok {
		row = &store.Principal{ID: newUUID(), Issuer: p.Issuer, Subject: p.Subject, FirstSeenAt: now, LastSeenAt: now}
		s.principals[row.ID] = row
		s.identities[key] = row.ID
	} else {
		row.LastSeenAt = later(row.LastSeenAt, now)
	}
	row.Username, row.Email, row.Groups = p.Username, p.Email, slices.Clone(p.Groups)
	// RETURNING id, first_seen_at, last_seen_at: the rest is the caller's value.
	p.ID, p.FirstSeenAt, p.LastSeenAt = row.ID, row.FirstSeenAt, row.LastSeenAt
	return p, nil
}

// GetPrincipal returns principal id as last recorded; store.ErrNotFound when unknown.
func (s *Store) GetPrincipal(ctx context.Context, id string) (store.Principal, error) {
	if err := ctx.Err(); err != nil {
		return store.Principal{}, err
	}
	u, err := uuidText(id)
	if err != nil {
		return store.Principal{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	row, ok := s.principals[u]
	if !ok {
		return store.Principal{}, store.ErrNotFound
	}
	p := *row
	p.Groups = slices.Clone(row.Groups)
	return p, nil
}

// SeenPrincipal moves principal id's last_seen_at to now (never back) and returns the row;
// store.ErrNotFound when unknown.
func (s *Store) SeenPrincipal(ctx context.Context, id string, now time.Time) (store.Principal, error) {
	if err := ctx.Err(); err != nil {
		return store.Principal{}, err
	}
	u, err := uuidText(id)
	if err != nil {
		return store.Principal{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	row, ok := s.principals[u]
	if !ok {
		return store.Principal{}, store.ErrNotFound
	}
	row.LastSeenAt = later(row.LastSeenAt, ts(now))
	p := *row
	p.Groups = slices.Clone(row.Groups)
	return p, nil
}

// PrincipalLabel names principal id as "issuer#subject"; store.ErrNotFound when unknown.
func (s *Store) PrincipalLabel(ctx context.Context, id string) (string, error) {
	if err := ctx.Err(); err != nil {
		return "", err
	}
	u, err := uuidText(id)
	if err != nil {
		return "", err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	row, ok := s.principals[u]
	if !ok {
		return "", store.ErrNotFound
	}
	return row.Issuer + "#" + row.Subject, nil
}

// Runners.

// Heartbeat records runner id as alive at now (the latest call wins, as in Postgres, even
// with an earlier time; the hostname is the first one given).
func (s *Store) Heartbeat(ctx context.Context, id, hostname string, now time.Time) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	now = ts(now)
	s.mu.Lock()
	defer s.mu.Unlock()
	r, ok := s.runners[id]
	if !ok {
		r = runner{hostname: hostname, startedAt: now}
	}
	r.heartbeatAt = now
	s.runners[id] = r
	return nil
}

// RemoveRunner forgets runner id.
func (s *Store) RemoveRunner(ctx context.Context, id string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.runners, id)
	return nil
}

// DeleteStaleRunners forgets runners silent since before t.
func (s *Store) DeleteStaleRunners(ctx context.Context, before time.Time) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	before = ts(before)
	s.mu.Lock()
	defer s.mu.Unlock()
	for id, r := range s.runners {
		if r.heartbeatAt.Before(before) {
			delete(s.runners, id)
		}
	}
	return nil
}

// alive reports whether runner id has a heartbeat at or after staleBefore. Call with mu held.
func (s *Store) alive(id string, staleBefore time.Time) bool {
	r, ok := s.runners[id]
	return ok && !r.heartbeatAt.Before(staleBefore)
}

// TryExclusive runs fn holding key, or returns store.ErrLockHeld at once when another call
// holds it — a call from inside fn included (in Postgres that one runs on another
// connection).
func (s *Store) TryExclusive(ctx context.Context, key int64, fn func(ctx context.Context) error) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s.mu.Lock()
	if s.exclusive[key] {
		s.mu.Unlock()
		return store.ErrLockHeld
	}
	s.exclusive[key] = true
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		delete(s.exclusive, key)
		s.mu.Unlock()
	}()
	return fn(ctx)
}
