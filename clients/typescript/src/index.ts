// The TypeScript client of a Sandgate gateway.
//
// `api` is an openapi-fetch client typed by the paths generated from openapi.yaml
// (src/schema.ts): every operation, with typed parameters, bodies and answers. The helpers
// around it do what a generated client does badly: raw file bodies (never JSON-encoded),
// event streams of executions (an async iterator that resumes with Last-Event-ID), standard
// input, and problem answers as a SandgateError.

import createClient, { type Client, type Middleware } from "openapi-fetch";
import { createParser, type EventSourceMessage } from "eventsource-parser";
import type { components, paths } from "./schema.js";

export type { components, paths, operations } from "./schema.js";

type S = components["schemas"];
export type Principal = S["Principal"];
export type Profile = S["Profile"];
export type Session = S["Session"];
export type CreateSessionRequest = S["CreateSessionRequest"];
export type CommandRequest = S["CommandRequest"];
export type CodeRequest = S["CodeRequest"];
export type RunRequest = S["RunRequest"];
export type ExecutionResult = S["ExecutionResult"];
export type Task = S["Task"];
export type TaskStatus = S["TaskStatus"];
export type Process = S["Process"];
export type OutputChunk = S["OutputChunk"];
export type OutputGap = S["OutputGap"];
export type RichResult = S["RichResult"];
export type FileWritten = S["FileWritten"];
export type FileList = S["FileList"];
export type StdinWritten = S["StdinWritten"];
export type Problem = S["Problem"];

/** Stable problem type URIs start with this; the rest is the kind ("not-found"). */
export const PROBLEM_TYPE_BASE = "https://sandgate.dev/problems/";

/**
 * A refused request: the gateway's RFC 9457 problem (or, for an answer that carries none,
 * its status with the first bytes of the body as `detail`).
 */
export class SandgateError extends Error {
  /** HTTP status (or the problem's own, for an `error` stream event). */
  readonly status: number;
  /** Problem type URI; "" when the answer was no problem document. */
  readonly type: string;
  /** The type's stable suffix: "not-found", "quota", … ("" for none). */
  readonly kind: string;
  readonly title: string;
  readonly detail: string;
  readonly requestId: string;
  /** Seconds to wait before trying again (Retry-After on 429 and 503); undefined when absent. */
  readonly retryAfter: number | undefined;
  readonly problem: Problem | undefined;

  constructor(status: number, problem: Problem | undefined, fallback: string, headers?: Headers) {
    const type = problem?.type ?? "";
    const kind = type.startsWith(PROBLEM_TYPE_BASE) ? type.slice(PROBLEM_TYPE_BASE.length) : "";
    const detail = problem?.detail ?? fallback;
    super(`sandgate: ${status}${kind ? " " + kind : ""}${detail ? ": " + detail : ""}`);
    this.name = "SandgateError";
    this.status = status;
    this.type = type;
    this.kind = kind;
    this.title = problem?.title ?? "";
    this.detail = detail;
    this.requestId = problem?.request_id ?? headers?.get("X-Request-Id") ?? "";
    const ra = headers?.get("Retry-After");
    this.retryAfter = ra && /^\d+$/.test(ra) ? Number(ra) : undefined;
    this.problem = problem;
  }

  /** Whether the same request may succeed later (429, 503), after retryAfter seconds. */
  get temporary(): boolean {
    return this.status === 429 || this.status === 503;
  }
}

/** The error of a non-2xx answer whose body was read already (as openapi-fetch does). */
export function errorOf(response: Response, body: unknown): SandgateError {
  if (body && typeof body === "object" && "status" in body) {
    return new SandgateError(response.status, body as Problem, "", response.headers);
  }
  const text = typeof body === "string" ? body.slice(0, 500).trim() : "";
  return new SandgateError(response.status, undefined, text || response.statusText, response.headers);
}

async function errorFromResponse(response: Response): Promise<SandgateError> {
  const text = await response.text();
  let body: unknown = text;
  try {
    body = JSON.parse(text);
  } catch {
    // not JSON: keep the text
  }
  return errorOf(response, body);
}

/**
 * The data of an openapi-fetch answer, or its error thrown as a SandgateError:
 * `const me = await unwrap(sg.api.GET("/v1/me"))`.
 */
export async function unwrap<T>(
  call: Promise<{ data?: T; error?: unknown; response: Response }>,
): Promise<T> {
  const { data, error, response } = await call;
  if (!response.ok) throw errorOf(response, error);
  return data as T;
}

export interface SandgateOptions {
  /** The gateway's base URL, e.g. "http://localhost:8080". */
  baseUrl: string;
  /** Bearer token (an OIDC ID or access token), or a function asked before every request. */
  token?: string | (() => string | Promise<string>);
  /** A fetch implementation; default globalThis.fetch. */
  fetch?: typeof fetch;
}

