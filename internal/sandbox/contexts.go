package sandbox

import (
	"context"
	"regexp"

	"github.com/sandgate/sandgate/internal/fault"
	"github.com/sandgate/sandgate/internal/principal"
	"github.com/sandgate/sandgate/internal/providers"
)

// contextName is what a context may be called: what sandboxd accepts.
var contextName = regexp.MustCompile(`^[A-Za-z0-9_.-]{1,64}$`)

// pickContext decides which stateful context runs spec: the one the caller named, else the
// default context on a stateful profile, else none (a fresh interpreter per execution).
// Errors: fault.Validation for a context on a command or a malformed name;
// fault.Capability when the profile's provider keeps no state.
func (s *Service) pickContext(prof *Profile, spec *providers.ExecSpec, named string) error {
	if named == "" {
		if prof.Config.Stateful && spec.Code != "" && prof.Caps.Stateful {
			spec.Context = providers.DefaultContext
		}
		return nil
	}
	if spec.Code == "" {
		return fault.New(fault.Validation, "context applies to code executions only; a command runs in a fresh shell (use a bash code execution to keep shell state)")
	}
	if !contextName.MatchString(named) {
		return fault.New(fault.Validation, "context name %q is not valid: use 1-64 letters, digits, '_', '.' or '-'", named)
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

// Context operations.
const (
	ContextList    = "list"
	ContextCreate  = "create"
	ContextRestart = "restart"
	ContextDelete  = "delete"
)

// Contexts lists, creates, restarts or deletes the stateful contexts of session id's sandbox
// (creating the sandbox when the session has none yet). Context operations are ordered with
// the session's executions. It returns the contexts after the operation, sorted by name.
//
// Errors: fault.NotFound for another principal's or an unknown session, or (restart, delete)
// an unknown context; fault.Capability when the profile's provider keeps no state;
// fault.Conflict for per_call profiles and for creating an existing context;
// fault.Validation for a bad name or language.
func (s *Service) Contexts(ctx context.Context, p principal.Principal, id, profile string, op ContextOp) ([]providers.ContextInfo, error) {
	sess, prof, ephemeral, err := s.resolve(ctx, p, id, profile)
	if err != nil {
		return nil, err
	}
	if ephemeral {
		return nil, fault.New(fault.Conflict, "profile '%s' has scope per_call: its sandboxes live for one run and keep no contexts", prof.Name)
	}
	if !prof.Caps.Stateful {
		return nil, fault.Unsupported(prof.Provider.Type(), "stateful")
	}
	if op.Op != ContextList && !contextName.MatchString(op.Name) {
		return nil, fault.New(fault.Validation, "context name %q is not valid: use 1-64 letters, digits, '_', '.' or '-'", op.Name)
	}
	if op.Op == ContextCreate {
		if op.Language == "" {
			op.Language = "python"
		}
		if op.Language != "python" && op.Language != "bash" {
			return nil, fault.New(fault.Validation, "context language %q is not supported: use python or bash", op.Language)
		}
	}
	if _, err := s.checks(prof, p); err != nil {
		return nil, err
	}
	unlock, err := s.lockSession(ctx, sess.ID)
	if err != nil {
		return nil, err
	}
	defer unlock()
	if sess, err = s.store.GetSession(ctx, sess.ID); err != nil {
		return nil, err
	}
	if _, err := s.resetIfIdle(ctx, prof, &sess); err != nil {
		return nil, err
	}
	sb, _, err := s.acquire(ctx, prof, &sess, providerPrincipal(prof, p))
	if err != nil {
		return nil, err
	}
	defer func() { _ = sb.Close() }()
	if err := s.store.UpdateSessionBackend(ctx, sess.ID, sb.ID(), "active", s.now()); err != nil {
		return nil, err
	}
	cm, ok := sb.(providers.Contexts)
	if !ok {
		return nil, fault.Unsupported(prof.Provider.Type(), "stateful")
	}
	switch op.Op {
	case ContextCreate:
		_, err = cm.CreateContext(ctx, op.Name, op.Language)
	case ContextRestart:
		_, err = cm.RestartContext(ctx, op.Name)
	case ContextDelete:
		err = cm.DeleteContext(ctx, op.Name)
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
	return list, nil
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
