// One session: its facts, a runner for code and shell commands, and a file browser.

import { call, get, send, profileMap, filePath } from './api.js';
import {
  h, fill, field, fact, badge, statusBadge, stateBadge, isolationBadge, problemBox, confirmDialog, announce, time,
  idleLeft, fmtIdle, fmtBytes, tableWrap,
} from './ui.js';
import { sessionNotices, renderResult, liveOutput } from './result.js';
import { stream } from './stream.js';

export async function load(id, signal) {
  const [session, profs] = await Promise.all([get(`/v1/sessions/${id}`, null, signal), profileMap(signal)]);
  return { session, profile: profs.get(session.profile) };
}

/** The session's title, facts (with a live idle countdown), actions and tabs. */
export function sessionHeader(session, profile, tab, signal) {
  const id = session.id;
  const facts = h('dl', { class: 'facts inline' });
  const notice = h('div');
  const status = h('div');
  let s = session;
  const idle = h('dd', { id: 'idle-left' });
  const tick = () => {
    const left = s.status === 'active' ? idleLeft(s, profile) : null;
    idle.textContent = s.status === 'active' ? fmtIdle(left, profile, s) : '—';
    idle.classList.toggle('bad', left != null && left <= 0 && s.state !== 'paused');
  };
  const caps = profile?.capabilities ?? {};
  // Pausing needs the provider's capability, or a non-strict profile (which holds the session).
  const canPause = caps.pause || profile?.policy?.strict === false;
  const pause = h('button', { type: 'button', class: 'secondary', id: 'pause-session' }, 'Pause');
  const snap = h('button', { type: 'button', class: 'secondary', id: 'snapshot-session' }, 'Snapshot');
  const act = (btn, fn) => btn.addEventListener('click', async () => {
    btn.disabled = true;
    fill(status);
    try {
      await fn();
    } catch (e) {
      if (e.name !== 'AbortError') fill(status, problemBox(e));
    } finally {
      btn.disabled = false;
    }
  });
  act(pause, async () => {
    const paused = s.state === 'paused';
    const next = await call('POST', `/v1/sessions/${id}/${paused ? 'resume' : 'pause'}`, { signal });
    update(next);
    if (next.warnings?.length) fill(status, h('ul', { class: 'warnings' }, next.warnings.map((w) => h('li', null, w))));
    announce(paused ? 'Session resumed' : 'Session paused');
  });
  act(snap, async () => {
    const name = `${s.name || 'session'} ${new Date().toLocaleString()}`;
    const made = await call('POST', `/v1/sessions/${id}/snapshots`, { json: { name }, signal });
    fill(status, h('p', { class: 'ok', id: 'snapshot-done' }, 'Snapshot ', h('a', { href: `#/snapshots?session=${id}` }, h('code', null, made.id.slice(0, 8))),
      ` taken (${fmtBytes(made.size_bytes)}). Fork it from the snapshots list.`));
    announce('Snapshot taken');
  });
  const update = (next) => {
    s = next;
    pause.textContent = s.state === 'paused' ? 'Resume' : 'Pause';
    pause.title = canPause ? (s.state === 'paused' ? 'Thaw the sandbox: its processes run on' : 'Freeze the sandbox: files, processes and variables are kept')
      : `The ${s.provider} provider cannot pause sandboxes (strict profile)`;
    pause.disabled = !canPause || (s.state !== 'paused' && s.state !== 'running');
    snap.disabled = !caps.snapshots || s.state === 'none';
    snap.title = caps.snapshots ? 'Capture the workspace; start new sessions from it' : `The ${s.provider} provider cannot take snapshots`;
    fill(facts,
      fact('status', statusBadge(s.status)),
      fact('state', stateBadge(s.state), { id: 'session-state' }),
      fact('profile', h('a', { href: '#/profiles' }, s.profile)),
      fact('provider', h('code', null, s.provider)),
      fact('scope', s.scope.replace('_', ' ')),
      fact('created', time(s.created_at)),
      fact('last used', time(s.last_used_at)),
      h('div', null, h('dt', null, 'idle time left'), idle),
      Object.keys(s.labels ?? {}).length > 0 && fact('labels', Object.entries(s.labels).map(([k, v]) => h('code', { class: 'chip' }, `${k}=${v}`))));
    tick();
    fill(notice, sessionNotices.has(id) && h('p', { class: 'notice', role: 'status' }, sessionNotices.get(id)));
  };
  update(session);
  const timer = setInterval(tick, 1000);
  signal.addEventListener('abort', () => clearInterval(timer));

  const destroy = h('button', { type: 'button', class: 'danger', id: 'destroy-session' }, 'Destroy session');
  destroy.addEventListener('click', async () => {
    if (!await confirmDialog('Destroy session?', `The sandbox of ${s.name || id} and all its files are deleted. This cannot be undone.`, 'Destroy')) return;
    try {
      const d = await call('DELETE', `/v1/sessions/${id}`, { signal });
      if (d?.destroyed === false) {
        // 202: kept, closed, and retried by the gateway; the notice says why.
        fill(status, h('p', { class: 'notice', role: 'status' }, d.notice));
        return;
      }
      sessionNotices.delete(id);
      announce('Session destroyed');
      location.hash = '#/sessions';
    } catch (e) {
      if (e.name !== 'AbortError') fill(status, problemBox(e));
    }
  });
  const tabLink = (name, href, label) => h('a', { href, 'aria-current': tab === name ? 'page' : null }, label);
  const node = h('div', { class: 'session-head' },
    h('div', { class: 'title-row' },
      h('h1', null, s.name || 'Session', ' ', h('code', { class: 'muted small' }, id)),
      profile && isolationBadge(profile.isolation),
      s.status === 'active' && !s.shared && h('div', { class: 'session-actions' }, pause, snap, destroy),
      s.state === 'destroy_failed' && !s.shared && h('div', { class: 'session-actions' }, destroy)),
    profile?.isolation === 'none' && h('p', { class: 'warning', role: 'note' },
      h('strong', null, 'No isolation: '), 'this session\'s code runs directly on the gateway host.'),
    facts, notice, status,
    h('nav', { class: 'tabs', 'aria-label': 'Session' },
      tabLink('run', `#/sessions/${id}`, 'Run'),
      tabLink('files', `#/sessions/${id}/files`, 'Files'),
      profile?.capabilities.interactive && profile?.capabilities.background && tabLink('terminal', `#/sessions/${id}/terminal`, 'Terminal'),
      tabLink('tasks', `#/tasks?session=${id}`, 'Tasks'),
      tabLink('snapshots', `#/snapshots?session=${id}`, 'Snapshots')));
  return { node, update };
}

