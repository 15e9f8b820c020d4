package mcp

import (
	"encoding/json"
	"fmt"
	"strings"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/sandgate/sandgate/internal/principal"
	"github.com/sandgate/sandgate/internal/sandbox"
)

// What MCP clients learn about each tool beyond its input: annotations (hints about its
// effects) and the JSON Schema of its structured result. Every result — a success or the
// {"error": …} of a failure, which clients validate too — matches the tool's output schema.

// MaxDescriptionChars bounds every tool description: OpenAI refuses function descriptions
// over 1,024 characters, the smallest limit of the function-calling vendors. The long
// guidance is the MCP server's instructions (and GET /v1/agent/tools' "guidance").
const MaxDescriptionChars = 1024

// Output schema parts (JSON Schema draft 2020-12, kept to what draft-07 validators read).
const (
	strProp  = `{"type": "string"}`
	boolProp = `{"type": "boolean"}`
	// errorResult is the {"error": …} of every tool (§7), with a timed-out or cancelled
	// run's partial output.
	errorResult = `{"type": "object", "properties": {
		"error": {"type": "string", "description": "What failed; the operation did not happen (or did not finish)."},
		"sandbox_session_id": ` + strProp + `, "task_id": ` + strProp + `,
		"stdout": ` + strProp + `, "stderr": ` + strProp + `, "notice": ` + strProp + `, "truncated": ` + boolProp + `},
		"required": ["error"], "additionalProperties": false}`
	truncatedProp = `"truncated": {"type": "boolean", "description": "Output lost its middle (head and tail kept); absent when nothing was cut."}`
	runResult     = `{"type": "object", "properties": {
		"stdout": ` + strProp + `, "stderr": ` + strProp + `,
		"exit_code": {"type": ["integer", "null"], "description": "The program's exit status; 128+n when signal n ended it."},
		"sandbox_session_id": ` + strProp + `, "notice": {"type": "string", "description": "Tell the user (e.g. the session was reset)."},
		` + truncatedProp + `, ` + resultsSchema + `},
		"required": ["stdout", "stderr", "exit_code", "sandbox_session_id"], "additionalProperties": false}`
	pendingResult = `{"type": "object", "properties": {
		"task_id": ` + strProp + `, "status": {"const": "pending"}, "sandbox_session_id": ` + strProp + `, "notice": ` + strProp + `},
		"required": ["task_id", "status", "sandbox_session_id"], "additionalProperties": false}`
	unknownTask = `{"type": "object", "properties": {"task_id": ` + strProp + `, "status": {"const": "unknown"}},
		"required": ["task_id", "status"], "additionalProperties": false}`
	taskStatus = `{"type": "string", "enum": ["pending", "running", "succeeded", "failed", "timed_out", "cancelled", "lost"]}`
	taskResult = `{"type": "object", "properties": {
		"task_id": ` + strProp + `, "status": ` + taskStatus + `, "sandbox_session_id": ` + strProp + `,
		"result": {"type": "object", "properties": {
			"stdout": ` + strProp + `, "stderr": ` + strProp + `, "exit_code": {"type": ["integer", "null"]},
			"error": {"type": ["string", "null"]}, "notice": {"type": ["string", "null"]}, ` + truncatedProp + `, ` + resultsSchema + `},
			"required": ["stdout", "stderr", "exit_code", "error", "notice"], "additionalProperties": false}},
		"required": ["task_id", "status", "sandbox_session_id"], "additionalProperties": false}`
)

// outputSchema is the schema of a tool whose successful results match one of successes.
func outputSchema(successes ...string) json.RawMessage {
	return schema(`{"type": "object", "anyOf": [` + strings.Join(append(successes, errorResult), ", ") + `]}`)
}

