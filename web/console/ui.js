// Small DOM and formatting helpers shared by the views. Everything is built with
// createElement and text nodes: nothing from the API is ever parsed as HTML.

const props = new Set(['value', 'checked', 'disabled', 'selected', 'hidden', 'open', 'required', 'multiple']);

/** h('tag', {attr: value, onclick: fn}, ...children) builds an element. */
export function h(tag, attrs, ...kids) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs ?? {})) {
    if (v == null || v === false) continue;
    if (k.startsWith('on') && typeof v === 'function') el.addEventListener(k.slice(2), v);
    else if (props.has(k)) el[k] = v;
    else if (k === 'class') el.className = v;
    else el.setAttribute(k, v === true ? '' : String(v));
  }
  append(el, kids);
  return el;
}

function append(el, kids) {
  for (const k of kids) {
    if (k == null || k === false) continue;
    if (Array.isArray(k)) append(el, k);
    else el.append(k instanceof Node ? k : String(k));
  }
}

/** Replaces el's children. */
export function fill(el, ...kids) {
  el.replaceChildren();
  append(el, kids);
  return el;
}

/** A labelled form field: the label wraps its control so a click or screen reader finds it. */
export function field(label, control, hint) {
  return h('label', { class: 'field' }, h('span', { class: 'label' }, label), control,
    hint && h('span', { class: 'hint' }, hint));
}

export function badge(text, kind = '', title) {
  return h('span', { class: `badge ${kind}`, title }, text);
}

const statusKinds = {
  active: 'ok', succeeded: 'ok', completed: 'ok', closed: 'muted', pending: 'info', running: 'info',
  failed: 'bad', timed_out: 'bad', lost: 'bad', cancelled: 'muted', revoked: 'bad', expired: 'muted',
};

const stateKinds = { running: 'ok', paused: 'warn', parked: 'info', none: 'muted', destroy_failed: 'bad' };
const stateTitles = {
  running: 'The sandbox runs',
  paused: 'The sandbox is frozen: files, processes and variables are kept; nothing runs until it is resumed',
  parked: 'Removed while idle: the workspace waits in a snapshot and is restored on next use (processes and variables are gone)',
  none: 'No sandbox yet (or it was reset): the next use makes one',
  destroy_failed: 'Destroying its sandbox failed: it takes no new work, and the gateway retries the removal until it is gone (destroy it again to retry now)',
};
/** A session's state (running, paused, parked, none, destroy_failed). */
export const stateBadge = (s) => badge(s ?? 'none', stateKinds[s] ?? 'muted', stateTitles[s]);
export const statusBadge = (s) => badge(s.replace('_', ' '), statusKinds[s] ?? '');

/** The isolation tier; "none" is made impossible to miss. */
export function isolationBadge(tier) {
  if (tier === 'none') {
    return badge('⚠ no isolation', 'warn', 'Code runs directly on the gateway host (local provider): development only');
  }
  return badge(`isolation: ${tier.replace('_', ' ')}`, 'ok');
}

export function announce(text) {
  const el = document.getElementById('announce');
  el.textContent = '';
  setTimeout(() => { el.textContent = text; }, 50);
}

/**
 * An error box for an ApiError (problem+json: the human `detail` first, then `type`) or any
 * other Error.
 */
export function problemBox(err) {
  const box = h('div', { class: 'problem', role: 'alert' },
    h('p', { class: 'problem-title' }, err.title || 'Error', err.status ? ` (${err.status})` : ''),
    h('p', { class: 'problem-detail' }, err.message));
  if (err.errors?.length) {
    box.append(h('ul', null, err.errors.map((e) => h('li', null, e.field ? h('code', null, e.field) : null, e.field ? ': ' : '', e.message))));
  }
  const meta = [];
  if (err.type) meta.push(h('span', null, 'type ', h('code', { class: 'problem-type' }, err.type)));
  if (err.requestId) meta.push(h('span', null, 'request ', h('code', null, err.requestId)));
  if (meta.length) box.append(h('p', { class: 'problem-meta' }, meta));
  return box;
}

/** Shows a modal confirmation; resolves true when confirmed. */
export function confirmDialog(title, text, action = 'Confirm') {
  return new Promise((resolve) => {
    const dlg = h('dialog', { class: 'confirm', 'aria-labelledby': 'confirm-title' },
      h('form', { method: 'dialog' },
        h('h2', { id: 'confirm-title' }, title),
        h('p', null, text),
        h('div', { class: 'actions' },
          h('button', { value: 'cancel', type: 'submit', class: 'secondary' }, 'Cancel'),
          h('button', { value: 'ok', type: 'submit', class: 'danger', id: 'confirm-ok' }, action))));
    dlg.addEventListener('close', () => { resolve(dlg.returnValue === 'ok'); dlg.remove(); });
    document.body.append(dlg);
    dlg.showModal();
  });
}

