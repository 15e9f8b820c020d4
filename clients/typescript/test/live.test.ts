// Live tests of the TypeScript client against a real gateway: SANDGATE_URL and
// SANDGATE_TOKEN name it (typescript_test.go starts one and runs these with node --test).
import { test } from "node:test";
import assert from "node:assert/strict";
import { createHash, randomBytes } from "node:crypto";
import http from "node:http";
import type { AddressInfo } from "node:net";

import { createSandgateClient, SandgateError, unwrap, type ExecutionResult, type RichResult, type StreamEvent } from "../src/index.js";

const baseUrl = process.env.SANDGATE_URL ?? "";
const token = process.env.SANDGATE_TOKEN ?? "";
assert.ok(baseUrl && token, "SANDGATE_URL and SANDGATE_TOKEN must be set");

const sg = createSandgateClient({ baseUrl, token });

async function newSession(name: string): Promise<string> {
  const s = await unwrap(sg.api.POST("/v1/sessions", { body: { name } }));
  return s.id;
}

async function destroy(id: string): Promise<void> {
  await unwrap(sg.api.DELETE("/v1/sessions/{session_id}", { params: { path: { session_id: id } } }));
}

test("session and command: a non-zero exit is a result", async () => {
  const me = await sg.me();
  assert.equal(me.username, "ts-user");
  const sid = await newSession("ts-command");
  const { data, response } = await sg.api.POST("/v1/sessions/{session_id}/commands", {
    params: { path: { session_id: sid } },
    body: { command: "echo out; echo err >&2; exit 3" },
  });
  assert.equal(response.status, 200);
  const r = data as { stdout: string; stderr: string; exit_code?: number | null };
  assert.equal(r.stdout, "out\n");
  assert.equal(r.stderr, "err\n");
  assert.equal(r.exit_code, 3);
  const list = await unwrap(sg.api.GET("/v1/sessions"));
  assert.ok(list.sessions.some((s) => s.id === sid));
  await destroy(sid);
  const gone = sg.api.GET("/v1/sessions/{session_id}", { params: { path: { session_id: sid } } });
  await assert.rejects(unwrap(gone), (e: unknown) => e instanceof SandgateError && e.kind === "not-found" && e.status === 404);
});

test("stateful code keeps its variables between calls", async () => {
  const sid = await newSession("ts-code");
  const path = { params: { path: { session_id: sid } } };
  await unwrap(sg.api.POST("/v1/sessions/{session_id}/code", { ...path, body: { code: "answer = 6*7" } }));
  const r = await unwrap(sg.api.POST("/v1/sessions/{session_id}/code", { ...path, body: { code: "print(f'still here: {answer}')" } }));
  assert.equal((r as { stdout: string }).stdout, "still here: 42\n");
  // The last expression's value is the main result; displays stream as rich_result events.
  const value = (await unwrap(sg.api.POST("/v1/sessions/{session_id}/code", { ...path, body: { code: "answer" } }))) as ExecutionResult;
  assert.deepEqual(value.results, [{ is_main_result: true, data: { "text/plain": "42" } }]);
  const live: RichResult[] = [];
  const streamed = await sg.streamCode(sid, { code: "display({'text/html': '<b>hi</b>'}, raw=True)\nanswer + 1" }).wait({ richResult: (x) => live.push(x) });
  assert.deepEqual(live, streamed.results);
  assert.equal(live.length, 2);
  assert.equal(live[0]?.data?.["text/html"], "<b>hi</b>");
  await destroy(sid);
});