/** Per-call options of the helpers. */
export interface CallOptions {
  /** `?profile=`: with session id "default", the caller's default session of that profile. */
  profile?: string;
  signal?: AbortSignal;
}

/** A raw body: sent as its bytes, never JSON-encoded. Strings are sent as UTF-8. */
export type RawBody = Blob | Uint8Array | ArrayBuffer | ReadableStream<Uint8Array> | string;

/** One event of an execution's stream (openapi.yaml, EventStream). */
export type StreamEvent =
  | { type: "task"; data: Task }
  | { type: "stdout" | "stderr"; id: string; data: OutputChunk; bytes: Uint8Array }
  | { type: "gap"; data: OutputGap }
  | { type: "rich_result"; id: string; data: RichResult }
  | { type: "result"; data: ExecutionResult }
  | { type: "error"; data: Problem; error: SandgateError };

const OCTETS = "application/octet-stream";

function base64Bytes(s: string): Uint8Array {
  const bin = atob(s);
  const out = new Uint8Array(bin.length);
  for (let i = 0; i < bin.length; i++) out[i] = bin.charCodeAt(i);
  return out;
}

/** The bytes of an output chunk (decoded from base64 when it was sent so). */
export function chunkBytes(c: OutputChunk): Uint8Array {
  return c.encoding === "base64" ? base64Bytes(c.data) : new TextEncoder().encode(c.data);
}

/** A body fetch accepts, and whether it streams (then Node's fetch needs duplex: "half"). */
function rawInit(body: RawBody): { body: BodyInit; streams: boolean } {
  if (typeof body === "string") return { body: new TextEncoder().encode(body), streams: false };
  if (body instanceof ReadableStream) return { body, streams: true };
  return { body: body as BodyInit, streams: false };
}

/**
 * An execution's event stream: an async iterator of StreamEvents, ending after the
 * `result` or `error` event. A connection that breaks before then is reopened with
 * `GET /v1/tasks/{id}/output` and Last-Event-ID (up to 5 times in a row, 0.5–8 s apart), so
 * no output is lost or repeated. Breaking out of the loop closes the connection; the task
 * goes on (cancel it with POST /v1/tasks/{id}/cancel).
 */
export class ExecutionStream implements AsyncIterable<StreamEvent> {
  /** The task's id: known once the `task` event was read (or given to followTask). */
  taskId: string;
  /** The id of the last output event read; followTask(taskId, {lastEventId}) resumes after it. */
  lastEventId: string;
  /** Connections reopened after a break. */
  reconnects = 0;

  constructor(
    private readonly open: () => Promise<Response>,
    private readonly reopen: (taskId: string, lastEventId: string) => Promise<Response>,
    taskId = "",
    lastEventId = "",
    private readonly signal?: AbortSignal,
  ) {
    this.taskId = taskId;
    this.lastEventId = lastEventId;
  }

  async *[Symbol.asyncIterator](): AsyncIterator<StreamEvent> {
    let response = await this.open();
    let failures = 0;
    for (;;) {
      if (!response.ok) throw await errorFromResponse(response);
      if (!(response.headers.get("Content-Type") ?? "").startsWith("text/event-stream") || !response.body) {
        throw new SandgateError(response.status, undefined, "the answer is no event stream", response.headers);
      }
      const queue: EventSourceMessage[] = [];
      const parser = createParser({ onEvent: (m) => queue.push(m) });
      const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
      let broke: unknown;
      try {
        for (;;) {
          let chunk: ReadableStreamReadResult<string>;
          try {
            chunk = await reader.read();
          } catch (e) {
            broke = e;
            break;
          }
          if (chunk.done) break;
          parser.feed(chunk.value);
          while (queue.length) {
            const ev = this.event(queue.shift()!);
            if (!ev) continue;
            failures = 0;
            yield ev;
            if (ev.type === "result" || ev.type === "error") return;
          }
        }
      } finally {
        reader.cancel().catch(() => {});
      }
      if (this.signal?.aborted) throw this.signal.reason;
      if (!this.taskId || failures >= 5) {
        throw new Error(`sandgate: the event stream ended before its result${broke ? `: ${String(broke)}` : ""}`);
      }
      await new Promise((r) => setTimeout(r, 500 * 2 ** failures));
      failures++;
      try {
        response = await this.reopen(this.taskId, this.lastEventId);
        if (!response.ok) {
          const err = await errorFromResponse(response);
          if (!err.temporary) throw err;
          response = new Response("", { headers: { "Content-Type": "text/event-stream" } });
          continue;
        }
        this.reconnects++;
      } catch (e) {
        if (e instanceof SandgateError || this.signal?.aborted) throw e;
        response = new Response("", { headers: { "Content-Type": "text/event-stream" } });
      }
    }
  }

