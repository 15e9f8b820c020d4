// Package sandbox is Sandgate's domain: workload profiles, sessions and their scopes, idle
// reset and self-heal, the identity and policy checks that fail closed before any provider
// call, per-session ordering, and tasks (docs/semantics.md §3, §7–§10).
//
// A Service is handed the caller's principal explicitly on every call. It keeps its state in
// a store.Store (internal/store: sessions, tasks, principals and runners; Postgres in
// production, internal/store/memory in domain tests), whose rows it uses as they are: a
// Session and a Task are their rows plus what the domain reads from them (a session's
// State, a task's decoded Result), a Snapshot and an AuditEvent are their rows. It declares
// its other ports (ports.go): a Clock and, for the queue flavor, a Queue that sends
// executions to workers; it builds the broker that runs them on this process and is that
// broker's Executor (route.go: an execution is a broker.Request, the same on every route). It reaches sandboxes only
// through internal/providers, and never sees HTTP or the configuration: internal/gateway maps
// config onto Settings and ProfileSpecs.
//
// Rooms: the Service is a facade over sub-packages with one job each; it keeps the exported
// API the edges use, as delegations, and re-exports the rooms' types under its own names.
//   - profile/: profiles, who may use them, the fail-closed policy and identity checks.
//   - session/: sessions made (or forked), found by id or as the default, listed, destroyed
//     (a failed removal retried), and the identities an execution resolves without a round trip.
//   - park/: pause and resume, idle parking and waking, lifetimes and their expiry, snapshots,
//     preview ports and their share links.
//   - quota/: the per-principal limits and their refusals, usage, and the contexts and MCP
//     sessions this replica counts.
//   - account/: principals as the edges identify them, API keys, the audit log.
//   - secret/: principals' and profiles' secrets, sealed at rest (the keyring), and the
//     bindings a session's sandbox is made with: placeholders for its programs, values only
//     for the provider's egress proxy (docs/semantics.md §15).
//   - upkeep/: heartbeat, outage watch, the sweeps, retained-output trimming.
//   - clock/, names/, page/: the time port, caller-chosen text checks, paging cursors.
//
// In package sandbox itself, room types rather than Service own the rest:
//   - executions (route.go): the execution route, jobs, followers, completions and their
//     retry, cancellations (tasks.go), adoption of a stopped runner's tasks (adopt.go), the
//     guard on provider calls (guard.go); it holds the broker, the runner id and the closing
//     signal.
//   - leases (lease.go): the one path to a session's sandbox, and the session's line.
//   - files (files.go): the session resolution and the read lease of file operations.
//
// A room never imports the facade: what it needs of another part of the domain (the lease, a
// task's cancellation) it is handed as a function at construction.
//
// Rules worth knowing:
//   - Ownership: a principal sees only its own sessions and tasks, plus the shared session of
//     each per_runtime profile it may use; anything else is "not found" (never "forbidden").
//   - Ordering: executions and file writes of one session run one at a time in arrival order,
//     across replicas (the Store's session lock line: tickets granted in arrival order, taken
//     and awaited through the lease's takeTurn); reads never wait.
//   - One lease (lease.go): every operation that reaches a session's sandbox takes it through
//     the lease room (leases.lease) — its place in the session's order, the session re-read,
//     woken or restored, reset if idle, attached or created, the binding recorded — and
//     releases it.
//   - Activity: an operation touches the session when it starts and when it ends, and a
//     session with an unfinished task is never idle.
//   - Every execution is recorded as a task; one that outlives its wait is promoted and the
//     caller polls it. Finished tasks are kept for broker.response_ttl seconds. A plain call
//     that waits (execJob.plainCall) records its task and, when it ends within the wait (it
//     settles: it can no longer be promoted), its completion as deferred writes — visible to
//     every replica at once, on disk shortly after (store.Admission.Deferred,
//     store.Completion.Deferred; the crash window is docs/semantics.md §9 "Deferred
//     commits"); a promotion commits synchronously before the caller gets the task id.
//   - Output kept in memory for followers (live logs, results being read) is one budget per
//     replica, sandbox.kept_output_memory_bytes, shared by all followers of a task; past it
//     the oldest leaves memory and is replayed from the stored result (kept.go).
//   - Parking (the park room): a paused session's sandbox is never reached
//     (a frozen sandboxd would not answer): every operation first wakes it (idle pause,
//     auto_resume) or answers fault.Paused; a parked session is restored on first use.
package sandbox
