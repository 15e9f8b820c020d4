package mcp_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/stretchr/testify/require"

	"github.com/sandgate/sandgate/internal/auth/devissuer"
	"github.com/sandgate/sandgate/internal/config"
	"github.com/sandgate/sandgate/internal/gateway/gatewaytest"
	"github.com/sandgate/sandgate/internal/mcp"
	"github.com/sandgate/sandgate/internal/providers"
	"github.com/sandgate/sandgate/internal/providers/local"
	"github.com/sandgate/sandgate/internal/sandbox"
	"github.com/sandgate/sandgate/internal/sandbox/sandboxtest"
)

// gateway is the whole gateway (gatewaytest: REST with /mcp mounted, as `gateway serve`
// builds it) over real HTTP, on a real Postgres database, with the development issuer on the
// same listener.
type gateway struct {
	t      *testing.T
	URL    string
	issuer *devissuer.Issuer
}

func newGateway(t *testing.T, adjust func(*config.Config)) *gateway {
	t.Helper()
	return newGatewayAt(t, adjust, nil)
}

// newGatewayAt is newGateway with the domain on clock now (a sandboxtest.Clock).
func newGatewayAt(t *testing.T, adjust func(*config.Config), now func() time.Time) *gateway {
	t.Helper()
	return newGatewayWith(t, adjust, now, nil)
}

// newGatewayWith is newGatewayAt serving the provider types of reg (nil: the built-ins).
func newGatewayWith(t *testing.T, adjust func(*config.Config), now func() time.Time, reg *providers.Registry) *gateway {
	t.Helper()
	workdir := t.TempDir()
	e := gatewaytest.Start(t, gatewaytest.Options{Workdir: workdir, MaxConns: 10, Now: now, Registry: reg, Config: func(cfg *config.Config) {
		lb := config.Blocks{local.TypeName: &local.Block{Workdir: workdir}}
		cfg.Sandbox.Profiles = map[string]config.Profile{
			"default":    {Type: local.TypeName, Blocks: lb},
			"oneshot":    {Type: local.TypeName, Scope: sandbox.ScopePerCall, Blocks: lb},
			"shared":     {Type: local.TypeName, Scope: sandbox.ScopePerRuntime, Blocks: lb},
			"restricted": {Type: local.TypeName, AllowedGroups: []string{"ml"}, Blocks: lb},
			"nonet":      {Type: local.TypeName, Policy: config.Policy{NetworkEgress: "deny"}, Blocks: lb},
			"short-idle": {Type: local.TypeName, IdleTimeout: 1, Blocks: lb},
		}
		if adjust != nil {
			adjust(cfg)
		}
	}})
	return &gateway{t: t, URL: e.URL, issuer: e.Issuer}
}

// only keeps the named profiles (each local profile costs start-up time).
func only(c *config.Config, names ...string) {
	kept := map[string]config.Profile{}
	for _, n := range names {
		kept[n] = c.Sandbox.Profiles[n]
	}
	c.Sandbox.Profiles = kept
}

func (g *gateway) token(sub string, groups ...string) string {
	g.t.Helper()
	tok, err := g.issuer.Mint(devissuer.Claims{Subject: sub, Groups: groups, Email: sub + "@example.test"})
	require.NoError(g.t, err)
	return tok
}

type bearer struct {
	tok  string
	base http.RoundTripper
}

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.tok)
	return b.base.RoundTrip(r)
}

// connect opens an MCP session with the official SDK client, as the bearer of tok.
func (g *gateway) connect(tok string) *sdk.ClientSession {
	g.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	client := sdk.NewClient(&sdk.Implementation{Name: "sandgate-test", Version: "1"}, nil)
	cs, err := client.Connect(ctx, &sdk.StreamableClientTransport{
		Endpoint:   g.URL + mcp.Path,
		HTTPClient: &http.Client{Transport: bearer{tok: tok, base: http.DefaultTransport}},
		MaxRetries: -1,
	}, nil)
	require.NoError(g.t, err)
	g.t.Cleanup(func() { _ = cs.Close() })
	return cs
}

// call invokes a tool and returns its JSON result and isError. Sandbox failures must be tool
// results, never protocol errors; text and structured content must agree.
func call(t *testing.T, cs *sdk.ClientSession, name string, args map[string]any) (map[string]any, bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if args == nil {
		args = map[string]any{}
	}
	res, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: name, Arguments: args})
	require.NoError(t, err, "tool %s", name)
	require.Len(t, res.Content, 1)
	text := res.Content[0].(*sdk.TextContent).Text
	var m map[string]any
	require.NoError(t, json.Unmarshal([]byte(text), &m), "text: %s", text)
	sc, err := json.Marshal(res.StructuredContent)
	require.NoError(t, err)
	require.JSONEq(t, text, string(sc))
	_, hasErr := m["error"]
	require.Equal(t, hasErr, res.IsError, "isError must mark exactly the {\"error\": …} results: %s", text)
	requireOutputSchema(t, cs, name, sc)
	return m, res.IsError
}

// outputSchemas are the compiled output schemas each MCP session's tool list gave.
var outputSchemas sync.Map // *sdk.ClientSession → map[string]*jsonschema.Schema

