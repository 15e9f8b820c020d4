package e2b

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"

	"github.com/sandgate/sandgate/internal/fault"
	"github.com/sandgate/sandgate/internal/providers/e2b/wire"
)

// apiClient speaks E2B's control-plane REST API (spec/openapi.yml; see package wire).
type apiClient struct {
	base string // e.g. https://api.e2b.app, no trailing slash
	key  string
	http *http.Client
}

// apiStatusError is a control-plane answer with an unexpected status.
type apiStatusError struct {
	op      string
	status  int
	message string
}

func (e *apiStatusError) Error() string {
	msg := e.message
	if msg == "" {
		msg = http.StatusText(e.status)
	}
	hint := ""
	switch e.status {
	case http.StatusUnauthorized, http.StatusForbidden:
		hint = " (check the API key in the environment variable named by api_key_env)"
	case http.StatusTooManyRequests:
		hint = " (E2B's rate or concurrency limit of the team)"
	}
	return fmt.Sprintf("e2b: %s: %d %s%s", e.op, e.status, msg, hint)
}

// do sends method path with body (JSON, nil for none) and decodes a JSON answer into out (nil
// to discard). It returns the status; an answer outside want is an *apiStatusError.
func (c *apiClient) do(ctx context.Context, op, method, path string, body, out any, want ...int) (int, error) {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return 0, err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, rd)
	if err != nil {
		return 0, err
	}
	req.Header.Set(wire.APIKeyHeader, c.key)
	req.Header.Set("Accept", "application/json")
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return 0, fmt.Errorf("e2b: %s: %w", op, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 8<<20))
	if err != nil {
		return resp.StatusCode, fmt.Errorf("e2b: %s: reading the answer: %w", op, err)
	}
	for _, w := range want {
		if resp.StatusCode == w {
			if out != nil && len(bytes.TrimSpace(data)) > 0 {
				if err := json.Unmarshal(data, out); err != nil {
					return resp.StatusCode, fmt.Errorf("e2b: %s: undecodable answer: %w", op, err)
				}
			}
			return resp.StatusCode, nil
		}
	}
	var apiErr wire.Error
	msg := strings.TrimSpace(string(data))
	if json.Unmarshal(data, &apiErr) == nil && apiErr.Message != "" {
		msg = apiErr.Message
	}
	if len(msg) > 500 {
		msg = msg[:500] + "…"
	}
	return resp.StatusCode, &apiStatusError{op: op, status: resp.StatusCode, message: msg}
}

func statusOf(err error) int {
	var se *apiStatusError
	if errors.As(err, &se) {
		return se.status
	}
	return 0
}

// create is POST /sandboxes. Errors: fault.Provision.
func (c *apiClient) create(ctx context.Context, req wire.NewSandbox) (wire.Sandbox, error) {
	var sb wire.Sandbox
	if _, err := c.do(ctx, "creating a sandbox from template '"+req.TemplateID+"'", http.MethodPost, "/sandboxes", req, &sb, http.StatusCreated, http.StatusOK); err != nil {
		return sb, asKind(fault.Provision, err)
	}
	if sb.SandboxID == "" {
		return sb, fault.New(fault.Provision, "e2b: creating a sandbox: the answer names no sandbox")
	}
	return sb, nil
}

// connect is POST /sandboxes/{id}/connect: it resumes a paused sandbox and extends its time
// to live to timeout seconds from now. Errors: fault.Gone for an unknown (or killed) sandbox,
// fault.Provision otherwise.
func (c *apiClient) connect(ctx context.Context, id string, timeout int32) (wire.Sandbox, error) {
	var sb wire.Sandbox
	_, err := c.do(ctx, "connecting to sandbox "+id, http.MethodPost, "/sandboxes/"+url.PathEscape(id)+"/connect", wire.ConnectSandbox{Timeout: timeout}, &sb, http.StatusOK, http.StatusCreated)
	switch {
	case statusOf(err) == http.StatusNotFound:
		return sb, fault.Wrap(fault.Gone, err, "e2b: sandbox %s no longer exists (killed, or its timeout passed)", id)
	case err != nil:
		return sb, asKind(fault.Provision, err)
	}
	if sb.SandboxID == "" {
		sb.SandboxID = id
	}
	return sb, nil
}

// setTimeout is POST /sandboxes/{id}/timeout: the sandbox expires timeout seconds from now.
// Errors: fault.Gone for an unknown sandbox, fault.Provision otherwise.
func (c *apiClient) setTimeout(ctx context.Context, id string, timeout int32) error {
	_, err := c.do(ctx, "refreshing the timeout of sandbox "+id, http.MethodPost, "/sandboxes/"+url.PathEscape(id)+"/timeout", wire.TimeoutRequest{Timeout: timeout}, nil, http.StatusNoContent, http.StatusOK)
	switch {
	case statusOf(err) == http.StatusNotFound:
		return fault.Wrap(fault.Gone, err, "e2b: sandbox %s no longer exists", id)
	case err != nil:
		return asKind(fault.Provision, err)
	}
	return nil
}

// kill is DELETE /sandboxes/{id}; an unknown sandbox is not an error. Errors: fault.Provision.
func (c *apiClient) kill(ctx context.Context, id string) error {
	_, err := c.do(ctx, "killing sandbox "+id, http.MethodDelete, "/sandboxes/"+url.PathEscape(id), nil, nil, http.StatusNoContent, http.StatusOK, http.StatusNotFound)
	if err != nil {
		return asKind(fault.Provision, err)
	}
	return nil
}

// list is GET /v2/sandboxes filtered by metadata (running and paused ones, one page of at most
// 100). Errors: fault.Provision.
func (c *apiClient) list(ctx context.Context, metadata map[string]string) ([]wire.ListedSandbox, error) {
	q := url.Values{}
	for k, v := range metadata {
		q.Set(k, v)
	}
	path := "/v2/sandboxes?limit=100"
	if len(q) > 0 {
		path += "&metadata=" + url.QueryEscape(q.Encode())
	}
	var out []wire.ListedSandbox
	if _, err := c.do(ctx, "listing sandboxes", http.MethodGet, path, nil, &out, http.StatusOK); err != nil {
		return nil, asKind(fault.Provision, err)
	}
	return out, nil
}

// asKind classifies err as kind, keeping its message.
func asKind(kind fault.Kind, err error) error {
	return &fault.Error{Kind: kind, Msg: err.Error(), Err: err}
}
