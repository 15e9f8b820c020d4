package api

import (
	"context"
	"fmt"
	"maps"
	"net/url"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/sandgate/sandgate/internal/api/apigen"
	"github.com/sandgate/sandgate/internal/fault"
	"github.com/sandgate/sandgate/internal/principal"
	"github.com/sandgate/sandgate/internal/sandbox"
)

func caller(ctx context.Context) (principal.Principal, error) {
	p, ok := principal.FromContext(ctx)
	if !ok {
		return p, fault.New(fault.Internal, "no principal on an authenticated route")
	}
	return p, nil
}

func deref[T any](p *T) T {
	var zero T
	if p == nil {
		return zero
	}
	return *p
}

func ptr[T comparable](v T) *T {
	var zero T
	if v == zero {
		return nil
	}
	return &v
}

// location is a relative reference (RFC 9110 §10.2.2) so no client-sent Host header is echoed.
func location(_ context.Context, path string) *string { return &path }

// GetHealth answers liveness.
func (s *Server) GetHealth(context.Context, apigen.GetHealthRequestObject) (apigen.GetHealthResponseObject, error) {
	return apigen.GetHealth200JSONResponse{Status: apigen.Ok, Version: &s.version}, nil
}

// GetReady checks Postgres and the schema version.
func (s *Server) GetReady(ctx context.Context, _ apigen.GetReadyRequestObject) (apigen.GetReadyResponseObject, error) {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	checks := map[string]string{}
	if err := s.ready.Ping(ctx); err != nil {
		checks["database"] = "unreachable: " + err.Error()
		return apigen.GetReady503JSONResponse{Status: apigen.Unavailable, Checks: &checks, Version: &s.version}, nil
	}
	checks["database"] = "ok"
	cur, target, err := s.ready.SchemaVersion(ctx)
	switch {
	case err != nil:
		checks["schema"] = "unknown: " + err.Error()
	case cur < target:
		checks["schema"] = fmt.Sprintf("at version %d, binary needs %d; run gateway migrate", cur, target)
	default:
		checks["schema"] = fmt.Sprintf("version %d", cur)
		return apigen.GetReady200JSONResponse{Status: apigen.Ok, Checks: &checks, Version: &s.version}, nil
	}
	return apigen.GetReady503JSONResponse{Status: apigen.Unavailable, Checks: &checks, Version: &s.version}, nil
}

// GetMe returns the caller's principal.
func (s *Server) GetMe(ctx context.Context, _ apigen.GetMeRequestObject) (apigen.GetMeResponseObject, error) {
	p, err := caller(ctx)
	if err != nil {
		return nil, err
	}
	c := p.Credentials
	u, err := s.sandbox.Usage(ctx, p)
	if err != nil {
		return nil, err
	}
	quota := func(q sandbox.Quota) apigen.Quota { return apigen.Quota{Used: q.Used, Limit: q.Limit} }
	return apigen.GetMe200JSONResponse{
		Quotas: &apigen.Quotas{Sessions: quota(u.Sessions), ConcurrentExecutions: quota(u.ConcurrentExecutions), BackgroundProcesses: quota(u.BackgroundProcesses),
			Contexts: quota(u.Contexts), McpSessions: quota(u.MCPSessions), RetainedOutputBytes: quota(u.RetainedOutputBytes),
			Snapshots: quota(u.Snapshots), SnapshotBytes: quota(u.SnapshotBytes), OpenRequests: s.openRequests(p)},
		Issuer: p.Issuer, Subject: p.Subject, Username: p.Username, Email: ptr(p.Email), Groups: nonNil(p.Groups), Admin: p.Admin,
		Credentials: apigen.Credentials{
			KubernetesUser: ptr(c.KubernetesUser), AwsRoleArn: ptr(c.AWSRoleARN), RunAs: ptr(c.RunAs),
			KubernetesGroups: nilIfEmpty(c.KubernetesGroups),
		},
		FirstSeenAt: ptr(p.FirstSeenAt), LastSeenAt: ptr(p.LastSeenAt),
		ApiKey: apiKeyOf(p),
	}, nil
}

