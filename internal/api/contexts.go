package api

import (
	"context"

	"github.com/sandgate/sandgate/internal/api/apigen"
	"github.com/sandgate/sandgate/internal/fault"
	"github.com/sandgate/sandgate/internal/sandbox"
)

// ListContexts lists the stateful contexts of a session's sandbox.
func (s *Server) ListContexts(ctx context.Context, req apigen.ListContextsRequestObject) (apigen.ListContextsResponseObject, error) {
	list, err := s.contexts(ctx, req.SessionId, req.Params.Profile, sandbox.ContextOp{Op: sandbox.ContextList})
	if err != nil {
		return nil, err
	}
	return apigen.ListContexts200JSONResponse(contextList(list)), nil
}

// CreateContext starts a named context.
func (s *Server) CreateContext(ctx context.Context, req apigen.CreateContextRequestObject) (apigen.CreateContextResponseObject, error) {
	b := req.Body
	op := sandbox.ContextOp{Op: sandbox.ContextCreate, Name: b.Name, Language: string(deref(b.Language))}
	list, err := s.contexts(ctx, req.SessionId, req.Params.Profile, op)
	if err != nil {
		return nil, err
	}
	c, err := findContext(list, b.Name)
	if err != nil {
		return nil, err
	}
	return apigen.CreateContext201JSONResponse(c), nil
}

// RestartContext gives a context a fresh interpreter.
func (s *Server) RestartContext(ctx context.Context, req apigen.RestartContextRequestObject) (apigen.RestartContextResponseObject, error) {
	list, err := s.contexts(ctx, req.SessionId, req.Params.Profile, sandbox.ContextOp{Op: sandbox.ContextRestart, Name: req.ContextName})
	if err != nil {
		return nil, err
	}
	c, err := findContext(list, req.ContextName)
	if err != nil {
		return nil, err
	}
	return apigen.RestartContext200JSONResponse(c), nil
}

// DeleteContext stops a context; the answer lists the remaining ones.
func (s *Server) DeleteContext(ctx context.Context, req apigen.DeleteContextRequestObject) (apigen.DeleteContextResponseObject, error) {
	list, err := s.contexts(ctx, req.SessionId, req.Params.Profile, sandbox.ContextOp{Op: sandbox.ContextDelete, Name: req.ContextName})
	if err != nil {
		return nil, err
	}
	return apigen.DeleteContext200JSONResponse(contextList(list)), nil
}

func (s *Server) contexts(ctx context.Context, session string, profile *string, op sandbox.ContextOp) ([]sandbox.NamedContext, error) {
	p, err := caller(ctx)
	if err != nil {
		return nil, err
	}
	return s.sandbox.Contexts(ctx, p, session, deref(profile), op)
}

func contextView(c sandbox.NamedContext) apigen.Context {
	return apigen.Context{Name: c.Name, Language: apigen.ContextLanguage(c.Language), CreatedAt: c.CreatedAt.UTC(), Executions: c.Executions, Alive: c.Alive}
}

func contextList(list []sandbox.NamedContext) apigen.ContextList {
	out := apigen.ContextList{Contexts: make([]apigen.Context, 0, len(list))}
	for _, c := range list {
		out.Contexts = append(out.Contexts, contextView(c))
	}
	return out
}

// findContext picks name out of the list the provider returned after an operation on it.
func findContext(list []sandbox.NamedContext, name string) (apigen.Context, error) {
	for _, c := range list {
		if c.Name == name {
			return contextView(c), nil
		}
	}
	return apigen.Context{}, fault.New(fault.Internal, "context '%s' is missing after the operation", name)
}