// requireOutputSchema checks a tool's structured result against the output schema the
// server lists for the tool (as clients do: the TypeScript SDK refuses a result that does
// not match, errors included).
func requireOutputSchema(t *testing.T, cs *sdk.ClientSession, tool string, structured []byte) {
	t.Helper()
	v, ok := outputSchemas.Load(cs)
	if !ok {
		res, err := cs.ListTools(context.Background(), nil)
		require.NoError(t, err)
		schemas := map[string]*jsonschema.Schema{}
		for _, tl := range res.Tools {
			require.NotNil(t, tl.OutputSchema, "%s has an output schema", tl.Name)
			b, err := json.Marshal(tl.OutputSchema)
			require.NoError(t, err)
			doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(b))
			require.NoError(t, err)
			c := jsonschema.NewCompiler()
			require.NoError(t, c.AddResource(tl.Name+".json", doc))
			schemas[tl.Name], err = c.Compile(tl.Name + ".json")
			require.NoError(t, err, "%s's output schema", tl.Name)
		}
		v, _ = outputSchemas.LoadOrStore(cs, schemas)
	}
	sch := v.(map[string]*jsonschema.Schema)[tool]
	require.NotNil(t, sch, tool)
	inst, err := jsonschema.UnmarshalJSON(bytes.NewReader(structured))
	require.NoError(t, err)
	require.NoError(t, sch.Validate(inst), "%s's result does not match its output schema: %s", tool, structured)
}

var hexID = regexp.MustCompile(`^[0-9a-f]{32}$`)

func TestToolListAndGuidance(t *testing.T) {
	t.Parallel()
	g := newGateway(t, nil)
	cs := g.connect(g.token("alice"))

	res, err := cs.ListTools(context.Background(), nil)
	require.NoError(t, err)
	var names []string
	for _, tool := range res.Tools {
		names = append(names, tool.Name)
	}
	want := []string{"run_code", "run_command", "write_sandbox_file", "read_sandbox_file", "check_sandbox_task",
		"list_sandbox_sessions", "new_sandbox_session", "destroy_sandbox_session", "cancel_sandbox_task", "list_sandbox_files"}
	require.Equal(t, want, names)
	require.Equal(t, want, mcp.ToolNames())

	instructions := cs.InitializeResult().Instructions
	runCode := res.Tools[0].Description
	require.LessOrEqual(t, utf8.RuneCountInString(runCode), mcp.MaxDescriptionChars, "within OpenAI's limit: %s", runCode)
	require.Contains(t, runCode, "'default' (default, python/bash)")
	require.Contains(t, runCode, "'oneshot' (python/bash, fresh sandbox per call)")
	require.NotContains(t, runCode, "'restricted'", "only the profiles alice may use")
	for _, tool := range res.Tools[1:] {
		require.NotEmpty(t, tool.Description)
		require.NotContains(t, tool.Description, "[Sandbox execution]")
		require.LessOrEqual(t, len(tool.Description), 300)
	}
	hints := map[string]*sdk.ToolAnnotations{}
	for _, tool := range res.Tools {
		require.NotNil(t, tool.Annotations, tool.Name)
		require.NotEmpty(t, tool.Annotations.Title, tool.Name)
		require.NotNil(t, tool.OutputSchema, tool.Name)
		hints[tool.Name] = tool.Annotations
	}
	for _, n := range []string{"read_sandbox_file", "check_sandbox_task", "list_sandbox_sessions", "list_sandbox_files"} {
		require.True(t, hints[n].ReadOnlyHint, n)
	}
	for _, n := range []string{"run_code", "run_command", "write_sandbox_file", "destroy_sandbox_session", "cancel_sandbox_task"} {
		require.False(t, hints[n].ReadOnlyHint, n)
		require.True(t, *hints[n].DestructiveHint, n)
	}
	require.False(t, *hints["new_sandbox_session"].DestructiveHint)
	require.True(t, hints["destroy_sandbox_session"].IdempotentHint)
	require.False(t, hints["run_command"].IdempotentHint)
	require.True(t, *hints["run_code"].OpenWorldHint, "a program may reach the network its policy allows")
	require.False(t, *hints["read_sandbox_file"].OpenWorldHint)
	schema, err := json.Marshal(res.Tools[0].InputSchema)
	require.NoError(t, err)
	require.JSONEq(t, `["code"]`, mustField(t, schema, "required"))

	lines := strings.Split(instructions, "\n")
	require.NotContains(t, lines, "", "no blank lines")
	require.Equal(t, "[Sandbox execution]", lines[0])
	at := func(prefix string) int {
		for i, l := range lines {
			if strings.HasPrefix(l, prefix) {
				return i
			}
		}
		t.Fatalf("no guidance line starts with %q:\n%s", prefix, instructions)
		return -1
	}
	tools := at("Available tools:")
	for i, n := range want {
		require.True(t, strings.HasPrefix(lines[tools+1+i], "- "+n+"("), lines[tools+1+i])
	}
	require.Contains(t, lines[tools+1], `run_code(code, language="python", sandbox_session_id=None, profile=None)`)
	persist := at("State (files")
	ids := at("Session ids are assigned by the system: never invent one")
	errs := at(`If a result has an "error" field, the operation FAILED`)
	notice := at(`If a result has a "notice" field`)
	profiles := at("Available workload profiles (pass as profile=):")
	require.True(t, tools < persist && persist < ids && ids < errs && errs < notice && notice < profiles)
	require.Equal(t, persist, tools+len(want)+1)
	require.True(t, strings.HasPrefix(lines[len(lines)-1], "stdout/stderr and file reads are truncated at 8000 characters: "), lines[len(lines)-1])
	profileLines := lines[profiles+1 : len(lines)-1]
	require.Equal(t, []string{"default", "nonet", "oneshot", "shared", "short-idle"}, profileNames(profileLines),
		"only the profiles alice may use, sorted")
	require.True(t, strings.HasPrefix(profileLines[0], "- 'default' (default): provider 'local_subprocess', scope per_session"), profileLines[0])
	require.Contains(t, instructions, "- 'oneshot': provider 'local_subprocess', scope per_call")
	require.Contains(t, instructions, "- 'shared': provider 'local_subprocess', scope per_runtime")

	// Another caller's server lists the profiles it may use.
	ml := g.connect(g.token("mona", "ml"))
	require.Contains(t, ml.InitializeResult().Instructions, "- 'restricted': provider 'local_subprocess', scope per_session")
	require.NotContains(t, instructions, "'restricted'")
}

