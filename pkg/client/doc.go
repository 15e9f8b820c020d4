// Package client is the Go client of a Sandgate gateway's REST API (openapi.yaml).
//
// Two layers:
//
//   - Generated (client.gen.go, by oapi-codegen from openapi.yaml; never edit it): the models
//     (Session, Task, ExecutionResult, …), RawClient with one method per operation answering
//     *http.Response, and ClientWithResponses answering typed responses.
//   - Hand-written, for what generators do badly: Client, whose methods answer the decoded
//     value or an *Error built from the gateway's RFC 9457 problem (with its stable kind and
//     Retry-After); bearer-token auth (WithToken, WithTokenFunc); output streamed as it is
//     produced (StreamCommand, StreamCode, StreamRun, FollowTask: server-sent events read by a
//     Stream that resumes a broken connection with Last-Event-ID); files as raw byte streams
//     (Upload from an io.Reader, Download to an io.Writer, OpenFile); standard input streamed
//     from an io.Reader (WriteStdin, StdinWriter).
//
// Create a client with the gateway's base URL and a bearer token from an issuer the gateway
// trusts (`gateway token` mints one for `gateway dev`; `sandgate login` caches one):
//
//	c, err := client.New("http://localhost:8080", client.WithToken(token))
//	s, err := c.CreateSession(ctx, client.CreateSessionRequest{})
//	x, err := c.RunCommand(ctx, s.Id, client.CommandRequest{Command: "echo hi"})
//	fmt.Print(x.Result.Stdout)
//
// A program that exits non-zero is a result (ExecutionResult.ExitCode), never an error. An
// execution still running after wait_s answers with a Task instead (Execution.Task): wait for
// it with WaitTask or follow its output with FollowTask.
//
// Errors: every method returns an *Error for an answer outside 2xx (errors.As, IsKind with
// the Kind* constants); transport and context errors are returned as they are.
//
// Session ids: "default" with the request option WithProfile(name) names the caller's
// default session of a profile.
//
// The package imports nothing of the gateway's own (internal) packages: it is the public API.
package client
