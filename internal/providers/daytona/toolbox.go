package daytona

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime/multipart"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/gorilla/websocket"
)

// The toolbox is the daemon inside each sandbox, reached through the toolbox proxy at
// <toolboxProxyUrl>/<sandbox id> with the same bearer key. Paths this provider uses (Daytona's
// toolbox API):
//
//	GET    /work-dir                                   {dir}
//	POST   /process/execute                            {command, timeout} → {exitCode, result}
//	POST   /process/session                            {sessionId} → 201
//	DELETE /process/session/{sid}                      204
//	POST   /process/session/{sid}/exec                 {command, runAsync: true} → 202 {cmdId}
//	GET    /process/session/{sid}/command/{cid}        {id, command, exitCode?}
//	GET    /process/session/{sid}/command/{cid}/logs?follow=true   WebSocket: the command's
//	       output as it is logged, each line preceded by 01 01 01 (stdout) or 02 02 02
//	       (stderr); the daemon closes it once the exit code is written
//	POST   /files/bulk-upload                          multipart files[i].path, files[i].file
//	GET    /files/download?path=                       the file's bytes
//	GET    /files/info?path=                           FileInfo
//	GET    /files?path=                                [FileInfo]
//	DELETE /files?path=&recursive=                     204
//	POST   /process/interpreter/context                {cwd, language} → InterpreterContext
//	GET    /process/interpreter/context                {contexts}
//	DELETE /process/interpreter/context/{id}
//	GET    /process/interpreter/execute                WebSocket: send {code, contextId,
//	       envs, timeout}, receive {type: stdout|stderr|error|control, …}
//
// The daemon keeps a command's stdout and stderr apart in its logs only for clients that
// announce an SDK version of 0.167.0 or later (X-Daytona-SDK-Version); this client speaks the
// wire format of that SDK line and says so.

// wireVersion is the SDK version whose toolbox wire format this client implements.
const wireVersion = "0.218.0"

// toolboxClient calls one sandbox's toolbox.
type toolboxClient struct {
	httpDo
	base string // <toolboxProxyUrl>/<id>, no trailing slash
}

func (c *toolboxClient) url(path string, q url.Values) string {
	u := c.base + path
	if len(q) > 0 {
		u += "?" + q.Encode()
	}
	return u
}

func (c *toolboxClient) workDir(ctx context.Context) (string, error) {
	var out struct {
		Dir string `json:"dir"`
	}
	err := c.doJSON(ctx, http.MethodGet, c.url("/work-dir", nil), nil, &out)
	return out.Dir, err
}

// execute runs command with /process/execute, which splits it at spaces (quotes group) and
// runs it without a shell, merging its output. Only for the provider's own short commands.
func (c *toolboxClient) execute(ctx context.Context, command string, timeout time.Duration) (int, string, error) {
	in := map[string]any{"command": command}
	if timeout > 0 {
		in["timeout"] = int(timeout.Seconds() + 0.999)
	}
	var out struct {
		ExitCode *int   `json:"exitCode"`
		Code     *int   `json:"code"`
		Result   string `json:"result"`
	}
	if err := c.doJSON(ctx, http.MethodPost, c.url("/process/execute", nil), in, &out); err != nil {
		return 0, "", err
	}
	code := -1
	switch {
	case out.ExitCode != nil:
		code = *out.ExitCode
	case out.Code != nil:
		code = *out.Code
	}
	return code, out.Result, nil
}

func (c *toolboxClient) createSession(ctx context.Context, id string) error {
	return c.doJSON(ctx, http.MethodPost, c.url("/process/session", nil), map[string]string{"sessionId": id}, nil)
}

func (c *toolboxClient) deleteSession(ctx context.Context, id string) error {
	return c.doJSON(ctx, http.MethodDelete, c.url("/process/session/"+url.PathEscape(id), nil), nil, nil)
}

// sessionExec starts command in session sid without waiting for it; it returns its id.
func (c *toolboxClient) sessionExec(ctx context.Context, sid, command string) (string, error) {
	var out struct {
		CmdID string `json:"cmdId"`
	}
	in := map[string]any{"command": command, "runAsync": true, "async": true}
	if err := c.doJSON(ctx, http.MethodPost, c.url("/process/session/"+url.PathEscape(sid)+"/exec", nil), in, &out); err != nil {
		return "", err
	}
	if out.CmdID == "" {
		return "", errors.New("daytona: the toolbox started a session command but gave no command id")
	}
	return out.CmdID, nil
}

