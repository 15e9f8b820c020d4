// Drives Sandgate's E2B door with E2B's official JavaScript SDKs, unchanged: they reach it
// through E2B_API_URL, E2B_SANDBOX_URL and E2B_API_KEY only (set by ../../harness_test.go).
// `node door.mjs <scenario> [args…]` prints one JSON object of what the SDKs returned; the Go
// tests judge it. A call that throws is recorded as {thrown: {name, message, statusCode}}.
import { Sandbox as Base, CommandExitError } from 'e2b'
import { Sandbox } from '@e2b/code-interpreter'

const [scenario, ...args] = process.argv.slice(2)

// attempt records what p resolves to, or the exception it throws.
const attempt = async p => {
  try {
    return { value: await p }
  } catch (e) {
    return { thrown: { name: e.constructor.name, message: String(e.message), statusCode: e.statusCode ?? 0 } }
  }
}

// bracket runs call, which should make a sandbox end secs from when it ran, and reports whether
// the end that readEnd reads lies between secs after call started and secs after it returned
// (a second either way for rounding): no assumption on how long anything takes.
const bracket = async (call, secs, readEnd) => {
  const before = Date.now()
  await call()
  const after = Date.now()
  const end = (await readEnd()).getTime()
  return { within: end >= before + secs * 1000 - 1000 && end <= after + secs * 1000 + 1000, before, after, end }
}

const waitFor = async (what, pred) => {
  for (let i = 0; i < 600; i++) {
    if (await pred()) return
    await new Promise(r => setTimeout(r, 50))
  }
  throw new Error('timed out waiting for ' + what)
}

