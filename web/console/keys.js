// The API keys page: make a key (its secret shown this once, with a copy button), list your
// keys (admins: everyone's) and revoke them. A key authenticates as its maker wherever a
// token does; the gateway keeps only its hash, so a lost secret means a new key.

import { call, get, profiles } from './api.js';
import { h, fill, field, badge, statusBadge, problemBox, confirmDialog, announce, time, tableWrap, copyText } from './ui.js';

const DAY = 86400;
// Lifetimes offered; "" leaves it to the gateway (auth.api_keys.default_ttl, capped by max_ttl).
const lifetimes = [['', 'Gateway default'], [DAY, '1 day'], [7 * DAY, '7 days'], [30 * DAY, '30 days'], [90 * DAY, '90 days'], [365 * DAY, '1 year']];

/** The one-time display of a new key's secret, with a copy button and how to use it. */
function secretCard(k, onDone) {
  const input = h('input', { id: 'key-secret', readonly: true, value: k.secret, 'aria-describedby': 'key-secret-hint', spellcheck: 'false', autocomplete: 'off' });
  const copied = h('span', { id: 'key-copied', class: 'hint', role: 'status' });
  const copy = h('button', { type: 'button', class: 'primary', id: 'copy-secret' }, 'Copy');
  copy.addEventListener('click', async () => {
    const ok = await copyText(k.secret, input);
    copied.textContent = ok ? 'Copied to the clipboard.' : 'Copying failed: select the key and copy it yourself.';
  });
  input.addEventListener('focus', () => input.select());
  const done = h('button', { type: 'button', class: 'secondary', id: 'secret-done' }, 'Done');
  done.addEventListener('click', onDone);
  return h('section', { class: 'card secret', id: 'new-key', 'aria-labelledby': 'new-key-h' },
    h('h2', { id: 'new-key-h' }, 'Key ', h('code', null, k.name), ' made'),
    h('p', { class: 'warning', id: 'key-secret-hint' }, h('strong', null, 'Copy it now: '),
      'it is not shown again. The gateway keeps only a hash of it.'),
    h('div', { class: 'secret-row' }, input, copy),
    copied,
    h('p', { class: 'hint' }, 'Send it as ', h('code', null, 'Authorization: Bearer <key>'), ' (REST, /mcp), or ',
      h('code', null, 'export SANDGATE_API_KEY=<key>'), ' for the sandgate CLI. It expires ', time(k.expires_at), '.'),
    h('div', { class: 'actions' }, done));
}