// commandExit returns the exit code of command cid of session sid, nil while it runs.
func (c *toolboxClient) commandExit(ctx context.Context, sid, cid string) (*int, error) {
	var out struct {
		ExitCode *int `json:"exitCode"`
	}
	err := c.doJSON(ctx, http.MethodGet, c.url("/process/session/"+url.PathEscape(sid)+"/command/"+url.PathEscape(cid), nil), nil, &out)
	return out.ExitCode, err
}

// wsURL turns the toolbox URL of path into its WebSocket URL.
func (c *toolboxClient) wsURL(path string, q url.Values) string {
	u := c.url(path, q)
	switch {
	case strings.HasPrefix(u, "https://"):
		return "wss://" + strings.TrimPrefix(u, "https://")
	case strings.HasPrefix(u, "http://"):
		return "ws://" + strings.TrimPrefix(u, "http://")
	}
	return u
}

func (c *toolboxClient) dial(ctx context.Context, path string, q url.Values) (*websocket.Conn, error) {
	h := http.Header{}
	h.Set("Authorization", "Bearer "+c.key)
	for k, v := range c.headers {
		h.Set(k, v)
	}
	d := websocket.Dialer{HandshakeTimeout: 30 * time.Second}
	if c.hc != nil && c.hc.Transport != nil {
		if t, ok := c.hc.Transport.(*http.Transport); ok {
			d.Proxy, d.TLSClientConfig, d.NetDialContext = t.Proxy, t.TLSClientConfig, t.DialContext
		}
	}
	conn, resp, err := d.DialContext(ctx, c.wsURL(path, q), h)
	if err != nil {
		if resp != nil {
			defer resp.Body.Close()
			if resp.StatusCode/100 != 2 && resp.StatusCode != http.StatusSwitchingProtocols {
				return nil, readAPIError(resp)
			}
		}
		return nil, err
	}
	return conn, nil
}

// followLogs streams the log of command cid of session sid to stdout and stderr until the
// daemon closes the stream (the command ended) or ctx ends.
func (c *toolboxClient) followLogs(ctx context.Context, sid, cid string, stdout, stderr io.Writer) error {
	conn, err := c.dial(ctx, "/process/session/"+url.PathEscape(sid)+"/command/"+url.PathEscape(cid)+"/logs", url.Values{"follow": {"true"}})
	if err != nil {
		return err
	}
	stop := context.AfterFunc(ctx, func() { _ = conn.Close() })
	defer stop()
	defer conn.Close()
	dm := &demux{out: stdout, err: stderr}
	for {
		_, msg, err := conn.ReadMessage()
		if err != nil {
			dm.flush()
			if ctx.Err() != nil {
				return ctx.Err()
			}
			var ce *websocket.CloseError
			if errors.As(err, &ce) && (ce.Code == websocket.CloseNormalClosure || ce.Code == websocket.CloseGoingAway) {
				return nil
			}
			if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
				return nil
			}
			return fmt.Errorf("daytona: following a command's output: %w", err)
		}
		dm.write(msg)
	}
}

// demux splits a session command's log into its two streams: a run of three 01 bytes
// switches to stdout, three 02 bytes to stderr. Up to two trailing bytes that may start a
// marker are held back until the next chunk.
type demux struct {
	out, err io.Writer
	cur      io.Writer
	held     []byte
}

func (d *demux) write(chunk []byte) {
	buf := append(d.held, chunk...)
	d.held = nil
	start := 0
	i := 0
	for i < len(buf) {
		b := buf[i]
		if b != 1 && b != 2 {
			i++
			continue
		}
		if len(buf)-i < 3 {
			// Maybe the start of a marker: keep it (and the data before it goes out now).
			if allSame(buf[i:], b) {
				d.emit(buf[start:i])
				d.held = append([]byte(nil), buf[i:]...)
				return
			}
			i++
			continue
		}
		if buf[i+1] == b && buf[i+2] == b {
			d.emit(buf[start:i])
			if b == 1 {
				d.cur = d.out
			} else {
				d.cur = d.err
			}
			i += 3
			start = i
			continue
		}
		i++
	}
	d.emit(buf[start:])
}

func allSame(b []byte, v byte) bool {
	for _, c := range b {
		if c != v {
			return false
		}
	}
	return true
}

