// The admin console (/ui, docs/console.md) in a real browser: Debian's
// Chromium driven by playwright-core, against `switchyard up` with the
// reference server, server-everything and an OAuth-protected stub behind
// the mock authorization server (see harness.mjs). Issue #17, items 4-5.
//
// The flows share one gateway and one browser and run in order: log in (a
// wrong token and an engine token first), the servers; a hint override set
// and cleared, seen in an engine session's tool list; a form card answered
// once with an invalid value, then validly, and the call's result; a
// `confirm` tool's call approved; an OAuth server authorized through the
// popup; a background call cancelled; the refusals (forged cookie, missing
// CSRF token, engine token) and escaping (HTML in an elicitation message,
// a URL and call arguments); log out. Every request any page made is
// checked to be on the control plane's origin, but for the OAuth popup's
// navigation to the authorization server.
//
// Run with scripts/console-test.sh. CONSOLE_SCREENSHOTS=1 also writes the
// screenshots of docs/images/console-*.png.

import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { chromium } from 'playwright-core';
import { Gateway, LIMIT_MS, ROOT, eventually } from './harness.mjs';

const CHROMIUM = process.env.CHROMIUM || '/usr/bin/chromium';
const SCREENSHOTS = process.env.CONSOLE_SCREENSHOTS === '1';
const HOSTILE_SERVER = path.join(path.dirname(new URL(import.meta.url).pathname), 'hostile_server.py');

let gw;
let browser;
let context;
let page;
const requests = []; // {url, page, navigation}
let popupPage = null;
const pageErrors = []; // uncaught errors and CSP refusals of the console page
const failedRequests = []; // control-plane requests that failed (network) or answered 404/5xx (any 4xx for a non-API file)
let failed = false;
let readOnlySession = '';

/** `it`, remembering a failure (the gateway's log and files are then kept and shown). */
function step(name, fn) {
  it(name, async (t) => {
    try {
      await fn(t);
    } catch (e) {
      failed = true;
      throw e;
    }
  });
}

async function screenshot(name, fullPage = true) {
  if (!SCREENSHOTS) return;
  const dir = path.join(ROOT, 'docs', 'images');
  fs.mkdirSync(dir, { recursive: true });
  await page.evaluate(() => window.scrollTo(0, 0));
  await page.screenshot({ path: path.join(dir, `console-${name}.png`), fullPage });
}

/** Waits until `locator`'s text matches `re`; answers the text. */
async function text(locator, re, what) {
  return eventually(what || `text ${re}`, async () => {
    const t = await locator.textContent({ timeout: 1000 });
    return t !== null && re.test(t) ? t : null;
  });
}

/** The console API from Node, with `cookie` (a Cookie header value) and extra headers. */
async function apiFetch(method, p, { cookie, headers = {}, body } = {}) {
  const h = { ...headers };
  if (cookie) h.cookie = cookie;
  if (body !== undefined) h['content-type'] = 'application/json';
  const r = await fetch(gw.origin + '/ui/api/' + p, { method, headers: h, body: body === undefined ? undefined : JSON.stringify(body), redirect: 'manual' });
  let json = null;
  try { json = await r.json(); } catch (_) { /* not JSON */ }
  return { status: r.status, json, setCookie: r.headers.get('set-cookie') };
}

async function cookieHeader() {
  const cookies = await context.cookies(gw.origin + '/ui/');
  const c = cookies.find((x) => x.name === 'switchyard_console');
  assert.ok(c, `no switchyard_console cookie: ${JSON.stringify(cookies.map((x) => x.name))}`);
  return { header: `switchyard_console=${c.value}`, cookie: c };
}

const serverRow = (name) => page.locator(`[data-testid="server-row"][data-server="${name}"]`);
const toolRow = (upstream) => page.locator(`[data-testid="tool-row"][data-tool="${upstream}"]`);
const hintRow = (upstream, hint) => toolRow(upstream).locator(`[data-testid="hint-row"][data-hint="${hint}"]`);
const cardOf = (session, kind) => page.locator(`[data-testid="interaction-card"][data-session="${session}"][data-kind="${kind}"][data-status="open"]`);

async function go(hash) {
  await page.goto(gw.origin + '/ui/' + hash);
  await page.getByTestId('nav').waitFor({ state: 'visible' });
}

