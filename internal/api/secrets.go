package api

import (
	"context"

	"github.com/sandgate/sandgate/internal/api/apigen"
	"github.com/sandgate/sandgate/internal/sandbox"
)

// Secrets (issue 39; docs/semantics.md §15): set, listed and deleted through the domain,
// write-only — no answer carries a value.

// ListSecrets lists the caller's secrets by name.
func (s *Server) ListSecrets(ctx context.Context, _ apigen.ListSecretsRequestObject) (apigen.ListSecretsResponseObject, error) {
	p, err := caller(ctx)
	if err != nil {
		return nil, err
	}
	list, err := s.sandbox.ListSecrets(ctx, p)
	if err != nil {
		return nil, err
	}
	out := apigen.ListSecrets200JSONResponse{Secrets: make([]apigen.Secret, 0, len(list))}
	for _, sec := range list {
		out.Secrets = append(out.Secrets, secretView(sec))
	}
	return out, nil
}

// PutSecret creates or replaces one of the caller's secrets.
func (s *Server) PutSecret(ctx context.Context, req apigen.PutSecretRequestObject) (apigen.PutSecretResponseObject, error) {
	p, err := caller(ctx)
	if err != nil {
		return nil, err
	}
	sec, created, err := s.sandbox.SetSecret(ctx, p, req.Name, []byte(req.Body.Value), req.Body.Hosts)
	if err != nil {
		return nil, err
	}
	if created {
		return apigen.PutSecret201JSONResponse{Body: secretView(sec), Headers: apigen.PutSecret201ResponseHeaders{Location: location(ctx, "/v1/secrets/"+sec.Name)}}, nil
	}
	return apigen.PutSecret200JSONResponse(secretView(sec)), nil
}

// DeleteSecret deletes one of the caller's secrets.
func (s *Server) DeleteSecret(ctx context.Context, req apigen.DeleteSecretRequestObject) (apigen.DeleteSecretResponseObject, error) {
	p, err := caller(ctx)
	if err != nil {
		return nil, err
	}
	if err := s.sandbox.DeleteSecret(ctx, p, req.Name); err != nil {
		return nil, err
	}
	return apigen.DeleteSecret204Response{}, nil
}

func secretView(sec sandbox.Secret) apigen.Secret {
	return apigen.Secret{Name: sec.Name, Hosts: sec.Hosts, EnvName: ptr(sandbox.SecretEnvName(sec.Name)), CreatedAt: sec.CreatedAt, UpdatedAt: sec.UpdatedAt}
}