// ---- runner ----

const draftKey = (id) => `sandgate.draft.${id}`;

export async function sessionView({ el, params: [id], signal }) {
  const { session, profile } = await load(id, signal);
  const head = sessionHeader(session, profile, 'run', signal);
  const langs = profile?.capabilities.languages ?? [];
  const draft = JSON.parse(sessionStorage.getItem(draftKey(session.id)) ?? 'null') ?? {};
  const mode = draft.mode ?? (langs.length ? 'code' : 'command');

  const modeCode = h('input', { type: 'radio', name: 'mode', value: 'code', id: 'mode-code', checked: mode === 'code', disabled: !langs.length });
  const modeCmd = h('input', { type: 'radio', name: 'mode', value: 'command', id: 'mode-command', checked: mode === 'command', disabled: profile && !profile.capabilities.shell });
  const language = h('select', { id: 'language', name: 'language' }, langs.map((l) => h('option', { value: l, selected: l === (draft.language ?? langs[0]) }, l)));
  const code = h('textarea', { id: 'code', name: 'code', rows: 7, spellcheck: 'false', autocapitalize: 'off', value: draft.code ?? '' });
  const command = h('textarea', { id: 'command', name: 'command', rows: 3, spellcheck: 'false', autocapitalize: 'off', value: draft.command ?? '' });
  const cwd = h('input', { id: 'cwd', name: 'cwd', value: draft.cwd ?? '', placeholder: '.', autocomplete: 'off' });
  const stdin = h('textarea', { id: 'stdin', name: 'stdin', rows: 2, spellcheck: 'false', value: draft.stdin ?? '' });
  const timeout = h('input', { id: 'timeout', name: 'timeout_s', type: 'number', min: 0.1, step: 'any', value: draft.timeout ?? '', placeholder: String(profile?.policy.timeout_s ?? '') });
  const runBtn = h('button', { type: 'submit', class: 'primary', id: 'run' }, 'Run');
  const result = h('section', { id: 'result', class: 'result', 'data-state': 'idle', 'aria-live': 'polite', 'aria-label': 'Result' });

  const codeFields = h('div', { class: 'mode-fields' }, field('Language', language), field('Code', code));
  const cmdFields = h('div', { class: 'mode-fields' }, field('Command', command, 'run with /bin/sh -c in the workspace'),
    h('div', { class: 'row' }, field('Working folder', cwd), field('Standard input', stdin)));
  const form = h('form', { id: 'runner', class: 'card', 'aria-label': 'Runner' },
    h('fieldset', { class: 'mode' }, h('legend', null, 'Run'),
      h('label', null, modeCode, ' Code'), h('label', null, modeCmd, ' Shell command')),
    codeFields, cmdFields,
    h('details', { open: Boolean(draft.timeout) }, h('summary', null, 'Options'),
      h('div', { class: 'row' },
        field('Timeout (s)', timeout, 'lowers the profile\'s timeout'))),
    h('div', { class: 'actions' }, runBtn, h('span', { class: 'hint' }, h('kbd', null, 'Ctrl'), '+', h('kbd', null, 'Enter'), ' runs')));

  const current = () => (modeCmd.checked ? 'command' : 'code');
  const showMode = () => {
    codeFields.hidden = current() !== 'code';
    cmdFields.hidden = current() !== 'command';
  };
  const saveDraft = () => sessionStorage.setItem(draftKey(session.id), JSON.stringify({
    mode: current(), language: language.value, code: code.value, command: command.value,
    cwd: cwd.value, stdin: stdin.value, timeout: timeout.value,
  }));
  form.addEventListener('input', saveDraft);
  form.addEventListener('change', () => { showMode(); saveDraft(); });
  form.addEventListener('keydown', (ev) => {
    if (ev.key === 'Enter' && (ev.ctrlKey || ev.metaKey)) {
      ev.preventDefault();
      form.requestSubmit();
    }
  });
  showMode();

  form.addEventListener('submit', async (ev) => {
    ev.preventDefault();
    const isCode = current() === 'code';
    const body = isCode ? { code: code.value, language: language.value } : { command: command.value };
    if (!isCode && cwd.value.trim()) body.cwd = cwd.value.trim();
    if (!isCode && stdin.value) body.stdin = stdin.value;
    if (timeout.value) body.timeout_s = Number(timeout.value);
    if (!(isCode ? code.value : command.value).trim()) {
      (isCode ? code : command).focus();
      return;
    }
    runBtn.disabled = true;
    result.dataset.state = 'running';
    delete result.dataset.task;
    const live = liveOutput();
    const line = h('p', { id: 'pending', class: 'muted busy' }, 'Starting…');
    const cancel = h('button', { type: 'button', class: 'danger small', id: 'cancel-run', hidden: true }, 'Cancel');
    cancel.addEventListener('click', async () => {
      cancel.disabled = true;
      try { await call('POST', `/v1/tasks/${result.dataset.task}/cancel`, { signal }); } catch (e) { if (e.name !== 'AbortError') result.append(problemBox(e)); }
    });
    fill(result, h('div', { class: 'pending' }, line, cancel), live.node);
    try {
      // The output streams as the program writes it; the run is a task from its start, so a
      // page that reloads (or a connection that breaks) finds it again.
      const res = await stream({
        method: 'POST', path: `/v1/sessions/${session.id}/${isCode ? 'code' : 'commands'}`, json: body, signal,
        on: (ev) => {
          if (ev.event === 'task') {
            result.dataset.state = 'pending';
            result.dataset.task = ev.data.id;
            cancel.hidden = false;
            fill(line, badge('running', 'info'), ' Task ', h('a', { href: `#/tasks/${ev.data.id}` }, h('code', null, ev.data.id.slice(0, 8))),
              ': output appears as the program writes it.');
          } else {
            live.add(ev);
          }
        },
      });
      result.dataset.state = 'done';
      fill(result, renderResult(res));
      announce('Run finished');
    } catch (e) {
      if (e.name === 'AbortError') return;
      result.dataset.state = 'error';
      fill(result, problemBox(e));
    } finally {
      runBtn.disabled = false;
    }
    // The run used the session: refresh its last-used time and so the idle countdown.
    get(`/v1/sessions/${session.id}`, null, signal).then(head.update, () => {});
  });

  fill(el, head.node, form, result, portCard(session, profile, signal));
}

