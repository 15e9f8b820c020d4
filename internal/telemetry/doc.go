// Package telemetry is Sandgate's observability outside the audit log (docs/semantics.md
// §14): Prometheus metrics on a registry of each gateway's own (Metrics, served by Handler on
// the separate server.metrics_addr listener) and OpenTelemetry traces exported over OTLP/HTTP
// (Tracing), with W3C trace context taken from incoming requests (ServerHandler).
//
// Labels come from small fixed sets only — configured profile names and provider types, task
// statuses, fault kinds, the router's route patterns, standard HTTP methods, auth failure
// reasons — never a session, task or principal, and never a value a caller chose: anything
// outside a label's set is counted as "other" (labels.go).
//
// Counts that live in Postgres (sessions by state, tasks by status, the queue's depth) are
// read when Prometheus scrapes, at most once per Options.CountsTTL whatever the number of
// scrapers, and are database-wide: every replica reports the same values (aggregate them
// with max, not sum). Counters and histograms are per process.
//
// internal/gateway builds both and hands them to the domain (sandbox.Observer,
// sandbox.Options.Tracer), the broker, the authenticator and the HTTP edge.
package telemetry
