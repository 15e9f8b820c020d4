// Drives Sandgate's E2B door with E2B's official JavaScript SDKs, unchanged: they reach it
// through E2B_API_URL, E2B_SANDBOX_URL and E2B_API_KEY only (set by ../../harness_test.go).
// `node door.mjs <scenario> [args…]` prints one JSON object of what the SDKs returned; the Go
// tests judge it. A call that throws is recorded as {thrown: {name, message, statusCode}}.
import { Sandbox as Base } from 'e2b'
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
    await sbx.setTimeout(600_000)
    out.afterSetTimeoutS = await sbx.getInfo().then(i => Math.round((i.endAt - Date.now()) / 1000))
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

  // A gateway without the door: creating fails at once, saying why.
  async closed () {
    return { create: await attempt(Base.create()) }
  },
}

const run = scenarios[scenario]
if (!run) throw new Error('unknown scenario ' + scenario)
console.log(JSON.stringify(await run()))
