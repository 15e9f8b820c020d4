package api

import (
	"context"
	"math"
	"time"

	"github.com/sandgate/sandgate/internal/api/apigen"
	"github.com/sandgate/sandgate/internal/sandbox"
)

// The API keys (docs/semantics.md §1 API key): made, listed and revoked through the domain,
// which decides who may; authentication with them is internal/auth's.

// CreateAPIKey makes a key for the caller and answers its secret, this once.
func (s *Server) CreateAPIKey(ctx context.Context, req apigen.CreateAPIKeyRequestObject) (apigen.CreateAPIKeyResponseObject, error) {
	p, err := caller(ctx)
	if err != nil {
		return nil, err
	}
	in := sandbox.NewAPIKeyInput{Name: req.Body.Name, Profiles: deref(req.Body.Profiles)}
	if req.Body.Profiles != nil && in.Profiles == nil {
		in.Profiles = []string{}
	}
	if t := req.Body.TtlS; t != nil {
		in.TTL = time.Duration(min(int64(*t), math.MaxInt64/int64(time.Second))) * time.Second
	}
	k, err := s.sandbox.CreateAPIKey(ctx, p, in)
	if err != nil {
		return nil, err
	}
	v := keyView(k.APIKey)
	return apigen.CreateAPIKey201JSONResponse{
		Body: apigen.CreatedAPIKey{
			Id: v.Id, Name: v.Name, Prefix: v.Prefix, PrincipalId: v.PrincipalId, Principal: v.Principal, Profiles: v.Profiles,
			Status: apigen.CreatedAPIKeyStatus(v.Status), CreatedAt: v.CreatedAt, ExpiresAt: v.ExpiresAt, LastUsedAt: v.LastUsedAt,
			RevokedAt: v.RevokedAt, Secret: k.Secret,
		},
		Headers: apigen.CreateAPIKey201ResponseHeaders{Location: location(ctx, "/v1/api-keys/"+k.ID), CacheControl: ptr("no-store")},
	}, nil
}

// ListAPIKeys pages through the caller's keys (everyone's for an admin with all=true).
func (s *Server) ListAPIKeys(ctx context.Context, req apigen.ListAPIKeysRequestObject) (apigen.ListAPIKeysResponseObject, error) {
	p, err := caller(ctx)
	if err != nil {
		return nil, err
	}
	q := req.Params
	limit := 50
	if q.Limit != nil {
		limit = *q.Limit
	}
	keys, next, err := s.sandbox.ListAPIKeys(ctx, p, sandbox.APIKeyFilter{All: deref(q.All), Limit: limit, Cursor: deref(q.Cursor)})
	if err != nil {
		return nil, err
	}
	out := apigen.ListAPIKeys200JSONResponse{ApiKeys: []apigen.APIKey{}, NextCursor: next}
	for _, k := range keys {
		out.ApiKeys = append(out.ApiKeys, keyView(k))
	}
	return out, nil
}

// GetAPIKey returns one key.
func (s *Server) GetAPIKey(ctx context.Context, req apigen.GetAPIKeyRequestObject) (apigen.GetAPIKeyResponseObject, error) {
	p, err := caller(ctx)
	if err != nil {
		return nil, err
	}
	k, err := s.sandbox.GetAPIKey(ctx, p, req.KeyId)
	if err != nil {
		return nil, err
	}
	return apigen.GetAPIKey200JSONResponse(keyView(k)), nil
}

// RevokeAPIKey revokes a key and answers it.
func (s *Server) RevokeAPIKey(ctx context.Context, req apigen.RevokeAPIKeyRequestObject) (apigen.RevokeAPIKeyResponseObject, error) {
	p, err := caller(ctx)
	if err != nil {
		return nil, err
	}
	k, err := s.sandbox.RevokeAPIKey(ctx, p, req.KeyId)
	if err != nil {
		return nil, err
	}
	return apigen.RevokeAPIKey200JSONResponse(keyView(k)), nil
}

func keyView(k sandbox.APIKey) apigen.APIKey {
	v := apigen.APIKey{
		Id: k.ID, Name: k.Name, Prefix: k.Prefix, PrincipalId: k.PrincipalID, Principal: k.Principal,
		Status: apigen.APIKeyStatus(k.Status), CreatedAt: k.CreatedAt, ExpiresAt: k.ExpiresAt, LastUsedAt: k.LastUsedAt, RevokedAt: k.RevokedAt,
	}
	if k.Profiles != nil {
		v.Profiles = &k.Profiles
	}
	return v
}