// ---- preview ports ----

/**
 * A port inside the sandbox (a server the session started), in a browser. A browser sends no
 * bearer token on a navigation, so "Open port" asks for a personal link — on a preview domain
 * it must be opened within a minute, and then keeps this browser signed in to the preview —
 * and opens it in a new tab; "Share link" makes one for others, which works until it expires.
 */
function portCard(session, profile, signal) {
  if (!profile?.capabilities.preview_ports) return null;
  const port = h('input', { id: 'port', name: 'port', type: 'number', min: 1, max: 65535, value: sessionStorage.getItem(`sandgate.port.${session.id}`) ?? '8000' });
  const ttl = h('select', { id: 'port-ttl', name: 'ttl_s' },
    [[900, '15 minutes'], [3600, '1 hour'], [86400, '1 day']].map(([v, l]) => h('option', { value: v, selected: v === 3600 }, l)));
  const open = h('button', { type: 'submit', class: 'secondary', id: 'open-port' }, 'Open port');
  const share = h('button', { type: 'button', class: 'secondary', id: 'share-port' }, 'Share link');
  const out = h('div', { id: 'port-status', 'aria-live': 'polite' });
  const form = h('form', { class: 'card', id: 'ports', 'aria-labelledby': 'ports-h' },
    h('h2', { id: 'ports-h' }, 'Preview a port'),
    h('p', { class: 'muted' }, 'A server that listens on localhost inside the sandbox, reached through the gateway (nothing is published on a host). Open it for yourself, or make a share link: that one works without signing in until it expires, for whoever has it — share it with care.'),
    h('div', { class: 'row' }, field('Port', port), field('Lasts', ttl)),
    h('div', { class: 'actions' }, open, share), out);

  async function makeLink(personal) {
    open.disabled = share.disabled = true;
    fill(out);
    try {
      sessionStorage.setItem(`sandgate.port.${session.id}`, port.value);
      const link = await call('POST', `/v1/sessions/${session.id}/ports/${Number(port.value)}/links`, { json: { ttl_s: Number(ttl.value), personal }, signal });
      const expires = h('span', { class: 'muted small' }, 'expires ', time(link.expires_at));
      if (personal) {
        fill(out, h('p', null, 'Opened ', h('a', { href: link.url, target: '_blank', rel: 'noopener noreferrer', id: 'port-link' }, `port ${link.port}`),
          ' in a new tab (for you only)', h('br'), expires));
        window.open(link.url, '_blank', 'noopener');
        announce(`Port ${link.port} opened in a new tab`);
      } else {
        fill(out, h('p', null, 'Share link: ', h('a', { href: link.url, target: '_blank', rel: 'noopener noreferrer', id: 'share-link' }, link.url),
          h('br'), expires));
        announce(`Share link to port ${link.port} made`);
      }
    } catch (e) {
      if (e.name !== 'AbortError') fill(out, problemBox(e));
    } finally {
      open.disabled = share.disabled = false;
    }
  }
  form.addEventListener('submit', (ev) => { ev.preventDefault(); makeLink(true); });
  share.addEventListener('click', () => makeLink(false));
  return form;
}