export function fmtBytes(n) {
  if (n == null) return '';
  if (n < 1024) return `${n} B`;
  const units = ['KiB', 'MiB', 'GiB', 'TiB'];
  let v = n;
  let i = -1;
  do { v /= 1024; i++; } while (v >= 1024 && i < units.length - 1);
  return `${v.toFixed(v < 10 ? 1 : 0)} ${units[i]}`;
}

export function fmtDuration(ms) {
  if (ms == null) return '';
  if (ms < 1000) return `${ms} ms`;
  const s = ms / 1000;
  if (s < 60) return `${s.toFixed(s < 10 ? 2 : 1)} s`;
  const m = Math.floor(s / 60);
  if (m < 60) return `${m} min ${Math.round(s % 60)} s`;
  return `${Math.floor(m / 60)} h ${m % 60} min`;
}

/** A <time> element showing a local date-time with the ISO value as its machine form. */
export function time(iso) {
  if (!iso) return '';
  const d = new Date(iso);
  return h('time', { datetime: iso, title: iso }, d.toLocaleString(undefined, { dateStyle: 'medium', timeStyle: 'medium' }));
}

/** Seconds until the session's sandbox is reset for idleness (negative: already idle). */
export function idleLeft(session, profile, now = Date.now()) {
  if (!profile || !session.last_used_at) return null;
  return profile.idle_timeout_s - (now - Date.parse(session.last_used_at)) / 1000;
}

/** What the idle sweeper does with a session of profile (its idle_action), in words. */
const idleWords = {
  reset: ['idle: workspace resets on next use', 'reset'],
  pause: ['idle: paused soon, resumed on next use', 'pause'],
  snapshot: ['idle: parked soon, files restored on next use', 'park'],
};

export function fmtIdle(left, profile, session) {
  if (session?.state === 'paused') return 'paused: not idle';
  if (session?.state === 'parked') return 'parked: files restored on next use';
  if (left == null) return 'unknown';
  const [idle, verb] = idleWords[profile?.idle_action] ?? idleWords.reset;
  if (left <= 0) return idle;
  if (verb !== 'reset') return `${fmtLeft(left)} left before ${verb}`;
  return `${fmtLeft(left)} left`;
}

function fmtLeft(left) {
  if (left < 60) return `${Math.floor(left)} s`;
  if (left < 3600) return `${Math.floor(left / 60)} min ${Math.floor(left % 60)} s`;
  return `${Math.floor(left / 3600)} h ${Math.floor((left % 3600) / 60)} min`;
}


/**
 * Wraps a table for narrow screens: there each row becomes a block whose cells are labelled
 * with their column's heading (kept up to date as rows come and go).
 */
export function tableWrap(table) {
  const heads = () => [...table.querySelectorAll('thead th')].map((th) => th.textContent);
  const label = () => {
    const names = heads();
    for (const tr of table.querySelectorAll('tbody tr')) {
      [...tr.children].forEach((td, i) => { if (!td.hasAttribute('colspan')) td.dataset.label = names[i] ?? ''; });
    }
  };
  new MutationObserver(label).observe(table, { childList: true, subtree: true });
  label();
  return h('div', { class: 'table-wrap' }, table);
}

/** One label: value pair of a <dl>, grouped so that the two stay together on a line. */
export const fact = (label, value, attrs) => h('div', null, h('dt', null, label), h('dd', attrs, value));

export const shortId = (id) => (id && id.length > 12 ? `${id.slice(0, 8)}…` : id);

/** Parses "k=v, k2=v2" into an object; throws on a malformed pair. */
export function parseLabels(text) {
  const out = {};
  for (const part of text.split(',').map((s) => s.trim()).filter(Boolean)) {
    const i = part.indexOf('=');
    if (i <= 0) throw new Error(`label "${part}" is not key=value`);
    out[part.slice(0, i).trim()] = part.slice(i + 1).trim();
  }
  return out;
}

/** Copies text to the clipboard; falls back to selecting the text of el (an input or any element) and the copy command. */
export async function copyText(text, el) {
  try {
    await navigator.clipboard.writeText(text);
    return true;
  } catch {
    el.focus();
    if (typeof el.select === 'function') {
      el.select();
    } else {
      const range = document.createRange();
      range.selectNodeContents(el);
      getSelection().removeAllRanges();
      getSelection().addRange(range);
    }
    return document.execCommand('copy');
  }
}
