package sandbox

import (
	"context"
	"regexp"
	"time"

	"github.com/sandgate/sandgate/internal/fault"
	"github.com/sandgate/sandgate/internal/principal"
	"github.com/sandgate/sandgate/internal/providers"
	"github.com/sandgate/sandgate/internal/store"
)

// contextName is what a context may be called: what sandboxd accepts. The first character is
// never '.' (so no "." or "..": names are URL path segments) nor '-'.
var contextName = regexp.MustCompile(`^[A-Za-z0-9_][A-Za-z0-9_.-]{0,63}$`)

// pickContext decides which stateful context runs spec: the one the caller named, else, for
// Python code on a stateful profile, the default context, else none (a fresh interpreter per
// execution).
// Errors: fault.Validation for a context on a command or a malformed name;
// fault.Capability when the profile's provider keeps no state.
func pickContext(prof *Profile, spec *providers.ExecSpec, named string) error {
	if named == "" {
		// The default context is a Python one (seed 004's runtime); bash code runs in a fresh
		// shell unless it names a context.
		if prof.Stateful && spec.Code != "" && prof.Caps.Stateful && (spec.Language == "" || spec.Language == "python") {
			spec.Context = providers.DefaultContext
		}
		return nil
	}
	if spec.Code == "" {
		return fault.New(fault.Validation, "context applies to code executions only; a command runs in a fresh shell (use a bash code execution to keep shell state)")
	}
	if !contextName.MatchString(named) {
		return fault.New(fault.Validation, "context name %q is not valid: use 1-64 letters, digits, '_', '.' or '-', starting with a letter, digit or '_'", named)
	}
	if !prof.Caps.Stateful {
		return fault.Unsupported(prof.Provider.Type(), "stateful")
	}
	spec.Context = named
	return nil
}

// ContextOp is an operation on the stateful contexts of a session's sandbox.
type ContextOp struct {
	Op       string // list | create | restart | delete
	Name     string // create, restart, delete
	Language string // create: python (default) or bash
}

// NamedContext is a named stateful context of a session's sandbox as the caller sees it: an
// interpreter whose state outlives one execution (docs/semantics.md §3 Contexts).
type NamedContext struct {
	Name      string
	Language  string // python | bash
	CreatedAt time.Time
	// Executions counts the executions it ran since it (re)started.
	Executions int
	// Alive is false once its interpreter died; the next execution in it starts a new one.
	Alive bool
}

// namedContexts is the provider's list as the caller sees it.
func namedContexts(list []providers.ContextInfo) []NamedContext {
	out := make([]NamedContext, 0, len(list))
	for _, c := range list {
		out = append(out, NamedContext{Name: c.Name, Language: c.Language, CreatedAt: c.CreatedAt, Executions: c.Executions, Alive: c.Alive})
	}
	return out
}

// Context operations.
const (
	ContextList    = "list"
	ContextCreate  = "create"
	ContextRestart = "restart"
	ContextDelete  = "delete"
)

