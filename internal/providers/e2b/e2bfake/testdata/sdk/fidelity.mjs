// Drives the fake with E2B's official SDKs; prints one JSON object of observations on stdout.
// The SDKs reach the fake through E2B_API_URL, E2B_SANDBOX_URL, E2B_DOMAIN and E2B_API_KEY
// (set by sdk_test.go). Each step records what the SDK returned; the Go test judges it.
import { Sandbox as Base, CommandExitError } from 'e2b'
import { Sandbox } from '@e2b/code-interpreter'

const out = {}
const sbx = await Sandbox.create('code-interpreter-v1', {
  timeoutMs: 300_000, metadata: { suite: 'fidelity' }, envs: { FROM_CREATE: 'yes' },
  network: { allowPublicTraffic: false },
})
out.sandboxId = sbx.sandboxId

// Commands: output, exit codes, environment, working folder, stdin.
const ok = await sbx.commands.run('echo "hello $FROM_CREATE $EXTRA"; echo warn >&2', { envs: { EXTRA: 'extra' } })
out.command = { stdout: ok.stdout, stderr: ok.stderr, exitCode: ok.exitCode }
try {
  await sbx.commands.run('echo partial; exit 3')
  out.failing = { thrown: false }
} catch (e) {
  out.failing = { thrown: e instanceof CommandExitError, exitCode: e.exitCode, stdout: e.stdout }
}
const bg = await sbx.commands.run('cat', { background: true, stdin: true })
await sbx.commands.sendStdin(bg.pid, 'fed through stdin\n')
await sbx.commands.closeStdin(bg.pid)
const fed = await bg.wait()
out.stdin = { stdout: fed.stdout, exitCode: fed.exitCode }
const sleeper = await sbx.commands.run('sleep 600', { background: true })
out.killed = await sbx.commands.kill(sleeper.pid)
try {
  await sleeper.wait()
  out.sleeper = { thrown: false }
} catch (e) {
  out.sleeper = { thrown: true, exitCode: e.exitCode, error: e.error }
}

// Background commands: list, connect (output from then on, as envd replays nothing), input
// through the handle, kill through the handle.
const waitFor = async (what, pred) => {
  for (let i = 0; i < 600; i++) {
    if (pred()) return
    await new Promise(r => setTimeout(r, 50))
  }
  throw new Error('timed out waiting for ' + what)
}
let early = ''
const talker = await sbx.commands.run('echo before; read x; echo "after $x"', { background: true, stdin: true, onStdout: d => { early += d } })
await waitFor('before', () => early.includes('before'))
const listed = await sbx.commands.list()
let late = ''
const follower = await sbx.commands.connect(talker.pid, { onStdout: d => { late += d } })
await talker.sendStdin('go\n')
await talker.closeStdin()
const followed = await follower.wait()
const talked = await talker.wait()
const doomed = await sbx.commands.run('sleep 600', { background: true })
const doomedKilled = await doomed.kill()
let doomedEnd
try {
  await doomed.wait()
  doomedEnd = { thrown: false }
} catch (e) {
  doomedEnd = { thrown: true, exitCode: e.exitCode }
}
out.background = {
  listed: listed.some(p => p.pid === talker.pid && p.cmd === '/bin/bash' && p.args.includes('echo before; read x; echo "after $x"')),
  starter: talked.stdout, follower: followed.stdout, followerExitCode: followed.exitCode,
  killed: doomedKilled, killedEnd: doomedEnd,
  listedAfterKill: (await sbx.commands.list()).some(p => p.pid === doomed.pid),
  killAgain: await sbx.commands.kill(doomed.pid),
}

// A terminal: bash -i -l on a pty; input, resize, exit; and one killed.
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
const doomedTerm = await sbx.pty.create({ rows: 5, cols: 20, onData: () => {} })
const termKilled = await sbx.pty.kill(doomedTerm.pid)
let termKilledEnd
try {
  await doomedTerm.wait()
  termKilledEnd = { thrown: false }
} catch (e) {
  termKilledEnd = { thrown: true, exitCode: e.exitCode }
}
out.pty = {
  screen, exitCode: termEnd.exitCode, killed: termKilled, killedEnd: termKilledEnd,
  resizeGone: await sbx.pty.resize(doomedTerm.pid, { cols: 10, rows: 10 }).then(() => 'resized', e => e.constructor.name),
}

// Files: write, read, list, stat, remove.
await sbx.files.write('dir/hello.txt', 'written by the SDK\n')
out.read = await sbx.files.read('dir/hello.txt')
await sbx.files.write('dir/bytes.bin', new Uint8Array([0, 1, 2, 255]).buffer)
out.bytes = Array.from(await sbx.files.read('dir/bytes.bin', { format: 'bytes' }))
out.list = (await sbx.files.list('dir')).map(e => ({ name: e.name, type: e.type, size: e.size })).sort((a, b) => a.name.localeCompare(b.name))
out.exists = await sbx.files.exists('dir/hello.txt')
await sbx.files.remove('dir/hello.txt')
out.existsAfterRemove = await sbx.files.exists('dir/hello.txt')
out.fromProgram = (await sbx.commands.run('cat dir/bytes.bin | od -An -tu1')).stdout.trim().split(/\s+/).map(Number)

// Stateful code: the default context and a context of our own.
await sbx.runCode('x = 41')
const next = await sbx.runCode('print(x + 1)')
out.stateful = { stdout: next.logs.stdout, stderr: next.logs.stderr, error: next.error ?? null }
const failed = await sbx.runCode('print("before")\nundefined_name')
out.codeError = { stdout: failed.logs.stdout, name: failed.error?.name, value: failed.error?.value, hasTraceback: (failed.error?.traceback ?? '').includes('NameError') }
const ctx = await sbx.createCodeContext({ language: 'python' })
await sbx.runCode('y = "own context"', { context: ctx })
const own = await sbx.runCode('print(y)', { context: ctx })
const isolated = await sbx.runCode('print(y)')
out.contexts = {
  own: own.logs.stdout,
  isolatedError: isolated.error?.name ?? null,
  listed: (await sbx.listCodeContexts()).some(c => c.id === ctx.id && c.language === 'python'),
}
await sbx.restartCodeContext(ctx)
out.contexts.afterRestart = (await sbx.runCode('print(y)', { context: ctx })).error?.name ?? null
await sbx.removeCodeContext(ctx)
out.contexts.listedAfterRemove = (await sbx.listCodeContexts()).some(c => c.id === ctx.id)

// Control plane: info, list, timeout, connect, kill.
const info = await Base.getInfo(sbx.sandboxId)
out.info = { templateId: info.templateId, metadata: info.metadata, state: info.state }
const paginator = Base.list({ query: { metadata: { suite: 'fidelity' } } })
out.listed = (await paginator.nextItems()).map(s => s.sandboxId).includes(sbx.sandboxId)
await sbx.setTimeout(600_000)
const again = await Sandbox.connect(sbx.sandboxId)
out.connected = (await again.commands.run('cat dir/bytes.bin | wc -c')).stdout.trim()
out.killed1 = await sbx.kill()
out.killed2 = await Base.kill(sbx.sandboxId)
try {
  await Sandbox.connect(sbx.sandboxId)
  out.connectAfterKill = 'connected'
} catch (e) {
  out.connectAfterKill = e.constructor.name
}
console.log(JSON.stringify(out))
