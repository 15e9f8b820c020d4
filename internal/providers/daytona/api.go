package daytona

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
)

// The Daytona control plane, as far as this provider uses it (Daytona's API, paths relative
// to Config.APIURL, bearer authentication with the API key):
//
//	POST   /sandbox                          create (200, a Sandbox)
//	GET    /sandbox/{id}                     one sandbox (404 when unknown)
//	DELETE /sandbox/{id}                     delete (200; 404 when unknown)
//	POST   /sandbox/{id}/start               start a stopped sandbox (200, a Sandbox)
//	GET    /sandbox?labels=<json>&cursor=…   list ({items, nextCursor})
//	GET    /sandbox/{id}/toolbox-proxy-url   the toolbox's base URL ({url}), when a Sandbox
//	                                         does not carry toolboxProxyUrl
//
// Errors are JSON objects with at least statusCode and message.

// Sandbox states of Daytona (SandboxState) that the provider tells apart.
const (
	stateStarted      = "started"
	stateStopped      = "stopped"
	stateArchived     = "archived"
	stateDestroyed    = "destroyed"
	stateDestroying   = "destroying"
	stateError        = "error"
	stateBuildFailed  = "build_failed"
	statePendingBuild = "pending_build"
)

// Labels the provider puts on its sandboxes.
const (
	labelManagedBy = "app.kubernetes.io/managed-by"
	managedBy      = "sandgate"
	labelProfile   = "sandgate.io/profile"
	// labelInstallation is the gateway's installation id, when it has one.
	labelInstallation = "sandgate.io/installation"
	// labelLanguage is the label Daytona's SDKs read to pick the code-run language.
	labelLanguage = "code-toolbox-language"
)

// createSandbox is the body of POST /sandbox (CreateSandbox).
type createSandbox struct {
	Snapshot         string            `json:"snapshot,omitempty"`
	Env              map[string]string `json:"env,omitempty"`
	Labels           map[string]string `json:"labels,omitempty"`
	Target           string            `json:"target,omitempty"`
	CPU              int               `json:"cpu,omitempty"`
	Memory           int               `json:"memory,omitempty"` // GiB
	AutoStopInterval *int              `json:"autoStopInterval,omitempty"`
	NetworkBlockAll  bool              `json:"networkBlockAll,omitempty"`
	NetworkAllowList string            `json:"networkAllowList,omitempty"`
	BuildInfo        *buildInfo        `json:"buildInfo,omitempty"`
}

// buildInfo asks Daytona to build the sandbox's image (CreateBuildInfo).
type buildInfo struct {
	DockerfileContent string `json:"dockerfileContent"`
}

// sandboxDTO is the part of Daytona's Sandbox the provider reads.
type sandboxDTO struct {
	ID               string            `json:"id"`
	Name             string            `json:"name"`
	State            string            `json:"state"`
	ErrorReason      string            `json:"errorReason"`
	Labels           map[string]string `json:"labels"`
	Target           string            `json:"target"`
	Snapshot         string            `json:"snapshot"`
	CPU              float64           `json:"cpu"`
	Memory           float64           `json:"memory"`
	AutoStopInterval int               `json:"autoStopInterval"`
	NetworkBlockAll  bool              `json:"networkBlockAll"`
	NetworkAllowList string            `json:"networkAllowList"`
	ToolboxProxyURL  string            `json:"toolboxProxyUrl"`
}

// apiError is a non-2xx answer of the API or the toolbox.
type apiError struct {
	Method, Path string
	Status       int
	Message      string
}

func (e *apiError) Error() string {
	msg := e.Message
	if msg == "" {
		msg = http.StatusText(e.Status)
	}
	return fmt.Sprintf("daytona %s %s: %d %s", e.Method, e.Path, e.Status, msg)
}

// statusOf returns the HTTP status of err's apiError, or 0.
func statusOf(err error) int {
	var ae *apiError
	if errors.As(err, &ae) {
		return ae.Status
	}
	return 0
}

// httpDo is the one way both clients call Daytona: it sets the headers, sends the body and
// turns non-2xx answers into apiErrors. The caller closes the returned body.
type httpDo struct {
	hc      *http.Client
	key     string
	headers map[string]string
}