// apiKeyOf describes the API key p's request was made with; nil for a token.
func apiKeyOf(p principal.Principal) *struct {
	Id       string    `json:"id"`
	Profiles *[]string `json:"profiles,omitempty"`
} {
	if p.APIKeyID == "" {
		return nil
	}
	k := &struct {
		Id       string    `json:"id"`
		Profiles *[]string `json:"profiles,omitempty"`
	}{Id: p.APIKeyID}
	if p.KeyProfiles != nil {
		k.Profiles = &p.KeyProfiles
	}
	return k
}

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

func nilIfEmpty(s []string) *[]string {
	if len(s) == 0 {
		return nil
	}
	return &s
}

// ListProfiles returns the profiles the caller may use.
func (s *Server) ListProfiles(ctx context.Context, _ apigen.ListProfilesRequestObject) (apigen.ListProfilesResponseObject, error) {
	p, err := caller(ctx)
	if err != nil {
		return nil, err
	}
	out := apigen.ListProfiles200JSONResponse{Profiles: []apigen.Profile{}}
	for _, prof := range s.sandbox.Profiles(p) {
		v := profileView(prof)
		v.OutputLimitBytes = s.sandbox.OutputLimit()
		v.Shared = prof.Scope == sandbox.ScopePerRuntime
		out.Profiles = append(out.Profiles, v)
	}
	return out, nil
}

func profileView(prof *sandbox.Profile) apigen.Profile {
	c, pol := prof.Caps, prof.Policy
	v := apigen.Profile{
		Name: prof.Name, Default: prof.Default, Provider: prof.Provider.Type(), Scope: apigen.Scope(prof.Scope),
		Environment: environment(prof), Isolation: apigen.IsolationTier(c.Isolation),
		IdentityMode: identityMode(prof), IdleTimeoutS: int(prof.IdleTimeout / time.Second),
		IdleAction: apigen.ProfileIdleAction(prof.EffectiveIdleAction()), AutoResume: prof.AutoResume,
		AllowedGroups: nilIfEmpty(prof.AllowedGroups),
		Policy: apigen.Policy{
			NetworkEgress: apigen.PolicyNetworkEgress(pol.NetworkEgress), NetworkAllow: nonNil(pol.NetworkAllow),
			FsAllowRead: nonNil(pol.FSAllowRead), FsAllowWrite: nonNil(pol.FSAllowWrite), TimeoutS: pol.Timeout.Seconds(), Strict: pol.Strict,
		},
		Egress: apigen.Egress{Mode: apigen.EgressMode(pol.NetworkEgress), EnforcedBy: apigen.EgressEnforcedBy(prof.EgressEnforcement())},
		Capabilities: apigen.Capabilities{
			Isolation: apigen.IsolationTier(c.Isolation), Shell: c.Shell, Languages: nonNil(c.Languages), Files: c.Files,
			PackageInstall: c.PackageInstall, Stateful: c.Stateful, Interactive: c.Interactive, Background: c.Background,
			Attach: c.Attach, Provisions: c.Provisions,
			AttachesExternal: c.AttachesExternal, PrincipalUser: c.PrincipalUser, PolicyNetwork: c.PolicyNetwork,
			PolicyFilesystem: c.PolicyFilesystem, PolicyResources: c.PolicyResources, PolicyDisk: c.PolicyDisk,
			Pause: c.Pause, Snapshots: c.Snapshots, PreviewPorts: c.PreviewPorts,
		},
	}
	if pol.CPU > 0 {
		v.Policy.Cpu = ptr(float64(pol.CPU))
	}
	if pol.MemoryMB > 0 {
		v.Policy.MemoryMb = ptr(pol.MemoryMB)
	}
	if pol.DiskMB > 0 {
		v.Policy.DiskMb = ptr(pol.DiskMB)
	}
	return v
}

