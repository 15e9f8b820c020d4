// Rendering of execution results and tasks, shared by the session runner and the task pages.

import { h, fill, fact, badge, statusBadge, fmtBytes, fmtDuration, time } from './ui.js';
import { chunkText } from './stream.js';

/** Notices the gateway attached to results (e.g. "the session was idle and reset"), by session. */
export const sessionNotices = new Map();

function pane(name, text, bytes, truncated, encoding) {
  const kept = text ?? '';
  return h('section', { class: `pane ${name}`, 'aria-label': name },
    h('header', null,
      h('h3', null, name),
      h('span', { class: 'muted' }, fmtBytes(bytes)),
      truncated && badge('truncated', 'warn', `The middle was dropped: ${bytes} bytes were written; head and tail are kept`),
      encoding === 'base64' && badge('base64', 'info', 'The output is not UTF-8; it is shown base64-encoded')),
    kept === '' ? h('p', { class: 'empty muted' }, `no ${name}`)
      : h('pre', { id: name, tabindex: '0' }, kept),
    truncated && h('p', { class: 'truncation', role: 'note' }, `⋯ middle truncated: ${fmtBytes(bytes)} written in total, head and tail shown`));
}

// Rich results of code (the last expression's value, displays, charts, tables), each shown in
// the richest form the page can show without letting it act: images as <img> from data: URLs
// (an SVG in an <img> runs no script and loads nothing), HTML in a sandboxed frame (no
// scripts, no same origin, no forms; its own Content-Security-Policy allows no network, only
// inline styles and data: images — and the page's own policy applies to it as well), other
// forms as text. Nothing of a result is ever parsed as HTML in this page.

/** The HTML document a text/html result is shown as, in a sandboxed frame. */
function frameDoc(html) {
  return '<!doctype html><meta charset="utf-8">'
    + '<meta http-equiv="Content-Security-Policy" content="default-src \'none\'; style-src \'unsafe-inline\'; img-src data:">'
    + '<style>body{margin:0.5rem;font:13px system-ui,sans-serif;color:#1d2330}'
    + 'table{border-collapse:collapse}th,td{border:1px solid #d5d9e0;padding:0.2rem 0.5rem;text-align:right}'
    + 'thead th{background:#eef1f5}</style>' + html;
}

const utf8Base64 = (text) => {
  const bytes = new TextEncoder().encode(text);
  let bin = '';
  for (let i = 0; i < bytes.length; i += 0x8000) bin += String.fromCharCode(...bytes.subarray(i, i + 0x8000));
  return btoa(bin);
};

/** The node that shows one rich result's data: the richest form it has. */
function richView(data, i) {
  const str = (t) => (typeof data[t] === 'string' ? data[t] : null);
  for (const t of ['image/png', 'image/jpeg']) {
    if (str(t)) return h('img', { class: 'rich-image', src: `data:${t};base64,${str(t)}`, alt: str('text/plain') ?? `result ${i + 1} (${t})`, 'data-type': t });
  }
  if (str('image/svg+xml')) {
    return h('img', { class: 'rich-image', src: `data:image/svg+xml;base64,${utf8Base64(str('image/svg+xml'))}`, alt: str('text/plain') ?? `result ${i + 1} (SVG)`, 'data-type': 'image/svg+xml' });
  }
  if (str('text/html')) {
    return h('iframe', {
      class: 'rich-html', sandbox: '', referrerpolicy: 'no-referrer', srcdoc: frameDoc(str('text/html')),
      title: `result ${i + 1} (HTML)`, 'data-type': 'text/html', onload: (e) => { e.target.dataset.loaded = 'true'; },
    });
  }
  for (const t of ['text/plain', 'text/markdown', 'text/latex']) {
    if (str(t) != null) return h('pre', { class: 'rich-text', tabindex: '0', 'data-type': t }, str(t));
  }
  if (data['application/json'] !== undefined) {
    return h('pre', { class: 'rich-text', tabindex: '0', 'data-type': 'application/json' }, JSON.stringify(data['application/json'], null, 2));
  }
  return h('p', { class: 'muted' }, `no form this page can show (${Object.keys(data).join(', ')})`);
}

/** One rich result: labelled Out (the last expression's value) or display, then its view. */
function richResult(r, i) {
  const types = r.dropped ? r.dropped.types : Object.keys(r.data ?? {}).sort();
  return h('figure', { class: `rich-result${r.is_main_result ? ' main' : ''}`, 'data-index': String(i) },
    h('figcaption', null,
      h('span', { class: 'rich-label' }, r.is_main_result ? 'Out' : 'display'),
      h('span', { class: 'muted' }, types.join(' · '))),
    r.dropped
      ? h('p', { class: 'truncation', role: 'note' }, `dropped: ${fmtBytes(r.dropped.bytes)}, over the output limit (sandbox.max_output_bytes)`)
      : richView(r.data ?? {}, i));
}

/** The rich results section of a result (null without any); live ones grow with add(r). */
export function richResults(results = []) {
  const list = h('div', { class: 'rich-list' });
  const node = h('section', { class: 'rich-results', id: 'rich-results', 'aria-label': 'results', hidden: results.length === 0 },
    h('h3', null, 'results'), list);
  let n = 0;
  const add = (r) => { list.append(richResult(r, n++)); node.hidden = false; };
  results.forEach(add);
  return { node, add };
}

