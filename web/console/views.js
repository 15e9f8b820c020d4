// The list views: profiles, sessions, tasks (and one task), and the signed-in principal.

import { call, get, profiles, profileMap } from './api.js';
import { auth } from './auth.js';
import {
  h, fill, field, badge, statusBadge, stateBadge, isolationBadge, problemBox, confirmDialog, announce, time,
  idleLeft, fmtIdle, fmtDuration, fmtBytes, tableWrap, shortId, parseLabels,
} from './ui.js';
import { sessionNotices, renderTaskOutcome, taskFacts, finished, liveOutput } from './result.js';
import { stream } from './stream.js';

const yesNo = (v) => (v ? badge('yes', 'ok') : badge('no', 'muted'));

// ---- profiles ----

export async function profilesView({ el, signal }) {
  fill(el, h('h1', null, 'Profiles'), h('p', { class: 'lead' }, 'The workload profiles you may use, and what each one enforces.'));
  const list = await profiles(signal);
  if (!list.length) {
    el.append(h('p', { class: 'muted' }, 'No profile admits you. Ask an operator to add one of your groups to a profile\'s allowed_groups.'));
    return;
  }
  el.append(h('div', { class: 'cards', id: 'profiles' }, list.map(profileCard)));
}

function profileCard(p) {
  const c = p.capabilities;
  const pol = p.policy;
  const caps = ['shell', 'files', 'package_install', 'stateful', 'attach', 'provisions', 'attaches_external', 'principal_user', 'policy_network', 'policy_filesystem', 'policy_resources', 'policy_disk', 'pause', 'snapshots', 'preview_ports'];
  return h('article', { class: `card profile${p.isolation === 'none' ? ' unisolated' : ''}`, 'data-profile': p.name },
    h('header', null,
      h('h2', null, p.name),
      p.default && badge('default', 'info'),
      badge(p.scope.replace('_', ' ')),
      isolationBadge(p.isolation)),
    p.isolation === 'none' && h('p', { class: 'warning', role: 'note' },
      h('strong', null, 'No isolation. '), `The ${p.provider} provider runs code directly on the gateway host, as the gateway's user. Use it for development only.`),
    h('dl', { class: 'facts' },
      h('dt', null, 'provider'), h('dd', null, h('code', null, p.provider)),
      h('dt', null, 'environment'), h('dd', null, p.environment),
      h('dt', null, 'identity'), h('dd', null, p.identity_mode === 'user' ? 'user: runs with your credentials' : 'agent: runs as the gateway\'s own identity'),
      h('dt', null, 'idle timeout'), h('dd', null, fmtDuration(p.idle_timeout_s * 1000)),
      h('dt', null, 'when idle'), h('dd', null, idleActions[p.idle_action] ?? p.idle_action, p.auto_resume ? '; a paused session resumes on use' : ''),
      p.allowed_groups?.length > 0 && [h('dt', null, 'groups'), h('dd', null, p.allowed_groups.join(', '))]),
    h('h3', null, 'Policy'),
    h('dl', { class: 'facts' },
      h('dt', null, 'network egress'), h('dd', null, pol.network_egress, pol.network_allow?.length ? `: ${pol.network_allow.join(', ')}` : ''),
      h('dt', null, 'read paths'), h('dd', null, pol.fs_allow_read?.join(', ') || '—'),
      h('dt', null, 'write paths'), h('dd', null, pol.fs_allow_write?.join(', ') || '—'),
      pol.cpu != null && [h('dt', null, 'cpu'), h('dd', null, `${pol.cpu} cores`)],
      pol.memory_mb != null && [h('dt', null, 'memory'), h('dd', null, `${pol.memory_mb} MB`)],
      pol.disk_mb != null && [h('dt', null, 'workspace size'), h('dd', null, `${pol.disk_mb} MB`)],
      h('dt', null, 'timeout'), h('dd', null, `${pol.timeout_s} s`),
      h('dt', null, 'strict'), h('dd', null, pol.strict ? 'yes: refuse what cannot be enforced' : 'no: warn and run')),
    h('h3', null, 'Capabilities'),
    h('p', null, 'Languages: ', c.languages?.length ? c.languages.map((l) => h('code', { class: 'chip' }, l)) : '—'),
    h('ul', { class: 'caps' }, caps.map((k) => h('li', null, h('span', null, k.replace(/_/g, ' ')), yesNo(c[k])))),
    p.scope === 'per_session' && h('p', null, h('a', { class: 'button secondary', href: `#/sessions?profile=${encodeURIComponent(p.name)}` }, 'New session on ', p.name)));
}