async function engineTools(session) {
  const r = await gw.json('engine', ['tools', '--session', session]);
  return (r.tools || []).map((t) => t.name);
}

describe('the admin console in a real browser', { concurrency: 1, timeout: 240_000 }, () => {
  before(async () => {
    assert.ok(fs.existsSync(CHROMIUM), `${CHROMIUM} is missing: apt-get install chromium (scripts/install-test-peers.sh)`);
    gw = await Gateway.start();
    browser = await chromium.launch({
      executablePath: CHROMIUM,
      args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run', '--disable-background-networking', '--disable-component-update', '--disable-sync'],
    });
    context = await browser.newContext({ viewport: { width: 1440, height: 900 } });
    context.setDefaultTimeout(LIMIT_MS);
    context.on('request', (req) => {
      let p = null;
      try { p = req.frame().page(); } catch (_) { p = null; }
      requests.push({ url: req.url(), page: p, navigation: req.isNavigationRequest() });
    });
    context.on('requestfailed', (req) => {
      const f = req.failure();
      // A stream or fetch the page itself ends (navigation, logout) is aborted, not failed.
      if (f && /ERR_ABORTED/.test(f.errorText)) return;
      if (req.url().startsWith(gw.origin)) failedRequests.push(`${req.method()} ${req.url()}: ${f ? f.errorText : 'failed'}`);
    });
    context.on('response', (r) => {
      const u = r.url();
      if (!u.startsWith(gw.origin)) return;
      const api = new URL(u).pathname.startsWith('/ui/api/');
      // API refusals (401 before the login, 400/403 the tests provoke) are answers, not failures.
      if (r.status() === 404 || r.status() >= 500 || (!api && r.status() >= 400)) failedRequests.push(`${r.request().method()} ${u}: ${r.status()}`);
    });
    page = await context.newPage();
    page.on('dialog', (d) => d.accept());
    page.on('pageerror', (e) => pageErrors.push('page error: ' + e.message));
    page.on('console', (m) => {
      if (m.type() !== 'error') return;
      // A refused API call is logged by Chromium as "Failed to load resource: ... 401"; those are
      // checked through the responses above. Anything else is an error of the page.
      if (/Failed to load resource: the server responded with a status of (400|401|403|409)\b/.test(m.text())) return;
      pageErrors.push('console: ' + m.text());
    });
  });

  after(async () => {
    if (browser) await browser.close().catch(() => {});
    if (gw) {
      if (failed) console.error(`--- switchyard up log (tail; everything is kept in ${gw.dir}) ---\n${gw.tail(120)}`);
      await gw.stop();
      if (!failed) fs.rmSync(gw.dir, { recursive: true, force: true });
    }
  });

  step('refuses a wrong token and an engine token, then logs an admin in and shows the servers', async () => {
    await page.goto(gw.origin + '/ui/');
    await page.getByTestId('login-form').waitFor();
    assert.equal(await page.getByTestId('login-token').getAttribute('type'), 'password');

    await page.getByTestId('login-token').fill('not-a-token');
    await page.getByTestId('login-submit').click();
    const wrong = await text(page.getByTestId('alert-text'), /\S/, 'the refusal is shown');
    assert.ok(await page.getByTestId('login-form').isVisible(), 'still on the login page');
    assert.ok(await page.getByTestId('nav').isHidden());

    await page.getByTestId('login-token').fill(gw.tokens.engine);
    await page.getByTestId('login-submit').click();
    await eventually('the engine token is refused', async () => (await page.getByTestId('alert').isVisible()) && (await page.getByTestId('login-form').isVisible()));
    assert.ok(await page.getByTestId('nav').isHidden(), 'an engine token does not log in');
    assert.ok(wrong.length > 0);

    await page.getByTestId('login-token').fill(gw.tokens.admin);
    await page.getByTestId('login-submit').click();
    await page.getByTestId('nav').waitFor({ state: 'visible' });
    assert.equal(await page.getByTestId('admin-name').textContent(), 'ops');
    assert.ok(await page.getByTestId('alert').isHidden(), 'the earlier refusal is gone');
    const { cookie } = await cookieHeader();
    assert.equal(cookie.httpOnly, true);
    assert.equal(cookie.sameSite, 'Strict');
    assert.equal(await page.evaluate(() => document.cookie), '', 'the script cannot read the cookie');

    await page.getByTestId('servers-table').waitFor();
    await text(serverRow('orders').getByTestId('server-state'), /^up$/);
    await text(serverRow('everything').getByTestId('server-state'), /^up$/);
    await text(serverRow('orders').getByTestId('server-protocol'), /2026-07-28/);
    await text(serverRow('everything').getByTestId('server-protocol'), /2025-11-25/);
    await text(serverRow('stub').getByTestId('server-oauth'), /needs_authorization/);
    assert.ok(await serverRow('stub').getByTestId('server-authorize').isVisible());
    assert.equal(await serverRow('orders').getByTestId('server-authorize').count(), 0, 'no Authorize for a server without OAuth');
    await text(page.getByTestId('live-status'), /^live$/, 'the event stream is open');
    await screenshot('servers');
  });

  step('sets and clears a hint override, and the engine\'s tool list follows', async () => {
    const session = await gw.createSession('read_only');
    readOnlySession = session;
    assert.ok((await engineTools(session)).includes('orders__get_order'), 'a read-only session sees get_order');
    await go('#/servers/orders');
    const row = hintRow('get_order', 'readOnlyHint');
    await text(row.getByTestId('hint-effective'), /^true$/);
    await text(row.getByTestId('hint-source'), /^declared$/);
    assert.equal(await row.getByTestId('hint-declared').textContent(), 'true');
    await text(toolRow('get_order').getByTestId('tool-title'), /^Get order$/);
    await text(toolRow('get_order').getByTestId('tool-name'), /^orders__get_order$/);
    assert.equal(await toolRow('get_order').getByTestId('tool-upstream').textContent(), 'get_order');
    assert.match(await toolRow('get_order').getByTestId('tool-output-summary').textContent(), /id \(string, required\)/, 'the output-schema summary');
    assert.equal(await toolRow('get_order').getByTestId('tool-open-world').count(), 0);
    assert.equal(await toolRow('link_account').getByTestId('tool-open-world').count(), 1, 'an open-world tool is marked');
    assert.equal(await hintRow('link_account', 'openWorldHint').getByTestId('hint-set-true').count(), 0, 'openWorld has no override');
    assert.match(await hintRow('link_account', 'openWorldHint').getByTestId('hint-not-overridable').getAttribute('title'), /readOnly, destructive and idempotent only/);
    // A read-only tool: destructive and idempotent are marked not applicable.
    await text(hintRow('get_order', 'destructiveHint').getByTestId('hint-not-applicable'), /n\/a: read-only/);
    assert.match(await toolRow('get_order').getByTestId('tool-policy-help').textContent(), /default: called without asking, except in ask sessions/);

    await row.getByTestId('hint-set-false').click();
    await text(row.getByTestId('hint-source'), /^override$/, 'the override is shown');
    await text(page.getByTestId('notice-text'), /Saved: readOnlyHint of orders__get_order is overridden to false/, 'the save is confirmed');
    assert.equal(await hintRow('get_order', 'destructiveHint').getByTestId('hint-not-applicable').count(), 0, 'no longer read-only: destructive applies');
    await text(row.getByTestId('hint-effective'), /^false$/);
    assert.equal(await row.getByTestId('hint-declared').textContent(), 'true', 'the declared hint stays shown');
    await eventually('the read-only session no longer sees get_order', async () => !(await engineTools(session)).includes('orders__get_order'));
    await screenshot('tools', false);

    await row.getByTestId('hint-clear').click();
    await text(row.getByTestId('hint-source'), /^declared$/, 'the override is cleared');
    await text(row.getByTestId('hint-effective'), /^true$/);
    await eventually('the read-only session sees get_order again', async () => (await engineTools(session)).includes('orders__get_order'));
  });

  step('answers a form card: an invalid value is refused next to its field, a valid one goes to the server', async () => {
    const session = await gw.createSession('auto');
    const call = gw.spawnCli('engine', ['call', 'orders__confirm_order_form', '--session', session, '--json', '--args', '{"order_id":"O-1002"}']);
    await go('#/interactions');
    const card = cardOf(session, 'form');
    await card.waitFor();
    await text(card.getByTestId('card-message'), /^Confirm the delivery details of order O-1002\.$/);
    await text(page.getByTestId('nav-open-count'), /^1$/, 'the nav counts the open interaction');
    assert.equal(await card.getByTestId('card-cancel').textContent(), 'Cancel (no answer)');
    assert.match(await card.getByTestId('card-decline').getAttribute('title'), /said no/);
    // Every field kind of the reference server's form is rendered.
    const field = (name) => card.locator(`[data-testid="field"][data-field="${name}"]`);
    for (const [name, kind] of [['contact_name', 'string'], ['email', 'string'], ['delivery_date', 'string'], ['tip_percent', 'number'], ['quantity', 'integer'], ['gift_wrap', 'boolean'], ['shipping_speed', 'single_select'], ['carrier', 'single_select'], ['notify_via', 'multi_select'], ['extras', 'multi_select']]) {
      assert.equal(await field(name).getAttribute('data-kind'), kind, name);
    }
    assert.equal(await field('email').locator('input').getAttribute('type'), 'email');
    assert.equal(await field('delivery_date').locator('input').getAttribute('type'), 'date');
    assert.equal(await field('contact_name').locator('input').inputValue(), 'Ada Lovelace', 'defaults are pre-filled');
    assert.match(await field('contact_name').getByTestId('field-hint').textContent(), /at least 2 characters/);

    await field('contact_name').locator('input').fill('A');
    await field('delivery_date').locator('input').fill('2026-05-01');
    await card.getByTestId('card-accept').click();
    const problem = await text(field('contact_name').getByTestId('field-error'), /\S/, 'the field error appears next to the field');
    assert.match(problem, /2|short|length/i, problem);
    assert.ok(await field('email').getByTestId('field-error').isHidden(), 'no error next to a valid field');
    assert.equal(await card.getAttribute('data-status'), 'open');
    assert.equal(call.child.exitCode, null, 'the call still waits');
    await screenshot('interactions');

    await field('contact_name').locator('input').fill('Grace Hopper');
    await card.getByTestId('card-accept').click();
    await card.waitFor({ state: 'detached' });
    await page.getByTestId('nav-open-count').waitFor({ state: 'hidden' });
    // Resolved, the card says who answered and when.
    await page.getByTestId('interactions-show-resolved').check();
    await text(page.locator(`[data-testid="interaction-card"][data-session="${session}"][data-kind="form"]`).getByTestId('card-resolved'), /^answered accept \d+ s ago$/);
    await page.getByTestId('interactions-show-resolved').uncheck();
    const done = await call.done;
    assert.equal(done.code, 0, done.stdout + done.stderr);
    const result = JSON.parse(done.stdout);
    const answer = result.structuredContent || JSON.parse(result.content[0].text);
    assert.equal(answer.action, 'accept', done.stdout);
    assert.equal(answer.content.contact_name, 'Grace Hopper', done.stdout);
    assert.equal(answer.content.delivery_date, '2026-05-01', done.stdout);
  });

  step('approves a call of a tool whose policy is confirm', async () => {
    await go('#/servers/orders');
    const policy = toolRow('echo').getByTestId('tool-policy');
    await policy.selectOption('confirm');
    await text(toolRow('echo').getByTestId('tool-policy-source'), /set by an admin/);
    await text(page.getByTestId('notice-text'), /Saved: policy of orders__echo is confirm/);
    const settings = await gw.json('admin', ['servers', 'tools', 'orders']);
    const echo = (settings.tools || settings).find((t) => t.upstreamName === 'echo');
    assert.equal(echo.policy, 'confirm', JSON.stringify(echo));

    const session = await gw.createSession('auto');
    const message = '<i id=injected-arg>approved</i>';
    const call = gw.spawnCli('engine', ['call', 'orders__echo', '--session', session, '--args', JSON.stringify({ message })]);
    await go('#/interactions');
    const card = cardOf(session, 'approval');
    await card.waitFor();
    await text(card.getByTestId('card-tool'), /echo/);
    await text(card.getByTestId('card-arguments'), /"message": "<i id=injected-arg>approved<\/i>"/, 'the arguments, pretty-printed, as text');
    assert.equal(await page.locator('#injected-arg').count(), 0);
    assert.equal(call.child.exitCode, null, 'the call waits for the approval');
    await card.getByTestId('card-approve').click();
    await card.waitFor({ state: 'detached' });
    const done = await call.done;
    assert.equal(done.code, 0, done.stdout + done.stderr);
    assert.ok(done.stdout.includes(message), done.stdout);

    await go('#/servers/orders');
    await toolRow('echo').getByTestId('tool-policy-clear').click();
    await text(toolRow('echo').getByTestId('tool-policy-source'), /derived/);
  });

  step('shows a URL card with its domain and never opens it by itself', async () => {
    const session = await gw.createSession('auto');
    const call = gw.spawnCli('engine', ['call', 'orders__link_account', '--session', session, '--args', JSON.stringify({ account: '<b>acme</b>' })]);
    await go('#/interactions');
    const card = cardOf(session, 'url');
    await card.waitFor();
    await text(card.getByTestId('card-domain'), /^accounts\.example\.com$/);
    await text(card.getByTestId('card-message'), /Sign in to <b>acme<\/b> to link/);
    assert.equal(await card.locator('b').count(), 0, 'no <b> element from the message');
    const url = await card.getByTestId('card-url').textContent();
    assert.ok(url.startsWith('https://accounts.example.com/link?account='), url);
    const open = card.getByTestId('card-open');
    assert.equal(await open.getAttribute('target'), '_blank');
    assert.equal(await open.getAttribute('rel'), 'noopener noreferrer');
    assert.ok((await open.getAttribute('href')).startsWith('https://accounts.example.com/'));
    assert.equal(context.pages().length, 1, 'no window was opened');
    await card.getByTestId('card-decline').click();
    await card.waitFor({ state: 'detached' });
    const done = await call.done;
    assert.notEqual(done.code, 0, 'a declined link is an error result: ' + done.stdout);
  });

  step('authorizes an OAuth server: the popup goes to the authorization server and back, the list updates', async () => {
    await go('#/servers');
    const row = serverRow('stub');
    await text(row.getByTestId('server-oauth'), /needs_authorization/);
    const popupSeen = context.waitForEvent('page');
    await row.getByTestId('server-authorize').click();
    await page.locator('[data-testid="authorize-waiting"][data-server="stub"]').waitFor();
    popupPage = await popupSeen;
    await popupPage.waitForLoadState('load');
    await eventually('the callback page says the server is authorized', async () => {
      const u = new URL(popupPage.url());
      if (u.origin !== gw.origin) return false;
      return /authorized/i.test(await popupPage.locator('body').textContent());
    });
    // The list updates from the event stream, without a reload.
    await text(row.getByTestId('server-oauth'), /^authorized$/, 'the list shows the server authorized');
    await page.locator('[data-testid="authorize-waiting"]').waitFor({ state: 'detached' });
    await popupPage.close();
    await gw.waitServers({ stub: 'up' });
    await text(row.getByTestId('server-state'), /^up$/);
  });

  step('cancels a background call', async () => {
    await go('#/servers/orders');
    await toolRow('task_forever').getByTestId('tool-background').selectOption('always');
    await eventually('background always is stored', async () => {
      const s = await gw.json('admin', ['servers', 'tools', 'orders']);
      return (s.tools || s).find((t) => t.upstreamName === 'task_forever').background === 'always';
    });
    // A background-only change is an admin setting too: "clear" is offered.
    await text(page.getByTestId('notice-text'), /Saved: background mode of orders__task_forever is always/);
    await text(toolRow('task_forever').getByTestId('tool-policy-source'), /set by an admin/);
    await eventually('clear is enabled after a background-only change', async () => toolRow('task_forever').getByTestId('tool-policy-clear').isEnabled());
    const session = await gw.createSession('auto');
    const moved = await gw.json('engine', ['call', 'orders__task_forever', '--session', session, '--args', '{"pollIntervalMs":200}']);
    const id = moved.movedToBackground && moved.movedToBackground.id;
    assert.ok(id, JSON.stringify(moved));

    await go('#/background');
    const row = page.locator(`[data-testid="background-row"][data-id="${id}"]`);
    await text(row.getByTestId('background-status'), /^(working|input_required)$/);
    await text(row.getByTestId('background-message'), /\S/, 'the message column says something about a running call');
    await screenshot('background');
    await row.getByTestId('background-cancel').click(); // confirm() is accepted
    await eventually('the call is cancelled', async () => {
      const list = await gw.json('admin', ['background', 'list', '--all', '--session', session]);
      const c = (list.calls || list).find((x) => x.id === id);
      return c && c.status === 'cancelled';
    });
    await row.waitFor({ state: 'detached' }); // finished calls are hidden by default
    await page.getByTestId('bg-filter-finished').check();
    await text(page.locator(`[data-testid="background-row"][data-id="${id}"]`).getByTestId('background-status'), /^cancelled$/);
  });

  step('adds, edits and removes a server from the console; HTML in its tool\'s title and description shows as text', async () => {
    await go('#/servers');
    await page.getByTestId('server-add').click();
    const form = page.getByTestId('server-form');
    await form.getByTestId('server-form-name').fill('hostile');
    await form.getByTestId('server-form-transport').selectOption('stdio');
    await form.getByTestId('server-form-command').fill('python3');
    await form.getByTestId('server-form-args').fill(HOSTILE_SERVER);
    await form.getByTestId('server-form-max-message-bytes').fill('2097152');
    await form.getByTestId('server-form-submit').click();
    await form.waitFor({ state: 'detached' });
    await text(serverRow('hostile').getByTestId('server-state'), /^up$/, 'the added server comes up');
    assert.equal((await gw.servers()).find((s) => s.name === 'hostile').maxMessageBytes, 2097152);
    await serverRow('hostile').getByTestId('server-name').click();
    const row = toolRow('hostile');
    await text(row.getByTestId('tool-title'), /^<b id=injected-title>Hostile<\/b>$/, 'the title shows literally');
    const desc = await text(row.getByTestId('tool-description'), /<script id=injected-script>/, 'the description shows literally');
    assert.ok(desc.includes('<img src=x id=injected-img onerror="document.title=1">'), desc);
    assert.ok(desc.includes('<b id=injected-desc>Bold?</b> & "quotes"'), desc);
    assert.equal(await page.locator('#injected-title, #injected-desc, #injected-img, #injected-script').count(), 0, 'no element was injected');
    assert.notEqual(await page.title(), '1');
    assert.notEqual(await page.title(), '2');

    // Edit: the form comes pre-filled; the update goes through.
    await go('#/servers');
    await serverRow('hostile').getByTestId('server-edit').click();
    const edit = page.getByTestId('server-form');
    assert.equal(await edit.getByTestId('server-form-name').inputValue(), 'hostile');
    assert.equal(await edit.getByTestId('server-form-command').inputValue(), 'python3');
    assert.equal(await edit.getByTestId('server-form-args').inputValue(), HOSTILE_SERVER);
    assert.equal(await edit.getByTestId('server-form-max-message-bytes').inputValue(), '2097152');
    await edit.getByTestId('server-form-era').selectOption('2025-11-25');
    await edit.getByTestId('server-form-submit').click();
    await edit.waitFor({ state: 'detached' });
    await eventually('the update is stored', async () => (await gw.servers()).find((s) => s.name === 'hostile').era === '2025-11-25');
    assert.equal((await gw.servers()).find((s) => s.name === 'hostile').maxMessageBytes, 2097152, 'the limit is kept');

    await serverRow('hostile').getByTestId('server-remove').click(); // confirm() is accepted
    await serverRow('hostile').waitFor({ state: 'detached' });
    await eventually('the server is gone', async () => !(await gw.servers()).some((s) => s.name === 'hostile'));
  });

  step('says why a server\'s sidecar cannot run, live', async () => {
    // The page is open and following events before the server exists: the
    // launch error comes as a change event (it is in no store).
    await go('#/servers');
    await text(page.getByTestId('live-status'), /^live$/, 'the page follows events');
    // Its header file is missing: `up` starts its sidecar, which exits
    // at once, naming the file.
    await gw.cli('admin', ['servers', 'add', '--name', 'nofile', '--transport', 'http', '--url', 'http://127.0.0.1:9/mcp',
      '--header-file', 'Authorization=/nonexistent/switchyard-console-token']);
    const why = await text(serverRow('nofile').getByTestId('server-last-error'), /^not running: .*switchyard-console-token/,
      'the launch error is shown');
    assert.match(why, /its sidecar exited/, why);
    await gw.ok('admin', ['servers', 'remove', 'nofile']);
    await go('#/servers');
    await serverRow('nofile').waitFor({ state: 'detached' });
  });

  step('refuses a bad server with the API\'s error text', async () => {
    await go('#/servers');
    await page.getByTestId('server-add').click();
    const form = page.getByTestId('server-form');
    await form.getByTestId('server-form-name').fill('bad name!');
    await form.getByTestId('server-form-command').fill('python3');
    assert.equal(await form.getByTestId('server-form-name').getAttribute('placeholder'), 'e.g. github');
    await form.getByTestId('server-form-submit').click();
    const msg = await text(form.locator('[data-testid="server-form-error"][data-field="name"]'), /\S/, 'the refusal is shown next to Name');
    assert.match(msg, /name|letter|character/i, msg);
    assert.ok(await page.getByTestId('alert').isHidden(), 'not in the banner');
    assert.ok(await form.isVisible(), 'the form stays open to fix it');
    // A limit out of range: shown next to its field.
    await form.getByTestId('server-form-name').fill('tiny');
    await form.getByTestId('server-form-max-message-bytes').fill('100');
    await form.getByTestId('server-form-submit').click();
    const limit = await text(form.locator('[data-testid="server-form-error"][data-field="maxMessageBytes"]'), /\S/, 'the refusal is shown next to the limit');
    assert.match(limit, /1024/, limit);
    await form.getByTestId('server-form-cancel').click();
  });

  step('lists the sessions', async () => {
    await go('#/sessions');
    await page.getByTestId('sessions-table').waitFor();
    const n = await eventually('sessions listed', async () => {
      const c = await page.getByTestId('session-row').count();
      return c >= 5 ? c : 0;
    });
    assert.ok(n >= 5);
    const row = page.locator(`[data-testid="session-row"][data-session="${readOnlySession}"]`);
    assert.match(await row.textContent(), /read_only/);
    assert.match(await row.textContent(), /engine/, 'the owner');
    assert.equal((await row.getByTestId('session-open-interactions').textContent()).trim(), '0');
  });

  step('refuses an engine token, a forged cookie and a write without the CSRF token', async () => {
    const { header } = await cookieHeader();
    assert.equal((await apiFetch('GET', 'session', { cookie: header })).status, 200, 'the real cookie works');
    assert.equal((await apiFetch('GET', 'servers', { cookie: 'switchyard_console=forged' })).status, 401);
    const tampered = header.slice(0, -2) + (header.endsWith('AA') ? 'BB' : 'AA');
    assert.equal((await apiFetch('GET', 'servers', { cookie: tampered })).status, 401);
    assert.equal((await apiFetch('GET', 'servers')).status, 401, 'no cookie');

    // A write with the real cookie but no CSRF header: 403, and nothing changed.
    const hintPath = 'servers/orders/tools/get_order/hints';
    const noCsrf = await apiFetch('POST', hintPath, { cookie: header, body: { readOnlyHint: false } });
    assert.equal(noCsrf.status, 403, JSON.stringify(noCsrf.json));
    assert.ok(noCsrf.json && noCsrf.json.error, JSON.stringify(noCsrf.json));
    const wrongCsrf = await apiFetch('POST', hintPath, { cookie: header, headers: { 'x-switchyard-csrf': 'nope' }, body: { readOnlyHint: false } });
    assert.equal(wrongCsrf.status, 403);
    // The same from the page's own script (the browser sends the cookie).
    const fromPage = await page.evaluate(async (p) => (await fetch('/ui/api/' + p, { method: 'POST', credentials: 'same-origin', headers: { 'Content-Type': 'application/json' }, body: '{"readOnlyHint":false}' })).status, hintPath);
    assert.equal(fromPage, 403);
    const tools = await apiFetch('GET', 'servers/orders/tools', { cookie: header });
    const t = tools.json.tools.find((x) => x.upstreamName === 'get_order');
    assert.equal(t.hintSources.readOnlyHint, 'declared', 'no refused write went through');

    // The console's answers carry the CSP.
    const r = await fetch(gw.origin + '/ui/');
    const csp = r.headers.get('content-security-policy') || '';
    assert.match(csp, /default-src 'none'/);
    assert.match(csp, /script-src 'self'/);
    assert.doesNotMatch(csp, /unsafe-inline/);

    // An engine token cannot open a console session (docs/console.md: 401).
    const engine = await apiFetch('POST', 'login', { body: { token: gw.tokens.engine } });
    assert.ok(!engine.json || !('csrf' in engine.json), JSON.stringify(engine.json));
    assert.ok(!/switchyard_console=/.test(engine.setCookie || ''), 'no cookie for an engine token');
    assert.equal(engine.status, 403, JSON.stringify(engine.json));
  });

  step('shows the login page when the session ends elsewhere (the logout event)', async () => {
    await go('#/servers');
    await text(page.getByTestId('live-status'), /^live$/, 'the event stream is open');
    const { header } = await cookieHeader();
    const s = await apiFetch('GET', 'session', { cookie: header });
    assert.equal(s.status, 200);
    const out = await apiFetch('POST', 'logout', { cookie: header, headers: { 'x-switchyard-csrf': s.json.csrf }, body: {} });
    assert.equal(out.status, 200, JSON.stringify(out.json));
    await page.getByTestId('login-form').waitFor();
    await text(page.getByTestId('login-message'), /^Your session ended; log in again\.$/);
    assert.ok(await page.getByTestId('nav').isHidden());
    // Log in again for the next steps.
    await page.getByTestId('login-token').fill(gw.tokens.admin);
    await page.getByTestId('login-submit').click();
    await page.getByTestId('nav').waitFor({ state: 'visible' });
  });

  step('shows the login page on any 401 answer', async () => {
    await go('#/sessions');
    await page.getByTestId('sessions-table').waitFor();
    // An API answer of 401 (here made up, so the event stream cannot be what tells the page).
    const unauth = (r) => r.fulfill({ status: 401, contentType: 'application/json', body: '{"error":"not logged in","code":"UNAUTHENTICATED"}' });
    await page.route('**/ui/api/background?*', unauth);
    try {
      await page.getByTestId('nav-background').click();
      await page.getByTestId('login-form').waitFor();
      await text(page.getByTestId('login-message'), /^Your session ended; log in again\.$/);
    } finally {
      await page.unroute('**/ui/api/background?*', unauth);
    }
    await page.getByTestId('login-token').fill(gw.tokens.admin);
    await page.getByTestId('login-submit').click();
    await page.getByTestId('nav').waitFor({ state: 'visible' });
  });

  step('logs out, and the cookie no longer works', async () => {
    const { header } = await cookieHeader();
    await go('#/servers');
    await page.getByTestId('logout').click();
    await page.getByTestId('login-form').waitFor();
    assert.ok(await page.getByTestId('nav').isHidden());
    assert.equal((await apiFetch('GET', 'session', { cookie: header })).status, 401, 'the old cookie is refused');
    await page.reload();
    await page.getByTestId('login-form').waitFor();
  });

  step('made no request outside the control plane (but the OAuth popup\'s authorization redirect)', async () => {
    assert.ok(requests.length > 20, `${requests.length} requests recorded`);
    const issuer = new URL(gw.issuer).origin;
    const callback = gw.origin + '/admin/v1/mcp/oauth/callback';
    // The one request allowed to leave: the popup's navigation to the mock
    // authorization server's /authorize, redirecting back to this control
    // plane's callback. (Playwright cannot name the page of a popup's first
    // navigation, so "not the console's page" is what is checked.)
    const isAuthorizeRedirect = (r) => {
      const u = new URL(r.url);
      return r.navigation && r.page !== page && u.origin === issuer && u.pathname === '/authorize'
        && u.searchParams.get('redirect_uri') === callback;
    };
    const outside = requests.filter((r) => new URL(r.url).origin !== gw.origin && !isAuthorizeRedirect(r));
    assert.deepEqual(outside.map((r) => r.url), []);
    assert.equal(requests.filter(isAuthorizeRedirect).length, 1, 'the popup went to the authorization server once');
    assert.ok(requests.some((r) => r.url.startsWith(callback + '?')), 'and came back to the callback');
  });

  step('says on the login page when no admin token is configured', async () => {
    const bare = await Gateway.start({ bare: true });
    const ctx = await browser.newContext();
    try {
      const p = await ctx.newPage();
      await p.goto(bare.origin + '/ui/');
      const note = p.getByTestId('login-no-admin-tokens');
      await note.waitFor();
      assert.match(await note.textContent(), /No admin token is configured/);
      assert.match(await note.textContent(), /role = "admin"/);
      const r = await fetch(bare.origin + '/ui/api/session');
      assert.equal(r.status, 401);
      assert.equal((await r.json()).adminTokens, false);
    } finally {
      await ctx.close();
      await bare.stop();
      fs.rmSync(bare.dir, { recursive: true, force: true });
    }
  });

  step('raised no script error, no Content-Security-Policy refusal and no failed request to the control plane', () => {
    assert.deepEqual(pageErrors, []);
    assert.deepEqual(failedRequests, []);
  });
});