// Contexts lists, creates, restarts or deletes the stateful contexts of session id's sandbox
// (a create makes the sandbox when the session has none yet). Operations on an existing
// sandbox do not wait for the session's running execution: restarting or deleting the
// context it runs in ends that execution (its result says the context was lost). It returns
// the contexts after the operation, sorted by name.
//
// Errors: fault.NotFound for another principal's or an unknown session, or (restart, delete)
// an unknown context; fault.Capability when the profile's provider keeps no state;
// fault.Conflict for per_call profiles and for creating an existing context;
// fault.Validation for a bad name or language; fault.Quota for a create past
// sandbox.quotas.contexts.
func (s *Service) Contexts(ctx context.Context, p principal.Principal, id, profile string, op ContextOp) ([]NamedContext, error) {
	sess, prof, ephemeral, err := s.sessions.Resolve(ctx, p, id, profile)
	if err != nil {
		return nil, err
	}
	if err := checkContextOp(prof, ephemeral, &op); err != nil {
		return nil, err
	}
	if _, err := s.profiles.Checks(prof, p); err != nil {
		return nil, err
	}
	sb, sess, err := s.leases().contextSandbox(ctx, p, prof, sess, op)
	if err != nil {
		return nil, err
	}
	if sb == nil {
		return []NamedContext{}, nil // a list without a sandbox: none
	}
	defer func() { _ = sb.Close() }()
	_ = s.store.TouchSession(ctx, sess.ID, s.now())
	cm, ok := sb.(providers.Contexts)
	if !ok {
		return nil, fault.Unsupported(prof.Provider.Type(), "stateful")
	}
	switch op.Op {
	case ContextCreate:
		// Counted before it exists (contextquota.go), given back if it could not be made.
		if err := s.quota.HoldContext(ctx, p, sess.ID, sb.ID(), op.Name); err != nil {
			return nil, err
		}
		if _, err = cm.CreateContext(ctx, op.Name, op.Language); err != nil && fault.KindOf(err) != fault.Conflict {
			s.quota.ReleaseContext(ctx, sess.ID, op.Name)
		}
	case ContextRestart:
		_, err = cm.RestartContext(ctx, op.Name)
	case ContextDelete:
		err = cm.DeleteContext(ctx, op.Name)
		if err == nil || fault.KindOf(err) == fault.NotFound {
			s.quota.ReleaseContext(ctx, sess.ID, op.Name)
		}
	case ContextList:
	default:
		return nil, fault.New(fault.Internal, "unknown context operation %q", op.Op)
	}
	if err != nil {
		return nil, classify(err, fault.Provision)
	}
	list, err := cm.ListContexts(ctx)
	if err != nil {
		return nil, classify(err, fault.Provision)
	}
	return namedContexts(list), nil
}

// checkContextOp refuses op on prof (per_call: ephemeral) before anything is reached, and
// defaults a create's language to python. Errors: Contexts'.
func checkContextOp(prof *Profile, ephemeral bool, op *ContextOp) error {
	if ephemeral {
		return fault.New(fault.Conflict, "profile '%s' has scope per_call: its sandboxes live for one run and keep no contexts", prof.Name)
	}
	if !prof.Caps.Stateful {
		return fault.Unsupported(prof.Provider.Type(), "stateful")
	}
	if op.Op != ContextList && !contextName.MatchString(op.Name) {
		return fault.New(fault.Validation, "context name %q is not valid: use 1-64 letters, digits, '_', '.' or '-', starting with a letter, digit or '_'", op.Name)
	}
	if op.Op == ContextCreate {
		if op.Language == "" {
			op.Language = "python"
		}
		if op.Language != "python" && op.Language != "bash" {
			return fault.New(fault.Validation, "context language %q is not supported: use python or bash", op.Language)
		}
	}
	return nil
}

// contextSandbox leases sess's sandbox for context operation op and keeps its handle (the
// caller closes it): a nil handle, no error, for a list on a session without a sandbox.
// Context operations do not wait for the session's running execution (a restart is how a
// caller frees a context stuck in one): with a sandbox in place they go straight to it.
// Only a create on a session without a sandbox takes the session lock, to make one — as an
// execution would: in the session's line, reset if idle, the binding recorded.
func (ls *leases) contextSandbox(ctx context.Context, p principal.Principal, prof *Profile, sess store.Session, op ContextOp) (providers.Sandbox, store.Session, error) {
	l, err := ls.lease(ctx, p, prof, sess, leaseOpts{order: orderIfParked, reach: reachAttach})
	if err != nil && fault.KindOf(err) != fault.Gone {
		return nil, sess, err
	}
	if err == nil && l.Sandbox != nil {
		return l.Keep(), l.Session, nil
	}
	if err == nil {
		sess = l.Session
	}
	switch op.Op {
	case ContextList:
		return nil, sess, nil
	case ContextRestart, ContextDelete:
		return nil, sess, fault.New(fault.NotFound, "no context '%s' in session '%s': its sandbox has none yet", op.Name, sess.ID)
	}
	made, err := ls.lease(ctx, p, prof, sess, leaseOpts{order: orderLock, reach: reachCreate, bind: bindAlways, resetIdle: true})
	if err != nil {
		return nil, sess, err
	}
	defer made.Release() // the lock was for making the sandbox
	return made.Keep(), made.Session, nil
}

// joinNotice appends notice b to a (either may be empty).
func joinNotice(a, b string) string {
	switch {
	case a == "":
		return b
	case b == "":
		return a
	}
	return a + "; " + b
}