const idleActions = {
  reset: 'reset: the workspace is discarded',
  pause: 'pause: frozen, resumed on next use',
  snapshot: 'snapshot: files kept in a snapshot, restored on next use',
};

// ---- sessions ----

/** A session's labels as key=value chips, sorted by key; nothing for none. */
export function labelChips(labels) {
  const entries = Object.entries(labels ?? {}).sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0));
  if (!entries.length) return null;
  return h('div', { class: 'labels', 'aria-label': 'Labels' }, entries.map(([k, v]) => h('span', { class: 'chip label', title: `label ${k}` }, `${k}=${v}`)));
}

export async function sessionsView({ el, query, signal }) {
  const profs = await profileMap(signal);
  const creatable = [...profs.values()].filter((p) => p.scope === 'per_session');
  const wanted = query.get('profile');

  const createStatus = h('div');
  const profileSel = h('select', { id: 'new-session-profile', name: 'profile' },
    creatable.map((p) => h('option', { value: p.name, selected: wanted ? p.name === wanted : p.default },
      p.name, p.isolation === 'none' ? ' (no isolation)' : '')));
  const nameIn = h('input', { id: 'new-session-name', name: 'name', maxlength: 200, autocomplete: 'off' });
  const labelsIn = h('input', { id: 'new-session-labels', name: 'labels', autocomplete: 'off', placeholder: 'key=value, …' });
  const create = creatable.length
    ? h('form', { class: 'card create', id: 'create-session-form', 'aria-labelledby': 'create-h' },
      h('h2', { id: 'create-h' }, 'New session'),
      h('div', { class: 'row' }, field('Profile', profileSel), field('Name', nameIn, 'optional'), field('Labels', labelsIn, 'optional')),
      h('button', { type: 'submit', class: 'primary', id: 'create-session' }, 'Create session'),
      createStatus)
    : h('p', { class: 'muted' }, 'None of your profiles has scope per_session, so there is no session to create here.');
  if (creatable.length) create.addEventListener('submit', async (ev) => {
    ev.preventDefault();
    fill(createStatus);
    try {
      const body = { profile: profileSel.value };
      if (nameIn.value.trim()) body.name = nameIn.value.trim();
      const labels = parseLabels(labelsIn.value);
      if (Object.keys(labels).length) body.labels = labels;
      const s = await call('POST', '/v1/sessions', { json: body, signal });
      announce(`Session ${s.name || s.id} created`);
      location.hash = `#/sessions/${s.id}`;
    } catch (e) {
      if (e.name !== 'AbortError') fill(createStatus, problemBox(e));
    }
  });

  const statusSel = h('select', { id: 'session-status-filter' },
    h('option', { value: '' }, 'any'), h('option', { value: 'active', selected: true }, 'active'), h('option', { value: 'closed' }, 'closed'));
  const tbody = h('tbody');
  const listStatus = h('div');
  const more = h('button', { type: 'button', class: 'secondary', hidden: true }, 'Load more');
  const rows = []; // [{session, cell}] for the idle ticker
  let cursor = '';

  async function load(reset) {
    fill(listStatus);
    if (reset) {
      tbody.replaceChildren();
      rows.length = 0;
      cursor = '';
    }
    try {
      const page = await get('/v1/sessions', { status: statusSel.value, cursor, limit: 50 }, signal);
      for (const s of page.sessions) tbody.append(sessionRow(s));
      cursor = page.next_cursor;
      more.hidden = !cursor;
      if (!tbody.children.length) tbody.append(h('tr', null, h('td', { colspan: 6, class: 'muted' }, 'No sessions yet.')));
    } catch (e) {
      if (e.name !== 'AbortError') fill(listStatus, problemBox(e));
    }
  }

  function sessionRow(s) {
    const p = profs.get(s.profile);
    const idleCell = h('td', { class: 'idle' });
    const row = h('tr', { 'data-session': s.id },
      h('td', null,
        h('a', { href: `#/sessions/${s.id}` }, s.name || shortId(s.id)),
        s.default && badge('default', 'info'), s.shared && badge('shared', 'info'),
        h('div', { class: 'muted small' }, h('code', null, s.id)),
        labelChips(s.labels),
        sessionNotices.has(s.id) && h('div', { class: 'notice small' }, sessionNotices.get(s.id))),
      h('td', null, s.profile, ' ', p && p.isolation === 'none' && isolationBadge('none')),
      h('td', null, statusBadge(s.status), ' ', stateBadge(s.state)),
      h('td', null, time(s.last_used_at)),
      idleCell,
      h('td', { class: 'actions' },
        (s.status === 'active' || s.state === 'destroy_failed') && !s.shared && h('button', {
          type: 'button', class: 'danger small', 'aria-label': `Destroy session ${s.name || s.id}`,
          title: s.state === 'destroy_failed' ? `Retry now: ${s.destroy_error ?? ''}` : null,
          onclick: () => destroy(s, row),
        }, 'Destroy')));
    rows.push({ s, p, cell: idleCell });
    tick();
    return row;
  }

  async function destroy(s, row) {
    if (!await confirmDialog('Destroy session?', `The sandbox of ${s.name || s.id} and all its files are deleted.`, 'Destroy')) return;
    try {
      const d = await call('DELETE', `/v1/sessions/${s.id}`, { signal });
      if (d?.destroyed === false) {
        // 202: kept, closed, and retried by the gateway; the notice says why.
        fill(listStatus, h('p', { class: 'notice', role: 'status' }, d.notice));
        announce('Session not destroyed yet: the gateway retries');
        return;
      }
      row.remove();
      announce('Session destroyed');
    } catch (e) {
      if (e.name !== 'AbortError') fill(listStatus, problemBox(e));
    }
  }

  function tick() {
    for (const { s, p, cell } of rows) {
      const left = s.status === 'active' ? idleLeft(s, p) : null;
      cell.textContent = s.status === 'active' ? fmtIdle(left, p, s) : '—';
      cell.classList.toggle('bad', left != null && left <= 0 && s.state !== 'paused');
    }
  }
  const timer = setInterval(tick, 1000);
  signal.addEventListener('abort', () => clearInterval(timer));

  statusSel.addEventListener('change', () => load(true));
  more.addEventListener('click', () => load(false));

  fill(el, h('h1', null, 'Sessions'),
    h('p', { class: 'lead' }, 'Sandboxes you own (and shared ones). A session unused for its profile\'s idle timeout is reset, paused or parked, as its profile says.'),
    create,
    h('section', { id: 'sessions-view', 'aria-labelledby': 'list-h' },
      h('div', { class: 'toolbar' }, h('h2', { id: 'list-h' }, 'Your sessions'), field('Status', statusSel)),
      tableWrap(h('table', { id: 'sessions' },
        h('thead', null, h('tr', null, ['Session', 'Profile', 'Status', 'Last used', 'Idle time left', ''].map((t) => h('th', { scope: 'col' }, t)))),
        tbody)),
      more, listStatus));
  await load(true);
}