/** An ExecutionResult: status, exit code, duration, both streams with truncation marks. */
export function renderResult(r) {
  if (r.notice) sessionNotices.set(r.session_id, r.notice);
  const exit = r.exit_code == null ? '—' : String(r.exit_code);
  return h('div', { class: 'result-body' },
    r.notice && h('p', { class: 'notice', role: 'status' }, r.notice),
    h('dl', { class: 'facts inline' },
      fact('status', statusBadge(r.status)),
      fact('exit code', exit, { id: 'exit-code', class: r.exit_code === 0 ? 'ok' : 'bad' }),
      r.signal && fact('signal', r.signal),
      fact('duration', fmtDuration(r.duration_ms), { id: 'duration' }),
      r.task_id && fact('task', h('a', { href: `#/tasks/${r.task_id}` }, r.task_id.slice(0, 8)))),
    r.warnings?.length > 0 && h('ul', { class: 'warnings' }, r.warnings.map((w) => h('li', null, w))),
    h('div', { class: 'panes' },
      pane('stdout', r.stdout, r.stdout_bytes, r.stdout_truncated, r.encoding),
      pane('stderr', r.stderr, r.stderr_bytes, r.stderr_truncated, r.encoding)),
    r.results?.length > 0 && richResults(r.results).node);
}

/**
 * The output of a running execution as it streams in: stdout and stderr panes that grow with
 * each event, a mark where the middle of a long stream was dropped, and the rich results of
 * code as they come. add(event) takes the stream's stdout, stderr, gap and rich_result events.
 */
export function liveOutput() {
  const pre = {
    stdout: h('pre', { id: 'live-stdout', tabindex: '0' }),
    stderr: h('pre', { id: 'live-stderr', tabindex: '0' }),
  };
  const bytes = { stdout: 0, stderr: 0 };
  const size = { stdout: h('span', { class: 'muted' }), stderr: h('span', { class: 'muted' }) };
  const section = (name) => h('section', { class: `pane ${name}`, 'aria-label': `${name} (live)` },
    h('header', null, h('h3', null, name), size[name], badge('live', 'info', 'Output as the program writes it')), pre[name]);
  const rich = richResults();
  const node = h('div', { id: 'live-output' }, h('div', { class: 'panes live' }, section('stdout'), section('stderr')), rich.node);
  const add = (ev) => {
    if (ev.event === 'rich_result') {
      rich.add(ev.data);
      return;
    }
    const name = ev.event === 'gap' ? ev.data.stream : ev.event;
    if (!pre[name]) return;
    const atEnd = pre[name].scrollTop + pre[name].clientHeight >= pre[name].scrollHeight - 4;
    if (ev.event === 'gap') {
      pre[name].append(h('span', { class: 'truncation' }, `\n⋯ ${fmtBytes(ev.data.to - ev.data.from)} dropped here (the middle of a long output) ⋯\n`));
      bytes[name] = ev.data.to;
    } else {
      pre[name].append(chunkText(ev.data));
      const n = ev.data.encoding === 'base64' ? atob(ev.data.data).length : new TextEncoder().encode(ev.data.data).length;
      bytes[name] = ev.data.offset + n;
    }
    fill(size[name], fmtBytes(bytes[name]));
    if (atEnd) pre[name].scrollTop = pre[name].scrollHeight;
  };
  return { node, add };
}

export const finished = (task) => Boolean(task.finished_at);

/** A finished task's outcome: its result, or its error when it has none. */
export function renderTaskOutcome(task) {
  if (task.result) return renderResult(task.result);
  return h('div', { class: 'problem', role: 'alert' },
    h('p', { class: 'problem-title' }, `Task ${task.status.replace('_', ' ')}`),
    h('p', { class: 'problem-detail' }, task.error || 'The task ended without a result.'),
    task.error_type && h('p', { class: 'problem-meta' }, 'type ', h('code', null, task.error_type)));
}

export function taskFacts(t) {
  return h('dl', { class: 'facts' },
    h('dt', null, 'status'), h('dd', { id: 'task-status' }, statusBadge(t.status)),
    h('dt', null, 'operation'), h('dd', null, t.operation.replace('_', ' '), t.background && [' ', badge('background process', 'info')]),
    t.program && [h('dt', null, t.operation === 'execute_code' ? 'code' : 'command'), h('dd', null, h('pre', { id: 'task-program', class: 'program' }, t.program))],
    t.pid && [h('dt', null, 'pid'), h('dd', null, String(t.pid))],
    h('dt', null, 'session'), h('dd', null, h('a', { href: `#/sessions/${t.session_id}` }, t.session_id)),
    h('dt', null, 'profile'), h('dd', null, t.profile),
    h('dt', null, 'submitted'), h('dd', null, time(t.submitted_at)),
    t.started_at && [h('dt', null, 'started'), h('dd', null, time(t.started_at))],
    t.finished_at && [h('dt', null, 'finished'), h('dd', null, time(t.finished_at))],
    t.expires_at && [h('dt', null, 'kept until'), h('dd', null, time(t.expires_at))],
    t.notice && [h('dt', null, 'notice'), h('dd', null, t.notice)]);
}