  private event(m: EventSourceMessage): StreamEvent | undefined {
    const data = JSON.parse(m.data);
    switch (m.event) {
      case "task":
        if (!this.taskId) this.taskId = (data as Task).id;
        return { type: "task", data };
      case "stdout":
      case "stderr":
        if (m.id) this.lastEventId = m.id;
        return { type: m.event, id: m.id ?? "", data, bytes: chunkBytes(data) };
      case "gap":
        return { type: "gap", data };
      case "rich_result":
        if (m.id) this.lastEventId = m.id;
        return { type: "rich_result", id: m.id ?? "", data };
      case "result":
        return { type: "result", data };
      case "error":
        return { type: "error", data, error: new SandgateError(data.status ?? 0, data, "") };
      default:
        return undefined;
    }
  }

  /**
   * Reads the rest of the stream, handing output and rich results (charts, tables, the last
   * expression's value; the result has them all too) to the callbacks as they come, and
   * returns the result; an `error` event is thrown as its SandgateError.
   */
  async wait(
    handlers: { stdout?: (b: Uint8Array) => void; stderr?: (b: Uint8Array) => void; richResult?: (r: RichResult) => void } = {},
  ): Promise<ExecutionResult> {
    for await (const ev of this) {
      if (ev.type === "stdout") handlers.stdout?.(ev.bytes);
      else if (ev.type === "stderr") handlers.stderr?.(ev.bytes);
      else if (ev.type === "rich_result") handlers.richResult?.(ev.data);
      else if (ev.type === "result") return ev.data;
      else if (ev.type === "error") throw ev.error;
    }
    throw new Error("sandgate: the event stream ended before its result");
  }
}

/** A Sandgate gateway: `api` for every operation, helpers for bytes and streams. */
export class Sandgate {
  /** openapi-fetch client typed by openapi.yaml, with the bearer token on every request. */
  readonly api: Client<paths>;
  private readonly baseUrl: string;
  private readonly fetchImpl: typeof fetch;
  private readonly token: SandgateOptions["token"];

  constructor(opts: SandgateOptions) {
    this.baseUrl = opts.baseUrl.replace(/\/+$/, "");
    this.fetchImpl = opts.fetch ?? globalThis.fetch.bind(globalThis);
    this.token = opts.token;
    this.api = createClient<paths>({ baseUrl: this.baseUrl, fetch: this.fetchImpl });
    const auth: Middleware = {
      onRequest: async ({ request }) => {
        const tok = await this.bearer();
        if (tok) request.headers.set("Authorization", `Bearer ${tok}`);
        return request;
      },
    };
    this.api.use(auth);
  }

  private async bearer(): Promise<string | undefined> {
    return typeof this.token === "function" ? await this.token() : this.token;
  }

  /** A raw request to the gateway with the bearer token (for bodies openapi-fetch would JSON-encode). */
  private async send(method: string, path: string, query: Record<string, string | undefined>, init: RequestInit & { duplex?: "half" } = {}): Promise<Response> {
    const url = new URL(this.baseUrl + path);
    for (const [k, v] of Object.entries(query)) if (v !== undefined) url.searchParams.set(k, v);
    const headers = new Headers(init.headers);
    const tok = await this.bearer();
    if (tok) headers.set("Authorization", `Bearer ${tok}`);
    return this.fetchImpl(url, { ...init, method, headers });
  }

  private static filePath(sessionId: string, path: string): string {
    return `/v1/sessions/${encodeURIComponent(sessionId)}/files/${encodeURIComponent(path)}`;
  }

  /** The caller's principal. */
  me(): Promise<Principal> {
    return unwrap(this.api.GET("/v1/me"));
  }

  /**
   * Writes a file (PUT /v1/sessions/{id}/files/{path}) from raw bytes: a Blob, bytes, an
   * ArrayBuffer, a ReadableStream (streamed, chunked) or a string (UTF-8). Parent folders
   * are made; the answer gives the stored size and SHA-256.
   */
  async uploadFile(sessionId: string, path: string, body: RawBody, opts: CallOptions = {}): Promise<FileWritten> {
    const { body: b, streams } = rawInit(body);
    const res = await this.send("PUT", Sandgate.filePath(sessionId, path), { profile: opts.profile }, {
      body: b,
      headers: { "Content-Type": OCTETS },
      signal: opts.signal,
      ...(streams ? { duplex: "half" as const } : {}),
    });
    if (!res.ok) throw await errorFromResponse(res);
    return (await res.json()) as FileWritten;
  }

