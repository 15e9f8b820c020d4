package mcp

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/sandgate/sandgate/internal/principal"
	"github.com/sandgate/sandgate/internal/sandbox"
)

// Guidance is the usage guidance for p, generated from the live configuration in the order of
// docs/semantics.md §7 "Injected guidance text": heading, intro, tools, session rules, id rules, error rule,
// notice rule, (background tasks), the profiles p may use, the truncation limit. One statement
// per line, no blank lines. It is the MCP server's instructions (and the "guidance" of
// GET /v1/agent/tools); tool descriptions stay short (MaxDescriptionChars).
func (h *Handler) Guidance(p principal.Principal) string {
	var lines []string
	add := func(format string, args ...any) { lines = append(lines, fmt.Sprintf(format, args...)) }

	add("[Sandbox execution]")
	if !h.enabled {
		add("The sandbox capability is disabled on this gateway: every sandbox tool returns an error.")
		return strings.Join(lines, "\n")
	}
	add("You can execute code, run shell commands, and read and write files in sandboxed workspaces; prefer running real code to guessing, and report the output it actually produced.")
	add("Available tools:")
	for _, t := range toolTable {
		add("- %s: %s", t.signature, t.purpose)
	}
	add("State (files, installed packages, working data) persists per sandbox_session_id: pass the id from an earlier result to continue in that session, or omit it to use your default session.")
	add("Session ids are assigned by the system: never invent one; name the sessions you create, use list_sandbox_sessions to return to an earlier session, and check that listing before creating a new session.")
	add(`If a result has an "error" field, the operation FAILED: report the error, and never describe a failed or unattempted operation as done.`)
	add(`If a result has a "notice" field (for example, an idle session was reset and its workspace discarded), tell the user before continuing.`)
	add(`A result with "task_id" and "status": "pending" is still running in the background: call check_sandbox_task(task_id) later; once it has finished, its "result" holds stdout, stderr, exit_code, error and notice.`)
	add(`Python code in a stateful context also returns "results", as a notebook shows them: the value of the last expression (is_main_result), display(...), pandas tables and matplotlib charts (plt.show() or a figure left open); a chart is an image after the result's text — show it to the user rather than describing it.`)
	add("Available workload profiles (pass as profile=):")
	profiles := h.svc.Profiles(p)
	if len(profiles) == 0 {
		add("- (none configured)")
	}
	for _, prof := range profiles {
		add("%s", profileLine(prof))
	}
	add(`stdout/stderr and file reads are truncated at %d characters: the start and the end are kept, and "truncated": true says the middle is missing; a file that is not text comes back base64-encoded with "encoding": "base64".`, h.maxChars)
	return strings.Join(lines, "\n")
}

func profileLine(prof *sandbox.Profile) string {
	var b strings.Builder
	fmt.Fprintf(&b, "- '%s'", prof.Name)
	if prof.Default {
		b.WriteString(" (default)")
	}
	fmt.Fprintf(&b, ": provider '%s', scope %s", prof.Provider.Type(), prof.Scope)
	switch prof.Scope {
	case sandbox.ScopePerCall:
		b.WriteString(" (every call runs in a fresh sandbox; nothing persists between calls)")
	case sandbox.ScopePerRuntime:
		b.WriteString(" (one session shared by every caller of this profile: its files, variables, environment and processes are visible to all of them; omit sandbox_session_id to use it)")
	}
	if prof.Attached() {
		b.WriteString(", environment attached (connects to an existing system; never reset or destroyed)")
	}
	if langs := prof.Caps.Languages; len(langs) > 0 {
		fmt.Fprintf(&b, "; run_code languages: %s", strings.Join(langs, ", "))
	}
	if prof.Stateful && prof.Caps.Stateful && prof.Scope != sandbox.ScopePerCall {
		b.WriteString("; run_code keeps state: variables, functions and imports defined in one run_code call are still there in the next call of the same session (build on earlier results instead of recomputing them)")
	}
	if !prof.Caps.Shell {
		b.WriteString("; no shell: run_command is not available")
	}
	if !prof.Caps.Files {
		b.WriteString("; no file access: the file tools are not available")
	}
	if mb := prof.Policy.DiskMB; mb > 0 && prof.Caps.PolicyDisk {
		fmt.Fprintf(&b, "; the workspace holds at most %d MiB: going past it fails the write (\"No space left on device\") or, on some providers, resets the sandbox, so remove files you no longer need", mb)
	}
	if prof.Caps.OneShotCommands {
		b.WriteString("; NO persistent shell: each command runs as its own process, so a cd, an exported variable or a background job does not carry over to the next command; chain state-dependent steps in one command (e.g. `cd /app && ./run.sh`)")
	}
	return b.String()
}

// Formats of GET /v1/agent/tools.
const (
	FormatMCP       = "mcp"
	FormatOpenAI    = "openai"
	FormatAnthropic = "anthropic"
)

// MaxChars is sandbox.tool_output_max_chars.
func (h *Handler) MaxChars() int { return h.maxChars }

// ToolDefinitions returns the ten tools, the seed's eight first in its order, as p's MCP server lists them,
// in format: mcp ({name, title, description, inputSchema, outputSchema, annotations}), openai
// ({type: function, function: {name, description, parameters}}) or anthropic ({name,
// description, input_schema}). Descriptions are at most MaxDescriptionChars characters.
func (h *Handler) ToolDefinitions(p principal.Principal, format string) ([]map[string]any, error) {
	out := make([]map[string]any, 0, len(toolTable))
	for _, t := range toolTable {
		desc, schema := t.describe(h, p), json.RawMessage(t.schema)
		switch format {
		case FormatMCP, "":
			out = append(out, map[string]any{"name": t.name, "title": t.title, "description": desc, "inputSchema": schema,
				"outputSchema": t.output, "annotations": t.annotations()})
		case FormatOpenAI:
			out = append(out, map[string]any{"type": "function", "function": map[string]any{"name": t.name, "description": desc, "parameters": schema}})
		case FormatAnthropic:
			out = append(out, map[string]any{"name": t.name, "description": desc, "input_schema": schema})
		default:
			return nil, fmt.Errorf("unknown tool format %q: use mcp, openai or anthropic", format)
		}
	}
	return out, nil
}