func mustField(t *testing.T, doc []byte, field string) string {
	t.Helper()
	var m map[string]json.RawMessage
	require.NoError(t, json.Unmarshal(doc, &m))
	return string(m[field])
}

func profileNames(lines []string) []string {
	var out []string
	for _, l := range lines {
		name, _, _ := strings.Cut(strings.TrimPrefix(l, "- '"), "'")
		out = append(out, name)
	}
	return out
}

func TestRunAndFileTools(t *testing.T) {
	t.Parallel()
	g := newGateway(t, nil)
	cs := g.connect(g.token("alice"))

	// The seed's example, with our real default-session id echoed.
	m, isErr := call(t, cs, "run_code", map[string]any{"code": "print('hi')"})
	require.False(t, isErr)
	require.Equal(t, "hi\n", m["stdout"])
	require.Equal(t, "", m["stderr"])
	require.EqualValues(t, 0, m["exit_code"])
	def := m["sandbox_session_id"].(string)
	require.Regexp(t, hexID, def)
	require.NotContains(t, m, "notice")
	require.Len(t, m, 4)

	// The default session persists across calls and tools; a failing program is a result.
	m, _ = call(t, cs, "run_command", map[string]any{"command": "echo kept > state.txt; echo out; echo err >&2; exit 3"})
	require.Equal(t, map[string]any{"stdout": "out\n", "stderr": "err\n", "exit_code": float64(3), "sandbox_session_id": def}, m)
	m, _ = call(t, cs, "run_code", map[string]any{"code": "print(open('state.txt').read().strip())", "sandbox_session_id": nil})
	require.Equal(t, "kept\n", m["stdout"])
	require.Equal(t, def, m["sandbox_session_id"])
	m, _ = call(t, cs, "run_code", map[string]any{"code": "echo $((2+3))", "language": "bash", "sandbox_session_id": def})
	require.Equal(t, "5\n", m["stdout"])
	m, _ = call(t, cs, "run_command", map[string]any{"command": "cat state.txt", "sandbox_session_id": "default:default"})
	require.Equal(t, "kept\n", m["stdout"], "the seed's default:<profile> id names the same session")

	// Files: UTF-8 text in, text out, the real session id echoed.
	m, isErr = call(t, cs, "write_sandbox_file", map[string]any{"path": "dir/note.txt", "content": "héllo <&> wörld\n"})
	require.False(t, isErr, "%v", m)
	require.Equal(t, map[string]any{"path": "dir/note.txt", "written": true, "sandbox_session_id": def}, m)
	m, _ = call(t, cs, "read_sandbox_file", map[string]any{"path": "dir/note.txt"})
	require.Equal(t, map[string]any{"path": "dir/note.txt", "content": "héllo <&> wörld\n", "size": float64(len("héllo <&> wörld\n")), "sandbox_session_id": def}, m)
	m, _ = call(t, cs, "run_command", map[string]any{"command": "cat dir/note.txt"})
	require.Equal(t, "héllo <&> wörld\n", m["stdout"])
	// A file that is no UTF-8 text comes back base64, flagged; program output that is not
	// UTF-8 is decoded with replacement.
	call(t, cs, "run_code", map[string]any{"code": "open('bin.dat','wb').write(bytes([0x41,0xff,0x42]))"})
	m, _ = call(t, cs, "read_sandbox_file", map[string]any{"path": "bin.dat"})
	require.Equal(t, "Qf9C", m["content"])
	require.Equal(t, "base64", m["encoding"])
	m, _ = call(t, cs, "run_command", map[string]any{"command": "printf 'x\\377y'"})
	require.Equal(t, "x\uFFFDy", m["stdout"])
	// Listing: entries with type and size; a sub-folder; escapes refused.
	m, isErr = call(t, cs, "list_sandbox_files", map[string]any{"path": "dir"})
	require.False(t, isErr, "%v", m)
	require.Equal(t, map[string]any{"path": "dir", "sandbox_session_id": def,
		"entries": []any{map[string]any{"name": "note.txt", "type": "file", "size": float64(len("héllo <&> wörld\n"))}}}, m)
	m, _ = call(t, cs, "list_sandbox_files", nil)
	require.Contains(t, m["entries"], map[string]any{"name": "dir", "size": float64(4096), "type": "dir"})
	m, isErr = call(t, cs, "list_sandbox_files", map[string]any{"path": "../.."})
	require.True(t, isErr, "%v", m)

	// Named sessions: created, listed, used, destroyed (idempotently).
	m, _ = call(t, cs, "new_sandbox_session", map[string]any{"name": "analysis"})
	sid := m["sandbox_session_id"].(string)
	require.Regexp(t, hexID, sid)
	require.Equal(t, map[string]any{"sandbox_session_id": sid, "name": "analysis", "profile": "default"}, m)
	m, _ = call(t, cs, "write_sandbox_file", map[string]any{"path": "a.txt", "content": "in session", "sandbox_session_id": sid})
	require.Equal(t, sid, m["sandbox_session_id"])
	m, _ = call(t, cs, "run_command", map[string]any{"command": "cat a.txt; ls state.txt", "sandbox_session_id": sid})
	require.Equal(t, "in session", m["stdout"])
	require.NotEqualValues(t, 0, m["exit_code"], "sessions do not share workspaces")
	m, _ = call(t, cs, "list_sandbox_sessions", nil)
	sessions := m["sessions"].([]any)
	byID := map[string]map[string]any{}
	for _, s := range sessions {
		item := s.(map[string]any)
		require.ElementsMatch(t, []string{"sandbox_session_id", "name", "profile", "status", "last_used_at"}, keys(item))
		byID[item["sandbox_session_id"].(string)] = item
	}
	require.Equal(t, "analysis", byID[sid]["name"])
	require.Equal(t, "default", byID[sid]["profile"])
	require.Equal(t, "active", byID[sid]["status"])
	_, err := time.Parse(time.RFC3339, byID[sid]["last_used_at"].(string))
	require.NoError(t, err)
	require.Contains(t, byID, def)
	require.Nil(t, byID[def]["name"])

	m, _ = call(t, cs, "destroy_sandbox_session", map[string]any{"sandbox_session_id": sid})
	require.Equal(t, map[string]any{"sandbox_session_id": sid, "destroyed": true}, m)
	m, isErr = call(t, cs, "destroy_sandbox_session", map[string]any{"sandbox_session_id": sid})
	require.False(t, isErr)
	require.Equal(t, true, m["destroyed"])
	m, isErr = call(t, cs, "run_command", map[string]any{"command": "ls", "sandbox_session_id": sid})
	require.True(t, isErr)
	require.Contains(t, m["error"], sid)
	require.Equal(t, sid, m["sandbox_session_id"])

	// A per_call profile runs each call in a fresh sandbox.
	m, _ = call(t, cs, "run_command", map[string]any{"command": "touch x; ls", "profile": "oneshot"})
	require.Equal(t, "x\n", m["stdout"])
	m, _ = call(t, cs, "run_command", map[string]any{"command": "ls", "profile": "oneshot"})
	require.Equal(t, "", m["stdout"])

	m, _ = call(t, cs, "check_sandbox_task", map[string]any{"task_id": strings.Repeat("0", 32)})
	require.Equal(t, map[string]any{"task_id": strings.Repeat("0", 32), "status": "unknown"}, m)
}