test("binary files round trip byte-exact (bytes, Blob, stream)", async () => {
  const sid = await newSession("ts-files");
  const data = new Uint8Array(randomBytes(1 << 20));
  for (let i = 0; i < 256; i++) data[i] = i; // every byte value: no valid UTF-8
  assert.throws(() => new TextDecoder("utf-8", { fatal: true }).decode(data));
  const sha = createHash("sha256").update(data).digest("hex");

  const w = await sg.uploadFile(sid, "in/data.bin", data);
  assert.equal(w.size, data.length, "stored as sent, not JSON-encoded");
  assert.equal(w.sha256, sha);
  const back = await sg.downloadFile(sid, "in/data.bin");
  assert.deepEqual(back, data);

  await sg.uploadFile(sid, "in/blob.bin", new Blob([data]));
  assert.deepEqual(await sg.downloadFile(sid, "in/blob.bin"), data);

  let sent = 0;
  const stream = new ReadableStream<Uint8Array>({
    pull(c) {
      if (sent >= data.length) return c.close();
      c.enqueue(data.slice(sent, sent + 65536));
      sent += 65536;
    },
  });
  const sw = await sg.uploadFile(sid, "in/stream.bin", stream);
  assert.equal(sw.sha256, sha);
  const opened = await sg.openFile(sid, "in/stream.bin");
  assert.equal(opened.size, data.length);
  assert.ok(opened.etag);
  assert.deepEqual(new Uint8Array(await new Response(opened.body).arrayBuffer()), data);

  const r = await unwrap(sg.api.POST("/v1/sessions/{session_id}/commands", {
    params: { path: { session_id: sid } },
    body: { command: "sha256sum in/data.bin | cut -d' ' -f1" },
  }));
  assert.equal((r as { stdout: string }).stdout, sha + "\n", "the sandbox sees the same bytes");

  await assert.rejects(sg.uploadFile(sid, "../escape", "x"), (e: unknown) => e instanceof SandgateError && e.kind === "policy");
  await destroy(sid);
});

test("a promoted task is polled; a running one is cancelled", async () => {
  const sid = await newSession("ts-tasks");
  const path = { params: { path: { session_id: sid } } };
  const { data, response } = await sg.api.POST("/v1/sessions/{session_id}/commands", { ...path, body: { command: "sleep 1; echo finished", wait_s: 0 } });
  assert.equal(response.status, 202);
  const task = await sg.waitTask((data as { id: string }).id);
  assert.equal(task.status, "succeeded");
  assert.equal(task.result?.stdout, "finished\n");

  const long = await sg.api.POST("/v1/sessions/{session_id}/commands", { ...path, body: { command: "sleep 60", wait_s: 0 } });
  assert.equal(long.response.status, 202);
  const id = (long.data as { id: string }).id;
  await unwrap(sg.api.POST("/v1/tasks/{task_id}/cancel", { params: { path: { task_id: id } } }));
  const cancelled = await sg.waitTask(id);
  assert.equal(cancelled.status, "cancelled");
  await destroy(sid);
});

test("output streams as it is produced, and resumes after an event id", async () => {
  const sid = await newSession("ts-stream");
  const cmd = "for i in 1 2 3; do echo step $i; sleep 0.2; done; printf '\\377\\376'; echo oops >&2";
  const stream = sg.streamCommand(sid, { command: cmd });
  const events: StreamEvent[] = [];
  for await (const ev of stream) events.push(ev);
  assert.equal(events[0]?.type, "task");
  assert.equal(events.at(-1)?.type, "result");
  const out = events.filter((e) => e.type === "stdout");
  assert.ok(out.length >= 3, `each step came as it was written: ${events.map((e) => e.type)}`);
  const stdout = Buffer.concat(out.map((e) => (e.type === "stdout" ? e.bytes : new Uint8Array())));
  assert.deepEqual(stdout, Buffer.from("step 1\nstep 2\nstep 3\n\xff\xfe", "latin1"));
  const stderr = events.filter((e) => e.type === "stderr").map((e) => (e.type === "stderr" ? new TextDecoder().decode(e.bytes) : "")).join("");
  assert.equal(stderr, "oops\n");
  const first = out[0];
  assert.ok(first && first.type === "stdout");
  assert.equal(first.id, "7-0", "event ids are byte positions");
  assert.equal(first.data.stream, "stdout", "a chunk names its stream in its data too");
  assert.ok(stream.taskId);

  const rest: Uint8Array[] = [];
  const result = await sg.followTask(stream.taskId, { lastEventId: first.id }).wait({ stdout: (b) => rest.push(b) });
  assert.equal(result.exit_code, 0);
  assert.deepEqual(Buffer.concat(rest), Buffer.from("step 2\nstep 3\n\xff\xfe", "latin1"));

  const code: string[] = [];
  const r = await sg.streamCode(sid, { code: "print('from python')" }).wait({ stdout: (b) => code.push(new TextDecoder().decode(b)) });
  assert.equal(code.join(""), "from python\n");
  assert.equal(r.exit_code, 0);

  const once: string[] = [];
  await sg.streamRun({ kind: "command", profile: "oneshot", command: "echo streamed once" }).wait({ stdout: (b) => once.push(new TextDecoder().decode(b)) });
  assert.equal(once.join(""), "streamed once\n");
  await destroy(sid);
});

