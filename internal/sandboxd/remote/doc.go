// Package remote carries the sandboxd runtime API over HTTP: Handler serves a
// sandboxd.Runtime (inside the sandbox, on a Unix socket or TCP), and Client is the gateway's
// side of it.
//
// The API is described in openapi.yaml (OpenAPI 3.1, served to tests and tools by OpenAPI);
// contract_test.go checks client and handler against it: every request the Client sends must
// be a documented operation and valid, every answer a documented status with a body and
// headers that match.
//
// # Routes
//
//	GET    /healthz, /readyz                 no authentication; {"status":"ok"}
//	PUT    /v1/token                         no authentication; {"token":…} sets the secret of a
//	                                         sandboxd started with --await-token: the first one
//	                                         wins (204), the same again is 204, another 409
//	POST   /v1/exec                          JSON ExecRequest (timeout as "timeout_ms") → frame stream;
//	                                         header X-Execution-Id: a held execution (below)
//	POST   /v1/executions                    JSON ExecRequest, header X-Execution-Id → 201
//	                                         ExecutionInfo once it runs (a held execution, not followed)
//	GET    /v1/executions                    JSON array of ExecutionInfo
//	GET    /v1/executions/{id}               a held execution's frame stream, from its start
//	DELETE /v1/executions/{id}               stop a held execution → 204
//	POST   /v1/executions/{id}/stdin[?eof=true]  body → its standard input → {"bytes":n}
//	POST   /v1/executions/{id}/resize        {"rows","cols"} → 204
//	GET    /v1/files?path=P                  the file's bytes
//	PUT    /v1/files?path=P                  body: the file's bytes; header X-Max-Bytes → {"bytes":n}
//	GET    /v1/files/list?path=P             JSON array of FileInfo
//	DELETE /v1/files?path=P                  204
//	GET    /v1/contexts                      JSON array of ContextInfo
//	POST   /v1/contexts                      {"name":…,"language":…} → 201 ContextInfo
//	POST   /v1/contexts/{name}/restart       ContextInfo
//	DELETE /v1/contexts/{name}               204
//	GET    /v1/ports/{port}                  with "Connection: Upgrade", "Upgrade: tcp": 101, then
//	                                         the connection is a tunnel to 127.0.0.1:port in the
//	                                         sandbox (Client.DialPort; preview ports)
//	GET    /v1/workspace/archive[?gzip=true] the workspace as a tar stream (application/x-tar, or
//	                                         application/gzip); a failure midway breaks the
//	                                         connection off (Client.ReadArchive; snapshots)
//	PUT    /v1/workspace/archive[?replace=true] body: a tar stream (either type) extracted into
//	                                         the empty (or, replace, emptied) workspace; header
//	                                         X-Max-Bytes → {"entries":n,"bytes":n,"data_bytes":n}
//	                                         (Client.WriteArchive, Client.ReplaceWorkspace)
//
// Everything else under /v1 requires "Authorization: Bearer <token>", the sandbox's secret,
// compared in constant time; without it the answer is 401. A sandboxd awaiting its token
// (HandlerAwaitingToken) answers 503 with kind "awaiting-token" until PUT /v1/token set it.
//
// # Exec stream
//
// A successful POST /v1/exec answers 200 with Content-Type StreamContentType: a sequence of
// frames [1-byte type][4-byte big-endian length][payload], flushed one by one as the program
// writes: FrameStdout and FrameStderr carry output bytes; FrameRichResult a rich result of
// code in a python context as it is produced (a sandboxd.RichResult as JSON; a held
// execution's log keeps them as it keeps output); FrameResult (the last frame) carries
// the Result as JSON; FrameError (the last frame) carries a problem document when the
// execution failed after the stream began. The status line and headers are sent with the
// first frame, so a request that fails before anything ran (validation, confinement) gets an
// ordinary problem response instead. When the client goes away, the request's context ends
// and the execution is killed like on a timeout.
//
// # Held executions
//
// With X-Execution-Id the execution is held (sandboxd.Runtime.Start: a kept execution): it
// runs on when its client goes away (a gateway that dies), keeps the start and the end of each
// stream (package outlog; 2 MiB of each) and its result for 10 minutes after it ended, and
// GET /v1/executions/{id} follows it again from its start — a FrameSkip (payload: stream type,
// 8-byte count) where bytes were dropped. Only held executions may keep their input open
// (stdin_open, pty) or be background processes; POST /v1/executions starts one without
// following it.
// DELETE stops it; a follower then gets an error frame of kind "stopped" (Client: ErrStopped).
// Client.Exec holds an execution when ExecRequest.ID is set, stops it when its context ends,
// and follows the held one when its id is taken (a retried request); Client.Reattach follows
// one; Start starts one and returns once it runs. At most 256 are held; ended ones make room.
//
// # Errors
//
// Errors are RFC 9457 application/problem+json documents {type, title, status, detail, kind};
// kind is the fault.Kind. fault.Validation gives 400, fault.Policy 403, fault.NotFound 404,
// fault.Conflict 409, fault.TooLarge 413, fault.Full 507, any other kind 500. Client turns a problem back into
// a fault error of the same kind with the detail as message; a wrong token into a
// fault.Provision error; a sandboxd that cannot be reached (dial failure) into a
// fault.Provision error saying sandboxd does not answer. Those two, and a sandboxd awaiting
// its token, also carry ErrUnreachable: nothing of the request ran. Other transport errors,
// and the caller's context errors, are returned as they are (wrapped).
package remote
