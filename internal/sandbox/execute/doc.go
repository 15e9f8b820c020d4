// Package execute is the execution room of the domain (internal/sandbox), below its facade:
// what an execution yields and how it is bounded. A Result is a finished execution as every
// edge shows it (sandbox.Result is an alias); a Capture keeps a bounded view of one output
// stream (its head and its tail, docs/semantics.md §9 step 7); a Budget bounds the rich
// results of code together; TrimToRecord fits a result into a queue transport's hard message
// limit, keeping each stream's head and tail.
//
// It imports providers only (never the sandbox facade, the store or the broker). Running an
// execution — its request, job, route, turn and lease — is still the facade package's
// (internal/sandbox: exec.go, route.go, job.go) and moves here as its dependencies on the
// hall (the lease, quotas, completions) move out of it.
package execute