func sessionView(s sandbox.Session, admin bool, owner string) apigen.Session {
	v := apigen.Session{
		Id: s.ID, Name: ptr(s.Name), Profile: s.Profile, Provider: s.Provider, Scope: apigen.Scope(s.Scope),
		Status: apigen.SessionStatus(s.Status), Default: s.IsDefault && !s.Shared, Labels: s.Labels,
		SandboxId: ptr(s.SandboxID), CreatedAt: s.CreatedAt, LastUsedAt: s.LastUsedAt,
		State: apigen.SessionState(s.State), PausedAt: ptr(s.PausedAt), ParkedSnapshot: ptr(s.ParkedSnapshot),
		DestroyError: ptr(s.DestroyError), DestroyAttempts: ptr(s.DestroyAttempts), DestroyRetryAt: ptr(s.DestroyRetryAt),
	}
	if v.Labels == nil {
		v.Labels = map[string]string{}
	}
	if len(s.Env) > 0 {
		names := slices.Sorted(maps.Keys(s.Env))
		v.EnvNames = &names
	}
	if len(s.Secrets) > 0 {
		names := slices.Sorted(maps.Keys(s.Secrets))
		v.Secrets = &names
	}
	if !s.ExpiresAt.IsZero() {
		v.ExpiresAt, v.OnExpiry = &s.ExpiresAt, ptr(apigen.SessionOnExpiry(s.OnExpiry))
	}
	v.Cpu, v.MemoryMb = ptr(s.CPU), ptr(s.MemoryMB)
	if s.Shared {
		v.Shared = ptr(true)
	}
	if admin {
		v.Owner = ptr(owner)
	}
	return v
}

// ListSessions pages through the caller's sessions.
func (s *Server) ListSessions(ctx context.Context, req apigen.ListSessionsRequestObject) (apigen.ListSessionsResponseObject, error) {
	p, err := caller(ctx)
	if err != nil {
		return nil, err
	}
	q := req.Params
	limit := 50
	if q.Limit != nil {
		limit = *q.Limit
	}
	labels, err := labelSelector(q.Label)
	if err != nil {
		return nil, err
	}
	rows, next, err := s.sandbox.ListSessions(ctx, p, sandbox.ListFilter{
		Profile: deref(q.Profile), Status: string(deref(q.Status)), Conversation: deref(q.Conversation), All: deref(q.All),
		Labels: labels, Limit: limit, Cursor: deref(q.Cursor),
	})
	if err != nil {
		return nil, err
	}
	out := apigen.ListSessions200JSONResponse{Sessions: []apigen.Session{}, NextCursor: next}
	for _, r := range rows {
		owner := ""
		if p.Admin && r.OwnerID != "" {
			owner = s.sandbox.OwnerLabel(ctx, r.OwnerID)
		}
		out.Sessions = append(out.Sessions, sessionView(r, p.Admin, owner))
	}
	return out, nil
}

// CreateSession mints a session.
func (s *Server) CreateSession(ctx context.Context, req apigen.CreateSessionRequestObject) (apigen.CreateSessionResponseObject, error) {
	p, err := caller(ctx)
	if err != nil {
		return nil, err
	}
	var in sandbox.CreateSessionInput
	if b := req.Body; b != nil {
		in = sandbox.CreateSessionInput{
			Profile: deref(b.Profile), Name: deref(b.Name), Labels: deref(b.Labels), FromSnapshot: deref(b.FromSnapshot),
			Env: deref(b.Env), Lifetime: time.Duration(deref(b.TimeoutS)) * time.Second, OnExpiry: string(deref(b.OnExpiry)),
			CPU: deref(b.Cpu), MemoryMB: deref(b.MemoryMb), Secrets: deref(b.Secrets),
		}
	}
	sess, err := s.sandbox.CreateSession(ctx, p, in)
	if err != nil {
		return nil, err
	}
	return apigen.CreateSession201JSONResponse{
		Body:    sessionView(sess, false, ""),
		Headers: apigen.CreateSession201ResponseHeaders{Location: location(ctx, "/v1/sessions/"+sess.ID)},
	}, nil
}