func keys(m map[string]any) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

func TestToolErrors(t *testing.T) {
	t.Parallel()
	g := newGateway(t, func(c *config.Config) {
		quick := 1.0
		c.Sandbox.Profiles["quick"] = config.Profile{Type: local.TypeName, Policy: config.Policy{Timeout: &quick},
			Blocks: c.Sandbox.Profiles["default"].Blocks}
	})
	cs := g.connect(g.token("alice"))

	// A run that hits the policy timeout is a failure, with its partial output.
	m, isErr := call(t, cs, "run_command", map[string]any{"command": "echo before; sleep 20", "profile": "quick"})
	require.True(t, isErr)
	require.Contains(t, m["error"], "timeout")
	require.Equal(t, "before\n", m["stdout"])
	require.Equal(t, "", m["stderr"])
	require.Regexp(t, hexID, m["sandbox_session_id"])
	require.Regexp(t, hexID, m["task_id"])

	m, isErr = call(t, cs, "run_code", map[string]any{"code": "print(1)", "profile": "no-such-profile"})
	require.True(t, isErr)
	require.Contains(t, m["error"], "no-such-profile")
	require.Equal(t, "", m["sandbox_session_id"])

	// A profile the caller may not use.
	m, _ = call(t, cs, "run_command", map[string]any{"command": "id", "profile": "restricted"})
	require.Contains(t, m["error"], "restricted")

	// Policy: network deny cannot be enforced by local_subprocess (strict) → fails closed.
	m, _ = call(t, cs, "run_command", map[string]any{"command": "echo never", "profile": "nonet"})
	require.Contains(t, m["error"], "network_egress")
	m, _ = call(t, cs, "write_sandbox_file", map[string]any{"path": "f", "content": "x", "profile": "nonet"})
	require.Contains(t, m["error"], "network_egress")

	// Capability and path errors keep the given id.
	m, _ = call(t, cs, "run_code", map[string]any{"code": "puts 1", "language": "ruby", "sandbox_session_id": "default"})
	require.Contains(t, m["error"], "language:ruby")
	require.Equal(t, "default", m["sandbox_session_id"])
	m, _ = call(t, cs, "write_sandbox_file", map[string]any{"path": "../escape", "content": "x"})
	require.Contains(t, m["error"], "escapes")
	m, _ = call(t, cs, "read_sandbox_file", map[string]any{"path": "missing.txt"})
	require.Contains(t, m["error"], "missing.txt")
	m, _ = call(t, cs, "write_sandbox_file", map[string]any{"path": "f", "content": "x", "profile": "oneshot"})
	require.Contains(t, m["error"], "per_call")

	// new_sandbox_session on per_runtime and per_call profiles.
	// The domain's hints come in tool terms, never as REST routes.
	m, _ = call(t, cs, "new_sandbox_session", map[string]any{"profile": "shared"})
	require.Contains(t, m["error"], "per_runtime")
	require.Contains(t, m["error"], "omit sandbox_session_id and pass profile='shared'")
	require.NotContains(t, m["error"], "?profile=")
	m, _ = call(t, cs, "new_sandbox_session", map[string]any{"profile": "oneshot"})
	require.Contains(t, m["error"], "per_call")
	require.Contains(t, m["error"], "call run_code or run_command with profile='oneshot'")
	require.NotContains(t, m["error"], "/v1/")

	// Session/profile mismatch, invented ids, bad arguments.
	m, _ = call(t, cs, "new_sandbox_session", map[string]any{"name": "x"})
	sid := m["sandbox_session_id"].(string)
	m, _ = call(t, cs, "run_command", map[string]any{"command": "ls", "sandbox_session_id": sid, "profile": "short-idle"})
	require.Contains(t, m["error"], "omit profile")
	m, _ = call(t, cs, "run_command", map[string]any{"command": "ls", "sandbox_session_id": "my-session"})
	require.Contains(t, m["error"], "unknown sandbox session 'my-session'")
	require.Equal(t, "my-session", m["sandbox_session_id"])
	m, _ = call(t, cs, "run_command", map[string]any{"command": "ls", "session_id": sid})
	require.Contains(t, m["error"], "unknown argument \"session_id\"")
	m, _ = call(t, cs, "run_command", map[string]any{})
	require.Contains(t, m["error"], "command")
	m, _ = call(t, cs, "run_code", map[string]any{"code": 42})
	require.Contains(t, m["error"], "code must be a string")
	m, _ = call(t, cs, "check_sandbox_task", nil)
	require.Contains(t, m["error"], "task_id")
}