func (d *demux) emit(p []byte) {
	if len(p) == 0 || d.cur == nil {
		return
	}
	_, _ = d.cur.Write(p)
}

// flush writes bytes held back for a marker that never completed.
func (d *demux) flush() {
	d.emit(d.held)
	d.held = nil
}

// uploadFile is one file of a bulk upload.
type uploadFile struct {
	path string
	r    io.Reader
}

// upload streams files to the toolbox in one multipart request (files[i].path, then
// files[i].file). The daemon writes each file to a temporary file beside its destination
// and renames it into place, creating missing parent folders, so a broken-off upload leaves
// nothing behind. A reader's error aborts the request and is returned.
func (c *toolboxClient) upload(ctx context.Context, files []uploadFile) error {
	pr, pw := io.Pipe()
	mw := multipart.NewWriter(pw)
	src := &sourceReader{}
	done := make(chan struct{})
	go func() {
		defer close(done)
		err := func() error {
			for i, f := range files {
				if err := mw.WriteField(fmt.Sprintf("files[%d].path", i), f.path); err != nil {
					return err
				}
				w, err := mw.CreateFormFile(fmt.Sprintf("files[%d].file", i), f.path)
				if err != nil {
					return err
				}
				if f.r != nil {
					src.r = f.r
					if _, err := io.Copy(w, src); err != nil {
						return err
					}
				}
			}
			return mw.Close()
		}()
		pw.CloseWithError(err)
	}()
	resp, err := c.do(ctx, http.MethodPost, c.url("/files/bulk-upload", nil), pr, mw.FormDataContentType())
	_ = pr.CloseWithError(errUploadDone)
	<-done
	if src.err != nil {
		if resp != nil {
			resp.Body.Close()
		}
		return &sourceError{src.err}
	}
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	return nil
}

// sourceError is the error of a caller's reader that broke an upload off.
type sourceError struct{ err error }

func (e *sourceError) Error() string { return e.err.Error() }
func (e *sourceError) Unwrap() error { return e.err }

// sourceReader remembers the error of the reader it reads from (not the pipe's), so that a
// caller's broken reader is told apart from a broken request.
type sourceReader struct {
	r   io.Reader
	err error
}

func (s *sourceReader) Read(p []byte) (int, error) {
	n, err := s.r.Read(p)
	if err != nil && err != io.EOF {
		s.err = err
	}
	return n, err
}

var errUploadDone = errors.New("daytona: upload request ended")

// download opens the file at path.
func (c *toolboxClient) download(ctx context.Context, path string) (io.ReadCloser, error) {
	resp, err := c.do(ctx, http.MethodGet, c.url("/files/download", url.Values{"path": {path}}), nil, "")
	if err != nil {
		return nil, err
	}
	return resp.Body, nil
}

// fileInfoDTO is Daytona's FileInfo (os.Stat of the entry: symlinks followed).
type fileInfoDTO struct {
	Name        string `json:"name"`
	Size        int64  `json:"size"`
	Mode        string `json:"mode"`
	ModTime     string `json:"modTime"`
	IsDir       bool   `json:"isDir"`
	Permissions string `json:"permissions"`
}

func (c *toolboxClient) info(ctx context.Context, path string) (fileInfoDTO, error) {
	var out fileInfoDTO
	err := c.doJSON(ctx, http.MethodGet, c.url("/files/info", url.Values{"path": {path}}), nil, &out)
	return out, err
}

func (c *toolboxClient) list(ctx context.Context, path string) ([]fileInfoDTO, error) {
	var out []fileInfoDTO
	err := c.doJSON(ctx, http.MethodGet, c.url("/files", url.Values{"path": {path}}), nil, &out)
	return out, err
}

func (c *toolboxClient) remove(ctx context.Context, path string, recursive bool) error {
	return c.doJSON(ctx, http.MethodDelete, c.url("/files", url.Values{"path": {path}, "recursive": {strconv.FormatBool(recursive)}}), nil, nil)
}

// makeFolder is POST /files/folder: the toolbox makes path and its missing parents
// (os.MkdirAll; a folder already there is fine) with mode, octal digits.
func (c *toolboxClient) makeFolder(ctx context.Context, path, mode string) error {
	return c.doJSON(ctx, http.MethodPost, c.url("/files/folder", url.Values{"path": {path}, "mode": {mode}}), nil, nil)
}