// GetSession returns one session.
func (s *Server) GetSession(ctx context.Context, req apigen.GetSessionRequestObject) (apigen.GetSessionResponseObject, error) {
	p, err := caller(ctx)
	if err != nil {
		return nil, err
	}
	sess, err := s.sandbox.GetSession(ctx, p, req.SessionId, deref(req.Params.Profile))
	if err != nil {
		return nil, err
	}
	return apigen.GetSession200JSONResponse(sessionView(sess, false, "")), nil
}

// DeleteSession destroys a session (idempotent): 200 once it is gone, 202 when the provider
// failed to remove its sandbox and the session is kept, closed, while that is retried.
func (s *Server) DeleteSession(ctx context.Context, req apigen.DeleteSessionRequestObject) (apigen.DeleteSessionResponseObject, error) {
	p, err := caller(ctx)
	if err != nil {
		return nil, err
	}
	d, err := s.sandbox.DestroySession(ctx, p, req.SessionId, deref(req.Params.Profile))
	if err != nil {
		return nil, err
	}
	if d.Pending {
		state := apigen.SessionDestroyedStateDestroyFailed
		return apigen.DeleteSession202JSONResponse{
			Body:    apigen.SessionDestroyed{SessionId: d.SessionID, Destroyed: false, State: &state, Notice: ptr(d.Notice)},
			Headers: apigen.DeleteSession202ResponseHeaders{Location: location(ctx, "/v1/sessions/"+d.SessionID)},
		}, nil
	}
	return apigen.DeleteSession200JSONResponse{SessionId: d.SessionID, Destroyed: true}, nil
}

func seconds(f *float64) time.Duration {
	if f == nil {
		return 0
	}
	return time.Duration(*f * float64(time.Second))
}

func waitFor(f *float64) *time.Duration {
	if f == nil {
		return nil
	}
	d := seconds(f)
	return &d
}

func stdinBytes(s *string) []byte {
	if s == nil {
		return nil
	}
	return []byte(*s)
}

// RunCommand runs a shell command in a session.
func (s *Server) RunCommand(ctx context.Context, req apigen.RunCommandRequestObject) (apigen.RunCommandResponseObject, error) {
	p, err := caller(ctx)
	if err != nil {
		return nil, err
	}
	b := req.Body
	in := sandbox.ExecInput{
		SessionID: req.SessionId, Profile: deref(req.Params.Profile), Command: b.Command, Env: deref(b.Env), Cwd: deref(b.Cwd),
		Stdin: stdinBytes(b.Stdin), Timeout: seconds(b.TimeoutS), Wait: waitFor(b.WaitS), Base64: deref(b.Output) == apigen.OutputEncodingBase64,
		StdinOpen: deref(b.StdinOpen), Background: deref(b.Background),
	}
	if b.Pty != nil {
		in.PTY = &sandbox.TermSize{Rows: b.Pty.Rows, Cols: b.Pty.Cols}
	}
	execute := func(in sandbox.ExecInput) (sandbox.Outcome, error) { return s.sandbox.Execute(ctx, p, in) }
	if wantsEventStream(ctx) {
		return s.streamExecution(ctx, p, execute, in)
	}
	out, err := execute(in)
	if err != nil {
		return nil, err
	}
	if out.Task != nil && out.Task.Background {
		return apigen.RunCommand201JSONResponse{ProcessStartedJSONResponse: processStarted(ctx, *out.Task)}, nil
	}
	if out.Task != nil {
		return apigen.RunCommand202JSONResponse{ExecutionPromotedJSONResponse: promoted(ctx, *out.Task)}, nil
	}
	return apigen.RunCommand200JSONResponse{ExecutionDoneJSONResponse: apigen.ExecutionDoneJSONResponse(resultView(out.Result))}, nil
}

