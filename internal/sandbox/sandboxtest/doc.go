// Package sandboxtest holds in-memory stand-ins for the domain's ports, for tests of
// internal/sandbox and of anything built on it that should run without Postgres or Docker:
//
//   - Clock: a manual clock, so idle timeouts, TTLs and heartbeats advance when a test says;
//   - Provider: a fake provider whose sandboxes keep their files in memory and run programs a
//     test scripts (results, blocking until released, failures, lost sandboxes);
//   - New: a *sandbox.Service assembled from them on the in-memory store of
//     internal/store/memory (the Postgres store's semantics, held to them by the same
//     conformance suite, internal/store/storetest).
//
// None of them starts a goroutine of its own: what runs concurrently is the domain's broker
// and the test's own goroutines.
package sandboxtest