  /** Opens a file for reading: its bytes as a stream, as stored. */
  async openFile(sessionId: string, path: string, opts: CallOptions = {}): Promise<{ body: ReadableStream<Uint8Array>; size: number | undefined; etag: string | undefined }> {
    const res = await this.send("GET", Sandgate.filePath(sessionId, path), { profile: opts.profile }, { signal: opts.signal });
    if (!res.ok) throw await errorFromResponse(res);
    const len = res.headers.get("Content-Length");
    return {
      body: res.body ?? new ReadableStream({ start: (c) => c.close() }),
      size: len === null ? undefined : Number(len),
      etag: res.headers.get("ETag") ?? undefined,
    };
  }

  /** Reads a whole file as bytes, exactly as stored. */
  async downloadFile(sessionId: string, path: string, opts: CallOptions = {}): Promise<Uint8Array> {
    const { body } = await this.openFile(sessionId, path, opts);
    return new Uint8Array(await new Response(body).arrayBuffer());
  }

  /**
   * Sends bytes to the standard input of a running execution started with `stdin_open` or
   * `pty` (POST /v1/tasks/{id}/stdin); `eof` closes the input afterwards. A ReadableStream
   * is streamed as it comes.
   */
  async writeStdin(taskId: string, body: RawBody | undefined, opts: { eof?: boolean; signal?: AbortSignal } = {}): Promise<StdinWritten> {
    const init = body === undefined ? { body: undefined, streams: false } : rawInit(body);
    const res = await this.send("POST", `/v1/tasks/${encodeURIComponent(taskId)}/stdin`, { eof: opts.eof ? "true" : undefined }, {
      body: init.body,
      headers: { "Content-Type": OCTETS },
      signal: opts.signal,
      ...(init.streams ? { duplex: "half" as const } : {}),
    });
    if (!res.ok) throw await errorFromResponse(res);
    return (await res.json()) as StdinWritten;
  }

  private execStream(path: string, body: unknown, opts: CallOptions): ExecutionStream {
    const open = () =>
      this.send("POST", path, { profile: opts.profile }, {
        body: JSON.stringify(body),
        headers: { "Content-Type": "application/json", Accept: "text/event-stream" },
        signal: opts.signal,
      });
    return new ExecutionStream(open, (id, last) => this.outputResponse(id, last, opts.signal), "", "", opts.signal);
  }

  private outputResponse(taskId: string, lastEventId: string, signal?: AbortSignal): Promise<Response> {
    return this.send("GET", `/v1/tasks/${encodeURIComponent(taskId)}/output`, {}, {
      headers: lastEventId ? { "Last-Event-ID": lastEventId, Accept: "text/event-stream" } : { Accept: "text/event-stream" },
      signal,
    });
  }

  /** Runs a command in a session and streams its output: a `task` event, output, the result. */
  streamCommand(sessionId: string, req: CommandRequest, opts: CallOptions = {}): ExecutionStream {
    return this.execStream(`/v1/sessions/${encodeURIComponent(sessionId)}/commands`, req, opts);
  }

  /** Runs code in a session and streams its output. */
  streamCode(sessionId: string, req: CodeRequest, opts: CallOptions = {}): ExecutionStream {
    return this.execStream(`/v1/sessions/${encodeURIComponent(sessionId)}/code`, req, opts);
  }

  /** A one-off run in a fresh sandbox, streamed. */
  streamRun(req: RunRequest, opts: CallOptions = {}): ExecutionStream {
    return this.execStream("/v1/runs", req, opts);
  }

  /** Follows a task's output from the start, or after `lastEventId` (resume on any replica). */
  followTask(taskId: string, opts: { lastEventId?: string; signal?: AbortSignal } = {}): ExecutionStream {
    const last = opts.lastEventId ?? "";
    return new ExecutionStream(() => this.outputResponse(taskId, last, opts.signal), (id, l) => this.outputResponse(id, l, opts.signal), taskId, last, opts.signal);
  }

  /** Polls a task until it has finished (every 200 ms at first, at most every 2 s). */
  async waitTask(taskId: string, opts: { signal?: AbortSignal } = {}): Promise<Task> {
    let wait = 200;
    for (;;) {
      const t = await unwrap(this.api.GET("/v1/tasks/{task_id}", { params: { path: { task_id: taskId } }, signal: opts.signal }));
      if (t.finished_at) return t;
      await new Promise((r) => setTimeout(r, wait));
      if (opts.signal?.aborted) throw opts.signal.reason;
      wait = Math.min(wait * 1.5, 2000);
    }
  }
}

/** A client of the gateway at `opts.baseUrl`. */
export function createSandgateClient(opts: SandgateOptions): Sandgate {
  return new Sandgate(opts);
}