// RunCode runs code in a session.
func (s *Server) RunCode(ctx context.Context, req apigen.RunCodeRequestObject) (apigen.RunCodeResponseObject, error) {
	p, err := caller(ctx)
	if err != nil {
		return nil, err
	}
	b := req.Body
	in := sandbox.ExecInput{
		SessionID: req.SessionId, Profile: deref(req.Params.Profile), Code: b.Code, Language: deref(b.Language), Env: deref(b.Env),
		Context: deref(b.Context), Timeout: seconds(b.TimeoutS), Wait: waitFor(b.WaitS), Base64: deref(b.Output) == apigen.OutputEncodingBase64,
		Stdin: stdinBytes(b.Stdin), StdinOpen: deref(b.StdinOpen),
	}
	execute := func(in sandbox.ExecInput) (sandbox.Outcome, error) { return s.sandbox.Execute(ctx, p, in) }
	if wantsEventStream(ctx) {
		return s.streamExecution(ctx, p, execute, in)
	}
	out, err := execute(in)
	if err != nil {
		return nil, err
	}
	if out.Task != nil {
		return apigen.RunCode202JSONResponse{ExecutionPromotedJSONResponse: promoted(ctx, *out.Task)}, nil
	}
	return apigen.RunCode200JSONResponse{ExecutionDoneJSONResponse: apigen.ExecutionDoneJSONResponse(resultView(out.Result))}, nil
}

// CreateRun runs once in a fresh per_call sandbox.
func (s *Server) CreateRun(ctx context.Context, req apigen.CreateRunRequestObject) (apigen.CreateRunResponseObject, error) {
	p, err := caller(ctx)
	if err != nil {
		return nil, err
	}
	b := req.Body
	if (b.Command == nil) == (b.Code == nil) {
		return nil, fault.New(fault.Validation, "give exactly one of command or code")
	}
	if k := deref(b.Kind); k == apigen.RunRequestKindCommand && b.Command == nil || k == apigen.RunRequestKindCode && b.Code == nil {
		return nil, fault.New(fault.Validation, "kind '%s' needs the member '%s'", k, k)
	}
	in := sandbox.ExecInput{
		Profile: deref(b.Profile), Command: deref(b.Command), Code: deref(b.Code), Language: deref(b.Language), Env: deref(b.Env),
		Stdin: stdinBytes(b.Stdin), Timeout: seconds(b.TimeoutS), Wait: waitFor(b.WaitS), Base64: deref(b.Output) == apigen.OutputEncodingBase64,
	}
	execute := func(in sandbox.ExecInput) (sandbox.Outcome, error) { return s.sandbox.Run(ctx, p, in) }
	if wantsEventStream(ctx) {
		return s.streamExecution(ctx, p, execute, in)
	}
	out, err := execute(in)
	if err != nil {
		return nil, err
	}
	if out.Task != nil {
		return apigen.CreateRun202JSONResponse{ExecutionPromotedJSONResponse: promoted(ctx, *out.Task)}, nil
	}
	return apigen.CreateRun200JSONResponse{ExecutionDoneJSONResponse: apigen.ExecutionDoneJSONResponse(resultView(out.Result))}, nil
}

func promoted(ctx context.Context, t sandbox.Task) apigen.ExecutionPromotedJSONResponse {
	return apigen.ExecutionPromotedJSONResponse{
		Body:    taskView(t),
		Headers: apigen.ExecutionPromotedResponseHeaders{Location: location(ctx, "/v1/tasks/"+t.ID)},
	}
}

func resultView(r *sandbox.Result) apigen.ExecutionResult {
	return apigen.ExecutionResult{
		Status: apigen.ExecutionResultStatus(r.Status), ExitCode: r.ExitCode, Signal: ptr(r.Signal), OomKilled: ptr(r.OOMKilled),
		Stdout: r.Stdout, Stderr: r.Stderr, StdoutBytes: r.StdoutBytes, StderrBytes: r.StderrBytes,
		StdoutTruncated: r.StdoutTruncated, StderrTruncated: r.StderrTruncated, Encoding: apigen.ExecutionResultEncoding(r.Encoding),
		DurationMs: r.DurationMS, SessionId: r.SessionID, TaskId: ptr(r.TaskID), Notice: ptr(r.Notice), Warnings: nonNil(r.Warnings),
		OutputDropped: ptr(r.OutputDropped), Results: richResultsView(r.Results),
	}
}

