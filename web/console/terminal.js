// A terminal in a session's sandbox: a shell started as a background process on a
// pseudo-terminal (POST …/commands with background and pty), its output streamed into an
// xterm.js terminal, keystrokes sent to its stdin, and its size kept in step with the box.

import { Terminal } from './vendor/xterm/xterm.mjs';
import { FitAddon } from './vendor/xterm/addon-fit.mjs';
import { call, send } from './api.js';
import { h, fill, problemBox, announce } from './ui.js';
import { load, sessionHeader } from './session.js';
import { stream, chunkText } from './stream.js';

// The shell the terminal runs: bash when the sandbox has it, else sh.
const SHELL = 'if command -v bash >/dev/null 2>&1; then exec bash -i; else exec sh -i; fi';

export async function terminalView({ el, params: [id], signal }) {
  const { session, profile } = await load(id, signal);
  const head = sessionHeader(session, profile, 'terminal', signal);
  const caps = profile?.capabilities ?? {};
  if (!caps.interactive || !caps.background) {
    fill(el, head.node, h('p', { class: 'muted', id: 'terminal-unsupported' },
      `Profile ${session.profile}'s provider cannot run a terminal (it needs the interactive and background capabilities).`));
    return;
  }
  const status = h('div', { id: 'terminal-status', 'aria-live': 'polite' });
  const box = h('div', { id: 'terminal', class: 'terminal', 'aria-label': 'Terminal' });
  const start = h('button', { type: 'button', class: 'primary', id: 'terminal-start' }, 'Open a shell');
  const stop = h('button', { type: 'button', class: 'danger', id: 'terminal-stop', hidden: true }, 'Close the shell');
  fill(el, head.node,
    h('section', { class: 'card', 'aria-labelledby': 'terminal-h' },
      h('div', { class: 'toolbar' }, h('h2', { id: 'terminal-h' }, 'Terminal'), start, stop),
      h('p', { class: 'muted small' }, 'The shell runs as a background process of this session: it keeps the session busy while open, and closes when you leave this page.'),
      status, box));

  let proc = null;
  const term = new Terminal({ cursorBlink: true, convertEol: false, fontSize: 13, scrollback: 5000 });
  const fit = new FitAddon();
  term.loadAddon(fit);

  // Keystrokes are batched briefly so typing does not cost a request per key.
  let pending = '';
  let flushing = null;
  const flush = async () => {
    while (pending && proc) {
      const data = pending;
      pending = '';
      try {
        await send('POST', `/v1/tasks/${proc.id}/stdin`, { body: new TextEncoder().encode(data), signal });
      } catch (e) {
        if (e.name !== 'AbortError') fill(status, problemBox(e));
        return;
      }
    }
  };
  term.onData((d) => {
    pending += d;
    flushing ??= new Promise((r) => setTimeout(r, 15)).then(flush).finally(() => { flushing = null; });
  });

  let resizeTimer = 0;
  const resized = () => {
    fit.fit();
    if (!proc) return;
    clearTimeout(resizeTimer);
    resizeTimer = setTimeout(() => {
      call('POST', `/v1/tasks/${proc.id}/resize`, { json: { rows: term.rows, cols: term.cols }, signal }).catch(() => {});
    }, 150);
  };
  const observer = new ResizeObserver(resized);

  const close = (keepalive) => {
    if (!proc) return;
    const p = proc;
    proc = null;
    // DELETE on the way out must survive the page: keepalive.
    send('DELETE', `/v1/sessions/${session.id}/processes/${p.id}`, { keepalive }).catch(() => {});
  };
  const onHide = () => close(true);
  window.addEventListener('pagehide', onHide);
  signal.addEventListener('abort', () => {
    window.removeEventListener('pagehide', onHide);
    observer.disconnect();
    close(true);
    term.dispose();
  });

  start.addEventListener('click', async () => {
    start.disabled = true;
    fill(status);
    if (!box.firstChild) {
      term.open(box);
      observer.observe(box);
    }
    fit.fit();
    try {
      proc = await call('POST', `/v1/sessions/${session.id}/commands`, {
        json: { command: SHELL, background: true, pty: { rows: term.rows, cols: term.cols } }, signal,
      });
      box.dataset.process = proc.id;
      start.hidden = true;
      stop.hidden = false;
      term.focus();
      announce('Shell opened');
      const end = await stream({ taskId: proc.id, signal, on: (ev) => { if (ev.event === 'stdout') term.write(chunkText(ev.data)); } });
      // xterm.js parses writes later: the page says it ended once the line is in the buffer.
      term.write(`\r\n\x1b[2m[the shell ended${end.exit_code == null ? '' : `: exit ${end.exit_code}`}]\x1b[0m\r\n`,
        () => { box.dataset.ended = 'true'; });
    } catch (e) {
      if (e.name === 'AbortError') return;
      fill(status, problemBox(e));
    } finally {
      proc = null;
      stop.hidden = true;
      start.hidden = false;
      start.disabled = false;
    }
  });
  stop.addEventListener('click', () => close(false));
}
