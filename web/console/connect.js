// The "Connect an agent" page: the gateway's MCP endpoint as configuration to copy for the
// common MCP clients, and the same sandboxes from Python. The credential in the snippets is a
// placeholder unless the user asks for their current sign-in token (which expires); an API
// key (#/keys) is the credential for an agent that runs for days.

import { profiles } from './api.js';
import { auth } from './auth.js';
import { h, fill, time, copyText } from './ui.js';

const PLACEHOLDER = '<TOKEN>';

/** The snippets for endpoint url, credential token and profile name, in the order shown. */
function snippets(url, token, profile) {
  const json = (v) => JSON.stringify(v, null, 2);
  return [
    {
      id: 'claude-code', title: 'Claude Code',
      hint: 'Run in a terminal; add --scope user to use it in every project.',
      text: `claude mcp add --transport http sandgate ${url} --header "Authorization: Bearer ${token}"`,
    },
    {
      id: 'claude-desktop', title: 'Claude Desktop',
      hint: 'In claude_desktop_config.json (Settings → Developer → Edit Config). Claude Desktop reaches HTTP servers through the mcp-remote bridge, which needs Node.js.',
      text: json({ mcpServers: { sandgate: {
        command: 'npx',
        args: ['-y', 'mcp-remote', url, '--header', 'Authorization:${SANDGATE_AUTH}'],
        env: { SANDGATE_AUTH: `Bearer ${token}` },
      } } }),
    },
    {
      id: 'cursor', title: 'Cursor',
      hint: 'In ~/.cursor/mcp.json (every project) or .cursor/mcp.json (one project).',
      text: json({ mcpServers: { sandgate: { url, headers: { Authorization: `Bearer ${token}` } } } }),
    },
    {
      id: 'generic', title: 'Other MCP clients',
      hint: 'The mcpServers form most clients read (streamable HTTP).',
      text: json({ mcpServers: { sandgate: { type: 'http', url, headers: { Authorization: `Bearer ${token}` } } } }),
    },
    {
      id: 'python', title: 'Python',
      hint: 'The sandgate package (clients/python in the Sandgate repository: pip install ./clients/python).',
      text: [
        `# export SANDGATE_URL=${new URL(url).origin} SANDGATE_TOKEN=${token}`,
        'from sandgate import Sandbox',
        '',
        `with Sandbox.create(profile=${JSON.stringify(profile)}) as sbx:`,
        '    print(sbx.commands.run("echo hi").stdout)',
        '',
      ].join('\n'),
    },
  ];
}

/** One snippet: its title, how to use it, the text and a copy button. */
function snippetCard(s) {
  const pre = h('pre', { class: 'snippet', id: `connect-${s.id}`, tabindex: 0 }, s.text);
  const copied = h('span', { class: 'hint', role: 'status', id: `connect-${s.id}-copied` });
  const copy = h('button', { type: 'button', class: 'secondary small', id: `copy-${s.id}`, 'aria-label': `Copy the ${s.title} configuration` }, 'Copy');
  copy.addEventListener('click', async () => {
    const ok = await copyText(pre.textContent, pre);
    copied.textContent = ok ? 'Copied.' : 'Copying failed: select the text and copy it yourself.';
  });
  return h('section', { class: 'card connect', 'aria-labelledby': `connect-${s.id}-h` },
    h('header', null, h('h2', { id: `connect-${s.id}-h` }, s.title), copy, copied),
    h('p', { class: 'hint' }, s.hint),
    pre);
}

export async function connectView({ el, signal }) {
  const usable = await profiles(signal);
  const profile = (usable.find((p) => p.default && p.scope === 'per_session') ?? usable.find((p) => p.scope === 'per_session') ?? usable[0])?.name ?? 'default';
  const url = `${location.origin}/mcp`;
  const useToken = h('input', { type: 'checkbox', id: 'connect-use-token' });
  const record = auth.current();
  const cards = h('div', { class: 'connect-snippets' });
  const render = () => {
    const token = useToken.checked ? (auth.token() ?? PLACEHOLDER) : PLACEHOLDER;
    fill(cards, snippets(url, token, profile).map(snippetCard));
  };
  useToken.addEventListener('change', render);
  render();
  fill(el,
    h('h1', null, 'Connect an agent'),
    h('p', { class: 'lead' }, 'Give an AI agent sandboxes as tools: this gateway serves MCP at ', h('code', { id: 'connect-url' }, url),
      ' (run_code, run_command, files, sessions, tasks), under your identity and profiles. Copy the configuration for your client.'),
    h('section', { class: 'card', id: 'connect-credential', 'aria-labelledby': 'connect-credential-h' },
      h('h2', { id: 'connect-credential-h' }, 'Credential'),
      h('p', null, 'The snippets send ', h('code', null, `Authorization: Bearer ${PLACEHOLDER}`), '. Replace ', h('code', null, PLACEHOLDER),
        ' with an API key (', h('a', { href: '#/keys' }, 'make one'), ': it lasts as long as you choose and can be revoked), or with ',
        h('code', null, 'sandgate token'), ' from the CLI.'),
      h('label', { class: 'check' }, useToken, ' Fill in my current sign-in token',
        record?.exp ? h('span', { class: 'hint' }, ' (it expires ', time(new Date(record.exp * 1000).toISOString()), ')') : null),
      h('p', { class: 'warning small' }, 'Anyone with the credential acts as you: keep it out of shared files and repositories.')),
    cards,
    h('p', { class: 'hint' }, 'Other function-calling clients: ', h('code', null, 'GET /v1/agent/tools?format=openai'),
      ' (or anthropic, mcp) gives the same tools as definitions; see ', h('a', { href: '/docs/' }, 'the API docs'), '.'));
}