// richResultsView is the API form of rich results (nil for none).
func richResultsView(list []sandbox.RichResult) *[]apigen.RichResult {
	if len(list) == 0 {
		return nil
	}
	out := make([]apigen.RichResult, len(list))
	for i, r := range list {
		out[i] = richResultView(r)
	}
	return &out
}

func richResultView(r sandbox.RichResult) apigen.RichResult {
	v := apigen.RichResult{IsMainResult: r.Main}
	if r.Data != nil {
		data := make(map[string]any, len(r.Data))
		for t, raw := range r.Data {
			data[t] = raw // encodes as it is: the JSON the sandbox gave
		}
		v.Data = &data
	}
	if d := r.Dropped; d != nil {
		v.Dropped = &apigen.DroppedResult{Types: nonNil(d.Types), Bytes: d.Bytes}
	}
	return v
}

func taskView(t sandbox.Task) apigen.Task {
	v := apigen.Task{
		Id: t.ID, SessionId: t.SessionID, Profile: t.Profile, Operation: apigen.TaskOperation(t.Operation),
		Status: apigen.TaskStatus(t.Status), SubmittedAt: t.SubmittedAt, StartedAt: t.StartedAt, FinishedAt: t.FinishedAt,
		ExpiresAt: t.ExpiresAt, Notice: ptr(t.Notice), Error: ptr(t.Error), ErrorType: ptr(t.ErrorType),
		Program: ptr(t.Program), Background: ptr(t.Background), Pid: ptr(t.PID),
	}
	if t.Result != nil {
		r := resultView(t.Result)
		v.Result = &r
	}
	return v
}

// ListFiles lists a workspace folder.
func (s *Server) ListFiles(ctx context.Context, req apigen.ListFilesRequestObject) (apigen.ListFilesResponseObject, error) {
	p, err := caller(ctx)
	if err != nil {
		return nil, err
	}
	dir, entries, err := s.sandbox.ListFiles(ctx, p, req.SessionId, deref(req.Params.Profile), deref(req.Params.Dir))
	if err != nil {
		return nil, err
	}
	out := apigen.ListFiles200JSONResponse{Dir: dir, Entries: []apigen.FileEntry{}}
	for _, e := range entries {
		out.Entries = append(out.Entries, apigen.FileEntry{
			Name: e.Name, Path: e.Path, Type: apigen.FileEntryType(e.Type), Size: e.Size,
			Mode: fmt.Sprintf("%04o", e.Mode.Perm()), ModifiedAt: e.ModTime.UTC(), PathEscaped: escapedPath(e.Path),
		})
	}
	return out, nil
}

// WriteFile streams the body into a workspace file.
func (s *Server) WriteFile(ctx context.Context, req apigen.WriteFileRequestObject) (apigen.WriteFileResponseObject, error) {
	p, err := caller(ctx)
	if err != nil {
		return nil, err
	}
	size := int64(-1) // chunked: the limit cuts the stream
	if r := requestOf(ctx); r != nil {
		size = r.ContentLength
	}
	w, err := s.sandbox.WriteFile(ctx, p, req.SessionId, deref(req.Params.Profile), req.Path, req.Body, size)
	if err != nil {
		return nil, err
	}
	return apigen.WriteFile200JSONResponse{SessionId: w.SessionID, Path: w.Path, PathEscaped: escapedPath(w.Path), Size: w.Size, Sha256: w.SHA256}, nil
}

