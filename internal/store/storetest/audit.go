package storetest

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/stretchr/testify/require"

	"github.com/sandgate/sandgate/internal/store"
)

var auditTests = []test{
	{"execution_recorded_with_its_task", testAuditExecution},
	{"execution_completed_once", testAuditExecutionFinish},
	{"execution_duration_without_result", testAuditDurationFromTimes},
	{"execution_lost", testAuditLost},
	{"begin_with_lock", testAuditBeginLocked},
	{"quota_refusal_not_recorded", testAuditQuotaRefused},
	{"append_and_filter", testAuditFilters},
	{"retention", testAuditRetention},
}

// audit lists every event, newest first.
func (f *fixture) audit(filter store.AuditFilter) []store.AuditEvent {
	f.t.Helper()
	if filter.Limit == 0 {
		filter.Limit = 100
	}
	rows, err := f.st.ListAudit(f.ctx, filter)
	require.NoError(f.t, err)
	return rows
}

// auditOf is task id's event, which must exist.
func (f *fixture) auditOf(id string) store.AuditEvent {
	f.t.Helper()
	for _, e := range f.audit(store.AuditFilter{}) {
		if e.TaskID == id {
			return e
		}
	}
	f.t.Fatalf("no audit event for task %s", id)
	return store.AuditEvent{}
}

func sha(s string) string {
	h := sha256.Sum256([]byte(s))
	return hex.EncodeToString(h[:])
}

func testAuditExecution(f *fixture) {
	t := f.t
	alice := f.owner("alice")
	// Over the excerpt's length, with a three-byte character across the cut.
	program := strings.Repeat("x", store.AuditExcerptBytes-1) + "€ and more after the cut"
	in := newTask("t01", alice, "s01", "r1", at(time.Minute))
	in.Operation, in.Program = "execute_command", program
	require.NoError(t, f.st.CreateTaskWithin(f.ctx, in, 0))

	rows := f.audit(store.AuditFilter{})
	require.Len(t, rows, 1, "the task's insert records its audit event")
	e := rows[0]
	require.NotZero(t, e.ID)
	require.Equal(t, store.AuditExecution, e.Kind)
	require.Equal(t, alice, e.PrincipalID)
	require.Equal(t, "https://issuer.storetest.invalid#alice", e.Principal)
	require.Equal(t, "s01", e.SessionID)
	require.Equal(t, "default", e.Profile)
	require.Equal(t, "t01", e.TaskID)
	require.Equal(t, "execute_command", e.Operation)
	require.Equal(t, sha(program), e.Digest, "the digest is of the whole program")
	require.EqualValues(t, len(program), e.Size)
	require.Equal(t, strings.Repeat("x", store.AuditExcerptBytes-1), e.Excerpt, "cut before a character that does not fit")
	require.True(t, utf8.ValidString(e.Excerpt))
	require.Equal(t, store.AuditSubmitted, e.Status)
	sameTime(t, at(time.Minute), e.At, "at")
	require.Nil(t, e.ExitCode)
	require.Nil(t, e.DurationMS)
	require.Nil(t, e.FinishedAt)

	short := newTask("t02", alice, "s01", "r1", at(2*time.Minute))
	short.Program = "print(1)"
	f.task(short)
	e = f.auditOf("t02")
	require.Equal(t, "print(1)", e.Excerpt)
	require.Equal(t, sha("print(1)"), e.Digest)
}

func testAuditExecutionFinish(f *fixture) {
	t := f.t
	alice := f.owner("alice")
	_, err := f.st.BeginTask(f.ctx, newTask("t01", alice, "s01", "r1", at(0)), store.Admission{Limit: 0, Lock: false})
	require.NoError(t, err)
	code, ms := 3, int64(42)
	ok, err := f.st.FinishTask(f.ctx, "t01", store.Completion{Status: "succeeded", ExitCode: &code, DurationMS: &ms}, at(time.Second), time.Hour)
	require.NoError(t, err)
	require.True(t, ok)
	e := f.auditOf("t01")
	require.Equal(t, "succeeded", e.Status)
	require.Equal(t, "", e.ErrorType)
	require.NotNil(t, e.ExitCode)
	require.Equal(t, 3, *e.ExitCode)
	require.NotNil(t, e.DurationMS)
	require.EqualValues(t, 42, *e.DurationMS, "the program's own run time wins")
	sameTimePtr(t, at(time.Second), e.FinishedAt, "finished_at")

	// A second completion is not stored, and leaves the event alone.
	other := 9
	ok, err = f.st.FinishTask(f.ctx, "t01", store.Completion{Status: "failed", ErrorType: "provision", ExitCode: &other}, at(time.Minute), time.Hour)
	require.NoError(t, err)
	require.False(t, ok)
	e = f.auditOf("t01")
	require.Equal(t, "succeeded", e.Status)
	require.Equal(t, 3, *e.ExitCode)
	require.Len(t, f.audit(store.AuditFilter{}), 1, "one event per execution")
}