var (
	runOutput   = outputSchema(runResult, pendingResult)
	writeOutput = outputSchema(`{"type": "object", "properties": {"path": ` + strProp + `, "written": {"const": true}, "sandbox_session_id": ` + strProp + `},
		"required": ["path", "written", "sandbox_session_id"], "additionalProperties": false}`)
	readOutput = outputSchema(`{"type": "object", "properties": {
		"path": ` + strProp + `,
		"content": {"type": "string", "description": "The text; with encoding base64, the file's first bytes in base64."},
		"encoding": {"const": "base64", "description": "Present when the file is no UTF-8 text."},
		"size": {"type": "integer", "description": "The file's size in bytes."},
		` + truncatedProp + `, "sandbox_session_id": ` + strProp + `},
		"required": ["path", "content", "size", "sandbox_session_id"], "additionalProperties": false}`)
	checkOutput        = outputSchema(taskResult, unknownTask)
	listSessionsOutput = outputSchema(`{"type": "object", "properties": {"sessions": {"type": "array", "items": {"type": "object", "properties": {
		"sandbox_session_id": ` + strProp + `, "name": {"type": ["string", "null"]}, "profile": ` + strProp + `, "status": ` + strProp + `,
		"last_used_at": {"type": "string", "format": "date-time"}},
		"required": ["sandbox_session_id", "name", "profile", "status", "last_used_at"], "additionalProperties": false}}},
		"required": ["sessions"], "additionalProperties": false}`)
	newSessionOutput = outputSchema(`{"type": "object", "properties": {"sandbox_session_id": ` + strProp + `, "name": {"type": ["string", "null"]}, "profile": ` + strProp + `},
		"required": ["sandbox_session_id", "name", "profile"], "additionalProperties": false}`)
	destroyOutput = outputSchema(`{"type": "object", "properties": {"sandbox_session_id": ` + strProp + `, "destroyed": {"type": "boolean"},
		"notice": {"type": "string", "description": "When destroyed is false: the sandbox could not be removed yet; the session takes no new work and the gateway retries."}},
		"required": ["sandbox_session_id", "destroyed"], "additionalProperties": false}`)
	cancelOutput = outputSchema(`{"type": "object", "properties": {"task_id": `+strProp+`, "status": `+taskStatus+`, "sandbox_session_id": `+strProp+`},
		"required": ["task_id", "status", "sandbox_session_id"], "additionalProperties": false}`, unknownTask)
	listFilesOutput = outputSchema(`{"type": "object", "properties": {"path": ` + strProp + `,
		"entries": {"type": "array", "items": {"type": "object", "properties": {
			"name": ` + strProp + `, "type": {"enum": ["file", "dir", "symlink", "other"]}, "size": {"type": "integer"}},
			"required": ["name", "type", "size"], "additionalProperties": false}},
		"truncated": {"type": "boolean", "description": "More than 500 entries: the rest are not listed."}, "sandbox_session_id": ` + strProp + `},
		"required": ["path", "entries", "sandbox_session_id"], "additionalProperties": false}`)
)

func yes() *bool { b := true; return &b }
func no() *bool  { b := false; return &b }

// Annotations (MCP ToolAnnotations): runs and writes change the sandbox; reads and listings
// do not; destroying, cancelling and writing again give the same end state; only runs reach
// beyond the sandbox (a program may use the network its policy allows).
var (
	runHints     = &sdk.ToolAnnotations{DestructiveHint: yes(), IdempotentHint: false, OpenWorldHint: yes()}
	writeHints   = &sdk.ToolAnnotations{DestructiveHint: yes(), IdempotentHint: true, OpenWorldHint: no()}
	readHints    = &sdk.ToolAnnotations{ReadOnlyHint: true, IdempotentHint: true, OpenWorldHint: no()}
	createHints  = &sdk.ToolAnnotations{DestructiveHint: no(), IdempotentHint: false, OpenWorldHint: no()}
	destroyHints = &sdk.ToolAnnotations{DestructiveHint: yes(), IdempotentHint: true, OpenWorldHint: no()}
)

// runCodeDescription is run_code's description for the caller: what it does, the profiles p
// may use in a few words, and where the full rules are (the server's instructions) — within
// MaxDescriptionChars.
func (h *Handler) runCodeDescription(p principal.Principal) string {
	var b strings.Builder
	fmt.Fprintf(&b, "Run source code in a sandbox session and return its stdout, stderr and exit_code (each at most %d characters: head and tail kept, \"truncated\": true when cut). "+
		"Omit sandbox_session_id for your default session; pass an id from an earlier result to continue there (never invent one). "+
		"A run still going after wait_s answers with task_id and status \"pending\": collect it with check_sandbox_task. "+
		"An \"error\" field means it failed; pass any \"notice\" on to the user.", h.maxChars)
	profiles := h.svc.Profiles(p)
	if len(profiles) > 0 {
		b.WriteString(" Profiles (profile=):")
		for i, prof := range profiles {
			item := " " + profileBrief(prof)
			if i < len(profiles)-1 {
				item += ";"
			}
			const more = " … (see the server instructions)."
			if b.Len()+len(item)+len(more) > MaxDescriptionChars && i < len(profiles)-1 {
				b.WriteString(more)
				return b.String()
			}
			b.WriteString(item)
		}
		b.WriteString(".")
	}
	return capDescription(b.String())
}

// profileBrief is a profile in a few words: name, default, languages, state, scope notes.
func profileBrief(prof *sandbox.Profile) string {
	var notes []string
	if prof.Default {
		notes = append(notes, "default")
	}
	if langs := prof.Caps.Languages; len(langs) > 0 {
		notes = append(notes, strings.Join(langs, "/"))
	}
	if prof.Stateful && prof.Caps.Stateful && prof.Scope != sandbox.ScopePerCall {
		notes = append(notes, "keeps variables between calls")
	}
	switch prof.Scope {
	case sandbox.ScopePerCall:
		notes = append(notes, "fresh sandbox per call")
	case sandbox.ScopePerRuntime:
		notes = append(notes, "shared with every caller")
	}
	return fmt.Sprintf("'%s' (%s)", prof.Name, strings.Join(notes, ", "))
}

// capDescription cuts s to MaxDescriptionChars characters, ending with "…".
func capDescription(s string) string {
	r := []rune(s)
	if len(r) <= MaxDescriptionChars {
		return s
	}
	return string(r[:MaxDescriptionChars-1]) + "…"
}