// escapedPath is workspace path p percent-encoded byte for byte, slashes kept, as it must
// appear in …/files/{path}, when p is not valid UTF-8 (JSON would show U+FFFD for its
// invalid bytes, a path no request can name); nil for a UTF-8 path, whose path field says it.
func escapedPath(p string) *string {
	if utf8.ValidString(p) {
		return nil
	}
	parts := strings.Split(p, "/")
	for i, part := range parts {
		parts[i] = url.PathEscape(part)
	}
	e := strings.Join(parts, "/")
	return &e
}

// ReadFile streams a workspace file (whole, one range, or 304: fileDownload).
func (s *Server) ReadFile(ctx context.Context, req apigen.ReadFileRequestObject) (apigen.ReadFileResponseObject, error) {
	p, err := caller(ctx)
	if err != nil {
		return nil, err
	}
	rc, st, err := s.sandbox.OpenFile(ctx, p, req.SessionId, deref(req.Params.Profile), req.Path)
	if err != nil {
		return nil, err
	}
	d := fileDownload{rc: rc, stat: st, r: requestOf(ctx)}
	d.params.rng, d.params.ifNoneMatch, d.params.ifRange = deref(req.Params.Range), deref(req.Params.IfNoneMatch), deref(req.Params.IfRange)
	return d, nil
}

// DeleteFile removes a workspace file or empty folder.
func (s *Server) DeleteFile(ctx context.Context, req apigen.DeleteFileRequestObject) (apigen.DeleteFileResponseObject, error) {
	p, err := caller(ctx)
	if err != nil {
		return nil, err
	}
	if err := s.sandbox.DeleteFile(ctx, p, req.SessionId, deref(req.Params.Profile), req.Path); err != nil {
		return nil, err
	}
	return apigen.DeleteFile204Response{}, nil
}

// ListTasks pages through the caller's tasks.
func (s *Server) ListTasks(ctx context.Context, req apigen.ListTasksRequestObject) (apigen.ListTasksResponseObject, error) {
	p, err := caller(ctx)
	if err != nil {
		return nil, err
	}
	q := req.Params
	limit := 50
	if q.Limit != nil {
		limit = *q.Limit
	}
	labels, err := labelSelector(q.Label)
	if err != nil {
		return nil, err
	}
	rows, next, err := s.sandbox.ListTasks(ctx, p, sandbox.TaskFilter{Status: string(deref(q.Status)), SessionID: deref(q.SessionId), Labels: labels, Limit: limit, Cursor: deref(q.Cursor)})
	if err != nil {
		return nil, err
	}
	out := apigen.ListTasks200JSONResponse{Tasks: []apigen.Task{}, NextCursor: next}
	for _, t := range rows {
		out.Tasks = append(out.Tasks, taskView(t))
	}
	return out, nil
}

// GetTask returns one task with its result once finished.
func (s *Server) GetTask(ctx context.Context, req apigen.GetTaskRequestObject) (apigen.GetTaskResponseObject, error) {
	p, err := caller(ctx)
	if err != nil {
		return nil, err
	}
	t, err := s.sandbox.GetTask(ctx, p, req.TaskId)
	if err != nil {
		return nil, err
	}
	return apigen.GetTask200JSONResponse(taskView(t)), nil
}

// CancelTask cancels a pending or running task.
func (s *Server) CancelTask(ctx context.Context, req apigen.CancelTaskRequestObject) (apigen.CancelTaskResponseObject, error) {
	p, err := caller(ctx)
	if err != nil {
		return nil, err
	}
	t, err := s.sandbox.CancelTask(ctx, p, req.TaskId)
	if err != nil {
		return nil, err
	}
	return apigen.CancelTask200JSONResponse(taskView(t)), nil
}

func environment(prof *sandbox.Profile) apigen.ProfileEnvironment {
	if prof.Attached() {
		return apigen.Attached
	}
	return apigen.Managed
}

func identityMode(prof *sandbox.Profile) apigen.ProfileIdentityMode {
	if prof.IdentityMode == sandbox.IdentityUser {
		return apigen.ProfileIdentityModeUser
	}
	return apigen.ProfileIdentityModeAgent
}