func TestTruncation(t *testing.T) {
	t.Parallel()
	g := newGateway(t, func(c *config.Config) {
		c.Sandbox.ToolOutputMaxChars = 10
		only(c, "default")
	})
	cs := g.connect(g.token("alice"))
	require.Contains(t, cs.InitializeResult().Instructions, "truncated at 10 characters: the start and the end are kept")

	m, _ := call(t, cs, "run_code", map[string]any{"code": "import sys\nprint('é'*50 + 'E')\nprint('ü'*50, file=sys.stderr)"})
	require.Equal(t, strings.Repeat("é", 5)+"\n…[42 characters cut]…\n"+strings.Repeat("é", 3)+"E\n", m["stdout"], "head and tail, in characters, not bytes")
	require.Equal(t, strings.Repeat("ü", 5)+"\n…[41 characters cut]…\n"+strings.Repeat("ü", 4)+"\n", m["stderr"])
	require.Equal(t, true, m["truncated"])
	m, _ = call(t, cs, "run_code", map[string]any{"code": "print('short')"})
	require.NotContains(t, m, "truncated", "absent when nothing was cut")

	call(t, cs, "write_sandbox_file", map[string]any{"path": "long.txt", "content": "0123456789abcdef"})
	m, _ = call(t, cs, "read_sandbox_file", map[string]any{"path": "long.txt"})
	require.Equal(t, "01234\n…[6 characters cut]…\nbcdef", m["content"])
	require.Equal(t, true, m["truncated"])
	require.EqualValues(t, 16, m["size"])
	require.NotContains(t, m, "encoding")
	// A file larger than what is read whole: its start and its end, in constant memory.
	big := "START" + strings.Repeat("é", 5000) + "END"
	call(t, cs, "write_sandbox_file", map[string]any{"path": "big.txt", "content": big})
	m, _ = call(t, cs, "read_sandbox_file", map[string]any{"path": "big.txt"})
	require.Equal(t, "START\n…["+strconv.Itoa(len(big)-len("START")-len("ééEND"))+" bytes cut]…\nééEND", m["content"])
	require.Equal(t, true, m["truncated"])
	require.EqualValues(t, len(big), m["size"])
	m, _ = call(t, cs, "read_sandbox_file", map[string]any{"path": "short.txt"})
	require.Contains(t, m["error"], "no file or folder")
}

// TestBinaryFileReads: a file that is not UTF-8 text comes back base64 with a flag, never as
// text with replacement characters.
func TestBinaryFileReads(t *testing.T) {
	t.Parallel()
	g := newGateway(t, func(c *config.Config) {
		c.Sandbox.ToolOutputMaxChars = 16
		only(c, "default")
	})
	cs := g.connect(g.token("alice"))
	call(t, cs, "run_code", map[string]any{"code": "open('small.bin','wb').write(bytes([0x89,0x50,0x4e,0x47,0,1,2,255]))\nopen('big.bin','wb').write(bytes(range(256))*4)"})
	m, _ := call(t, cs, "read_sandbox_file", map[string]any{"path": "small.bin"})
	require.Equal(t, "base64", m["encoding"])
	require.Equal(t, base64.StdEncoding.EncodeToString([]byte{0x89, 0x50, 0x4e, 0x47, 0, 1, 2, 255}), m["content"])
	require.NotContains(t, m, "truncated")
	require.EqualValues(t, 8, m["size"])

	m, _ = call(t, cs, "read_sandbox_file", map[string]any{"path": "big.bin"})
	require.Equal(t, "base64", m["encoding"])
	raw, err := base64.StdEncoding.DecodeString(m["content"].(string))
	require.NoError(t, err)
	require.Equal(t, []byte{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11}, raw, "the first bytes, at most 16 characters of base64")
	require.LessOrEqual(t, len(m["content"].(string)), 16)
	require.Equal(t, true, m["truncated"])
	require.EqualValues(t, 1024, m["size"])
}

