// Drives daytonafake with Daytona's official TypeScript SDK: the calls a Daytona user makes
// (create from a snapshot and from an image, run a command, move files, run code, keep
// state in a session and in an interpreter context, delete). Run by ../../sdk_test.go with
// DAYTONA_FAKE_API_URL and DAYTONA_FAKE_API_KEY; prints one JSON object of what it saw.
import { Daytona } from '@daytonaio/sdk'

const daytona = new Daytona({
  apiKey: process.env.DAYTONA_FAKE_API_KEY,
  apiUrl: process.env.DAYTONA_FAKE_API_URL,
  target: 'us',
})

const seen = {}
const steps = []
async function step(name, fn) {
  try {
    seen[name] = await fn()
    steps.push(name)
  } catch (e) {
    seen[name] = { error: String(e && e.message ? e.message : e), status: e && e.statusCode }
  }
}

const sandbox = await daytona.create({ language: 'python', envVars: { GREETING: 'hello from env' }, labels: { suite: 'fidelity' } })
seen.created = { id: sandbox.id, state: sandbox.state, target: sandbox.target, toolbox: sandbox.toolboxProxyUrl }

await step('command', async () => {
  const r = await sandbox.process.executeCommand('echo hello sdk')
  return { exitCode: r.exitCode, result: r.result }
})
await step('commandExit', async () => {
  const r = await sandbox.process.executeCommand("sh -c 'echo bye; exit 3'")
  return { exitCode: r.exitCode, result: r.result }
})
await step('env', async () => {
  const r = await sandbox.process.executeCommand('printenv GREETING')
  return r.result
})
await step('workDir', () => sandbox.getWorkDir())
await step('files', async () => {
  await sandbox.fs.uploadFile(Buffer.from('first file\n'), 'docs/hello.txt')
  await sandbox.fs.uploadFiles([{ source: Buffer.from([0, 1, 2, 255]), destination: 'docs/bytes.bin' }])
  const text = (await sandbox.fs.downloadFile('docs/hello.txt')).toString()
  const bytes = [...(await sandbox.fs.downloadFile('docs/bytes.bin'))]
  const list = (await sandbox.fs.listFiles('docs')).map((f) => ({ name: f.name, size: f.size, isDir: f.isDir })).sort((a, b) => a.name.localeCompare(b.name))
  const info = await sandbox.fs.getFileDetails('docs/hello.txt')
  await sandbox.fs.deleteFile('docs/bytes.bin')
  const after = (await sandbox.fs.listFiles('docs')).map((f) => f.name)
  let missing
  try {
    await sandbox.fs.downloadFile('docs/missing.txt')
    missing = 'no error'
  } catch (e) {
    missing = e.constructor.name
  }
  return { text, bytes, list, size: info.size, after, missing }
})
await step('codeRun', async () => {
  const r = await sandbox.process.codeRun('import os\nprint(6 * 7, os.environ["GREETING"])')
  return { exitCode: r.exitCode, result: r.result }
})
await step('session', async () => {
  await sandbox.process.createSession('fidelity')
  const a = await sandbox.process.executeSessionCommand('fidelity', { command: 'export COUNT=41; cd docs; echo out; echo err >&2' })
  const b = await sandbox.process.executeSessionCommand('fidelity', { command: 'echo $((COUNT + 1)) $(basename "$PWD")' })
  const c = await sandbox.process.executeSessionCommand('fidelity', { command: 'for i in 1 2 3; do echo line $i; done; echo oops >&2; exit 5', runAsync: true })
  let out = ''
  let err = ''
  await sandbox.process.getSessionCommandLogs('fidelity', c.cmdId, (s) => { out += s }, (s) => { err += s })
  let cmd = await sandbox.process.getSessionCommand('fidelity', c.cmdId)
  for (let i = 0; i < 50 && cmd.exitCode === undefined; i++) {
    await new Promise((r) => setTimeout(r, 100))
    cmd = await sandbox.process.getSessionCommand('fidelity', c.cmdId)
  }
  const logs = await sandbox.process.getSessionCommandLogs('fidelity', c.cmdId)
  await sandbox.process.deleteSession('fidelity')
  return {
    first: { exitCode: a.exitCode, stdout: a.stdout, stderr: a.stderr },
    second: { exitCode: b.exitCode, stdout: b.stdout },
    async: { streamedOut: out, streamedErr: err, exitCode: cmd.exitCode, stdout: logs.stdout, stderr: logs.stderr },
  }
})
await step('interpreter', async () => {
  const ctx = await sandbox.codeInterpreter.createContext()
  const a = await sandbox.codeInterpreter.runCode('answer = 41', { context: ctx })
  const b = await sandbox.codeInterpreter.runCode('import sys\nprint(answer + 1)\nprint("to err", file=sys.stderr)', { context: ctx })
  const c = await sandbox.codeInterpreter.runCode('1 / 0', { context: ctx })
  const contexts = (await sandbox.codeInterpreter.listContexts()).map((x) => x.id)
  await sandbox.codeInterpreter.deleteContext(ctx)
  const d = await sandbox.codeInterpreter.runCode('print("default context")')
  return {
    first: a.stdout,
    second: { stdout: b.stdout, stderr: b.stderr },
    error: c.error ? { name: c.error.name, value: c.error.value, traceback: c.error.traceback } : null,
    listed: contexts.includes(ctx.id),
    default: d.stdout,
  }
})
await step('fromImage', async () => {
  const img = await daytona.create({ image: 'python:3.12-slim', resources: { cpu: 2, memory: 4 } }, { timeout: 30 })
  const r = await img.process.executeCommand('echo built')
  const out = { state: img.state, cpu: img.cpu, memory: img.memory, result: r.result }
  await img.delete()
  return out
})
await step('list', async () => {
  const ids = []
  for await (const s of daytona.list({ labels: { suite: 'fidelity' } })) ids.push(s.id)
  return ids
})
await step('delete', async () => {
  await sandbox.delete()
  try {
    await daytona.get(sandbox.id)
    return 'still there'
  } catch (e) {
    return e.constructor.name
  }
})

seen.steps = steps
process.stdout.write(JSON.stringify(seen) + '\n')
await daytona[Symbol.asyncDispose]()
process.exit(0)