func (h *httpDo) do(ctx context.Context, method, rawURL string, body io.Reader, contentType string) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, method, rawURL, body)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Authorization", "Bearer "+h.key)
	for k, v := range h.headers {
		req.Header.Set(k, v)
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	resp, err := h.hc.Do(req)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode/100 != 2 {
		defer resp.Body.Close()
		return nil, readAPIError(resp)
	}
	return resp, nil
}

// readAPIError reads an error answer: Daytona's {statusCode, message} (message may be a list
// of validation messages), or plain text.
func readAPIError(resp *http.Response) error {
	raw, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	ae := &apiError{Method: resp.Request.Method, Path: resp.Request.URL.Path, Status: resp.StatusCode}
	var body struct {
		Message any    `json:"message"`
		Error   string `json:"error"`
	}
	if json.Unmarshal(raw, &body) == nil {
		switch m := body.Message.(type) {
		case string:
			ae.Message = m
		case []any:
			parts := make([]string, 0, len(m))
			for _, p := range m {
				parts = append(parts, fmt.Sprint(p))
			}
			ae.Message = strings.Join(parts, "; ")
		}
		if ae.Message == "" {
			ae.Message = body.Error
		}
	}
	if ae.Message == "" {
		ae.Message = strings.TrimSpace(string(raw))
	}
	return ae
}

// doJSON sends in (when not nil) as JSON and decodes the answer into out (when not nil).
func (h *httpDo) doJSON(ctx context.Context, method, rawURL string, in, out any) error {
	var body io.Reader
	ct := ""
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return err
		}
		body, ct = bytes.NewReader(b), "application/json"
	}
	resp, err := h.do(ctx, method, rawURL, body, ct)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if out == nil {
		_, _ = io.Copy(io.Discard, resp.Body)
		return nil
	}
	if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
		return fmt.Errorf("daytona %s %s: decoding the answer: %w", method, resp.Request.URL.Path, err)
	}
	return nil
}

// apiClient calls the control plane.
type apiClient struct {
	httpDo
	base string // Config.APIURL without a trailing slash
}

func (c *apiClient) url(path string, q url.Values) string {
	u := c.base + path
	if len(q) > 0 {
		u += "?" + q.Encode()
	}
	return u
}

func (c *apiClient) create(ctx context.Context, in createSandbox) (sandboxDTO, error) {
	var out sandboxDTO
	err := c.doJSON(ctx, http.MethodPost, c.url("/sandbox", nil), in, &out)
	return out, err
}

func (c *apiClient) get(ctx context.Context, id string) (sandboxDTO, error) {
	var out sandboxDTO
	err := c.doJSON(ctx, http.MethodGet, c.url("/sandbox/"+url.PathEscape(id), nil), nil, &out)
	return out, err
}

func (c *apiClient) start(ctx context.Context, id string) (sandboxDTO, error) {
	var out sandboxDTO
	err := c.doJSON(ctx, http.MethodPost, c.url("/sandbox/"+url.PathEscape(id)+"/start", nil), nil, &out)
	return out, err
}

func (c *apiClient) delete(ctx context.Context, id string) error {
	return c.doJSON(ctx, http.MethodDelete, c.url("/sandbox/"+url.PathEscape(id), nil), nil, nil)
}

func (c *apiClient) toolboxProxyURL(ctx context.Context, id string) (string, error) {
	var out struct {
		URL string `json:"url"`
	}
	err := c.doJSON(ctx, http.MethodGet, c.url("/sandbox/"+url.PathEscape(id)+"/toolbox-proxy-url", nil), nil, &out)
	return out.URL, err
}

// list returns every sandbox carrying labels, following the cursor.
func (c *apiClient) list(ctx context.Context, labels map[string]string) ([]sandboxDTO, error) {
	lb, err := json.Marshal(labels)
	if err != nil {
		return nil, err
	}
	var all []sandboxDTO
	cursor := ""
	for page := 0; page < 1000; page++ {
		q := url.Values{"labels": {string(lb)}, "limit": {"100"}}
		if cursor != "" {
			q.Set("cursor", cursor)
		}
		var out struct {
			Items      []sandboxDTO `json:"items"`
			NextCursor *string      `json:"nextCursor"`
		}
		if err := c.doJSON(ctx, http.MethodGet, c.url("/sandbox", q), nil, &out); err != nil {
			return nil, err
		}
		all = append(all, out.Items...)
		if out.NextCursor == nil || *out.NextCursor == "" {
			return all, nil
		}
		cursor = *out.NextCursor
	}
	return all, nil
}
