package postgres

import (
	"context"
	"encoding/json"

	"github.com/sandgate/sandgate/internal/store"
)

// liveContexts is the condition "context row c lives in its session's current sandbox".
const liveContexts = `EXISTS (SELECT 1 FROM sessions s WHERE s.id = c.session_id AND s.sandbox_id = c.sandbox_id)`

// HoldContext records that c.OwnerID holds context c.Name in session c.SessionID's sandbox
// c.SandboxID, unless the owner already holds limit live contexts besides this one (limit ≤ 0:
// no limit), then ErrQuota and nothing written — in one statement. Recording a context again
// (the same session and name) moves it to c.SandboxID and keeps its owner. Errors:
// ErrNotFound when the session does not exist.
func (st *Store) HoldContext(ctx context.Context, c store.Context, limit int) error {
	var held, exists bool
	err := st.pool.QueryRow(ctx, `WITH ins AS (
		INSERT INTO contexts (session_id, name, sandbox_id, owner_id, created_at)
		SELECT $1, $2, $3, $4, $5 WHERE EXISTS (SELECT 1 FROM sessions WHERE id = $1)
		   AND ($6::int <= 0 OR (SELECT count(*) FROM contexts c WHERE c.owner_id = $4 AND `+liveContexts+`
		                           AND NOT (c.session_id = $1 AND c.name = $2)) < $6)
		ON CONFLICT (session_id, name) DO UPDATE SET sandbox_id = EXCLUDED.sandbox_id
		RETURNING 1)
		SELECT EXISTS (SELECT 1 FROM ins), EXISTS (SELECT 1 FROM sessions WHERE id = $1)`,
		c.SessionID, c.Name, c.SandboxID, c.OwnerID, c.CreatedAt, limit).Scan(&held, &exists)
	switch {
	case err != nil:
		return err
	case !exists:
		return store.ErrNotFound
	case !held:
		return store.ErrQuota
	}
	return nil
}

// ReleaseContext forgets context name of session sessionID (no error when unknown).
func (st *Store) ReleaseContext(ctx context.Context, sessionID, name string) error {
	_, err := st.pool.Exec(ctx, `DELETE FROM contexts WHERE session_id = $1 AND name = $2`, sessionID, name)
	return err
}

// DeleteStaleContexts removes the context rows whose sandbox is no longer their session's
// (it was reset, replaced or forgotten), and returns how many.
func (st *Store) DeleteStaleContexts(ctx context.Context) (int64, error) {
	tag, err := st.pool.Exec(ctx, `DELETE FROM contexts c WHERE NOT `+liveContexts)
	return tag.RowsAffected(), err
}

// DropOldestOutputs keeps the newest finished results of owner ownerID whose output bytes
// (Completion.OutputBytes) add up to at most keep, and drops the output of the older ones:
// their result becomes result merged with blank (a JSON object whose keys replace the
// result's), their output bytes 0. The tasks themselves stay. It returns how many results
// lost their output.
func (st *Store) DropOldestOutputs(ctx context.Context, ownerID string, keep int64, blank json.RawMessage) (int64, error) {
	tag, err := st.pool.Exec(ctx, `WITH ranked AS (
		SELECT id, sum(output_bytes) OVER (ORDER BY finished_at DESC, id DESC) AS upto
		  FROM tasks WHERE owner_id = $1 AND output_bytes > 0)
		UPDATE tasks t SET result = CASE WHEN jsonb_typeof(t.result) = 'object' THEN t.result || $3::jsonb ELSE t.result END,
		       output_bytes = 0
		  FROM ranked r WHERE t.id = r.id AND r.upto > $2`, ownerID, keep, string(blank))
	return tag.RowsAffected(), err
}
