// The console's entry point: loads /console/config.json, finishes a sign-in callback, and
// routes #/… hashes to views. Each view gets a fresh AbortSignal that fires when the user
// navigates away, so its timers and requests stop with it.

import { auth } from './auth.js';
import { h, fill, problemBox } from './ui.js';
import { profilesView, sessionsView, snapshotsView, tasksView, taskView, meView } from './views.js';
import { sessionView, filesView } from './session.js';
import { terminalView } from './terminal.js';
import { keysView } from './keys.js';
import { secretsView } from './secrets.js';
import { connectView } from './connect.js';

const SID = '([0-9a-f]{32}|default)';
const routes = [
  [/^\/sessions$/, sessionsView],
  [new RegExp(`^/sessions/${SID}$`), sessionView],
  [new RegExp(`^/sessions/${SID}/files$`), filesView],
  [new RegExp(`^/sessions/${SID}/terminal$`), terminalView],
  [/^\/snapshots$/, snapshotsView],
  [/^\/profiles$/, profilesView],
  [/^\/tasks$/, tasksView],
  [/^\/tasks\/([0-9a-f]{32})$/, taskView],
  [/^\/keys$/, keysView],
  [/^\/secrets$/, secretsView],
  [/^\/connect$/, connectView],
  [/^\/me$/, meView],
];

const main = document.getElementById('main');
const nav = document.getElementById('nav');
const who = document.getElementById('who');
let current = null; // AbortController of the shown view
let signInMessage = '';

function stopView() {
  current?.abort();
  current = null;
}

function showSignIn(message, error) {
  stopView();
  nav.hidden = true;
  fill(who);
  document.title = 'Sign in · Sandgate';
  if (!auth.configured()) {
    fill(main, h('section', { class: 'signin', id: 'signin-unconfigured' },
      h('h1', null, 'Sign-in is not configured'),
      h('p', null, 'This gateway does not name an OIDC issuer and client for the console. An operator can set ',
        h('code', null, 'auth.console.issuer'), ' and ', h('code', null, 'auth.console.client_id'), ' in its configuration.'),
      h('p', null, 'The REST API works with any bearer token from a trusted issuer: see ', h('a', { href: '/docs/' }, 'the API docs'), '.')));
    return;
  }
  const issuer = new URL(auth.issuer());
  const host = issuer.host;
  // The development issuer answers its own origin only (no CORS): localhost and 127.0.0.1 differ.
  const loopback = (h) => ['localhost', '127.0.0.1', '[::1]'].includes(h);
  const otherOrigin = issuer.origin !== location.origin && loopback(issuer.hostname) && loopback(location.hostname)
    && issuer.port === location.port;
  const button = h('button', { id: 'signin', type: 'button', class: 'primary' }, 'Sign in');
  const status = h('div');
  button.addEventListener('click', async () => {
    button.disabled = true;
    try {
      await auth.signIn(location.hash || '#/sessions');
    } catch (e) {
      button.disabled = false;
      fill(status, problemBox(e));
    }
  });
  fill(main, h('section', { class: 'signin' },
    h('h1', null, 'Sign in to Sandgate'),
    message && h('p', { class: 'notice', role: 'status', id: 'signin-message' }, message),
    error && problemBox(error),
    h('p', null, 'You will sign in at ', h('strong', null, host), ' and come back to ',
      h('code', null, location.hash || '#/sessions'), '.'),
    otherOrigin && h('p', { class: 'warning' }, 'The issuer lives on another origin. If sign-in fails, open the console at ',
      h('a', { href: `${issuer.origin}/${location.hash}` }, `${issuer.origin}/`), ' instead.'),
    button, status));
  button.focus();
}

function showShell() {
  nav.hidden = false;
  const claims = auth.current()?.claims ?? {};
  const signOut = h('button', { type: 'button', class: 'secondary small', id: 'signout' }, 'Sign out');
  signOut.addEventListener('click', () => {
    auth.signOut();
    signInMessage = 'You signed out.';
    showSignIn(signInMessage);
  });
  fill(who, h('span', { class: 'user', title: claims.iss ?? '' }, claims.preferred_username || claims.email || claims.sub || ''), signOut);
}

async function route() {
  if (!auth.current()) {
    showSignIn(signInMessage);
    return;
  }
  if (!auth.token()) return; // expired: the expiry callback has shown the sign-in screen
  if (!location.hash.startsWith('#/')) {
    history.replaceState(null, '', '#/sessions');
  }
  const [path, qs] = location.hash.slice(1).split('?');
  const query = new URLSearchParams(qs ?? '');
  let view = null;
  let params = [];
  for (const [re, v] of routes) {
    const m = re.exec(path);
    if (m) {
      view = v;
      params = m.slice(1);
      break;
    }
  }
  stopView();
  showShell();
  const ctl = new AbortController();
  current = ctl;
  for (const a of nav.querySelectorAll('a')) {
    if (path.startsWith(a.getAttribute('href').slice(1))) a.setAttribute('aria-current', 'page');
    else a.removeAttribute('aria-current');
  }
  const container = h('div', { class: 'view' });
  fill(main, container);
  if (!view) {
    fill(container, h('h1', null, 'Not found'), h('p', null, 'No page at ', h('code', null, location.hash), '. ', h('a', { href: '#/sessions' }, 'Go to sessions'), '.'));
    return;
  }
  try {
    await view({ el: container, params, query, signal: ctl.signal });
  } catch (e) {
    if (e.name === 'AbortError' || ctl.signal.aborted) return;
    if (e.status === 401) return; // the sign-in screen is already up
    container.append(problemBox(e));
  }
  if (!ctl.signal.aborted) {
    const heading = container.querySelector('h1');
    document.title = `${heading?.textContent ?? 'Console'} · Sandgate`;
  }
}

/** Moves focus to the new page's heading after a navigation, for keyboard and screen-reader users. */
function focusHeading() {
  const active = document.activeElement;
  if (active && active !== document.body && main.contains(active)) return; // the user is already busy here
  const heading = main.querySelector('h1');
  if (!heading) return;
  heading.setAttribute('tabindex', '-1');
  heading.focus({ preventScroll: true });
}

async function start() {
  let cfg;
  try {
    const res = await fetch('/console/config.json');
    cfg = await res.json();
  } catch (e) {
    fill(main, problemBox(new Error(`Could not load /console/config.json: ${e.message}`)));
    return;
  }
  auth.configure(cfg, (message) => {
    signInMessage = message;
    showSignIn(message);
  });
  try {
    const restored = await auth.handleCallback();
    if (restored) signInMessage = '';
  } catch (e) {
    showSignIn('', e);
    return;
  }
  window.addEventListener('hashchange', () => { route().then(focusHeading); });
  await route();
}

start();
