// The secrets page: set a secret (its value typed once, never shown again), list your secrets
// by name and hosts, delete them. Sessions bind secrets by name and see only a placeholder;
// the egress proxy puts the value into requests to the secret's hosts.

import { call, get } from './api.js';
import { h, fill, field, problemBox, confirmDialog, announce, time, tableWrap } from './ui.js';

export async function secretsView({ el, signal }) {
  // ---- set ----
  const nameIn = h('input', { id: 'secret-name', name: 'name', required: true, maxlength: 63, autocomplete: 'off', placeholder: 'openai', pattern: '[a-z][a-z0-9_\\-]{0,62}' });
  const valueIn = h('input', { id: 'secret-value', name: 'value', type: 'password', required: true, maxlength: 16384, autocomplete: 'off', spellcheck: 'false' });
  const hostsIn = h('input', { id: 'secret-hosts', name: 'hosts', required: true, autocomplete: 'off', placeholder: 'api.openai.com, *.openai.com' });
  const setStatus = h('div');
  const form = h('form', { class: 'card create', id: 'set-secret-form', 'aria-labelledby': 'set-secret-h' },
    h('h2', { id: 'set-secret-h' }, 'Set a secret'),
    h('div', { class: 'row' }, field('Name', nameIn, 'lower-case letters, digits, _ and -'), field('Value', valueIn, 'never shown again')),
    field('Hosts', hostsIn, 'where the value may be sent, separated by commas'),
    h('button', { type: 'submit', class: 'primary', id: 'set-secret' }, 'Save secret'),
    setStatus);
  form.addEventListener('submit', async (ev) => {
    ev.preventDefault();
    fill(setStatus);
    const name = nameIn.value.trim();
    const hosts = hostsIn.value.split(',').map((s) => s.trim()).filter(Boolean);
    try {
      await call('PUT', `/v1/secrets/${encodeURIComponent(name)}`, { json: { value: valueIn.value, hosts }, signal });
      form.reset();
      announce(`Secret ${name} saved`);
      await load();
    } catch (e) {
      valueIn.value = '';
      if (e.name !== 'AbortError') fill(setStatus, problemBox(e));
    }
  });

  // ---- list ----
  const tbody = h('tbody');
  const listStatus = h('div');

  async function load() {
    fill(listStatus);
    try {
      const list = await get('/v1/secrets', null, signal);
      tbody.replaceChildren(...list.secrets.map(row));
      if (!list.secrets.length) tbody.append(h('tr', null, h('td', { colspan: 5, class: 'muted' }, 'No secrets yet.')));
    } catch (e) {
      if (e.name !== 'AbortError') fill(listStatus, problemBox(e));
    }
  }

  function row(s) {
    const del = h('button', {
      type: 'button', class: 'danger small', 'data-action': 'delete', 'aria-label': `Delete secret ${s.name}`,
      onclick: async () => {
        if (!await confirmDialog('Delete secret?', `${s.name} is removed; sessions bound to it get no value for it from their next start on.`, 'Delete')) return;
        try {
          await call('DELETE', `/v1/secrets/${encodeURIComponent(s.name)}`, { signal });
          announce(`Secret ${s.name} deleted`);
          await load();
        } catch (e) {
          if (e.name !== 'AbortError') fill(listStatus, problemBox(e));
        }
      },
    }, 'Delete');
    return h('tr', { 'data-secret': s.name },
      h('td', null, s.name),
      h('td', null, s.hosts.map((x) => h('code', { class: 'chip' }, x))),
      h('td', null, h('code', null, s.env_name || '')),
      h('td', null, time(s.updated_at)),
      h('td', { class: 'actions' }, del));
  }

  const head = h('tr', null, ['Name', 'Hosts', 'Variable', 'Updated', ''].map((t) => h('th', { scope: 'col' }, t)));
  fill(el, h('h1', null, 'Secrets'),
    h('p', { class: 'lead' }, 'Credentials your sessions use without their programs reading them: a session made with a secret sees only a placeholder in its variable, which the egress proxy replaces with the value in requests to the secret\'s hosts. Values are write-only.'),
    form,
    h('section', { id: 'secrets-view', 'aria-labelledby': 'secrets-h' },
      h('h2', { id: 'secrets-h' }, 'Your secrets'),
      tableWrap(h('table', { id: 'secrets' }, h('thead', null, head), tbody)),
      listStatus));
  await load();
}
