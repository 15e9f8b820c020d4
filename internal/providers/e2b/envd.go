package e2b

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"

	"connectrpc.com/connect"

	"github.com/sandgate/sandgate/internal/fault"
	"github.com/sandgate/sandgate/internal/providers"
	"github.com/sandgate/sandgate/internal/providers/e2b/wire"
)

// The envd client: Connect-RPC calls of the process and filesystem services, and the HTTP
// files API, to one sandbox, with its routing headers and its envd access token.

// envdURL is the base URL of the sandbox's envd.
func (s *Sandbox) envdURL() string { return s.p.portURL(s.id, s.domain, wire.EnvdPort) }

// headers sets the routing and access headers of a request to port.
func (s *Sandbox) headers(h http.Header, port int) {
	h.Set(wire.SandboxIDHeader, s.id)
	h.Set(wire.SandboxPortHeader, strconv.Itoa(port))
	if s.token != "" {
		h.Set(wire.AccessTokenHeader, s.token)
	}
	if s.traffic != "" && port != wire.EnvdPort {
		h.Set(wire.TrafficTokenHeader, s.traffic)
	}
}

// unary calls procedure with req and returns the answer.
func unary[Req, Res any](ctx context.Context, s *Sandbox, procedure string, req *Req) (*Res, error) {
	c := connect.NewClient[Req, Res](s.p.http, s.envdURL()+procedure, connect.WithCodec(wire.Codec{}))
	r := connect.NewRequest(req)
	s.headers(r.Header(), wire.EnvdPort)
	resp, err := c.CallUnary(ctx, r)
	if err != nil {
		return nil, err
	}
	return resp.Msg, nil
}

// startProcess calls process.Process/Start and returns its event stream.
func (s *Sandbox) startProcess(ctx context.Context, req *wire.StartRequest) (*connect.ServerStreamForClient[wire.StartResponse], error) {
	c := connect.NewClient[wire.StartRequest, wire.StartResponse](s.p.http, s.envdURL()+wire.ProcStart, connect.WithCodec(wire.Codec{}))
	r := connect.NewRequest(req)
	s.headers(r.Header(), wire.EnvdPort)
	r.Header().Set(wire.KeepalivePingHeader, "30")
	return c.CallServerStream(ctx, r)
}

// envdError classifies an error of an envd call on path (a workspace path, for messages).
// Errors that say the sandbox was not reached wrap providers.ErrUnreached: the caller
// decides whether that matters.
func envdError(err error, what string) error {
	var ce *connect.Error
	if errors.As(err, &ce) {
		switch ce.Code() {
		case connect.CodeNotFound:
			return fault.Wrap(fault.NotFound, err, "e2b: %s", what)
		case connect.CodeInvalidArgument, connect.CodeAlreadyExists, connect.CodeFailedPrecondition:
			return fault.Wrap(fault.Conflict, err, "e2b: %s", what)
		case connect.CodePermissionDenied:
			return fault.Wrap(fault.Policy, err, "e2b: %s", what)
		case connect.CodeUnavailable, connect.CodeUnauthenticated:
			return fault.Wrap(fault.Provision, fmt.Errorf("%w: %w", providers.ErrUnreached, err), "e2b: %s", what)
		}
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	return fault.Wrap(fault.Provision, err, "e2b: %s", what)
}

// stat is filesystem.Filesystem/Stat of guest path p (lstat semantics; see wire.EntryInfo).
func (s *Sandbox) stat(ctx context.Context, p string) (*wire.EntryInfo, error) {
	res, err := unary[wire.StatRequest, wire.StatResponse](ctx, s, wire.FSStat, &wire.StatRequest{Path: p})
	if err != nil {
		return nil, err
	}
	if res.Entry == nil {
		return nil, fmt.Errorf("e2b: stat %s: no entry in the answer", p)
	}
	return res.Entry, nil
}

// httpFiles sends a request to envd's /files?path=p.
func (s *Sandbox) httpFiles(ctx context.Context, method, p string, body io.Reader) (*http.Response, error) {
	u := s.envdURL() + "/files?" + url.Values{"path": {p}}.Encode()
	req, err := http.NewRequestWithContext(ctx, method, u, body)
	if err != nil {
		return nil, err
	}
	s.headers(req.Header, wire.EnvdPort)
	if body != nil {
		req.Header.Set("Content-Type", "application/octet-stream")
	}
	return s.p.http.Do(req)
}

// filesError reads envd's error body of resp (closing it) into an error of a kind: 404
// NotFound, 400 Conflict (a folder, a bad path), 401 Provision, 507 TooLarge (disk full).
func filesError(resp *http.Response, what string) error {
	defer resp.Body.Close()
	data, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	msg := string(data)
	var e struct {
		Message string `json:"message"`
	}
	if json.Unmarshal(data, &e) == nil && e.Message != "" {
		msg = e.Message
	}
	kind := fault.Provision
	switch resp.StatusCode {
	case http.StatusNotFound:
		kind = fault.NotFound
	case http.StatusBadRequest:
		kind = fault.Conflict
	case http.StatusInsufficientStorage:
		kind = fault.TooLarge
	}
	return fault.New(kind, "e2b: %s: %d %s", what, resp.StatusCode, msg)
}
