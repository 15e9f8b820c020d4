// Drives a gateway's MCP endpoint with the official TypeScript SDK: two run_command calls of
// a command that takes about 90 s, made as agents make them.
//
//   node long_calls.mjs <mcp url> <bearer token> <seconds>
//
// 1. With wait_s above the command's length, onprogress and resetTimeoutOnProgress under the
//    SDK's default 60 s request timeout: the call itself returns the result, kept alive by
//    the server's progress notifications.
// 2. Without wait_s (the default): the call answers before the 60 s timeout with a task_id,
//    collected with check_sandbox_task.
//
// Prints one JSON line: {"direct": <result of 1>, "progress": <notifications seen by 1>,
//   "promoted": <first answer of 2>, "collected": <final check_sandbox_task answer of 2>}.
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";

const [url, token, seconds] = process.argv.slice(2);
const command = `sleep ${seconds}; echo done after ${seconds}`;

async function connect() {
  const client = new Client({ name: "sandgate-sdk-test", version: "1.0.0" });
  const transport = new StreamableHTTPClientTransport(new URL(url), {
    requestInit: { headers: { Authorization: `Bearer ${token}` } },
  });
  await client.connect(transport);
  client.done = async () => {
    await transport.terminateSession(); // DELETE: the server forgets the session
    await client.close();
  };
  return client;
}

const text = (res) => JSON.parse(res.content[0].text);

async function direct() {
  const client = await connect();
  const progress = [];
  const res = await client.callTool(
    { name: "run_command", arguments: { command, wait_s: Number(seconds) + 60 } },
    undefined,
    { onprogress: (p) => progress.push(p), resetTimeoutOnProgress: true, timeout: 60_000 },
  );
  await client.done();
  return { result: text(res), progress: progress.length };
}

async function promoted() {
  const client = await connect();
  // A session of its own: the default one runs the other call (one execution at a time).
  const session = text(await client.callTool({ name: "new_sandbox_session", arguments: { name: "promoted" } }));
  const first = text(await client.callTool({
    name: "run_command", arguments: { command, sandbox_session_id: session.sandbox_session_id },
  }));
  let collected = first;
  while (first.task_id && !collected.result) {
    await new Promise((r) => setTimeout(r, 2000));
    collected = text(await client.callTool({ name: "check_sandbox_task", arguments: { task_id: first.task_id } }));
  }
  await client.done();
  return { first, collected };
}

const [d, p] = await Promise.all([direct(), promoted()]);
console.log(JSON.stringify({ direct: d.result, progress: d.progress, promoted: p.first, collected: p.collected }));
