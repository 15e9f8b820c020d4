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
      pane('stderr', r.stderr, r.stderr_bytes, r.stderr_truncated, r.encoding)));
}

/**
 * The output of a running execution as it streams in: stdout and stderr panes that grow with
 * each event, a mark where the middle of a long stream was dropped. add(event) takes the
 * stream's stdout, stderr and gap events.
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
  const node = h('div', { class: 'panes live', id: 'live-output' }, section('stdout'), section('stderr'));
  const add = (ev) => {
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