// ---- snapshots ----

export async function snapshotsView({ el, query, signal }) {
  const session = query.get('session') ?? '';
  const tbody = h('tbody');
  const status = h('div', { id: 'snapshots-status', 'aria-live': 'polite' });
  const more = h('button', { type: 'button', class: 'secondary', hidden: true }, 'Load more');
  let cursor = '';

  async function load(reset) {
    if (reset) {
      tbody.replaceChildren();
      cursor = '';
    }
    try {
      const page = await get('/v1/snapshots', { session_id: session, cursor, limit: 50 }, signal);
      for (const snap of page.snapshots) tbody.append(row(snap));
      cursor = page.next_cursor;
      more.hidden = !cursor;
      if (!tbody.children.length) tbody.append(h('tr', null, h('td', { colspan: 6, class: 'muted' }, 'No snapshots yet: take one from a session\'s page.')));
    } catch (e) {
      if (e.name !== 'AbortError') fill(status, problemBox(e));
    }
  }

  function row(snap) {
    const fork = h('button', { type: 'button', class: 'primary small', 'data-action': 'fork', 'aria-label': `Start a session from snapshot ${snap.name || snap.id}` }, 'Fork');
    fork.addEventListener('click', async () => {
      fork.disabled = true;
      fill(status, h('p', { class: 'muted busy' }, 'Restoring the snapshot into a new session…'));
      try {
        const s = await call('POST', '/v1/sessions', { json: { from_snapshot: snap.id, name: `fork of ${snap.name || shortId(snap.id)}`.slice(0, 200) }, signal });
        announce('Session started from the snapshot');
        location.hash = `#/sessions/${s.id}`;
      } catch (e) {
        fork.disabled = false;
        if (e.name !== 'AbortError') fill(status, problemBox(e));
      }
    });
    const del = h('button', { type: 'button', class: 'danger small', 'data-action': 'delete', 'aria-label': `Delete snapshot ${snap.name || snap.id}` }, 'Delete');
    del.addEventListener('click', async () => {
      if (!await confirmDialog('Delete snapshot?', `${snap.name || snap.id} is deleted. Sessions started from it keep their files.`, 'Delete')) return;
      try {
        await call('DELETE', `/v1/snapshots/${snap.id}`, { signal });
        tr.remove();
        announce('Snapshot deleted');
      } catch (e) {
        if (e.name !== 'AbortError') fill(status, problemBox(e));
      }
    });
    const tr = h('tr', { 'data-snapshot': snap.id },
      h('td', null, snap.name || h('code', null, shortId(snap.id)), snap.kind === 'idle' && badge('idle', 'info', 'Holds the workspace of a session parked while idle')),
      h('td', null, h('a', { href: `#/sessions/${snap.session_id}` }, h('code', null, shortId(snap.session_id)))),
      h('td', null, snap.profile),
      h('td', { class: 'num' }, fmtBytes(snap.size_bytes)),
      h('td', null, time(snap.created_at)),
      h('td', { class: 'actions' }, snap.kind === 'user' && [fork, del]));
    return tr;
  }

  more.addEventListener('click', () => load(false));
  fill(el, h('h1', null, 'Snapshots'),
    h('p', { class: 'lead' }, 'Captures of sessions\' workspaces. Fork one into a new session: its files come back, its processes and variables start afresh.'),
    session && h('p', null, 'Of session ', h('a', { href: `#/sessions/${session}` }, h('code', null, session)), ' · ', h('a', { href: '#/snapshots' }, 'all snapshots')),
    h('section', { id: 'snapshots-view' },
      tableWrap(h('table', { id: 'snapshots' },
        h('thead', null, h('tr', null, ['Snapshot', 'Session', 'Profile', 'Size', 'Taken', ''].map((t) => h('th', { scope: 'col' }, t)))),
        tbody)),
      more, status));
  await load(true);
}

