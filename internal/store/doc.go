// Package store is the seam between Sandgate's domain and where it keeps its state: the
// rows (principals, API keys, sessions, tasks, snapshots, named contexts, audit events,
// runners), the interfaces that read and write them (Store, the domain's; Queue, the queue
// flavor's) and their errors. It makes no decisions (those belong to internal/sandbox) and
// knows no database.
//
// Implementations live beside it, as dex's storage/ keeps its backends:
//
//   - postgres: the production store (pgx, the goose migrations of /migrations), shared by
//     every replica and worker. Only the composition root (internal/gateway) imports it.
//   - memory: an in-memory Store with the Postgres store's semantics, for domain tests.
//   - storetest: the conformance suite both run, so they behave the same way; it imports
//     neither the domain nor a backend.
package store
