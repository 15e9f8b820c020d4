// Package sandbox is Sandgate's domain: workload profiles, sessions and their scopes, idle
// reset and self-heal, the identity and policy checks that fail closed before any provider
// call, per-session ordering, and tasks (seed-semantics §3, §7–§10).
//
// A Service is handed the caller's principal explicitly on every call; it persists sessions
// and tasks through internal/store, runs operations through an internal/broker Broker, and
// reaches sandboxes only through internal/providers. It never sees HTTP.
//
// Rules worth knowing:
//   - Ownership: a principal sees only its own sessions and tasks, plus the shared session of
//     each per_runtime profile it may use; anything else is "not found" (never "forbidden").
//   - Ordering: executions and file writes of one session run one at a time in arrival order,
//     across replicas (a Postgres advisory lock); reads never wait.
//   - Activity: an operation touches the session when it starts and when it ends, and a
//     session with an unfinished task is never idle.
//   - Every execution is recorded as a task; one that outlives its wait is promoted and the
//     caller polls it. Finished tasks are kept for broker.response_ttl seconds.
package sandbox
