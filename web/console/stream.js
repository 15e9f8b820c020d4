// Server-sent events over fetch: EventSource can neither send a bearer token nor POST a body.
// An execution's output streams as `task`, `stdout`/`stderr` (with ids: the position after
// the event), `gap`, `rich_result` (code's charts and tables, as they come), and one closing
// `result` or `error` event (openapi.yaml, EventStream).

import { send, ApiError } from './api.js';

/** Parses a text/event-stream body into {id, event, data} objects (comments skipped). */
async function* parse(res, signal) {
  const reader = res.body.pipeThrough(new TextDecoderStream()).getReader();
  const stop = () => reader.cancel().catch(() => {});
  signal?.addEventListener('abort', stop, { once: true });
  let buf = '';
  let ev = { id: '', event: 'message', data: [] };
  try {
    for (;;) {
      const { value, done } = await reader.read();
      if (done) return;
      buf += value;
      let nl;
      while ((nl = buf.indexOf('\n')) >= 0) {
        const line = buf.slice(0, nl).replace(/\r$/, '');
        buf = buf.slice(nl + 1);
        if (line === '') {
          if (ev.data.length) yield { id: ev.id, event: ev.event, data: JSON.parse(ev.data.join('\n')) };
          ev = { id: '', event: 'message', data: [] };
        } else if (!line.startsWith(':')) {
          const i = line.indexOf(':');
          const field = i < 0 ? line : line.slice(0, i);
          const v = i < 0 ? '' : line.slice(i + 1).replace(/^ /, '');
          if (field === 'data') ev.data.push(v);
          else if (field === 'event') ev.event = v;
          else if (field === 'id') ev.id = v;
        }
      }
    }
  } finally {
    signal?.removeEventListener('abort', stop);
  }
}

const sleep = (ms, signal) => new Promise((resolve) => {
  const id = setTimeout(resolve, ms);
  signal?.addEventListener('abort', () => { clearTimeout(id); resolve(); }, { once: true });
});

/**
 * Streams an execution's events to on(event): with a request (method, path, json) the
 * execution is submitted with Accept: text/event-stream; with taskId an existing task is
 * followed. A stream that breaks before its end resumes from the last event id (a position,
 * valid on any replica). Resolves with the closing result (or rejects with the error event's
 * problem as an ApiError).
 */
export async function stream({ method = 'GET', path, json, taskId, signal, on }) {
  let after = '';
  let attempts = 0;
  for (;;) {
    let res;
    try {
      res = taskId
        ? await send('GET', `/v1/tasks/${taskId}/output`, { signal, accept: 'text/event-stream', headers: after ? { 'Last-Event-ID': after } : undefined })
        : await send(method, path, { json, signal, accept: 'text/event-stream' });
    } catch (e) {
      if (e.name === 'AbortError' || !(e instanceof ApiError) || e.status !== 0 || !taskId || ++attempts > 5) throw e;
      await sleep(1000 * attempts, signal);
      continue;
    }
    try {
      for await (const ev of parse(res, signal)) {
        attempts = 0;
        if (ev.event === 'task') taskId = ev.data.id;
        if (ev.id) after = ev.id;
        on(ev);
        if (ev.event === 'result') return ev.data;
        if (ev.event === 'error') throw new ApiError(ev.data.status ?? 500, ev.data);
      }
    } catch (e) {
      if (e instanceof ApiError || e.name === 'AbortError' || signal?.aborted) throw e;
    }
    if (signal?.aborted) throw new DOMException('aborted', 'AbortError');
    if (!taskId || ++attempts > 5) throw new ApiError(0, { title: 'Network error', detail: 'The output stream ended before the execution did.' });
    await sleep(500 * attempts, signal); // the connection broke: resume where it stopped
  }
}

/** The bytes of an OutputChunk as text (base64 chunks decoded, invalid UTF-8 replaced). */
export function chunkText(chunk) {
  if (chunk.encoding !== 'base64') return chunk.data;
  const bin = atob(chunk.data);
  const bytes = Uint8Array.from(bin, (c) => c.charCodeAt(0));
  return new TextDecoder().decode(bytes);
}