// move is POST /files/move: the toolbox renames source to destination, which must not exist
// (409) and whose parent must (404).
func (c *toolboxClient) move(ctx context.Context, source, destination string) error {
	return c.doJSON(ctx, http.MethodPost, c.url("/files/move", url.Values{"source": {source}, "destination": {destination}}), nil, nil)
}

// interpContext is Daytona's InterpreterContext.
type interpContext struct {
	ID        string    `json:"id"`
	Cwd       string    `json:"cwd"`
	CreatedAt time.Time `json:"createdAt"`
	Active    bool      `json:"active"`
	Language  string    `json:"language"`
}

func (c *toolboxClient) createContext(ctx context.Context, cwd string) (interpContext, error) {
	var out interpContext
	err := c.doJSON(ctx, http.MethodPost, c.url("/process/interpreter/context", nil), map[string]string{"cwd": cwd, "language": "python"}, &out)
	return out, err
}

func (c *toolboxClient) listContexts(ctx context.Context) ([]interpContext, error) {
	var out struct {
		Contexts []interpContext `json:"contexts"`
	}
	err := c.doJSON(ctx, http.MethodGet, c.url("/process/interpreter/context", nil), nil, &out)
	return out.Contexts, err
}

func (c *toolboxClient) deleteContext(ctx context.Context, id string) error {
	return c.doJSON(ctx, http.MethodDelete, c.url("/process/interpreter/context/"+url.PathEscape(id), nil), nil, nil)
}

// runResult is how an interpreter execution ended.
type runResult struct {
	// Completed: a control message "completed" arrived; Interrupted: "interrupted" (the
	// timeout's SIGINT).
	Completed, Interrupted bool
	// Error is the exception the code raised, if any.
	Error *runError
	// CloseCode is the WebSocket close code (4008: the execution timed out).
	CloseCode int
	// CloseText is the close message ("worker process ended" when the interpreter died).
	CloseText string
}

type runError struct {
	Name, Value, Traceback string
}

// closeTimeout is the toolbox's close code for an execution that timed out.
const closeTimeout = 4008

// runCode runs code in interpreter context contextID (the default context when "") over
// the execute WebSocket, writing its output to stdout and stderr as it arrives.
func (c *toolboxClient) runCode(ctx context.Context, code, contextID string, envs map[string]string, timeout time.Duration, stdout, stderr io.Writer) (runResult, error) {
	var res runResult
	conn, err := c.dial(ctx, "/process/interpreter/execute", nil)
	if err != nil {
		return res, err
	}
	stop := context.AfterFunc(ctx, func() { _ = conn.Close() })
	defer stop()
	defer conn.Close()
	req := map[string]any{"code": code}
	if contextID != "" {
		req["contextId"] = contextID
	}
	if len(envs) > 0 {
		req["envs"] = envs
	}
	if timeout > 0 {
		req["timeout"] = int64(timeout.Seconds() + 0.999)
	} else {
		req["timeout"] = 0
	}
	if err := conn.WriteJSON(req); err != nil {
		return res, fmt.Errorf("daytona: sending code to the interpreter: %w", err)
	}
	for {
		_, msg, err := conn.ReadMessage()
		if err != nil {
			if ctx.Err() != nil {
				return res, ctx.Err()
			}
			var ce *websocket.CloseError
			if errors.As(err, &ce) {
				res.CloseCode, res.CloseText = ce.Code, ce.Text
				return res, nil
			}
			if res.Completed || res.Interrupted {
				return res, nil
			}
			return res, fmt.Errorf("daytona: reading the interpreter's output: %w", err)
		}
		var chunk struct {
			Type      string `json:"type"`
			Text      string `json:"text"`
			Name      string `json:"name"`
			Value     string `json:"value"`
			Traceback string `json:"traceback"`
		}
		if json.Unmarshal(msg, &chunk) != nil {
			continue
		}
		switch chunk.Type {
		case "stdout":
			_, _ = io.WriteString(stdout, chunk.Text)
		case "stderr":
			_, _ = io.WriteString(stderr, chunk.Text)
		case "error":
			res.Error = &runError{Name: chunk.Name, Value: chunk.Value, Traceback: chunk.Traceback}
		case "control":
			switch chunk.Text {
			case "completed":
				res.Completed = true
			case "interrupted":
				res.Interrupted = true
			}
		}
	}
}
