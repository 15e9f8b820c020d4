package account

import (
	"context"
	"encoding/base64"
	"strconv"
	"strings"
	"time"

	"github.com/sandgate/sandgate/internal/fault"
	"github.com/sandgate/sandgate/internal/principal"
	"github.com/sandgate/sandgate/internal/store"
)

// AuditEvent is one entry of the audit log as administrators read it (docs/semantics.md
// §14): the store's row as it is.
type AuditEvent = store.AuditEvent

// AuditQuery selects audit events (GET /v1/audit).
type AuditQuery struct {
	// Principal is an "issuer#subject" or a principal id.
	Principal string
	SessionID string
	Kind      string
	APIKeyID  string    // only events made with this API key
	Since     time.Time // at or after (zero: no bound)
	Until     time.Time // before (zero: no bound)
	Limit     int
	Cursor    string // the next_cursor of the previous page
}

// Record records e as done by p now (its Kind and fields set by the caller). A failure to
// record is logged, not returned: the operation it describes has happened.
func (a *Room) Record(ctx context.Context, p principal.Principal, e store.AuditEvent) {
	e.At, e.PrincipalID, e.APIKeyID = a.clock.Now(), p.ID, p.APIKeyID
	if err := a.store.AppendAudit(context.WithoutCancel(ctx), e); err != nil {
		a.log.Error("recording an audit event failed", "kind", e.Kind, "session_id", e.SessionID, "principal", p.Key(), "err", err)
	}
}

// Audit returns a page of the audit log, newest first, and the cursor of the next page (""
// on the last). Only administrators may read it: anyone else gets fault.Forbidden.
func (a *Room) Audit(ctx context.Context, p principal.Principal, q AuditQuery) ([]AuditEvent, string, error) {
	if !p.Admin {
		return nil, "", fault.New(fault.Forbidden, "the audit log is readable by members of an admin group (auth.admin_groups) only")
	}
	before, err := decodeAuditCursor(q.Cursor)
	if err != nil {
		return nil, "", err
	}
	if !q.Since.IsZero() && !q.Until.IsZero() && !q.Since.Before(q.Until) {
		return nil, "", fault.New(fault.Validation, "since (%s) must be before until (%s)", q.Since.Format(time.RFC3339), q.Until.Format(time.RFC3339))
	}
	rows, err := a.store.ListAudit(ctx, store.AuditFilter{
		Principal: q.Principal, SessionID: q.SessionID, Kind: q.Kind, APIKeyID: q.APIKeyID, Since: q.Since, Until: q.Until,
		BeforeID: before, Limit: q.Limit + 1,
	})
	if err != nil {
		return nil, "", err
	}
	next := ""
	if len(rows) > q.Limit {
		rows = rows[:q.Limit]
		next = encodeAuditCursor(rows[len(rows)-1].ID)
	}
	return rows, next, nil
}

const auditCursorPrefix = "audit:"

func encodeAuditCursor(id int64) string {
	return base64.RawURLEncoding.EncodeToString([]byte(auditCursorPrefix + strconv.FormatInt(id, 10)))
}

func decodeAuditCursor(c string) (int64, error) {
	if c == "" {
		return 0, nil
	}
	if b, err := base64.RawURLEncoding.DecodeString(c); err == nil {
		if n, ok := strings.CutPrefix(string(b), auditCursorPrefix); ok {
			if id, err := strconv.ParseInt(n, 10, 64); err == nil && id > 0 {
				return id, nil
			}
		}
	}
	return 0, fault.New(fault.Validation, "cursor %q is not a next_cursor this API returned; start again without it", c)
}

// SweepAudit deletes audit events older than the retention (docs/semantics.md §14).
func (a *Room) SweepAudit(ctx context.Context) error {
	n, err := a.store.DeleteAuditBefore(ctx, a.clock.Now().Add(-a.retention))
	if n > 0 {
		a.log.Info("audit events past their retention deleted", "count", n, "retention", a.retention.String())
	}
	return err
}

// AuditRetention is how long audit events are kept (audit.retention).
func (a *Room) AuditRetention() time.Duration { return a.retention }
