package memory

import (
	"context"
	"slices"
	"time"

	"github.com/sandgate/sandgate/internal/store"
)

// The audit log, as internal/store/audit.go keeps it in Postgres.

// label is principal id's "issuer#subject", "" when unknown (the audit table has no foreign
// key). Call with mu held.
func (s *Store) label(id string) string {
	if p, ok := s.principals[id]; ok {
		return p.Issuer + "#" + p.Subject
	}
	return ""
}

// auditTask records task row, just inserted with the full program text program and
// submitted with API key apiKey, as an execution's audit event. Call with mu held.
func (s *Store) auditTask(row *store.Task, program, apiKey string) {
	s.appendAuditLocked(store.AuditEvent{
		At: row.SubmittedAt, Kind: store.AuditExecution, PrincipalID: row.OwnerID, SessionID: row.SessionID, Profile: row.Profile,
		TaskID: row.ID, Operation: row.Operation, Digest: store.DigestOf(program), Excerpt: store.ExcerptOf(program),
		Size: int64(len(program)), Status: store.AuditSubmitted, APIKeyID: apiKey,
	})
}

// finishAudit completes task id's audit event, as FinishTask and MarkLostTasks do. Call
// with mu held.
func (s *Store) finishAudit(id, status, errorType string, exitCode *int, durationMS *int64, started *time.Time, finished time.Time) {
	for i := range s.audit {
		e := &s.audit[i]
		if e.TaskID != id {
			continue
		}
		e.Status, e.ErrorType, e.FinishedAt = status, errorType, &finished
		e.ExitCode, e.DurationMS = nil, nil
		if exitCode != nil {
			v := *exitCode
			e.ExitCode = &v
		}
		switch {
		case durationMS != nil:
			v := *durationMS
			e.DurationMS = &v
		case started != nil:
			v := roundedMillis(finished.Sub(*started))
			e.DurationMS = &v
		}
		return
	}
}

// roundedMillis is d in milliseconds as Postgres casts a numeric to bigint: rounded half
// away from zero.
func roundedMillis(d time.Duration) int64 {
	us := d.Microseconds()
	if us < 0 {
		return -((-us + 500) / 1000)
	}
	return (us + 500) / 1000
}

func (s *Store) appendAuditLocked(e store.AuditEvent) {
	s.auditSeq++
	e.ID, e.At, e.Principal = s.auditSeq, ts(e.At), s.label(e.PrincipalID)
	s.audit = append(s.audit, e)
}

// AppendAudit records e with the next id and its principal's label; Status defaults to
// "succeeded".
func (s *Store) AppendAudit(ctx context.Context, e store.AuditEvent) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	id, err := uuidText(e.PrincipalID)
	if err != nil {
		return err
	}
	if e.Status == "" {
		e.Status = "succeeded"
	}
	e.PrincipalID, e.TaskID, e.ExitCode, e.DurationMS, e.FinishedAt = id, "", nil, nil, nil
	s.mu.Lock()
	defer s.mu.Unlock()
	s.appendAuditLocked(e)
	return nil
}

// ListAudit returns up to f.Limit events of the filter, highest id first.
func (s *Store) ListAudit(ctx context.Context, f store.AuditFilter) ([]store.AuditEvent, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if err := checkLimit(f.Limit); err != nil {
		return nil, err
	}
	since, until := ts(f.Since), ts(f.Until)
	s.mu.Lock()
	defer s.mu.Unlock()
	out := []store.AuditEvent{}
	for _, e := range slices.Backward(s.audit) {
		switch {
		case len(out) >= f.Limit:
			return out, nil
		case f.Principal != "" && e.Principal != f.Principal && e.PrincipalID != f.Principal,
			f.SessionID != "" && e.SessionID != f.SessionID,
			f.Kind != "" && e.Kind != f.Kind,
			f.APIKeyID != "" && e.APIKeyID != f.APIKeyID,
			!f.Since.IsZero() && e.At.Before(since),
			!f.Until.IsZero() && !e.At.Before(until),
			f.BeforeID > 0 && e.ID >= f.BeforeID:
			continue
		}
		c := e
		c.ExitCode, c.DurationMS, c.FinishedAt = clonePtr(e.ExitCode), clonePtr(e.DurationMS), tsPtr(e.FinishedAt)
		out = append(out, c)
	}
	return out, nil
}

func clonePtr[T any](p *T) *T {
	if p == nil {
		return nil
	}
	v := *p
	return &v
}

// DeleteAuditBefore removes the events before cutoff, except those of unfinished executions.
func (s *Store) DeleteAuditBefore(ctx context.Context, cutoff time.Time) (int64, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	cutoff = ts(cutoff)
	s.mu.Lock()
	defer s.mu.Unlock()
	n := len(s.audit)
	s.audit = slices.DeleteFunc(s.audit, func(e store.AuditEvent) bool {
		return e.At.Before(cutoff) && (e.TaskID == "" || e.FinishedAt != nil)
	})
	return int64(n - len(s.audit)), nil
}