func TestPromotedTaskAndIdleNotice(t *testing.T) {
	t.Parallel()
	clock := sandboxtest.NewClock(time.Now())
	g := newGatewayAt(t, func(c *config.Config) {
		wait := 0.3
		c.Sandbox.Broker.WaitTimeout = &wait
		c.Sandbox.ToolOutputMaxChars = 20
		only(c, "default", "short-idle")
	}, clock.Now)
	cs := g.connect(g.token("alice"))

	m, isErr := call(t, cs, "run_command", map[string]any{"command": "sleep 1.5; printf 'done-%s' 0123456789abcdefghij; echo oops >&2; exit 2"})
	require.False(t, isErr, "%v", m)
	require.Equal(t, "pending", m["status"])
	task := m["task_id"].(string)
	require.Regexp(t, hexID, task)
	require.Regexp(t, hexID, m["sandbox_session_id"])
	require.Len(t, m, 3)

	deadline := time.Now().Add(30 * time.Second)
	for {
		m, isErr = call(t, cs, "check_sandbox_task", map[string]any{"task_id": task})
		require.False(t, isErr, "%v", m)
		if m["result"] != nil || time.Now().After(deadline) {
			break
		}
		require.Contains(t, []string{"pending", "running"}, m["status"])
		time.Sleep(200 * time.Millisecond)
	}
	require.Equal(t, task, m["task_id"])
	require.Equal(t, "succeeded", m["status"])
	require.Regexp(t, hexID, m["sandbox_session_id"])
	require.Equal(t, map[string]any{
		"stdout": "done-01234\n…[5 characters cut]…\nabcdefghij", "stderr": "oops\n", "exit_code": float64(2), "error": nil, "notice": nil,
		"truncated": true,
	}, m["result"], "stdout cut to tool_output_max_chars, head and tail")

	// Another principal cannot see the task.
	bob := g.connect(g.token("bob"))
	m, _ = call(t, bob, "check_sandbox_task", map[string]any{"task_id": task})
	require.Equal(t, "unknown", m["status"])

	// Idle reset: the notice is relayed with the next result.
	first, _ := call(t, cs, "run_command", map[string]any{"command": "echo a > f", "profile": "short-idle"})
	require.NotContains(t, first, "notice")
	clock.Advance(2200 * time.Millisecond) // past short-idle's idle_timeout of 1 s
	m, _ = call(t, cs, "run_command", map[string]any{"command": "ls", "profile": "short-idle"})
	for m["task_id"] != nil { // promoted (slow machine): collect it
		time.Sleep(200 * time.Millisecond)
		tm, _ := call(t, cs, "check_sandbox_task", map[string]any{"task_id": m["task_id"]})
		if r, ok := tm["result"].(map[string]any); ok {
			m = map[string]any{"stdout": r["stdout"], "notice": r["notice"]}
		}
	}
	require.Contains(t, m["notice"], "idle")
	require.Contains(t, m["notice"], "discarded")
	require.Equal(t, "", m["stdout"], "the workspace was discarded")
}

func TestAuthAndIsolation(t *testing.T) {
	t.Parallel()
	g := newGateway(t, nil)

	// No token: 401 with the RFC 9728 pointer; the metadata names the issuer and /mcp.
	body := `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"x","version":"1"}}}`
	for _, tok := range []string{"", "not-a-jwt"} {
		r := post(t, g.URL+mcp.Path, tok, "", body)
		require.Equal(t, 401, r.StatusCode)
		challenge := r.Header.Get("WWW-Authenticate")
		require.Contains(t, challenge, `resource_metadata="`+g.URL+`/.well-known/oauth-protected-resource/mcp"`)
		require.True(t, strings.HasPrefix(challenge, "Bearer "), challenge)
	}
	for _, path := range []string{"/.well-known/oauth-protected-resource", "/.well-known/oauth-protected-resource/mcp"} {
		resp, err := http.Get(g.URL + path)
		require.NoError(t, err)
		require.Equal(t, 200, resp.StatusCode)
		var meta map[string]any
		require.NoError(t, json.NewDecoder(resp.Body).Decode(&meta))
		resp.Body.Close()
		require.Equal(t, g.URL+"/mcp", meta["resource"])
		require.Equal(t, []any{g.issuer.URL()}, meta["authorization_servers"])
		require.Equal(t, []any{"header"}, meta["bearer_methods_supported"])
	}
	// REST challenges are unchanged.
	resp, err := http.Get(g.URL + "/v1/me")
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, `Bearer realm="sandgate"`, resp.Header.Get("WWW-Authenticate"))

	// Bob can reach neither Alice's sandbox sessions nor her MCP session.
	alice := g.connect(g.token("alice"))
	m, _ := call(t, alice, "run_command", map[string]any{"command": "echo alice-secret > s.txt; cat s.txt"})
	require.Equal(t, "alice-secret\n", m["stdout"])
	hers := m["sandbox_session_id"].(string)
	named, _ := call(t, alice, "new_sandbox_session", map[string]any{"name": "private"})

	bob := g.connect(g.token("bob"))
	for _, id := range []string{hers, named["sandbox_session_id"].(string)} {
		m, isErr := call(t, bob, "run_command", map[string]any{"command": "cat s.txt", "sandbox_session_id": id})
		require.True(t, isErr)
		require.Contains(t, m["error"], "unknown sandbox session")
		require.NotContains(t, m, "stdout")
		m, _ = call(t, bob, "read_sandbox_file", map[string]any{"path": "s.txt", "sandbox_session_id": id})
		require.Contains(t, m["error"], "unknown sandbox session")
		m, _ = call(t, bob, "destroy_sandbox_session", map[string]any{"sandbox_session_id": id})
		require.Equal(t, true, m["destroyed"], "idempotent: someone else's id is simply unknown")
	}
	m, _ = call(t, bob, "list_sandbox_sessions", nil)
	require.Empty(t, m["sessions"])
	m, _ = call(t, bob, "run_command", map[string]any{"command": "ls"})
	require.NotEqual(t, hers, m["sandbox_session_id"], "bob's default session is his own")
	require.Equal(t, "", m["stdout"])
	// Alice's session survived bob's destroy attempts.
	m, _ = call(t, alice, "run_command", map[string]any{"command": "cat s.txt", "sandbox_session_id": hers})
	require.Equal(t, "alice-secret\n", m["stdout"])

	// Bob presenting Alice's MCP session id is refused; Alice herself is served.
	list := `{"jsonrpc":"2.0","id":7,"method":"tools/list","params":{}}`
	r := post(t, g.URL+mcp.Path, g.token("bob"), alice.ID(), list)
	require.Equal(t, http.StatusForbidden, r.StatusCode)
	require.Equal(t, "application/problem+json", r.Header.Get("Content-Type"), "the SDK's text answer becomes a problem")
	r = post(t, g.URL+mcp.Path, g.token("alice"), strings.Repeat("0", 26), list)
	require.Equal(t, http.StatusNotFound, r.StatusCode)
	require.Equal(t, "application/problem+json", r.Header.Get("Content-Type"))
	r = post(t, g.URL+mcp.Path, g.token("alice"), alice.ID(), list)
	require.Equal(t, http.StatusOK, r.StatusCode)
	r = post(t, g.URL+mcp.Path, "", alice.ID(), list)
	require.Equal(t, http.StatusUnauthorized, r.StatusCode)
}