// ---- tasks ----

const running = (t) => t.status === 'pending' || t.status === 'running';

async function cancelTask(id, signal) {
  return call('POST', `/v1/tasks/${id}/cancel`, { signal });
}

export async function tasksView({ el, query, signal }) {
  const statusSel = h('select', { id: 'task-status-filter' },
    ['', 'pending', 'running', 'succeeded', 'failed', 'timed_out', 'cancelled', 'lost'].map((s) => h('option', { value: s }, s || 'any')));
  const sessionIn = h('input', { id: 'task-session-filter', value: query.get('session') ?? '', placeholder: 'session id', autocomplete: 'off', pattern: '[0-9a-f]{32}' });
  const tbody = h('tbody');
  const status = h('div');
  let timer = 0;

  async function load() {
    clearTimeout(timer);
    try {
      const page = await get('/v1/tasks', { status: statusSel.value, session_id: sessionIn.value.trim(), limit: 100 }, signal);
      fill(status);
      fill(tbody, page.tasks.map((t) => h('tr', { 'data-task': t.id },
        h('td', null, h('a', { href: `#/tasks/${t.id}` }, h('code', null, shortId(t.id)))),
        h('td', null, t.operation.replace('_', ' ')),
        h('td', null, h('a', { href: `#/sessions/${t.session_id}` }, h('code', null, shortId(t.session_id)))),
        h('td', null, t.profile),
        h('td', null, statusBadge(t.status)),
        h('td', null, time(t.submitted_at)),
        h('td', null, t.finished_at && t.started_at ? fmtDuration(Date.parse(t.finished_at) - Date.parse(t.started_at)) : ''),
        h('td', { class: 'actions' }, running(t) && h('button', {
          type: 'button', class: 'danger small', 'aria-label': `Cancel task ${t.id}`,
          onclick: async () => {
            try { await cancelTask(t.id, signal); announce('Task cancelled'); load(); } catch (e) { if (e.name !== 'AbortError') fill(status, problemBox(e)); }
          },
        }, 'Cancel')))));
      if (!page.tasks.length) tbody.append(h('tr', null, h('td', { colspan: 8, class: 'muted' }, 'No tasks match.')));
      if (page.tasks.some(running)) timer = setTimeout(load, 2000); // refresh while something runs
    } catch (e) {
      if (e.name !== 'AbortError') fill(status, problemBox(e));
    }
  }
  signal.addEventListener('abort', () => clearTimeout(timer));
  statusSel.addEventListener('change', load);
  sessionIn.addEventListener('change', load);

  fill(el, h('h1', null, 'Tasks'),
    h('p', { class: 'lead' }, 'Every execution is recorded as a task; one that outlives its wait keeps running in the background.'),
    h('div', { class: 'toolbar', id: 'tasks-view' }, field('Status', statusSel), field('Session', sessionIn)),
    tableWrap(h('table', { id: 'tasks' },
      h('thead', null, h('tr', null, ['Task', 'Operation', 'Session', 'Profile', 'Status', 'Submitted', 'Ran for', ''].map((t) => h('th', { scope: 'col' }, t)))),
      tbody)),
    status);
  await load();
}

