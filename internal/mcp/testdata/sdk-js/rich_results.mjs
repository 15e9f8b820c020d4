// Runs code whose results are a chart and a table through the official TypeScript SDK (which
// checks the structured result against run_code's output schema) and prints what the agent
// receives: the content items and the structured result.
//
//   node rich_results.mjs <mcp url> <bearer token>
//
// Prints one JSON line: {"content": [{type, mimeType?, data?, text?}], "structured": {...}}.
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";

const [url, token] = process.argv.slice(2);
const client = new Client({ name: "sandgate-sdk-rich-results", version: "1.0.0" });
const transport = new StreamableHTTPClientTransport(new URL(url), {
  requestInit: { headers: { Authorization: `Bearer ${token}` } },
});
await client.connect(transport);
await client.listTools(); // caches the output schemas the SDK validates with

const code = [
  "import matplotlib.pyplot as plt",
  "plt.figure(figsize=(4, 3))",
  "plt.plot([1, 2, 3], [1, 4, 9])",
  "plt.title('squares')",
  "plt.show()",
  "6 * 7",
].join("\n");
const res = await client.callTool({ name: "run_code", arguments: { code } });

await transport.terminateSession();
await client.close();
console.log(JSON.stringify({ content: res.content, structured: res.structuredContent, isError: !!res.isError }));