func testAuditDurationFromTimes(f *fixture) {
	t := f.t
	alice := f.owner("alice")
	f.task(newTask("t01", alice, "s01", "r1", at(0)))
	require.NoError(t, f.st.StartTask(f.ctx, "t01", at(time.Second)))
	ok, err := f.st.FinishTask(f.ctx, "t01", store.Completion{Status: "failed", ErrorType: "provision", Error: "no engine"}, at(3500*time.Millisecond), time.Hour)
	require.NoError(t, err)
	require.True(t, ok)
	e := f.auditOf("t01")
	require.Equal(t, "failed", e.Status)
	require.Equal(t, "provision", e.ErrorType)
	require.Nil(t, e.ExitCode)
	require.NotNil(t, e.DurationMS)
	require.EqualValues(t, 2500, *e.DurationMS, "from its start to its finish")

	f.task(newTask("t02", alice, "s01", "r1", at(0)))
	ok, err = f.st.FinishTask(f.ctx, "t02", store.Completion{Status: "cancelled", ErrorType: "cancelled"}, at(time.Second), time.Hour)
	require.NoError(t, err)
	require.True(t, ok)
	e = f.auditOf("t02")
	require.Equal(t, "cancelled", e.Status)
	require.Nil(t, e.DurationMS, "it never started")
}

func testAuditLost(f *fixture) {
	t := f.t
	alice := f.owner("alice")
	f.task(newTask("t01", alice, "s01", "dead", at(-2*time.Hour)))
	require.NoError(t, f.st.StartTask(f.ctx, "t01", at(-2*time.Hour)))
	f.task(newTask("t02", alice, "s01", "dead", at(-2*time.Hour)))
	n, err := f.st.MarkLostTasks(f.ctx, at(-time.Minute), at(0), time.Hour)
	require.NoError(t, err)
	require.EqualValues(t, 2, n)
	e := f.auditOf("t01")
	require.Equal(t, "lost", e.Status)
	require.Equal(t, "lost", e.ErrorType)
	sameTimePtr(t, at(0), e.FinishedAt, "finished_at")
	require.NotNil(t, e.DurationMS)
	require.EqualValues(t, (2 * time.Hour).Milliseconds(), *e.DurationMS)
	e = f.auditOf("t02")
	require.Equal(t, "lost", e.Status)
	require.Nil(t, e.DurationMS, "it never started")
}

func testAuditBeginLocked(f *fixture) {
	t := f.t
	alice := f.owner("alice")
	f.session(newSession("s01", alice, at(0)))
	in := newTask("t01", alice, "s01", "r1", at(time.Second))
	in.Program = "echo hi"
	b := f.begin(in)
	e := f.auditOf("t01")
	require.Equal(t, sha("echo hi"), e.Digest)
	require.Equal(t, "s01", e.SessionID)
	f.finishUnlocking("t01", b.Place, at(2*time.Second))
	require.Equal(t, "succeeded", f.auditOf("t01").Status)

	_, err := f.st.BeginTask(f.ctx, newTask("t02", alice, "nosuch", "r1", at(time.Second)), store.Admission{Limit: 0, Lock: true})
	require.ErrorIs(t, err, store.ErrNotFound)
	require.Len(t, f.audit(store.AuditFilter{}), 1, "nothing recorded for a task that was not inserted")
}

func testAuditQuotaRefused(f *fixture) {
	t := f.t
	alice := f.owner("alice")
	f.task(newTask("t01", alice, "s01", "r1", at(0)))
	require.ErrorIs(t, f.st.CreateTaskWithin(f.ctx, newTask("t02", alice, "s01", "r1", at(0)), 1), store.ErrQuota)
	_, err := f.st.BeginTask(f.ctx, newTask("t03", alice, "s01", "r1", at(0)), store.Admission{Limit: 1, Lock: false})
	require.ErrorIs(t, err, store.ErrQuota)
	rows := f.audit(store.AuditFilter{})
	require.Len(t, rows, 1)
	require.Equal(t, "t01", rows[0].TaskID)
}