func post(t *testing.T, url, tok, session, body string) *http.Response {
	t.Helper()
	req, err := http.NewRequest("POST", url, strings.NewReader(body))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	if tok != "" {
		req.Header.Set("Authorization", "Bearer "+tok)
	}
	if session != "" {
		req.Header.Set("Mcp-Session-Id", session)
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp
}

func getJSON(t *testing.T, url, tok string) (int, map[string]any) {
	t.Helper()
	req, err := http.NewRequest("GET", url, nil)
	require.NoError(t, err)
	if tok != "" {
		req.Header.Set("Authorization", "Bearer "+tok)
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	var m map[string]any
	require.NoError(t, json.Unmarshal(b, &m), "body: %s", b)
	return resp.StatusCode, m
}

func TestAgentToolsEndpoint(t *testing.T) {
	t.Parallel()
	g := newGateway(t, nil)
	tok := g.token("alice")
	cs := g.connect(tok)
	listed, err := cs.ListTools(context.Background(), nil)
	require.NoError(t, err)
	mcpTools, err := json.Marshal(listed.Tools)
	require.NoError(t, err)
	var fromMCP []map[string]any
	require.NoError(t, json.Unmarshal(mcpTools, &fromMCP))

	st, def := getJSON(t, g.URL+"/v1/agent/tools", tok)
	require.Equal(t, 200, st, "%v", def)
	require.Equal(t, "mcp", def["format"])
	require.Equal(t, cs.InitializeResult().Instructions, def["guidance"])
	require.EqualValues(t, 8000, def["tool_output_max_chars"])
	tools := def["tools"].([]any)
	require.Len(t, tools, 10)
	for i, raw := range tools {
		tool := raw.(map[string]any)
		require.Equal(t, fromMCP[i]["name"], tool["name"])
		require.Equal(t, fromMCP[i]["description"], tool["description"])
		require.Equal(t, fromMCP[i]["inputSchema"], tool["inputSchema"], "the same schema the MCP server lists")
		require.Equal(t, fromMCP[i]["outputSchema"], tool["outputSchema"])
		require.Equal(t, fromMCP[i]["annotations"], tool["annotations"])
		require.Equal(t, fromMCP[i]["title"], tool["title"])
	}
	st, explicit := getJSON(t, g.URL+"/v1/agent/tools?format=mcp", tok)
	require.Equal(t, 200, st)
	require.Equal(t, def, explicit)

	st, oa := getJSON(t, g.URL+"/v1/agent/tools?format=openai", tok)
	require.Equal(t, 200, st)
	require.Equal(t, "openai", oa["format"])
	for i, raw := range oa["tools"].([]any) {
		tool := raw.(map[string]any)
		require.Equal(t, "function", tool["type"])
		fn := tool["function"].(map[string]any)
		require.LessOrEqual(t, utf8.RuneCountInString(fn["description"].(string)), 1024, "OpenAI's limit")
		require.Equal(t, fromMCP[i]["name"], fn["name"])
		require.Equal(t, fromMCP[i]["description"], fn["description"])
		require.Equal(t, fromMCP[i]["inputSchema"], fn["parameters"])
	}

	st, an := getJSON(t, g.URL+"/v1/agent/tools?format=anthropic", tok)
	require.Equal(t, 200, st)
	require.Equal(t, "anthropic", an["format"])
	for i, raw := range an["tools"].([]any) {
		tool := raw.(map[string]any)
		require.ElementsMatch(t, []string{"name", "description", "input_schema"}, keys(tool))
		require.Equal(t, fromMCP[i]["name"], tool["name"])
		require.Equal(t, fromMCP[i]["inputSchema"], tool["input_schema"])
	}
	runCommand := an["tools"].([]any)[1].(map[string]any)["input_schema"].(map[string]any)
	require.Equal(t, []any{"command"}, runCommand["required"])
	require.ElementsMatch(t, []string{"command", "sandbox_session_id", "profile", "wait_s"}, keys(runCommand["properties"].(map[string]any)))

	// Profiles follow the caller.
	_, ml := getJSON(t, g.URL+"/v1/agent/tools", g.token("mona", "ml"))
	require.Contains(t, ml["guidance"], "'restricted'")
	require.NotContains(t, def["guidance"], "'restricted'")

	st, bad := getJSON(t, g.URL+"/v1/agent/tools?format=yaml", tok)
	require.Equal(t, 400, st, "%v", bad)
	st, _ = getJSON(t, g.URL+"/v1/agent/tools", "")
	require.Equal(t, 401, st)
}

func TestDisabledCapability(t *testing.T) {
	t.Parallel()
	g := newGateway(t, func(c *config.Config) {
		c.Sandbox.Enabled = new(bool)
		only(c, "default")
	})
	cs := g.connect(g.token("alice"))
	require.Contains(t, cs.InitializeResult().Instructions, "disabled")
	for _, name := range mcp.ToolNames() {
		res, err := cs.CallTool(context.Background(), &sdk.CallToolParams{Name: name, Arguments: map[string]any{}})
		require.NoError(t, err)
		require.True(t, res.IsError)
		require.JSONEq(t, `{"error": "sandbox capability is disabled"}`, res.Content[0].(*sdk.TextContent).Text)
	}
}

// Losing a group revokes: a session made in a group-restricted profile is refused once the
// caller's token no longer carries the group (checked on every call, not at creation only).
func TestLosingAGroupRevokesItsSessions(t *testing.T) {
	t.Parallel()
	g := newGateway(t, func(c *config.Config) { only(c, "default", "restricted") })
	member := g.connect(g.token("bob", "ml"))
	m, isErr := call(t, member, "new_sandbox_session", map[string]any{"profile": "restricted"})
	require.False(t, isErr, "%v", m)
	sid := m["sandbox_session_id"].(string)
	m, isErr = call(t, member, "run_command", map[string]any{"command": "echo in", "sandbox_session_id": sid})
	require.False(t, isErr, "%v", m)

	former := g.connect(g.token("bob")) // the same subject, no longer in ml
	for _, tool := range []struct {
		name string
		args map[string]any
	}{
		{"run_command", map[string]any{"command": "echo still", "sandbox_session_id": sid}},
		{"run_code", map[string]any{"code": "print(1)", "sandbox_session_id": sid}},
		{"write_sandbox_file", map[string]any{"path": "x", "content": "x", "sandbox_session_id": sid}},
		{"read_sandbox_file", map[string]any{"path": "x", "sandbox_session_id": sid}},
	} {
		m, isErr = call(t, former, tool.name, tool.args)
		require.True(t, isErr, "%s: %v", tool.name, m)
		require.Contains(t, m["error"], "restricted to members of [ml]", tool.name)
	}
}

// TestToolDescriptionsStayWithinVendorLimits: however many profiles a caller may use, every
// description fits OpenAI's 1,024 characters; the guidance keeps the whole list.
func TestToolDescriptionsStayWithinVendorLimits(t *testing.T) {
	t.Parallel()
	g := newGateway(t, func(c *config.Config) {
		lb := c.Sandbox.Profiles["default"].Blocks
		for i := range 60 {
			c.Sandbox.Profiles[fmt.Sprintf("team-%02d-with-a-rather-long-profile-name", i)] = config.Profile{Type: local.TypeName, Stateful: true, Blocks: lb}
		}
	})
	st, def := getJSON(t, g.URL+"/v1/agent/tools?format=openai", g.token("alice"))
	require.Equal(t, 200, st)
	for _, raw := range def["tools"].([]any) {
		fn := raw.(map[string]any)["function"].(map[string]any)
		require.LessOrEqual(t, utf8.RuneCountInString(fn["description"].(string)), 1024, "%s", fn["name"])
	}
	runCode := def["tools"].([]any)[0].(map[string]any)["function"].(map[string]any)["description"].(string)
	require.True(t, strings.HasSuffix(runCode, "… (see the server instructions)."), runCode)
	require.Contains(t, def["guidance"], "team-59-with-a-rather-long-profile-name", "the guidance lists them all")
}

// TestNewSessionOptions: new_sandbox_session takes the session's env, which every run of the
// session sees, and a lifetime; a lifetime under a second is refused as a tool error.
func TestNewSessionOptions(t *testing.T) {
	t.Parallel()
	g := newGateway(t, nil)
	cs := g.connect(g.token("alice"))
	m, isErr := call(t, cs, "new_sandbox_session", map[string]any{"name": "opts", "env": map[string]string{"GREETING": "hello"}, "timeout_s": 600})
	require.False(t, isErr, "%v", m)
	sid := m["sandbox_session_id"].(string)
	m, _ = call(t, cs, "run_command", map[string]any{"command": `echo "$GREETING"`, "sandbox_session_id": sid})
	require.Equal(t, "hello\n", m["stdout"])
	m, _ = call(t, cs, "run_code", map[string]any{"code": `import os; print(os.environ["GREETING"])`, "sandbox_session_id": sid})
	require.Equal(t, "hello\n", m["stdout"])
	m, isErr = call(t, cs, "new_sandbox_session", map[string]any{"timeout_s": 0})
	require.True(t, isErr, "%v", m)
	require.Contains(t, m["error"], "timeout_s")
}

// TestNewSessionSecrets: new_sandbox_session binds stored secrets by name; an unknown name is
// a tool error naming it, and a provider without the egress proxy refuses to run the session.
func TestNewSessionSecrets(t *testing.T) {
	t.Parallel()
	g := newGateway(t, func(c *config.Config) {
		c.Secrets.Keys = []string{"k1:" + base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{7}, 32))}
		only(c, "default")
	})
	tok := g.token("alice")
	req, err := http.NewRequest("PUT", g.URL+"/v1/secrets/openai", strings.NewReader(`{"value":"sk-mcp","hosts":["api.openai.com"]}`))
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+tok)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, 201, resp.StatusCode)

	cs := g.connect(tok)
	m, isErr := call(t, cs, "new_sandbox_session", map[string]any{"secrets": []string{"nosuch"}})
	require.True(t, isErr, "%v", m)
	require.Contains(t, m["error"], "nosuch")
	m, isErr = call(t, cs, "new_sandbox_session", map[string]any{"secrets": []string{"openai"}})
	require.False(t, isErr, "%v", m)
	m, isErr = call(t, cs, "run_command", map[string]any{"command": "env", "sandbox_session_id": m["sandbox_session_id"]})
	require.True(t, isErr, "%v", m)
	require.Contains(t, m["error"], "openai")
	require.NotContains(t, m["error"], "sk-mcp")
}