// ---- files ----

const imageTypes = {
  png: 'image/png', jpg: 'image/jpeg', jpeg: 'image/jpeg', gif: 'image/gif', webp: 'image/webp',
  svg: 'image/svg+xml', bmp: 'image/bmp', ico: 'image/x-icon', avif: 'image/avif',
};
const PREVIEW_BYTES = 256 << 10;

const extOf = (name) => (name.includes('.') ? name.split('.').pop().toLowerCase() : '');

function cleanDir(d) {
  const parts = (d || '.').split('/').filter((p) => p && p !== '.');
  return parts.length ? parts.join('/') : '.';
}

export async function filesView({ el, params: [id], query, signal }) {
  const { session, profile } = await load(id, signal);
  const head = sessionHeader(session, profile, 'files', signal);
  const dir = cleanDir(query.get('dir'));
  const sid = session.id;
  const base = `/v1/sessions/${sid}/files`;
  const dirHref = (d) => `#/sessions/${sid}/files${d === '.' ? '' : `?dir=${encodeURIComponent(d)}`}`;

  const status = h('div', { id: 'files-status', 'aria-live': 'polite' });
  const tbody = h('tbody');
  const preview = h('section', { id: 'preview', class: 'card preview', hidden: true, 'aria-label': 'Preview' });
  const upload = h('input', { type: 'file', id: 'upload-input', multiple: true });

  const crumbs = [h('a', { href: dirHref('.') }, 'workspace')];
  let acc = '';
  for (const part of dir === '.' ? [] : dir.split('/')) {
    acc = acc ? `${acc}/${part}` : part;
    crumbs.push(' / ', h('a', { href: dirHref(acc) }, part));
  }

  async function list() {
    try {
      const { entries } = await get(base, { dir }, signal);
      fill(tbody, dir !== '.' && h('tr', null, h('td', { colspan: 5 }, h('a', { href: dirHref(dir.split('/').slice(0, -1).join('/') || '.') }, '↑ parent folder'))),
        entries.map(entryRow));
      if (!entries.length) tbody.append(h('tr', null, h('td', { colspan: 5, class: 'muted' }, 'This folder is empty.')));
    } catch (e) {
      if (e.name !== 'AbortError') fill(status, problemBox(e));
    }
  }

  function entryRow(e) {
    const isFile = e.type === 'file';
    const act = (label, fn, cls = 'secondary') => h('button', {
      type: 'button', class: `${cls} small`, 'data-action': label.toLowerCase(), 'aria-label': `${label} ${e.name}`,
      onclick: () => fn(e).catch((err) => { if (err.name !== 'AbortError') fill(status, problemBox(err)); }),
    }, label);
    return h('tr', { 'data-path': e.path },
      h('td', null, e.type === 'dir' ? h('a', { href: dirHref(e.path) }, `${e.name}/`) : e.name,
        e.type === 'symlink' && badge('symlink', 'muted')),
      h('td', { class: 'num' }, isFile ? fmtBytes(e.size) : ''),
      h('td', null, time(e.modified_at)),
      h('td', null, h('code', null, e.mode)),
      h('td', { class: 'actions' },
        isFile && act('Preview', showPreview),
        isFile && act('Download', download),
        (isFile || e.type === 'dir' || e.type === 'symlink') && act('Delete', remove, 'danger')));
  }

  const fetchBlob = async (e) => (await send('GET', `${base}/${filePath(e.path)}`, { signal })).blob();

  async function download(e) {
    const blob = await fetchBlob(e);
    const url = URL.createObjectURL(blob);
    const a = h('a', { href: url, download: e.name, hidden: true });
    document.body.append(a);
    a.click();
    a.remove();
    setTimeout(() => URL.revokeObjectURL(url), 60_000);
    announce(`Downloaded ${e.name}`);
  }

  async function showPreview(e) {
    const blob = await fetchBlob(e);
    preview.hidden = false;
    const old = preview.querySelector('img')?.src;
    if (old) URL.revokeObjectURL(old);
    const title = h('h2', null, 'Preview: ', h('code', null, e.path));
    const type = imageTypes[extOf(e.name)];
    if (type) {
      const img = h('img', { src: URL.createObjectURL(new Blob([blob], { type })), alt: `Preview of ${e.name}`, id: 'preview-image' });
      fill(preview, title, img);
    } else {
      const bytes = new Uint8Array(await blob.slice(0, PREVIEW_BYTES).arrayBuffer());
      if (bytes.includes(0)) {
        fill(preview, title, h('p', { class: 'muted' }, `Binary file (${fmtBytes(blob.size)}): download it instead.`));
      } else {
        fill(preview, title, h('pre', { id: 'preview-text', tabindex: '0' }, new TextDecoder().decode(bytes)),
          blob.size > PREVIEW_BYTES && h('p', { class: 'truncation' }, `⋯ showing the first ${fmtBytes(PREVIEW_BYTES)} of ${fmtBytes(blob.size)}`));
      }
    }
    preview.scrollIntoView({ block: 'nearest' });
  }

  async function remove(e) {
    if (!await confirmDialog('Delete?', `${e.path} is deleted from the workspace.`, 'Delete')) return;
    await send('DELETE', `${base}/${filePath(e.path)}`, { signal });
    if (preview.querySelector('h2 code')?.textContent === e.path) preview.hidden = true;
    announce(`Deleted ${e.name}`);
    await list();
  }

  upload.addEventListener('change', async () => {
    const chosen = [...upload.files];
    fill(status);
    for (const f of chosen) {
      const target = dir === '.' ? f.name : `${dir}/${f.name}`;
      fill(status, h('p', { class: 'muted busy' }, `Uploading ${f.name} (${fmtBytes(f.size)})…`));
      try {
        const w = await call('PUT', `${base}/${filePath(target)}`, { body: f, signal });
        fill(status, h('p', { class: 'ok', id: 'upload-done' }, `Uploaded ${w.path}: ${fmtBytes(w.size)}, SHA-256 `, h('code', null, w.sha256.slice(0, 16)), '…'));
      } catch (e) {
        if (e.name !== 'AbortError') fill(status, problemBox(e));
        break;
      }
    }
    upload.value = '';
    await list();
  });

  const refresh = h('button', { type: 'button', class: 'secondary small', onclick: () => list() }, 'Refresh');
  fill(el, head.node,
    h('section', { class: 'files', id: 'files-view', 'aria-labelledby': 'files-h' },
      h('div', { class: 'toolbar' },
        h('h2', { id: 'files-h' }, h('nav', { 'aria-label': 'Folder', class: 'crumbs' }, crumbs)),
        h('label', { class: 'button primary upload', for: 'upload-input' }, 'Upload files…', upload),
        refresh),
      status,
      tableWrap(h('table', { id: 'files' },
        h('thead', null, h('tr', null, ['Name', 'Size', 'Modified', 'Mode', ''].map((t) => h('th', { scope: 'col' }, t)))),
        tbody))),
    preview);
  await list();
}