const scenarios = {
  // The control plane: create, info, list (metadata, state, pages), timeout, kill — and what
  // it refuses.
  async control () {
    const out = {}
    const sbx = await Base.create({ timeoutMs: 120_000, metadata: { suite: 'door', kind: 'first' }, envs: { FROM_CREATE: 'yes' } })
    const other = await Base.create({ metadata: { suite: 'door', kind: 'second' } })
    const third = await Base.create('default', { metadata: { suite: 'elsewhere' } })
    out.ids = [sbx.sandboxId, other.sandboxId, third.sandboxId]
    const info = await sbx.getInfo()
    out.info = {
      sandboxId: info.sandboxId, templateId: info.templateId, metadata: info.metadata, state: info.state,
      lifetimeS: Math.round((info.endAt - info.startedAt) / 1000), envdVersion: info.envdVersion, onTimeout: info.lifecycle?.onTimeout,
    }
    out.defaultLifetimeS = await other.getInfo().then(i => Math.round((i.endAt - i.startedAt) / 1000))
    const ids = async query => {
      const got = []
      const pages = Base.list({ query, limit: 1 })
      while (pages.hasNext) got.push(...(await pages.nextItems()).map(s => s.sandboxId))
      return got
    }
    out.listedDoor = await ids({ metadata: { suite: 'door' } })
    out.listedFirst = await ids({ metadata: { suite: 'door', kind: 'first' } })
    out.listedRunning = await ids({ state: ['running'] })
    out.listedPaused = await ids({ state: ['paused'] })
    out.listedAll = (await Base.list().nextItems()).map(s => ({ id: s.sandboxId, state: s.state, metadata: s.metadata }))
    out.setTimeout = await bracket(() => sbx.setTimeout(600_000), 600, async () => (await sbx.getInfo()).endAt)
    out.running = await sbx.isRunning()
    out.killed = await sbx.kill()
    out.killedAgain = await Base.kill(sbx.sandboxId)
    out.infoAfterKill = await attempt(Base.getInfo(sbx.sandboxId))
    out.connectAfterKill = await attempt(Base.connect(sbx.sandboxId))
    out.runningAfterKill = await sbx.isRunning()
    await other.kill()
    await third.kill()
    // Refused, not dropped.
    out.unknownTemplate = await attempt(Base.create('no-such-template'))
    out.egressRules = await attempt(Base.create({ network: { allowOut: ['1.1.1.1'] } }))
    out.internet = await attempt(Base.create('nonet', { allowInternetAccess: true }))
    out.noInternet = await attempt(Base.create('nonet', { allowInternetAccess: false }).then(s => s.kill()))
    out.metrics = await attempt(Base.getMetrics(other.sandboxId))
    out.snapshot = await attempt(Base.createSnapshot(third.sandboxId))
    out.volumes = await attempt(Base.create({ volumeMounts: { '/data': 'vol' } }))
    out.tooLong = await attempt(Base.create({ timeoutMs: 31 * 24 * 3600 * 1000 }))
    out.autoPause = await attempt(Base.create({ lifecycle: { onTimeout: 'pause' } }))
    return out
  },

  // What a caller without access gets: for another principal's sandbox id (args[0]), a
  // template its key may not use (args[1]).
  async refused () {
    const [id, template] = args
    return {
      connect: await attempt(Base.connect(id)),
      info: await attempt(Base.getInfo(id)),
      kill: await attempt(Base.kill(id)),
      timeout: await attempt(Base.setTimeout(id, 60_000)),
      pause: await attempt(Base.pause(id)),
      listed: (await Base.list().nextItems()).map(s => s.sandboxId),
      template: await attempt(Base.create(template)),
    }
  },

  // A key that no longer works (revoked): every call is an AuthenticationError.
  async revoked () {
    const [id] = args
    return {
      create: await attempt(Base.create()),
      list: await attempt(Base.list().nextItems()),
      info: await attempt(Base.getInfo(id)),
    }
  },

  // envd's process service: foreground commands with streaming callbacks, cwd and
  // environment, exit codes, stdin, background commands (listed, followed, killed with their
  // whole tree), a terminal, and what is refused.
  async commands () {
    const out = {}
    const sbx = await Sandbox.create({ timeoutMs: 300_000, envs: { FROM_CREATE: 'yes' } })
    out.sandboxId = sbx.sandboxId
    const streamed = []
    const ok = await sbx.commands.run('echo "hello $FROM_CREATE $EXTRA"; echo warn >&2; echo second', {
      envs: { EXTRA: 'extra' }, onStdout: d => streamed.push(['stdout', d]), onStderr: d => streamed.push(['stderr', d]),
    })
    out.command = { stdout: ok.stdout, stderr: ok.stderr, exitCode: ok.exitCode, streamed }
    // Streamed as it comes: the command waits for an answer to what it wrote first, which
    // the callback gives once it saw it.
    let sawFirst
    const seen = new Promise(resolve => { sawFirst = resolve })
    const asker = await sbx.commands.run('echo "first?"; read answer; echo "got $answer"', {
      background: true, stdin: true, onStdout: d => { if (d.includes('first?')) sawFirst() },
    })
    await seen
    await asker.sendStdin('streamed\n')
    out.streaming = (await asker.wait()).stdout
    await sbx.commands.run('mkdir -p sub/deeper')
    out.cwd = (await sbx.commands.run('pwd', { cwd: '/home/user/sub/deeper' })).stdout.trim()
    out.relativeCwd = (await sbx.commands.run('pwd', { cwd: 'sub' })).stdout.trim()
    try {
      await sbx.commands.run('echo partial; exit 3')
      out.failing = { thrown: false }
    } catch (e) {
      out.failing = { thrown: e instanceof CommandExitError, exitCode: e.exitCode, stdout: e.stdout }
    }

    // Standard input, fed and closed.
    const cat = await sbx.commands.run('cat', { background: true, stdin: true })
    await sbx.commands.sendStdin(cat.pid, 'fed through stdin\n')
    await sbx.commands.closeStdin(cat.pid)
    const fed = await cat.wait()
    out.stdin = { stdout: fed.stdout, exitCode: fed.exitCode }
    out.noStdin = await attempt(sbx.commands.run('sleep 5', { background: true }).then(h => sbx.commands.sendStdin(h.pid, 'x').finally(() => h.kill())))

    // Background: listed; a kill ends its whole tree.
    const tree = await sbx.commands.run('sleep 600 & sleep 601 & wait', { background: true })
    const count = async () => (await sbx.commands.run("for p in /proc/[0-9]*; do tr '\\0' ' ' < $p/cmdline 2>/dev/null; echo; done | grep -c '^sleep 60[01]' || true")).stdout.trim()
    await waitFor('the tree', async () => (await count()) === '2')
    out.listed = (await sbx.commands.list()).filter(p => p.pid === tree.pid).map(p => ({ cmd: p.cmd, args: p.args }))
    out.killed = await sbx.commands.kill(tree.pid)
    out.treeEnd = await attempt(tree.wait())
    out.treeLeft = await count()
    out.listedAfterKill = (await sbx.commands.list()).some(p => p.pid === tree.pid)
    out.killAgain = await sbx.commands.kill(tree.pid)

    // Connect: what the command writes from then on.
    let early = ''
    const talker = await sbx.commands.run('echo before; read x; echo "after $x"', { background: true, stdin: true, onStdout: d => { early += d } })
    await waitFor('before', () => early.includes('before'))
    let late = ''
    const follower = await sbx.commands.connect(talker.pid, { onStdout: d => { late += d } })
    await talker.sendStdin('go\n')
    const followed = await follower.wait()
    const talked = await talker.wait()
    out.connect = { starter: talked.stdout, follower: followed.stdout, exitCode: followed.exitCode }

    // A terminal: input, resize, exit; one killed.
    const decoder = new TextDecoder()
    let screen = ''
    const term = await sbx.pty.create({ rows: 24, cols: 80, onData: d => { screen += decoder.decode(d, { stream: true }) } })
    const type = text => sbx.pty.sendInput(term.pid, new TextEncoder().encode(text))
    await type('stty size; echo "TERM=$TERM"\n')
    await waitFor('the first stty size', () => screen.includes('24 80'))
    await sbx.pty.resize(term.pid, { cols: 100, rows: 30 })
    await type('stty size\n')
    await waitFor('the second stty size', () => screen.includes('30 100'))
    await type('exit 0\n')
    const termEnd = await term.wait()
    const doomed = await sbx.pty.create({ rows: 5, cols: 20, onData: () => {} })
    out.pty = { screen, exitCode: termEnd.exitCode, killed: await sbx.pty.kill(doomed.pid), killedEnd: await attempt(doomed.wait()) }

    // Refused: another user, a command past its timeout.
    out.root = await attempt(sbx.commands.run('id', { user: 'root' }))
    out.timedOut = await attempt(sbx.commands.run('sleep 30', { timeoutMs: 1500 }))
    await sbx.kill()
    return out
  },

  // envd's filesystem service and files API: write and read (text, bytes, several files at
  // once, gzip), list (depth), stat, exists, make a folder, rename, remove, watch a folder —
  // and the paths it refuses.
  async files () {
    const out = {}
    const sbx = await Sandbox.create({ timeoutMs: 300_000 })
    out.madeDir = await sbx.files.makeDir('watched')
    out.madeAgain = await sbx.files.makeDir('/home/user/watched')
    const events = []
    const watcher = await sbx.files.watchDir('watched', e => { events.push({ name: e.name, type: e.type }) }, { recursive: true })
    const written = await sbx.files.write('watched/hello.txt', 'written by the SDK\n')
    out.written = { path: written.path, name: written.name }
    // A watch compares listings: a change undone before it looks again is not seen.
    await waitFor('the write seen', () => events.some(e => e.name === 'hello.txt'))
    out.read = await sbx.files.read('/home/user/watched/hello.txt')
    await sbx.files.write('dir/bytes.bin', new Uint8Array([0, 1, 2, 255]).buffer)
    out.bytes = Array.from(await sbx.files.read('dir/bytes.bin', { format: 'bytes' }))
    await sbx.files.write('dir/zipped.txt', 'sent gzip-encoded', { gzip: true })
    out.zipped = await sbx.files.read('dir/zipped.txt')
    out.multi = (await sbx.files.write([{ path: 'multi/a.txt', data: 'A' }, { path: 'multi/b/c.txt', data: 'C' }])).map(e => e.path)
    const brief = e => ({ name: e.name, path: e.path, type: e.type, size: e.size })
    const byPath = (a, b) => a.path.localeCompare(b.path)
    out.listDeep = (await sbx.files.list('multi', { depth: 2 })).map(brief).sort(byPath)
    out.listShallow = (await sbx.files.list('multi')).map(brief).sort(byPath)
    out.info = brief(await sbx.files.getInfo('dir/bytes.bin'))
    out.homeInfo = brief(await sbx.files.getInfo('/home/user'))
    out.exists = await sbx.files.exists('dir/bytes.bin')
    out.existsMissing = await sbx.files.exists('dir/none.bin')
    out.renamed = brief(await sbx.files.rename('watched/hello.txt', 'watched/sub/moved.txt'))
    out.fromProgram = (await sbx.commands.run('cat watched/sub/moved.txt; od -An -tu1 dir/bytes.bin')).stdout
    await sbx.files.remove('multi')
    out.multiAfterRemove = await sbx.files.exists('multi')
    await sbx.files.remove('dir/bytes.bin')
    out.bytesAfterRemove = await sbx.files.exists('dir/bytes.bin')
    await sbx.files.remove('dir/none.bin')
    await waitFor('the rename seen', () => events.some(e => e.name === 'sub/moved.txt'))
    await watcher.stop()
    out.events = events

    out.missing = await attempt(sbx.files.read('none.txt'))
    out.folder = await attempt(sbx.files.read('watched'))
    out.listFile = await attempt(sbx.files.list('watched/sub/moved.txt'))
    out.outsideRead = await attempt(sbx.files.read('/etc/passwd'))
    out.outsideWrite = await attempt(sbx.files.write('/tmp/x', 'y'))
    out.outsideList = await attempt(sbx.files.list('/'))
    out.escape = await attempt(sbx.files.read('../../etc/passwd'))
    out.metadata = await attempt(sbx.files.write('m.txt', 'x', { metadata: { k: 'v' } }))
    out.rootUser = await attempt(sbx.files.read('watched/sub/moved.txt', { user: 'root' }))
    out.rootList = await attempt(sbx.files.list('watched', { user: 'root' }))
    await sbx.kill()
    return out
  },

  // The code interpreter: stateful code in the default context, streamed output, the last
  // expression's value, a chart and a table as rich results, errors with their name, value
  // and traceback, contexts of their own (python, bash, a working folder), restarted and
  // removed — and what it refuses.
  async code () {
    const out = {}
    const sbx = await Sandbox.create({ timeoutMs: 300_000, envs: { FROM_CREATE: 'yes' } })
    await sbx.runCode('x = 41')
    const streamed = []
    const next = await sbx.runCode('import time\nprint("one", flush=True)\ntime.sleep(0.5)\nprint(x + 1)', {
      onStdout: m => streamed.push(m.line), onResult: () => streamed.push('result'),
    })
    out.stateful = { stdout: next.logs.stdout.join(''), streamed: streamed.filter(c => c !== 'result').join(''), first: streamed[0], error: next.error ?? null }
    const value = await sbx.runCode('x * 2')
    out.value = { text: value.text, results: value.results.map(r => ({ text: r.text, main: r.isMainResult, formats: r.formats() })) }
    const chart = await sbx.runCode('import matplotlib\nmatplotlib.use("Agg")\nimport matplotlib.pyplot as plt\nplt.plot([1, 2, 3], [3, 1, 2])\nplt.show()')
    out.chart = chart.results.map(r => ({ main: r.isMainResult, formats: r.formats(), png: (r.png ?? '').slice(0, 12) }))
    const table = await sbx.runCode('import pandas as pd\npd.DataFrame({"a": [1, 2], "b": ["x", "y"]})')
    out.table = table.results.map(r => ({ main: r.isMainResult, formats: r.formats(), html: (r.html ?? '').includes('<table'), text: r.text }))
    const failed = await sbx.runCode('print("before")\nundefined_name')
    out.codeError = {
      stdout: failed.logs.stdout.join(''), stderr: failed.logs.stderr.join(''),
      name: failed.error?.name, value: failed.error?.value, traceback: failed.error?.traceback ?? '',
    }
    const warned = await sbx.runCode('import sys\nprint("warned", file=sys.stderr)')
    out.stderr = warned.logs.stderr.join('')
    out.envs = (await sbx.runCode('import os\nprint(os.environ["ONE"], os.environ["FROM_CREATE"])', { envs: { ONE: 'per run' } })).logs.stdout.join('')

    const ctx = await sbx.createCodeContext({ language: 'python' })
    await sbx.runCode('y = "own context"', { context: ctx })
    const own = await sbx.runCode('print(y)', { context: ctx })
    const isolated = await sbx.runCode('print(y)')
    out.contexts = {
      language: ctx.language, cwd: ctx.cwd, own: own.logs.stdout.join(''), isolated: isolated.error?.name ?? null,
      listed: (await sbx.listCodeContexts()).some(c => c.id === ctx.id && c.language === 'python'),
    }
    await sbx.restartCodeContext(ctx)
    out.contexts.afterRestart = (await sbx.runCode('print(y)', { context: ctx })).error?.name ?? null
    await sbx.removeCodeContext(ctx)
    out.contexts.listedAfterRemove = (await sbx.listCodeContexts()).some(c => c.id === ctx.id)
    out.contexts.removedRun = await attempt(sbx.runCode('1', { context: ctx }))
    await sbx.runCode('export V=7', { language: 'bash' })
    out.bash = (await sbx.runCode('echo "$((V * 6))"', { language: 'bash' })).logs.stdout.join('')
    out.bashFailing = (await sbx.runCode('false', { language: 'bash' })).error?.value ?? null
    await sbx.files.makeDir('sub')
    const placed = await sbx.createCodeContext({ cwd: '/home/user/sub' })
    out.placed = { cwd: placed.cwd, pwd: (await sbx.runCode('import os\nprint(os.getcwd())', { context: placed })).logs.stdout.join('') }

    out.unknownContext = await attempt(sbx.runCode('1', { context: { id: 'nope', language: 'python', cwd: '/home/user' } }))
    out.language = await attempt(sbx.runCode('1', { language: 'r' }))
    await sbx.kill()
    return out
  },

  // A sandbox's life: a second client connects and sees its files, variables and processes;
  // setTimeout; pause (state kept, nothing reachable meanwhile) and resume by connect; a
  // timeout that pauses (autoPause) and one that kills.
  async lifecycle () {
    const out = {}
    const sbx = await Sandbox.create({ timeoutMs: 300_000, metadata: { suite: 'lifecycle' } })
    const id = sbx.sandboxId
    await sbx.files.write('kept.txt', 'kept across clients and pauses')
    await sbx.runCode('z = 99')
    const bg = await sbx.commands.run('sleep 600', { background: true, timeoutMs: 0 })

    const again = await Sandbox.connect(id)
    out.secondClient = {
      read: await again.files.read('kept.txt'), z: (await again.runCode('print(z)')).logs.stdout.join(''),
      listed: (await again.commands.list()).some(p => p.pid === bg.pid),
    }
    out.setTimeout = await bracket(() => again.setTimeout(900_000), 900, async () => (await Base.getInfo(id)).endAt)

    out.paused = await sbx.pause()
    out.pausedAgain = await sbx.pause()
    out.stateWhilePaused = (await Base.getInfo(id)).state
    out.listedPaused = (await Base.list({ query: { state: ['paused'], metadata: { suite: 'lifecycle' } } }).nextItems()).map(s => s.sandboxId)
    out.runningWhilePaused = await sbx.isRunning()
    out.commandWhilePaused = await attempt(sbx.commands.run('true'))
    const resumed = await Sandbox.connect(id, { timeoutMs: 120_000 })
    out.afterResume = {
      state: (await Base.getInfo(id)).state, read: await resumed.files.read('kept.txt'),
      z: (await resumed.runCode('print(z)')).logs.stdout.join(''), listed: (await resumed.commands.list()).some(p => p.pid === bg.pid),
    }
    await sbx.kill()

    // Timeouts: one that pauses the sandbox, one that kills it.
    const napper = await Sandbox.create({ timeoutMs: 2_000, lifecycle: { onTimeout: 'pause' } })
    await napper.files.write('note.txt', 'written before the nap')
    const state = async s => { try { return (await Base.getInfo(s.sandboxId)).state } catch (e) { return e.constructor.name } }
    await waitFor('the auto-pause', async () => (await state(napper)) === 'paused')
    out.autoPaused = await state(napper)
    let woken
    const wokenEnd = await bracket(async () => { woken = await Sandbox.connect(napper.sandboxId) }, 15, async () => (await Base.getInfo(napper.sandboxId)).endAt)
    out.afterAutoPause = { state: await state(napper), read: await woken.files.read('note.txt'), end: wokenEnd }
    await woken.kill()
    const mayfly = await Sandbox.create({ timeoutMs: 2_000 })
    await waitFor('the timeout', async () => (await state(mayfly)) === 'SandboxNotFoundError')
    out.expired = await state(mayfly)
    return out
  },

  // A gateway without the door: creating fails at once, saying why.
  async closed () {
    return { create: await attempt(Base.create()) }
  },
}

const run = scenarios[scenario]
if (!run) throw new Error('unknown scenario ' + scenario)
console.log(JSON.stringify(await run()))
