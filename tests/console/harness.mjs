// What the console's browser tests run against: real processes, started
// and stopped here.
//
// - `switchyard up` (own process group, killed as a group on exit, even on
//   failure) with `[auth] required` and three tokens (admin "ops", engine
//   "engine", sidecar), in front of the reference server over stdio
//   (2026-07-28, with its interaction and task tools), server-everything
//   over stdio, and an `auth = "oauth"` server: the protected stub
//   (tests/peers/servers/http_stub.py) whose tokens the mock authorization
//   server (oauth_as.py) issues;
// - or, bare, `switchyard-control-plane` alone with no admin token (`up`
//   would make one), for the login page's "no admin token" state;
// - the `switchyard` CLI as an engine or an admin would run it;
// - Debian's Chromium, through playwright-core.
//
// The binaries come from ${CARGO_TARGET_DIR:-target}/debug (built before,
// see scripts/console-test.sh); the npm peers from tests/peers/node_modules.

import { spawn, execFile } from 'node:child_process';
import fs from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const here = path.dirname(fileURLToPath(import.meta.url));
export const ROOT = path.resolve(here, '..', '..');
const TARGET = path.resolve(ROOT, process.env.CARGO_TARGET_DIR || 'target', 'debug');
const PEERS = path.join(ROOT, 'tests', 'peers');

/** Bound on any one condition the tests wait for. */
export const LIMIT_MS = 30_000;

export function bin(name) {
  const p = path.join(TARGET, name);
  if (!fs.existsSync(p)) throw new Error(`${p} is missing: build first (cargo build --workspace --bins)`);
  return p;
}

function mustExist(p, what) {
  if (!fs.existsSync(p)) throw new Error(`${what} is missing at ${p}: run scripts/install-test-peers.sh`);
  return p;
}

export async function freePort() {
  return new Promise((resolve, reject) => {
    const s = net.createServer();
    s.once('error', reject);
    s.listen(0, '127.0.0.1', () => {
      const { port } = s.address();
      s.close(() => resolve(port));
    });
  });
}

/** Polls `f` (sync or async) until it answers something truthy; throws with the last value or error. */
export async function eventually(what, f, limitMs = LIMIT_MS) {
  const deadline = Date.now() + limitMs;
  let last;
  for (;;) {
    try {
      const v = await f();
      if (v) return v;
      last = v;
    } catch (e) {
      last = e;
    }
    if (Date.now() > deadline) {
      throw new Error(`${what}: not within ${limitMs} ms; last: ${last instanceof Error ? last.stack : JSON.stringify(last)}`);
    }
    await new Promise((r) => setTimeout(r, 100));
  }
}

const groups = new Set(); // pids of process groups we started
// Whatever is still running when this process ends (a failed or
// interrupted run): SIGTERM to each group, which `up` answers by stopping
// its sidecars and their servers (they run in process groups of their own).
process.on('exit', () => {
  for (const pid of groups) {
    try { process.kill(-pid, 'SIGTERM'); } catch (_) { /* gone */ }
  }
});

/**
 * Starts `cmd args` in a process group of its own, its output to `log`;
 * resolves with the child and the first `http://…` URL it prints.
 */
