// Calls every tool through the official TypeScript SDK after listing them, so the SDK checks
// each structured result against the tool's output schema (it refuses one that does not
// match, error results included) and reads each tool's annotations.
//
//   node outputs.mjs <mcp url> <bearer token>
//
// Prints one JSON line: {"annotations": {tool: annotations}, "results": {label: result}}.
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";

const [url, token] = process.argv.slice(2);
const client = new Client({ name: "sandgate-sdk-outputs", version: "1.0.0" });
const transport = new StreamableHTTPClientTransport(new URL(url), {
  requestInit: { headers: { Authorization: `Bearer ${token}` } },
});
await client.connect(transport);

const { tools } = await client.listTools(); // caches the output schemas the SDK validates with
const annotations = Object.fromEntries(tools.map((t) => [t.name, { ...t.annotations, hasOutputSchema: !!t.outputSchema }]));
const results = {};
const call = async (label, name, args) => {
  const res = await client.callTool({ name, arguments: args });
  results[label] = { ...res.structuredContent, isError: !!res.isError };
  return res.structuredContent;
};

const session = await call("new_session", "new_sandbox_session", { name: "outputs" });
const sid = session.sandbox_session_id;
await call("run_command", "run_command", { command: "echo hi; echo err >&2; exit 3", sandbox_session_id: sid });
await call("run_code", "run_code", { code: "print('x' * 20000)", sandbox_session_id: sid });
const promoted = await call("promoted", "run_command", { command: "sleep 30", sandbox_session_id: sid, wait_s: 0 });
await call("cancel", "cancel_sandbox_task", { task_id: promoted.task_id });
await call("check", "check_sandbox_task", { task_id: promoted.task_id });
await call("write", "write_sandbox_file", { path: "a.txt", content: "text", sandbox_session_id: sid });
await call("read_text", "read_sandbox_file", { path: "a.txt", sandbox_session_id: sid });
await call("binary", "run_code", { code: "open('b.bin','wb').write(bytes(range(256)))", sandbox_session_id: sid });
await call("read_binary", "read_sandbox_file", { path: "b.bin", sandbox_session_id: sid });
await call("read_missing", "read_sandbox_file", { path: "missing.txt", sandbox_session_id: sid });
await call("list_files", "list_sandbox_files", { sandbox_session_id: sid });
await call("list_sessions", "list_sandbox_sessions", {});
await call("check_unknown", "check_sandbox_task", { task_id: "0123456789abcdef0123456789abcdef" });
await call("bad_args", "run_command", { command: "true", no_such_argument: 1 });
await call("destroy", "destroy_sandbox_session", { sandbox_session_id: sid });

await transport.terminateSession();
await client.close();
console.log(JSON.stringify({ annotations, results }));
