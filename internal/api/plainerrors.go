package api

import (
	"bytes"
	"net/http"
	"strings"
)

// plainErrors makes the text/plain error answers of a mounted handler (the MCP SDK answers
// its transport errors with http.Error: "session user mismatch", "session not found", …)
// RFC 9457 problems like every other answer of the gateway, with the handler's text as the
// detail. Other answers pass through untouched, streamed as they are written.
func plainErrors(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		pw := &plainErrorWriter{ResponseWriter: w}
		h.ServeHTTP(pw, r)
		if pw.status != 0 {
			kind, title := plainErrorKind(pw.status)
			// The header set for the text answer must not leak into the problem's.
			w.Header().Del("X-Content-Type-Options")
			WriteProblem(w, r, pw.status, kind, title, "MCP transport: "+strings.TrimSpace(pw.body.String()))
		}
	})
}

// plainErrorWriter holds back an error status written with a text/plain body (status set),
// collecting at most 4 KiB of the text; any other answer goes straight through.
type plainErrorWriter struct {
	http.ResponseWriter
	status  int
	started bool
	body    bytes.Buffer
}

func (w *plainErrorWriter) WriteHeader(code int) {
	if !w.started && code >= 400 && strings.HasPrefix(w.Header().Get("Content-Type"), "text/plain") {
		w.status = code
		w.started = true
		return
	}
	w.started = true
	w.ResponseWriter.WriteHeader(code)
}

func (w *plainErrorWriter) Write(b []byte) (int, error) {
	if !w.started {
		w.WriteHeader(http.StatusOK)
	}
	if w.status != 0 {
		if room := 4096 - w.body.Len(); room > 0 {
			w.body.Write(b[:min(len(b), room)])
		}
		return len(b), nil
	}
	return w.ResponseWriter.Write(b)
}

// Flush passes through (event streams), unless an error answer is being held back.
func (w *plainErrorWriter) Flush() {
	if w.status != 0 {
		return
	}
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// Unwrap lets http.ResponseController reach the connection's writer.
func (w *plainErrorWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// plainErrorKind is the problem type suffix and title of a held-back error status.
func plainErrorKind(status int) (kind, title string) {
	switch status {
	case http.StatusBadRequest:
		return "validation", "Invalid request"
	case http.StatusForbidden:
		return "forbidden", "Forbidden"
	case http.StatusNotFound:
		return "not-found", "Not found"
	case http.StatusMethodNotAllowed:
		return "method-not-allowed", "Method not allowed"
	case http.StatusConflict:
		return "conflict", "Conflict"
	case http.StatusRequestEntityTooLarge:
		return "too-large", "Too large"
	case http.StatusUnsupportedMediaType:
		return "unsupported-media-type", "Unsupported media type"
	}
	if status >= 500 {
		return "internal", "Internal error"
	}
	return "validation", http.StatusText(status)
}