export async function keysView({ el, signal }) {
  const [me, usable] = await Promise.all([get('/v1/me', null, signal), profiles(signal)]);

  // ---- create ----
  const nameIn = h('input', { id: 'key-name', name: 'name', required: true, maxlength: 100, autocomplete: 'off', placeholder: 'ci-deploy' });
  const ttlSel = h('select', { id: 'key-ttl', name: 'ttl' }, lifetimes.map(([v, label]) => h('option', { value: v }, label)));
  const boxes = usable.map((p) => h('input', { type: 'checkbox', name: 'profile', value: p.name }));
  const profileSet = h('fieldset', { class: 'profiles', id: 'key-profiles' },
    h('legend', null, 'Profiles'),
    boxes.map((b) => h('label', { class: 'check' }, b, ' ', b.value)),
    h('span', { class: 'hint' }, 'None ticked: every profile you may use.'));
  const createStatus = h('div');
  const secretSlot = h('div');
  const form = h('form', { class: 'card create', id: 'create-key-form', 'aria-labelledby': 'create-key-h' },
    h('h2', { id: 'create-key-h' }, 'New key'),
    h('div', { class: 'row' }, field('Name', nameIn, 'what it is for'), field('Expires after', ttlSel)),
    profileSet,
    h('button', { type: 'submit', class: 'primary', id: 'create-key' }, 'Create key'),
    createStatus);
  form.addEventListener('submit', async (ev) => {
    ev.preventDefault();
    fill(createStatus);
    const body = { name: nameIn.value.trim() };
    if (ttlSel.value) body.ttl_s = Number(ttlSel.value);
    const only = boxes.filter((b) => b.checked).map((b) => b.value);
    if (only.length) body.profiles = only;
    try {
      const k = await call('POST', '/v1/api-keys', { json: body, signal });
      form.reset();
      fill(secretSlot, secretCard(k, () => { fill(secretSlot); announce('The key\'s secret is no longer shown'); }));
      secretSlot.querySelector('#copy-secret').focus();
      announce(`API key ${k.name} created: copy it now`);
      await load(true);
    } catch (e) {
      if (e.name !== 'AbortError') fill(createStatus, problemBox(e));
    }
  });

  // ---- list ----
  const allBox = h('input', { type: 'checkbox', id: 'keys-all' });
  const tbody = h('tbody');
  const listStatus = h('div');
  const more = h('button', { type: 'button', class: 'secondary', hidden: true }, 'Load more');
  const head = h('tr');
  let cursor = '';

  function header() {
    const cols = ['Name', 'Prefix', 'Profiles', 'Status', 'Created', 'Last used', 'Expires'];
    if (allBox.checked) cols.push('Principal');
    cols.push('');
    fill(head, cols.map((t) => h('th', { scope: 'col' }, t)));
    return cols.length;
  }

  async function load(reset) {
    fill(listStatus);
    const cols = header();
    if (reset) {
      tbody.replaceChildren();
      cursor = '';
    }
    try {
      const page = await get('/v1/api-keys', { all: allBox.checked ? 'true' : '', cursor, limit: 50 }, signal);
      for (const k of page.api_keys) tbody.append(row(k));
      cursor = page.next_cursor;
      more.hidden = !cursor;
      if (!tbody.children.length) tbody.append(h('tr', null, h('td', { colspan: cols, class: 'muted' }, 'No API keys yet.')));
    } catch (e) {
      if (e.name !== 'AbortError') fill(listStatus, problemBox(e));
    }
  }

  function row(k) {
    const tr = h('tr', { 'data-key': k.id });
    const revoke = k.status === 'active' && h('button', {
      type: 'button', class: 'danger small', 'data-action': 'revoke', 'aria-label': `Revoke API key ${k.name}`,
      onclick: async () => {
        if (!await confirmDialog('Revoke API key?', `${k.name} (${k.prefix}…) stops working at once, everywhere. This cannot be undone.`, 'Revoke')) return;
        try {
          const r = await call('DELETE', `/v1/api-keys/${k.id}`, { signal });
          tr.replaceWith(row(r));
          announce(`API key ${k.name} revoked`);
        } catch (e) {
          if (e.name !== 'AbortError') fill(listStatus, problemBox(e));
        }
      },
    }, 'Revoke');
    fill(tr,
      h('td', null, k.name),
      h('td', null, h('code', null, k.prefix, '…')),
      h('td', null, k.profiles ? k.profiles.map((p) => h('code', { class: 'chip' }, p)) : h('span', { class: 'muted' }, 'all yours')),
      h('td', { class: 'status' }, statusBadge(k.status)),
      h('td', null, time(k.created_at)),
      h('td', null, k.last_used_at ? time(k.last_used_at) : h('span', { class: 'muted' }, 'never')),
      h('td', null, k.status === 'revoked' ? ['revoked ', time(k.revoked_at)] : time(k.expires_at)),
      allBox.checked && h('td', null, h('code', null, k.principal)),
      h('td', { class: 'actions' }, revoke));
    return tr;
  }

  allBox.addEventListener('change', () => load(true));
  more.addEventListener('click', () => load(false));

  fill(el, h('h1', null, 'API keys'),
    h('p', { class: 'lead' }, 'Credentials for scripts, CI jobs and servers. A key acts as you, with the groups you have now, wherever a sign-in does; revoke it and every gateway refuses it within a second.'),
    form,
    secretSlot,
    h('section', { id: 'keys-view', 'aria-labelledby': 'keys-h' },
      h('div', { class: 'toolbar' }, h('h2', { id: 'keys-h' }, me.admin ? 'Keys' : 'Your keys'),
        me.admin && h('label', { class: 'check' }, allBox, ' everyone\'s ', badge('admin', 'warn'))),
      tableWrap(h('table', { id: 'keys' }, h('thead', null, head), tbody)),
      more, listStatus));
  await load(true);
}