export async function taskView({ el, params: [id], signal }) {
  const facts = h('div');
  const outcome = h('div', { id: 'result', 'aria-live': 'polite' });
  const actions = h('div', { class: 'actions' });
  const status = h('div');
  fill(el, h('h1', null, 'Task ', h('code', null, shortId(id))), h('section', { class: 'card' }, facts, actions, status),
    h('h2', null, 'Result'), outcome);
  const show = (t) => {
    fill(facts, taskFacts(t));
    outcome.dataset.state = finished(t) ? 'done' : 'pending';
    fill(actions, running(t) && h('button', {
      type: 'button', class: 'danger', id: 'cancel-task',
      onclick: async () => { try { show(await cancelTask(id, signal)); } catch (e) { if (e.name !== 'AbortError') fill(status, problemBox(e)); } },
    }, 'Cancel task'));
    if (finished(t)) fill(outcome, renderTaskOutcome(t));
  };
  const t = await get(`/v1/tasks/${id}`, null, signal);
  show(t);
  if (finished(t)) return;
  // Running: its output streams live until it ends, then the stored outcome replaces it.
  const live = liveOutput();
  fill(outcome, h('p', { class: 'muted busy', id: 'task-live' }, `The task is ${t.status}: output appears as the program writes it.`), live.node);
  try {
    await stream({ taskId: id, signal, on: (ev) => { if (ev.event !== 'task') live.add(ev); } });
  } catch (e) {
    if (e.name === 'AbortError') return;
  }
  show(await get(`/v1/tasks/${id}`, null, signal));
}

// ---- me ----

export async function meView({ el, signal }) {
  const [me, list] = await Promise.all([get('/v1/me', null, signal), profiles(signal)]);
  const tok = auth.current();
  const cred = Object.entries(me.credentials ?? {}).filter(([, v]) => v && (!Array.isArray(v) || v.length));
  fill(el, h('h1', null, 'Me'),
    h('section', { class: 'card', id: 'me-view' },
      h('h2', null, me.username, ' ', me.admin && badge('admin', 'warn')),
      h('dl', { class: 'facts' },
        h('dt', null, 'issuer'), h('dd', null, h('code', null, me.issuer)),
        h('dt', null, 'subject'), h('dd', null, h('code', null, me.subject)),
        me.email && [h('dt', null, 'email'), h('dd', null, me.email)],
        h('dt', null, 'groups'), h('dd', { id: 'groups' }, me.groups.length ? me.groups.map((g) => h('code', { class: 'chip' }, g)) : '—'),
        h('dt', null, 'first seen'), h('dd', null, time(me.first_seen_at)),
        h('dt', null, 'last seen'), h('dd', null, time(me.last_seen_at)),
        tok?.exp && [h('dt', null, 'sign-in expires'), h('dd', null, time(new Date(tok.exp * 1000).toISOString()))])),
    h('section', { class: 'card' },
      h('h2', null, 'User-mode credentials'),
      cred.length
        ? h('dl', { class: 'facts' }, cred.map(([k, v]) => [h('dt', null, k.replace(/_/g, ' ')), h('dd', null, h('code', null, Array.isArray(v) ? v.join(', ') : v))]))
        : h('p', { class: 'muted' }, 'None: profiles in user identity mode cannot run as you.')),
    h('section', { class: 'card' },
      h('h2', null, 'Identity mode of your profiles'),
      tableWrap(h('table', { id: 'identity' },
        h('thead', null, h('tr', null, ['Profile', 'Identity mode', 'Meaning'].map((t) => h('th', { scope: 'col' }, t)))),
        h('tbody', null, list.map((p) => h('tr', null,
          h('td', null, p.name, ' ', isolationBadge(p.isolation)),
          h('td', null, badge(p.identity_mode, p.identity_mode === 'user' ? 'info' : '')),
          h('td', null, p.identity_mode === 'user'
            ? (cred.length ? 'Runs with your credentials above.' : 'Needs credentials you do not have: runs are refused.')
            : 'Runs as the gateway\'s own identity, whoever you are.'))))))));
}
