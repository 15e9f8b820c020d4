package client

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"time"
)

// octetStream is the media type of raw file and stdin bodies.
const octetStream = "application/octet-stream"

// contentLength declares a request body's size (size < 0: unknown, sent chunked).
func contentLength(size int64) RequestEditorFn {
	return func(_ context.Context, req *http.Request) error {
		switch {
		case size == 0:
			req.Body, req.GetBody, req.ContentLength = http.NoBody, nil, 0
		case size > 0:
			req.ContentLength = size
		}
		return nil
	}
}

// Upload writes body to the file at path (relative to the session's workspace; parent
// folders are made) as raw bytes, streaming it in constant memory (PUT
// /v1/sessions/{id}/files/{path}). size is body's length in bytes, or -1 when unknown (then
// it is sent chunked); with a known size, a file over the gateway's sandbox.max_file_bytes
// is refused (413) before a byte is sent. The answer gives the stored size and SHA-256.
func (c *Client) Upload(ctx context.Context, sessionID, path string, body io.Reader, size int64, editors ...RequestEditorFn) (*FileWritten, error) {
	if body == nil {
		body, size = http.NoBody, 0
	}
	resp, err := c.Raw.WriteFileWithBody(ctx, sessionID, path, nil, octetStream, body, append(editors, contentLength(size))...)
	return decode[FileWritten](resp, err, http.StatusOK)
}

// File is an open download: the file's bytes exactly as stored, read from the connection as
// they arrive. Close it.
type File struct {
	io.ReadCloser
	// Size is the file's length in bytes (-1 when the gateway did not say).
	Size int64
	// ETag changes with every write of the file ("" for a file of unknown size).
	ETag string
	// ModTime is its modification time (zero when not given).
	ModTime time.Time
}

// OpenFile opens the file at path for reading (GET /v1/sessions/{id}/files/{path}).
func (c *Client) OpenFile(ctx context.Context, sessionID, path string, editors ...RequestEditorFn) (*File, error) {
	resp, err := c.Raw.ReadFile(ctx, sessionID, path, nil, editors...)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		defer resp.Body.Close()
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		return nil, errorFrom(resp, body)
	}
	f := &File{ReadCloser: resp.Body, Size: resp.ContentLength, ETag: resp.Header.Get("ETag")}
	if t, err := http.ParseTime(resp.Header.Get("Last-Modified")); err == nil {
		f.ModTime = t
	}
	return f, nil
}

// Download copies the file at path to w as it arrives and returns the bytes copied. A
// connection that ends before the announced size is an error (io.ErrUnexpectedEOF).
func (c *Client) Download(ctx context.Context, sessionID, path string, w io.Writer, editors ...RequestEditorFn) (int64, error) {
	f, err := c.OpenFile(ctx, sessionID, path, editors...)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	n, err := io.Copy(w, f)
	if err == nil && f.Size >= 0 && n != f.Size {
		err = io.ErrUnexpectedEOF
	}
	return n, err
}

// Files lists a workspace folder (GET /v1/sessions/{id}/files?dir=); dir "" is the root.
func (c *Client) Files(ctx context.Context, sessionID, dir string, editors ...RequestEditorFn) (*FileList, error) {
	var params *ListFilesParams
	if dir != "" {
		params = &ListFilesParams{Dir: &dir}
	}
	return want[FileList](http.StatusOK)(c.Raw.ListFiles(ctx, sessionID, params, editors...))
}

// DeleteFile deletes a file or an empty folder (DELETE /v1/sessions/{id}/files/{path});
// one that is absent succeeds too.
func (c *Client) DeleteFile(ctx context.Context, sessionID, path string, editors ...RequestEditorFn) error {
	resp, err := c.Raw.DeleteFile(ctx, sessionID, path, nil, editors...)
	return noContent(resp, err)
}

// WriteStdin streams r into the standard input of a running execution started with
// StdinOpen or Pty (POST /v1/tasks/{id}/stdin), as one chunked request that ends when r
// does; eof closes the input afterwards. r may be nil to send nothing (with eof: just close
// it). The gateway bounds one request's duration by its server.read_timeout: for input that
// trickles in over a long time use StdinWriter.
func (c *Client) WriteStdin(ctx context.Context, taskID string, r io.Reader, eof bool, editors ...RequestEditorFn) (*StdinWritten, error) {
	size := int64(-1)
	if r == nil {
		r, size = http.NoBody, 0
	}
	params := &WriteTaskStdinParams{}
	if eof {
		params.Eof = &eof
	}
	resp, err := c.Raw.WriteTaskStdinWithBody(ctx, taskID, params, octetStream, r, append(editors, contentLength(size))...)
	return decode[StdinWritten](resp, err, http.StatusOK)
}

// StdinWriter is the standard input of a running execution as an io.WriteCloser: each Write
// is one request carrying its bytes, Close closes the input (eof). io.Copy(w, os.Stdin)
// forwards a pipe or a terminal line by line as it is read.
type StdinWriter struct {
	c       *Client
	ctx     context.Context
	taskID  string
	editors []RequestEditorFn
	// Written counts the bytes the program's input took.
	Written int64
}

// StdinWriter returns the standard input of the execution of task taskID.
func (c *Client) StdinWriter(ctx context.Context, taskID string, editors ...RequestEditorFn) *StdinWriter {
	return &StdinWriter{c: c, ctx: ctx, taskID: taskID, editors: editors}
}

// Write sends p; n is what the input took (all of p, or an error).
func (w *StdinWriter) Write(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	params := &WriteTaskStdinParams{}
	resp, err := w.c.Raw.WriteTaskStdinWithBody(w.ctx, w.taskID, params, octetStream, bytes.NewReader(p), append(w.editors, contentLength(int64(len(p))))...)
	got, err := decode[StdinWritten](resp, err, http.StatusOK)
	if err != nil {
		return 0, err
	}
	w.Written += got.Bytes
	if got.Bytes != int64(len(p)) {
		return int(got.Bytes), io.ErrShortWrite
	}
	return len(p), nil
}

// Close closes the program's input (it reads end of file).
func (w *StdinWriter) Close() error {
	_, err := w.c.WriteStdin(w.ctx, w.taskID, nil, true, w.editors...)
	return err
}