test("a stream cut in the middle reconnects with Last-Event-ID, nothing lost or twice", async () => {
  // A proxy that drops the connection of the first POST stream after its first output event.
  let cuts = 0;
  const proxy = http.createServer(async (req, res) => {
    const body = await new Promise<Buffer>((r) => {
      const parts: Buffer[] = [];
      req.on("data", (c: Buffer) => parts.push(c)).on("end", () => r(Buffer.concat(parts)));
    });
    const headers = new Headers();
    for (const [k, v] of Object.entries(req.headers)) if (typeof v === "string" && k !== "host") headers.set(k, v);
    const up = await fetch(baseUrl + req.url, { method: req.method, headers, body: body.length ? new Uint8Array(body) : undefined });
    const down = Object.fromEntries(up.headers);
    delete down["content-encoding"]; // fetch has decoded the body
    delete down["content-length"];
    res.writeHead(up.status, down);
    const cut = req.method === "POST" && (up.headers.get("content-type") ?? "").startsWith("text/event-stream") && cuts === 0;
    let seen = "";
    for await (const chunk of up.body as unknown as AsyncIterable<Uint8Array>) {
      res.write(chunk);
      seen += new TextDecoder().decode(chunk);
      const i = seen.indexOf("event: stdout");
      if (cut && i >= 0 && seen.indexOf("\n\n", i) >= 0) {
        cuts++;
        // Cut once what was written has left: destroying at once would drop the head and
        // the first events too when they came in one chunk (the client would see nothing).
        await new Promise<void>((r) => res.write("", () => r()));
        res.socket?.destroy();
        return;
      }
    }
    res.end();
  });
  await new Promise<void>((r) => proxy.listen(0, "127.0.0.1", r));
  try {
    const via = createSandgateClient({ baseUrl: `http://127.0.0.1:${(proxy.address() as AddressInfo).port}`, token });
    const sid = await newSession("ts-reconnect");
    const stream = via.streamCommand(sid, { command: "for i in 1 2 3 4; do echo line $i; sleep 0.3; done" });
    const out: string[] = [];
    const result = await stream.wait({ stdout: (b) => out.push(new TextDecoder().decode(b)) });
    assert.equal(cuts, 1, "the proxy cut the stream");
    assert.equal(stream.reconnects, 1);
    assert.equal(out.join(""), "line 1\nline 2\nline 3\nline 4\n");
    assert.equal(result.exit_code, 0);
    await destroy(sid);
  } finally {
    proxy.closeAllConnections();
    proxy.close();
  }
});

test("standard input streams into a running program", async () => {
  const sid = await newSession("ts-stdin");
  const { data } = await sg.api.POST("/v1/sessions/{session_id}/commands", {
    params: { path: { session_id: sid } },
    body: { command: "tr a-z A-Z", stdin_open: true, wait_s: 0 },
  });
  const id = (data as { id: string }).id;
  const parts = ["hello ", "from ", "a stream\n"];
  const input = new ReadableStream<Uint8Array>({
    pull(c) {
      const p = parts.shift();
      if (p === undefined) c.close();
      else c.enqueue(new TextEncoder().encode(p));
    },
  });
  const w = await sg.writeStdin(id, input, { eof: true });
  assert.equal(w.bytes, "hello from a stream\n".length);
  assert.equal(w.closed, true);
  const task = await sg.waitTask(id);
  assert.equal(task.result?.stdout, "HELLO FROM A STREAM\n");
  await assert.rejects(sg.writeStdin(id, "late"), (e: unknown) => e instanceof SandgateError && e.kind === "conflict");
  await destroy(sid);
});

test("problems are SandgateErrors with kind, detail and request id", async () => {
  const anon = createSandgateClient({ baseUrl });
  await assert.rejects(anon.me(), (e: unknown) => e instanceof SandgateError && e.status === 401 && e.kind === "unauthenticated" && e.detail !== "" && e.requestId !== "");
  const { error, response } = await sg.api.GET("/v1/tasks/{task_id}", { params: { path: { task_id: "0123456789abcdef0123456789abcdef" } } });
  assert.equal(response.status, 404);
  assert.equal(error?.type, "https://sandgate.dev/problems/not-found");
});