func testAuditFilters(f *fixture) {
	t := f.t
	alice, bob := f.owner("alice"), f.owner("bob")
	add := func(e store.AuditEvent) {
		t.Helper()
		require.NoError(t, f.st.AppendAudit(f.ctx, e))
	}
	add(store.AuditEvent{At: at(1 * time.Minute), Kind: store.AuditSessionCreate, PrincipalID: alice, SessionID: "s01", Profile: "default"})
	add(store.AuditEvent{At: at(2 * time.Minute), Kind: store.AuditFileWrite, PrincipalID: alice, SessionID: "s01", Profile: "default",
		Target: "in/data.bin", Digest: sha("data"), Size: 4})
	add(store.AuditEvent{At: at(3 * time.Minute), Kind: store.AuditSessionCreate, PrincipalID: bob, SessionID: "s02", Profile: "other"})
	add(store.AuditEvent{At: at(4 * time.Minute), Kind: store.AuditFileWrite, PrincipalID: bob, SessionID: "s02", Status: "failed", ErrorType: "too-large", Target: "big"})
	add(store.AuditEvent{At: at(5 * time.Minute), Kind: store.AuditSessionDestroy, PrincipalID: alice, SessionID: "s01", Profile: "default"})

	all := f.audit(store.AuditFilter{})
	require.Len(t, all, 5)
	for i := 1; i < len(all); i++ {
		require.Greater(t, all[i-1].ID, all[i].ID, "newest first")
	}
	w := all[3]
	require.Equal(t, store.AuditFileWrite, w.Kind)
	require.Equal(t, "in/data.bin", w.Target)
	require.Equal(t, sha("data"), w.Digest)
	require.EqualValues(t, 4, w.Size)
	require.Equal(t, "succeeded", w.Status, "the default status")
	require.Equal(t, "https://issuer.storetest.invalid#alice", w.Principal)
	require.Empty(t, w.TaskID)
	require.Equal(t, "failed", all[1].Status)
	require.Equal(t, "too-large", all[1].ErrorType)

	kinds := func(rows []store.AuditEvent) []string {
		out := []string{}
		for _, r := range rows {
			out = append(out, r.Kind+"/"+r.SessionID)
		}
		return out
	}
	require.Equal(t, []string{"session_destroy/s01", "file_write/s01", "session_create/s01"},
		kinds(f.audit(store.AuditFilter{Principal: "https://issuer.storetest.invalid#alice"})), "by label")
	require.Equal(t, []string{"file_write/s02", "session_create/s02"}, kinds(f.audit(store.AuditFilter{Principal: bob})), "by id")
	require.Equal(t, []string{"file_write/s02", "session_create/s02"}, kinds(f.audit(store.AuditFilter{SessionID: "s02"})))
	require.Equal(t, []string{"session_create/s02", "session_create/s01"}, kinds(f.audit(store.AuditFilter{Kind: store.AuditSessionCreate})))
	require.Equal(t, []string{"file_write/s02", "session_create/s02"},
		kinds(f.audit(store.AuditFilter{Since: at(3 * time.Minute), Until: at(5 * time.Minute)})), "since inclusive, until exclusive")
	require.Empty(t, f.audit(store.AuditFilter{Principal: "https://issuer.storetest.invalid#carol"}))

	// Paging by id.
	page := f.audit(store.AuditFilter{Limit: 2})
	require.Equal(t, []string{"session_destroy/s01", "file_write/s02"}, kinds(page))
	page = f.audit(store.AuditFilter{Limit: 2, BeforeID: page[1].ID})
	require.Equal(t, []string{"session_create/s02", "file_write/s01"}, kinds(page))
	page = f.audit(store.AuditFilter{Limit: 2, BeforeID: page[1].ID})
	require.Equal(t, []string{"session_create/s01"}, kinds(page))
}

func testAuditRetention(f *fixture) {
	t := f.t
	alice := f.owner("alice")
	require.NoError(t, f.st.AppendAudit(f.ctx, store.AuditEvent{At: at(-48 * time.Hour), Kind: store.AuditSessionCreate, PrincipalID: alice, SessionID: "old"}))
	require.NoError(t, f.st.AppendAudit(f.ctx, store.AuditEvent{At: at(0), Kind: store.AuditSessionCreate, PrincipalID: alice, SessionID: "new"}))
	f.task(newTask("done", alice, "s01", "r1", at(-48*time.Hour)))
	f.finish("done", "succeeded", at(-47*time.Hour))
	f.task(newTask("running", alice, "s01", "r1", at(-48*time.Hour)))

	n, err := f.st.DeleteAuditBefore(f.ctx, at(-24*time.Hour))
	require.NoError(t, err)
	require.EqualValues(t, 2, n)
	var left []string
	for _, e := range f.audit(store.AuditFilter{}) {
		left = append(left, e.SessionID+"/"+e.TaskID)
	}
	require.ElementsMatch(t, []string{"new/", "s01/running"}, left, "an unfinished execution's event stays until it is completed")
	f.finish("running", "succeeded", at(0))
	require.Equal(t, "succeeded", f.auditOf("running").Status)
	n, err = f.st.DeleteAuditBefore(f.ctx, at(-24*time.Hour))
	require.NoError(t, err)
	require.EqualValues(t, 1, n)
}