function startServer(cmd, args, env, log) {
  return new Promise((resolve, reject) => {
    const out = fs.openSync(log, 'a');
    const child = spawn(cmd, args, { env: { ...process.env, ...env }, stdio: ['ignore', 'pipe', 'pipe'], detached: true });
    groups.add(child.pid);
    let done = false;
    const timer = setTimeout(() => { if (!done) { done = true; reject(new Error(`${cmd} printed no URL within 30 s; see ${log}`)); } }, 30_000);
    const onData = (buf) => {
      fs.writeSync(out, buf);
      const m = /http:\/\/[^\s"',]+/.exec(buf.toString());
      if (m && !done) {
        done = true;
        clearTimeout(timer);
        resolve({ child, url: m[0] });
      }
    };
    child.stdout.on('data', onData);
    child.stderr.on('data', onData);
    child.on('exit', (code) => {
      groups.delete(child.pid);
      if (!done) { done = true; clearTimeout(timer); reject(new Error(`${cmd} exited (${code}) before printing its URL; see ${log}`)); }
    });
  });
}

async function stopGroup(child, graceMs = 15_000) {
  if (!child || child.exitCode !== null || child.signalCode !== null) { groups.delete(child && child.pid); return; }
  const exited = new Promise((r) => child.once('exit', r));
  try { process.kill(-child.pid, 'SIGTERM'); } catch (_) { /* gone */ }
  const t = setTimeout(() => { try { process.kill(-child.pid, 'SIGKILL'); } catch (_) { /* gone */ } }, graceMs);
  await exited;
  clearTimeout(t);
  // Whatever the leader left behind in its group.
  try { process.kill(-child.pid, 'SIGKILL'); } catch (_) { /* gone */ }
  groups.delete(child.pid);
}

const toml = (s) => JSON.stringify(String(s)); // a TOML basic string (JSON escapes are TOML's)

/** The whole setup: `up`, its servers, the CLI. */
export class Gateway {
  /**
   * `bare: true`: `switchyard-control-plane` alone (not `up`, which makes
   * an admin token when none is configured), with no admin token and no
   * server.
   */
  static async start(opts = {}) {
    const g = new Gateway();
    try {
      await g.boot(opts);
    } catch (e) {
      await g.stop();
      throw new Error(`${e.message}\n--- switchyard up log (tail; kept in ${g.dir}) ---\n${g.tail(60)}`);
    }
    return g;
  }

  async boot({ bare = false }) {
    const g = this;
    const admin = !bare;
    const oauth = !bare;
    g.dir = fs.mkdtempSync(path.join(os.tmpdir(), 'switchyard-console-'));
    g.tokens = { admin: 'admin-' + rand(), engine: 'engine-' + rand(), sidecar: 'sidecar-' + rand() };
    for (const [k, v] of Object.entries(g.tokens)) fs.writeFileSync(path.join(g.dir, k + '.token'), v + '\n', { mode: 0o600 });
    const python = 'python3';
    const servers = path.join(PEERS, 'servers');
    if (oauth) {
      g.as = await startServer(python, [mustExist(path.join(servers, 'oauth_as.py'), 'oauth_as.py')], {}, path.join(g.dir, 'oauth_as.log'));
      g.issuer = g.as.url.replace(/\/+$/, '');
      g.stub = await startServer(python, [mustExist(path.join(servers, 'http_stub.py'), 'http_stub.py')], { STUB_HTTP_OAUTH_AS: g.issuer }, path.join(g.dir, 'stub.log'));
      if (!new URL(g.stub.url).pathname.startsWith('/mcp')) g.stub.url = g.stub.url.replace(/\/?$/, '/mcp');
    }
    const grpc = await freePort();
    const http = await freePort();
    g.endpoint = `http://127.0.0.1:${grpc}`;
    g.origin = `http://127.0.0.1:${http}`;
    const everything = mustExist(path.join(PEERS, 'node_modules', '.bin', 'mcp-server-everything'), 'server-everything');
    const config = `[control_plane]
listen = "127.0.0.1:${grpc}"
http_listen = "127.0.0.1:${http}"
sidecar_lease_ttl_sec = 10

[store]
path = ${toml(path.join(g.dir, 'store', 'store.redb'))}

[auth]
required = true

${admin ? `[[auth.tokens]]
name = "ops"
role = "admin"
token_file = ${toml(path.join(g.dir, 'admin.token'))}` : ''}

[[auth.tokens]]
name = "engine"
role = "engine"
token_file = ${toml(path.join(g.dir, 'engine.token'))}

[[auth.tokens]]
name = "sidecars"
role = "sidecar"
token_file = ${toml(path.join(g.dir, 'sidecar.token'))}

${bare ? '' : `[[servers]]
name = "orders"
transport = "stdio"
command = ${toml(bin('switchyard-reference-server'))}
args = ["--era", "2026-07-28", "--interactions", "--tasks"]

[[servers]]
name = "everything"
transport = "stdio"
command = ${toml(everything)}
args = ["stdio"]
`}

${oauth ? `[[servers]]
name = "stub"
transport = "http"
url = ${toml(g.stub.url)}
auth = "oauth"` : ''}
`;
    g.config = path.join(g.dir, 'switchyard.toml');
    fs.writeFileSync(g.config, config);
    g.log = path.join(g.dir, 'up.log');
    const out = fs.openSync(g.log, 'a');
    g.env = {
      ...process.env,
      PATH: [TARGET, path.dirname(everything), process.env.PATH].join(path.delimiter),
      SWITCHYARD_SIDECAR_BIN: bin('switchyard-sidecar'),
      SWITCHYARD_LOG: 'info',
    };
    delete g.env.SWITCHYARD_TOKEN;
    const cmd = bare ? [bin('switchyard-control-plane'), ['--config', g.config]] : [bin('switchyard'), ['up', '--config', g.config]];
    g.up = spawn(cmd[0], cmd[1], { env: g.env, stdio: ['ignore', out, out], detached: true });
    groups.add(g.up.pid);
    g.up.on('exit', () => groups.delete(g.up.pid));
    if (admin) {
      await g.waitServers({ orders: 'up', everything: 'up' }, 90_000);
    } else {
      // Nobody may call the admin API: wait for the console to answer.
      await eventually('the console answers', async () => {
        if (g.up.exitCode !== null) throw new Error(`switchyard up exited ${g.up.exitCode}`);
        return (await fetch(g.origin + '/ui/api/session')).status === 401;
      }, 90_000);
    }
  }

  /** The last lines of `up`'s log, for failure messages. */
  tail(n = 60) {
    try {
      return fs.readFileSync(this.log, 'utf8').split('\n').slice(-n).join('\n');
    } catch (_) {
      return '';
    }
  }

  /** Runs the CLI as `who` ("admin" or "engine"); resolves {code, stdout, stderr}. */
  cli(who, args, { timeoutMs = LIMIT_MS } = {}) {
    return new Promise((resolve) => {
      execFile(bin('switchyard'), ['--endpoint', this.endpoint, ...args], {
        env: { ...this.env, SWITCHYARD_TOKEN: this.tokens[who] }, timeout: timeoutMs, maxBuffer: 16 << 20,
      }, (err, stdout, stderr) => {
        resolve({ code: err ? (typeof err.code === 'number' ? err.code : -1) : 0, stdout, stderr });
      });
    });
  }

  /** The CLI's stdout, failing on a non-zero exit. */
  async ok(who, args) {
    const r = await this.cli(who, args);
    if (r.code !== 0) throw new Error(`switchyard ${args.join(' ')} exited ${r.code}: ${r.stderr}${r.stdout}`);
    return r.stdout;
  }

  async json(who, args) {
    return JSON.parse(await this.ok(who, [...args, '--json']));
  }

  /**
   * Starts a CLI command that runs on (e.g. a call waiting for an
   * interaction); `.done` resolves {code, stdout, stderr} when it exits.
   */
  spawnCli(who, args) {
    const child = spawn(bin('switchyard'), ['--endpoint', this.endpoint, ...args], {
      env: { ...this.env, SWITCHYARD_TOKEN: this.tokens[who] }, stdio: ['ignore', 'pipe', 'pipe'], detached: true,
    });
    groups.add(child.pid);
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (d) => { stdout += d; });
    child.stderr.on('data', (d) => { stderr += d; });
    const done = new Promise((resolve) => child.on('exit', (code) => {
      groups.delete(child.pid);
      resolve({ code, stdout, stderr });
    }));
    return { child, done, output: () => stdout + stderr };
  }

  async servers() {
    const list = await this.json('admin', ['servers', 'list']);
    return Array.isArray(list) ? list : list.servers;
  }

  /** Waits until each named server is in the given state. */
  async waitServers(want, limitMs = LIMIT_MS) {
    await eventually(`servers ${JSON.stringify(want)}`, async () => {
      if (this.up.exitCode !== null) throw new Error(`switchyard up exited ${this.up.exitCode}\n${this.tail()}`);
      const list = await this.servers();
      const states = Object.fromEntries(list.map((s) => [s.name, s.state]));
      return Object.entries(want).every(([n, st]) => states[n] === st) ? states : (() => { throw new Error(JSON.stringify(states) + '\n' + this.tail(20)); })();
    }, limitMs);
  }

  async createSession(mode, servers = ['orders']) {
    const args = ['sessions', 'create', '--mode', mode];
    for (const s of servers) args.push('--server', s);
    return (await this.ok('engine', args)).trim();
  }

  async stop() {
    if (this.up) await stopGroup(this.up);
    await stopGroup(this.stub && this.stub.child, 5000);
    await stopGroup(this.as && this.as.child, 5000);
  }
}

function rand() {
  return Math.random().toString(36).slice(2) + Math.random().toString(36).slice(2);
}
