// The Switchyard admin console (docs/console.md): a page of plain
// JavaScript, no framework and no build step, served by the control plane
// at /ui with a strict Content-Security-Policy. It talks only to the
// console API under /ui/api (relative to this script's URL) and its event
// stream; it never holds a token (the session cookie is HttpOnly).
//
// Safety rule: every element is built with document.createElement and
// every server-provided string (names, descriptions, messages, URLs,
// errors) goes in as text (textContent, attribute values). Nothing is ever
// parsed as HTML, and no style attribute is set (CSS classes only).
//
// Routes (hash): #/servers, #/servers/<name> (its tools), #/sessions,
// #/background, #/interactions.
//
// Stable data-testid attributes, for the browser tests
// (tests/console/console.test.mjs):
//
//   Frame:  nav, nav-servers, nav-sessions, nav-background, nav-interactions,
//           admin-name, logout, live-status (text "live" / "reconnecting…"),
//           alert (role=alert; its text in alert-text), alert-dismiss,
//           notice (role=status; its text in notice-text), notice-dismiss,
//           nav-open-count (open interactions, every session; hidden at 0),
//           page-title.
//   Login:  login-form, login-token, login-submit, login-no-admin-tokens,
//           login-message (why the login page is shown), login-up-hint.
//   Servers: server-add, servers-table, server-row (data-server=NAME),
//           server-name (a link to the tools), server-state,
//           server-protocol, server-transport, server-sidecars,
//           server-era, server-command (one .arg chip per argument),
//           server-counts, server-last-error, server-oauth,
//           server-oauth-reason, server-edit, server-remove,
//           server-authorize, server-deauthorize, authorize-waiting
//           (data-server=NAME; holds authorize-link), authorize-done.
//   Server form: server-form, server-form-name, server-form-transport,
//           server-form-command, server-form-args, server-form-url,
//           server-form-era, server-form-auth, server-form-headers,
//           server-form-oauth-client-id, server-form-oauth-client-secret,
//           server-form-oauth-scopes, server-form-oauth-metadata-url,
//           server-form-env, server-form-cwd, server-form-timeout,
//           server-form-max-message-bytes, server-form-liveness,
//           server-form-header-files, server-form-oauth-help,
//           server-form-error (data-field=name|transport|era|timeout|
//           maxMessageBytes|liveness|
//           command|args|env|cwd|url|auth|headers|headerFiles|clientId|
//           clientSecret|scopes|metadataUrl|oauth),
//           server-form-submit, server-form-cancel.
//   Tools:  tools-table, tool-row (data-tool=UPSTREAM NAME, data-name=
//           ENGINE NAME), tool-title, tool-name, tool-upstream,
//           tool-description, tool-output-summary, tool-open-world,
//           tool-not-in-catalogue, hint-row (data-hint=readOnlyHint|
//           destructiveHint|idempotentHint|openWorldHint), hint-declared,
//           hint-effective, hint-source, hint-set-true, hint-set-false,
//           hint-clear, hint-not-applicable, hint-not-overridable,
//           tools-legend, tool-policy (select), tool-policy-help,
//           tool-policy-source, tool-policy-clear, tool-background
//           (select), tool-background-help.
//   Sessions: sessions-table, session-row (data-session=ID),
//           session-open-interactions.
//   Background: background-table, background-row (data-id=ID),
//           background-status, background-cancel, bg-filter-status,
//           bg-filter-server, bg-filter-mode, bg-filter-session,
//           bg-filter-finished, bg-apply, bg-next, bg-first, bg-empty,
//           background-message.
//   Interactions: interactions-filter-session, interactions-show-resolved,
//           interactions-list, interactions-empty, interaction-card
//           (data-id=ID, data-kind=form|url|approval|roots,
//           data-status=open|...), card-message, card-error (problems not
//           tied to a field), field (data-field=NAME; the input inside has
//           name=NAME), field-error (inside its field), field-hint,
//           card-accept, card-decline, card-cancel, card-url, card-domain,
//           card-open (the only link to the URL; never followed by the
//           page itself), card-tool, card-server, card-arguments,
//           card-approve, card-deny, card-outcome, card-resolved
//           ("answered <outcome> <age> ago"), field-tz (date-time fields).
(function () {
  'use strict';

  // ---------------------------------------------------------------- basics

  const SCRIPT_URL = document.currentScript ? document.currentScript.src : location.href;
  const API = new URL('api/', SCRIPT_URL).pathname; // "/ui/api/"
  const DEBOUNCE_MS = 200;

  const state = {
    admin: '',
    csrf: '',
    page: null, // the mounted page: {route, reload()}
    events: null, // the EventSource
    reloadTimer: 0,
  };

  /**
   * Builds an element. `props`: `class`, `testid`, `text`, `on` ({event:
   * handler}), `attrs` ({name: value}, set with setAttribute: never
   * `style` or an `on*` handler), and any other key as a DOM property
   * (`type`, `value`, `checked`, `disabled`, `href`, ...). Children:
   * nodes, or strings (as text), or null/false (skipped), or arrays.
   */
  function el(tag, props, ...children) {
    const node = document.createElement(tag);
    const p = props || {};
    for (const [k, v] of Object.entries(p)) {
      if (v === undefined || v === null) continue;
      if (k === 'class') node.className = v;
      else if (k === 'testid') node.dataset.testid = v;
      else if (k === 'text') node.textContent = String(v);
      else if (k === 'on') for (const [ev, fn] of Object.entries(v)) node.addEventListener(ev, fn);
      else if (k === 'attrs') for (const [a, av] of Object.entries(v)) {
        if (av !== undefined && av !== null && av !== false) node.setAttribute(a, String(av));
      }
      else if (k === 'data') for (const [dk, dv] of Object.entries(v)) node.dataset[dk] = String(dv);
      else node[k] = v;
    }
    append(node, children);
    return node;
  }

  function append(node, children) {
    for (const c of children) {
      if (c === null || c === undefined || c === false) continue;
      if (Array.isArray(c)) append(node, c);
      else if (c instanceof Node) node.appendChild(c);
      else node.appendChild(document.createTextNode(String(c)));
    }
  }

  function clear(node) {
    while (node.firstChild) node.removeChild(node.firstChild);
  }

  const $ = (id) => document.getElementById(id);

  function fmtTime(ms) {
    if (!ms) return '';
    const d = new Date(Number(ms));
    return d.toLocaleString(undefined, { year: 'numeric', month: 'short', day: '2-digit', hour: '2-digit', minute: '2-digit', second: '2-digit' });
  }

  function fmtAge(ms) {
    if (!ms) return '';
    let s = Math.max(0, Math.round((Date.now() - Number(ms)) / 1000));
    if (s < 60) return s + ' s';
    const m = Math.floor(s / 60);
    if (m < 60) return m + ' min ' + (s % 60) + ' s';
    const h = Math.floor(m / 60);
    if (h < 48) return h + ' h ' + (m % 60) + ' min';
    return Math.floor(h / 24) + ' d';
  }

  function badge(text, kind, testid) {
    return el('span', { class: 'badge badge-' + (kind || 'neutral'), text: text, testid: testid });
  }

  /** The badge colour of a state word. */
  function tone(word) {
    switch (String(word || '').toLowerCase()) {
      case 'up': case 'authorized': case 'completed': case 'connected': case 'ready': case 'accepted': case 'accept': case 'approved': case 'approve':
        return 'good';
      case 'working': case 'starting': case 'connecting': case 'open': case 'input_required': case 'needs_authorization': case 'pending':
        return 'warn';
      case 'down': case 'failed': case 'error': case 'needs_reauthorization': case 'unavailable': case 'denied': case 'deny': case 'disabled':
        return 'bad';
      default:
        return 'neutral';
    }
  }

  // ------------------------------------------------------------ messages

  const SESSION_ENDED = 'Your session ended; log in again.';

  /** The alert toast: stays until dismissed or the next successful action. */
  function showError(text) {
    $('alert-text').textContent = String(text || 'Something went wrong.');
    $('alert').hidden = false;
  }

  function clearError() {
    $('alert').hidden = true;
    $('alert-text').textContent = '';
  }

  /** The success toast: hides itself after NOTICE_MS; a success also clears the alert. */
  let noticeTimer = 0;
  const NOTICE_MS = 4000;
  function showNotice(text) {
    clearError();
    $('notice-text').textContent = text;
    $('notice').hidden = false;
    clearTimeout(noticeTimer);
    noticeTimer = setTimeout(hideNotice, NOTICE_MS);
  }

  function hideNotice() {
    clearTimeout(noticeTimer);
    $('notice').hidden = true;
  }

  // ------------------------------------------------------------------ API

  class ApiError extends Error {
    constructor(status, body) {
      const msg = (body && typeof body.error === 'string' && body.error) || ('HTTP ' + status);
      super(msg);
      this.status = status;
      this.code = body && body.code;
      this.fieldErrors = (body && Array.isArray(body.fieldErrors)) ? body.fieldErrors : [];
      this.body = body || {};
    }
  }

  /**
   * Calls the console API. A write (anything but GET) carries the CSRF
   * header and a JSON body (`{}` when there is nothing to send). Answers
   * the parsed JSON; throws ApiError. A 401 outside the login itself
   * means the session ended: the login page is shown.
   */
  async function api(method, path, body) {
    const opts = { method: method, credentials: 'same-origin', headers: { Accept: 'application/json' }, cache: 'no-store' };
    if (method !== 'GET') {
      opts.headers['Content-Type'] = 'application/json';
      opts.headers['X-Switchyard-Csrf'] = state.csrf;
      opts.body = JSON.stringify(body === undefined ? {} : body);
    }
    let resp;
    try {
      resp = await fetch(API + path, opts);
    } catch (e) {
      throw new ApiError(0, { error: 'The control plane could not be reached (' + e.message + ').' });
    }
    let data = null;
    const text = await resp.text();
    if (text) {
      try { data = JSON.parse(text); } catch (_) { data = { error: text.slice(0, 500) }; }
    }
    if (!resp.ok) {
      const err = new ApiError(resp.status, data);
      if (resp.status === 401 && path !== 'login' && path !== 'session') {
        if (state.csrf) showLogin(data, SESSION_ENDED);
      }
      throw err;
    }
    return data || {};
  }

  /** Runs a write; shows its refusal in the alert toast (cleared when it works). Answers the result or null. */
  async function act(fn) {
    try {
      const r = await fn();
      clearError();
      return r;
    } catch (e) {
      if (e instanceof ApiError && e.status === 401) return null;
      showError(e.message);
      return null;
    }
  }

  const enc = encodeURIComponent;

  // ---------------------------------------------------------------- login

  function showLogin(info, why) {
    stopEvents();
    state.admin = '';
    state.csrf = '';
    state.page = null;
    $('nav').hidden = true;
    $('who').hidden = true;
    clearError();
    hideNotice();
    const main = $('main');
    clear(main);
    const adminTokens = !info || info.adminTokens !== false;
    const token = el('input', {
      type: 'password', id: 'login-token', name: 'token', autocomplete: 'current-password',
      testid: 'login-token', required: true, attrs: { 'aria-label': 'Admin token' },
    });
    const submit = el('button', { type: 'submit', class: 'btn btn-primary', testid: 'login-submit', text: 'Log in' });
    const form = el('form', { class: 'login-card', testid: 'login-form', noValidate: true },
      el('h1', { text: 'Log in to Switchyard', testid: 'page-title' }),
      why ? el('p', { class: 'callout callout-info', testid: 'login-message', text: why }) : null,
      adminTokens ? null : el('div', { class: 'callout callout-warn', testid: 'login-no-admin-tokens' },
        el('strong', { text: 'No admin token is configured, so nobody can log in.' }),
        el('p', { text: 'Add an entry like this to the control plane\'s configuration, put a long random token in the file, and restart it:' }),
        el('pre', { class: 'code', text: '[[auth.tokens]]\nname = "ops"\nrole = "admin"\ntoken_file = "/etc/switchyard/admin.token"' }),
        el('p', { class: 'muted', text: '`switchyard up` makes one for you. See docs/console.md.' })),
      el('label', { class: 'field-label', htmlFor: 'login-token', text: 'Admin token' }),
      token,
      el('p', { class: 'hint', text: 'The content of the token_file of an [[auth.tokens]] entry with role "admin". It is sent once; the page keeps only a session cookie.' }),
      el('p', { class: 'hint', testid: 'login-up-hint' }, 'Running ', el('code', { text: 'switchyard up' }), '? It printed the file holding the token (for the quickstart: ',
        el('code', { text: 'examples/.switchyard/console-admin.token' }), ').'),
      el('div', { class: 'actions' }, submit));
    form.addEventListener('submit', async (ev) => {
      ev.preventDefault();
      clearError();
      if (!token.value) { showError('Enter an admin token.'); return; }
      submit.disabled = true;
      try {
        const s = await api('POST', 'login', { token: token.value });
        token.value = '';
        loggedIn(s);
      } catch (e) {
        showError(e.message);
        token.select();
      } finally {
        submit.disabled = false;
      }
    });
    main.appendChild(form);
    token.focus();
  }

  function loggedIn(s) {
    state.admin = s.admin || '';
    state.csrf = s.csrf || '';
    $('admin-name').textContent = state.admin;
    $('nav').hidden = false;
    $('who').hidden = false;
    startEvents();
    if (!location.hash || location.hash === '#' || location.hash === '#/') {
      location.hash = '#/servers';
    } else {
      route();
    }
  }

  async function logout() {
    const ok = await act(async () => { stopEvents(); await api('POST', 'logout', {}); return true; });
    if (ok) showLogin(null, 'You are logged out.');
    else if (state.csrf) startEvents();
  }

  // --------------------------------------------------------------- events

  function startEvents() {
    stopEvents();
    if (typeof EventSource === 'undefined') return;
    const es = new EventSource(API + 'events', { withCredentials: false });
    state.events = es;
    const live = $('live');
    es.onopen = () => { live.textContent = 'live'; live.className = 'live live-on'; };
    es.onerror = () => {
      // EventSource reconnects by itself; a closed one (e.g. a 401) is
      // reopened after a check of the session.
      live.textContent = 'reconnecting…';
      live.className = 'live live-off';
      if (es.readyState === EventSource.CLOSED) {
        setTimeout(async () => {
          if (state.events !== es) return;
          try {
            await api('GET', 'session');
            startEvents();
          } catch (e) {
            if (e instanceof ApiError && e.status === 401) showLogin(e.body, SESSION_ENDED);
            else setTimeout(() => { if (state.events === es) startEvents(); }, 3000);
          }
        }, 1000);
      }
    };
    es.addEventListener('change', (ev) => {
      scheduleReload();
      let topic = '';
      try { topic = JSON.parse(ev.data).topic; } catch (_) { topic = ''; }
      if (topic === 'interactions' || topic === 'sessions' || topic === '') scheduleCount();
    });
    // The session is gone (logged out elsewhere, expired, its token
    // removed): the stream ends after this.
    es.addEventListener('logout', () => {
      if (state.events !== es) return;
      showLogin(null, SESSION_ENDED);
    });
    // Open (or open again): what changed before it opened came as no event.
    es.addEventListener('ready', () => { scheduleReload(); scheduleCount(); });
  }

  // The count of open interactions (every session) on the nav tab.
  let countTimer = 0;
  let countSeq = 0;
  function scheduleCount() {
    clearTimeout(countTimer);
    countTimer = setTimeout(refreshCount, DEBOUNCE_MS);
  }

  async function refreshCount() {
    if (!state.csrf) return;
    const mine = ++countSeq;
    let n;
    try {
      const r = await api('GET', 'interactions');
      n = (r.interactions || []).filter((i) => i.status === 'open').length;
    } catch (_) {
      return;
    }
    if (mine !== countSeq || !state.csrf) return;
    const b = $('open-count');
    b.textContent = String(n);
    b.hidden = n === 0;
    b.title = n + (n === 1 ? ' open interaction' : ' open interactions') + ', every session';
  }

  function stopEvents() {
    clearTimeout(countTimer);
    countSeq++;
    $('open-count').hidden = true;
    if (state.events) {
      state.events.close();
      state.events = null;
    }
    const live = $('live');
    live.textContent = 'offline';
    live.className = 'live live-off';
  }

  function scheduleReload() {
    clearTimeout(state.reloadTimer);
    state.reloadTimer = setTimeout(() => {
      if (state.page && state.page.reload) state.page.reload();
    }, DEBOUNCE_MS);
  }

  // --------------------------------------------------------------- router

  function route() {
    if (!state.csrf) return;
    const hash = location.hash.replace(/^#\/?/, '').split('?')[0];
    const parts = hash.split('/').map((p) => { try { return decodeURIComponent(p); } catch (_) { return p; } });
    clearError();
    hideNotice();
    const main = $('main');
    clear(main);
    let page;
    switch (parts[0]) {
      case 'servers':
        page = parts[1] ? toolsPage(main, parts[1]) : serversPage(main);
        break;
      case 'sessions': page = sessionsPage(main); break;
      case 'background': page = backgroundPage(main); break;
      case 'interactions': page = interactionsPage(main); break;
      default:
        location.hash = '#/servers';
        return;
    }
    for (const a of document.querySelectorAll('#nav a')) {
      a.classList.toggle('active', a.dataset.route === parts[0]);
      if (a.dataset.route === parts[0]) a.setAttribute('aria-current', 'page'); else a.removeAttribute('aria-current');
    }
    state.page = page;
    page.reload();
  }

  /** A page's header: title, optional subtitle and actions on the right. */
  function pageHeader(title, sub, ...actions) {
    return el('div', { class: 'page-header' },
      el('div', {}, el('h1', { text: title, testid: 'page-title' }), sub ? el('p', { class: 'muted sub', text: sub }) : null),
      el('div', { class: 'page-actions' }, actions));
  }

  /** Loads data with `load` and renders it with `render`; keeps the last error shown. */
  function loader(load, render) {
    let seq = 0;
    return async function reload() {
      const mine = ++seq;
      try {
        const data = await load();
        if (mine !== seq) return;
        render(data);
      } catch (e) {
        if (mine !== seq) return;
        if (e instanceof ApiError && e.status === 401) return;
        showError(e.message);
      }
    };
  }

  function table(testid, headers, rows, emptyText) {
    const t = el('table', { class: 'table', testid: testid },
      el('thead', {}, el('tr', {}, headers.map((h) => el('th', { text: h })))),
      el('tbody', {}, rows));
    if (!rows.length) {
      t.tBodies[0].appendChild(el('tr', {}, el('td', { class: 'empty', colSpan: headers.length, text: emptyText || 'Nothing here.' })));
    }
    return el('div', { class: 'table-wrap' }, t);
  }

  // -------------------------------------------------------------- servers

  function serversPage(main) {
    const formSlot = el('div', {});
    const waitSlot = el('div', {});
    const body = el('div', {});
    const waiting = new Map(); // server -> {authorizedAtMs, reason, url}
    main.append(
      pageHeader('Servers', 'The MCP servers behind the gateway, their sidecars and their OAuth state.',
        el('button', { type: 'button', class: 'btn btn-primary', testid: 'server-add', text: 'Add server', on: { click: () => openForm(null) } })),
      formSlot, waitSlot, body);

    function openForm(server) {
      clear(formSlot);
      formSlot.appendChild(serverForm(server, () => clear(formSlot), async (spec) => {
        if (server) await api('PUT', 'servers/' + enc(server.name), spec);
        else await api('POST', 'servers', spec);
        clear(formSlot);
        showNotice(server ? 'Saved: server ' + spec.name + ' updated.' : 'Saved: server ' + spec.name + ' added.');
        reload();
      }));
      formSlot.scrollIntoView({ block: 'nearest' });
    }

    async function authorize(s) {
      const before = s.oauth || {};
      const r = await act(() => api('POST', 'servers/' + enc(s.name) + '/authorize', { scopes: [] }));
      if (!r || !r.authorizationUrl) return;
      waiting.set(s.name, { authorizedAtMs: Number(before.authorizedAtMs || 0), reason: before.reason || '', url: r.authorizationUrl });
      renderWaiting();
      // With 'noopener' window.open answers null even when the window opened.
      if (/^https?:/i.test(r.authorizationUrl)) window.open(r.authorizationUrl, '_blank', 'noopener');
    }

    function renderWaiting() {
      clear(waitSlot);
      for (const [name, w] of waiting) {
        const link = /^https?:/i.test(w.url)
          ? el('a', { href: w.url, target: '_blank', rel: 'noopener noreferrer', testid: 'authorize-link', text: 'open the authorization page' })
          : null;
        waitSlot.appendChild(el('div', { class: 'callout callout-info', testid: 'authorize-waiting', data: { server: name } },
          el('strong', { text: 'Waiting for the authorization of ' + name + '…' }),
          el('span', { text: ' Finish it in the window that opened. If none opened, ' }), link, '.',
          el('button', { type: 'button', class: 'btn btn-small btn-ghost', text: 'Stop waiting', on: { click: () => { waiting.delete(name); renderWaiting(); } } })));
      }
    }

    function checkWaiting(servers) {
      let changed = false;
      for (const [name, w] of waiting) {
        const s = servers.find((x) => x.name === name);
        const o = (s && s.oauth) || {};
        if (!s) { waiting.delete(name); changed = true; continue; }
        if (o.state === 'authorized' && Number(o.authorizedAtMs || 0) > w.authorizedAtMs) {
          waiting.delete(name);
          changed = true;
          showNotice(name + ' is authorized.');
          const done = el('div', { class: 'callout callout-good', testid: 'authorize-done', data: { server: name }, text: name + ' is authorized.' });
          waitSlot.after(done);
          setTimeout(() => done.remove(), 8000);
        } else if (o.reason && o.reason !== w.reason && /^authorization failed/i.test(o.reason)) {
          waiting.delete(name);
          changed = true;
          showError('The authorization of ' + name + ' failed: ' + o.reason);
        }
      }
      if (changed) renderWaiting();
    }

    const reload = loader(() => api('GET', 'servers'), (data) => {
      const servers = data.servers || [];
      checkWaiting(servers);
      clear(body);
      const rows = servers.map((s) => serverRow(s, { openForm, authorize, reload }));
      body.appendChild(table('servers-table',
        ['Name', 'State', 'Protocol', 'Transport', 'Sidecars', 'Tools / resources / prompts', 'Last error', 'OAuth', ''],
        rows, 'No servers yet. Add one.'));
    });
    return { route: 'servers', reload };
  }

  function serverRow(s, ctx) {
    const sidecars = s.sidecars || [];
    // A sidecar `switchyard up` could not run comes first: it is why the
    // server has no sidecar to report an error.
    const errors = [s.launchError ? 'not running: ' + s.launchError : '']
      .concat(sidecars.map((c) => c.lastError)).filter(Boolean);
    const o = s.oauth;
    const actions = el('div', { class: 'row-actions' },
      el('a', { class: 'btn btn-small', href: '#/servers/' + enc(s.name), text: 'Tools' }),
      el('button', { type: 'button', class: 'btn btn-small', testid: 'server-edit', text: 'Edit', on: { click: () => ctx.openForm(s) } }),
      s.auth === 'oauth' ? el('button', { type: 'button', class: 'btn btn-small btn-primary', testid: 'server-authorize', text: 'Authorize', on: { click: () => ctx.authorize(s) } }) : null,
      s.auth === 'oauth' && o && o.state && o.state !== 'needs_authorization'
        ? el('button', {
          type: 'button', class: 'btn btn-small', testid: 'server-deauthorize', text: 'Deauthorize', on: {
            click: async () => {
              if (!window.confirm('Forget the OAuth tokens of ' + s.name + '? Calls to it fail until it is authorized again.')) return;
              if (await act(() => api('POST', 'servers/' + enc(s.name) + '/deauthorize', {}))) ctx.reload();
            },
          },
        }) : null,
      el('button', {
        type: 'button', class: 'btn btn-small btn-danger', testid: 'server-remove', text: 'Remove', on: {
          click: async () => {
            if (!window.confirm('Remove the server ' + s.name + '? Its sidecars stop and its tools disappear from every session.')) return;
            if (await act(() => api('DELETE', 'servers/' + enc(s.name)))) { showNotice('Server ' + s.name + ' removed.'); ctx.reload(); }
          },
        },
      }));
    const protocol = s.protocolVersion || '—';
    const eraNote = s.era && s.era !== s.protocolVersion ? 'era ' + s.era : null;
    return el('tr', { testid: 'server-row', data: { server: s.name } },
      el('td', {}, el('a', { class: 'strong', href: '#/servers/' + enc(s.name), testid: 'server-name', text: s.name }),
        s.serverInfo && s.serverInfo.name ? el('div', { class: 'muted small', text: [s.serverInfo.name, s.serverInfo.version].filter(Boolean).join(' ') }) : null),
      el('td', {}, badge(s.state || 'unknown', tone(s.state), 'server-state')),
      el('td', { class: 'nowrap' }, el('div', { class: 'mono small', testid: 'server-protocol', text: protocol }),
        eraNote ? el('div', { class: 'muted small', testid: 'server-era', text: eraNote, title: 'The protocol era set for this server ("auto": negotiated)' }) : null),
      el('td', { testid: 'server-transport' }, s.transport || '',
        s.transport === 'http' && s.url ? el('div', { class: 'muted small mono break', text: s.url }) : null,
        s.transport !== 'http' && s.command
          ? el('div', { class: 'argv', testid: 'server-command', title: 'The command and its arguments, one chip each' },
            [s.command].concat(s.args || []).map((a, i) => el('span', { class: 'arg' + (i === 0 ? ' arg-cmd' : ''), text: a })))
          : null),
      el('td', { testid: 'server-sidecars' },
        el('span', { text: sidecars.length + (sidecars.length === 1 ? ' sidecar' : ' sidecars') }),
        sidecars.length ? el('div', { class: 'chips' }, sidecars.map((c) => el('span', { class: 'chip chip-' + tone(c.upstreamState), title: c.sidecarId || '', text: c.upstreamState || 'unknown' }))) : null),
      el('td', { class: 'num', testid: 'server-counts', text: (s.toolCount || 0) + ' / ' + (s.resourceCount || 0) + ' / ' + (s.promptCount || 0) }),
      el('td', { class: 'small break', testid: 'server-last-error' }, errors.length ? el('span', { class: 'text-bad', text: errors.join('\n') }) : el('span', { class: 'muted', text: '—' })),
      el('td', {}, o && o.state
        ? [badge(o.state, tone(o.state), 'server-oauth'), o.reason ? el('div', { class: 'small muted break', testid: 'server-oauth-reason', text: o.reason }) : null]
        : el('span', { class: 'muted', testid: 'server-oauth', text: s.auth === 'oauth' ? 'not authorized' : '—' })),
      el('td', { class: 'actions-cell' }, actions));
  }

  /**
   * Where a refusal of a server spec belongs: the API names the field
   * (`spec.name: ...`, `spec.oauth.client_id: ...`, `spec.header_files.X: ...`).
   * Answers a key of the form's error slots, or '' (the alert).
   */
  function specField(message) {
    const m = /^spec\.([A-Za-z_]+)(?:\.([A-Za-z_]+))?/.exec(String(message || ''));
    if (!m) return '';
    const top = m[1];
    const sub = m[2] || '';
    const map = {
      name: 'name', transport: 'transport', command: 'command', args: 'args', env: 'env', cwd: 'cwd',
      url: 'url', era: 'era', auth: 'auth', headers: 'headers', header_files: 'headerFiles', headerFiles: 'headerFiles',
      request_timeout_ms: 'timeout', request_timeout_sec: 'timeout', requestTimeoutMs: 'timeout',
      max_message_bytes: 'maxMessageBytes', maxMessageBytes: 'maxMessageBytes',
      liveness_interval_sec: 'liveness', livenessIntervalSec: 'liveness',
    };
    if (top === 'oauth') {
      const o = { client_id: 'clientId', clientId: 'clientId', client_secret: 'clientSecret', clientSecret: 'clientSecret', client_secret_file: 'clientSecret', scopes: 'scopes', client_metadata_url: 'metadataUrl', clientMetadataUrl: 'metadataUrl' };
      return o[sub] || 'oauth';
    }
    return map[top] || '';
  }

  /** The add/edit form of a server. `server`: the listed server when editing. `onSubmit(spec)` throws an ApiError on a refusal. */
  function serverForm(server, onCancel, onSubmit) {
    const editing = !!server;
    const s = server || {};
    const oauthSettings = s.oauthSettings || {};
    const input = (testid, props) => el('input', Object.assign({ testid: testid, class: 'input' }, props || {}));
    const name = input('server-form-name', { value: s.name || '', readOnly: editing, placeholder: 'e.g. github', attrs: { 'aria-label': 'Name' } });
    const transport = el('select', { class: 'input', testid: 'server-form-transport', attrs: { 'aria-label': 'Transport' } },
      el('option', { value: 'stdio', text: 'stdio (a command the sidecar runs)' }),
      el('option', { value: 'http', text: 'Streamable HTTP (a URL)' }));
    transport.value = s.transport === 'http' ? 'http' : 'stdio';
    const command = input('server-form-command', { value: s.command || '', placeholder: '/usr/local/bin/my-mcp-server', attrs: { 'aria-label': 'Command' } });
    const args = el('textarea', { class: 'input mono', rows: 3, testid: 'server-form-args', value: (s.args || []).join('\n'), placeholder: 'one argument per line', attrs: { 'aria-label': 'Arguments' } });
    const envLines = Object.entries(s.env || {}).map(([k, v]) => k + '=' + v).join('\n');
    const env = el('textarea', { class: 'input mono', rows: 3, testid: 'server-form-env', value: envLines, placeholder: 'NAME=value (one per line)', attrs: { 'aria-label': 'Environment' } });
    const cwd = input('server-form-cwd', { value: s.cwd || '', placeholder: 'optional: /srv/my-server', attrs: { 'aria-label': 'Working directory' } });
    const timeout = input('server-form-timeout', { type: 'number', min: 0, step: 1000, value: s.requestTimeoutMs ? String(s.requestTimeoutMs) : '', placeholder: 'optional (default 600000)', attrs: { 'aria-label': 'Request timeout (ms)' } });
    const number = (v) => (v === undefined || v === null ? '' : String(v));
    const maxBytes = input('server-form-max-message-bytes', { type: 'number', min: 1024, step: 1024, value: number(s.maxMessageBytes), placeholder: 'optional (default 16777216)', attrs: { 'aria-label': 'Largest message (bytes)' } });
    const liveness = input('server-form-liveness', { type: 'number', min: 0, step: 1, value: number(s.livenessIntervalSec), placeholder: 'optional (default 15)', attrs: { 'aria-label': 'Liveness interval (s)' } });
    const url = input('server-form-url', { value: s.url || '', placeholder: 'https://mcp.example.com/mcp', attrs: { 'aria-label': 'URL' } });
    const era = el('select', { class: 'input', testid: 'server-form-era', attrs: { 'aria-label': 'Protocol era' } },
      el('option', { value: 'auto', text: 'auto (negotiated)' }),
      el('option', { value: '2026-07-28', text: '2026-07-28' }),
      el('option', { value: '2025-11-25', text: '2025-11-25' }));
    era.value = ['2026-07-28', '2025-11-25'].includes(s.era) ? s.era : 'auto';
    const auth = el('select', { class: 'input', testid: 'server-form-auth', attrs: { 'aria-label': 'Authentication' } },
      el('option', { value: 'none', text: 'none' }),
      el('option', { value: 'headers', text: 'static headers (e.g. Authorization: Bearer …)' }),
      el('option', { value: 'oauth', text: 'OAuth (an admin authorizes once)' }));
    auth.value = ['headers', 'oauth'].includes(s.auth) ? s.auth : 'none';
    const headerLines = Object.entries(s.headers || {}).map(([k, v]) => k + ': ' + v).join('\n');
    const headers = el('textarea', { class: 'input mono', rows: 3, testid: 'server-form-headers', value: headerLines, placeholder: 'Name: value (one per line)', attrs: { 'aria-label': 'Headers' } });
    const headerFiles = Object.entries(s.headerFiles || {});
    const clientId = input('server-form-oauth-client-id', { value: oauthSettings.clientId || '', placeholder: 'optional: a pre-registered client', attrs: { 'aria-label': 'OAuth client id' } });
    const clientSecret = input('server-form-oauth-client-secret', { type: 'password', autocomplete: 'new-password', placeholder: oauthSettings.hasClientSecret ? 'set (leave empty to keep)' : 'optional', attrs: { 'aria-label': 'OAuth client secret' } });
    const scopes = input('server-form-oauth-scopes', { value: (oauthSettings.scopes || []).join(' '), placeholder: 'optional, space-separated', attrs: { 'aria-label': 'OAuth scopes' } });
    const metadataUrl = input('server-form-oauth-metadata-url', { value: oauthSettings.clientMetadataUrl || '', placeholder: 'optional: https://…/client.json', attrs: { 'aria-label': 'Client ID Metadata Document URL' } });

    // One error slot per field: a refusal naming the field shows there.
    const slots = new Map();
    const row = (key, label, control, hint) => {
      const err = el('p', { class: 'field-error', testid: 'server-form-error', data: { field: key }, hidden: true, attrs: { 'aria-live': 'polite' } });
      const r = el('div', { class: 'form-row', data: { field: key } },
        el('label', { class: 'field-label' }, label, control),
        hint ? el('p', { class: 'hint', text: hint }) : null,
        err);
      slots.set(key, { row: r, err });
      return r;
    };
    const stdioRows = el('div', {}, row('command', 'Command', command), row('args', 'Arguments', args, 'One argument per line, passed as they are (no shell).'),
      row('env', 'Environment', env, editing ? 'NAME=value, one per line. Values shown as [redacted] are secrets: leave them to keep the stored value.' : 'NAME=value, one per line, added to the sidecar\'s environment for the command.'),
      row('cwd', 'Working directory', cwd, 'Optional: where the sidecar starts the command.'));
    const httpRows = el('div', {}, row('url', 'URL', url), row('auth', 'Authentication', auth),
      row('liveness', 'Liveness interval (s)', liveness, 'Optional: seconds without hearing from the server before its sidecar checks it is still there (0: never; default 15).'));
    const headerRows = el('div', {}, row('headers', 'Headers', headers, editing ? 'Values shown as [redacted] are secrets: leave them to keep the stored value, or type a new one.' : 'Sent with every request to the server.'),
      headerFiles.length ? el('div', { class: 'form-row', testid: 'server-form-header-files' },
        el('span', { class: 'field-label', text: 'Headers read from files' }),
        el('ul', { class: 'plain-list mono small' }, headerFiles.map(([k, v]) => el('li', {}, el('strong', { text: k }), ': ', el('span', { text: v })))),
        el('p', { class: 'hint', text: 'Read by the server\'s sidecar on its machine; set in the configuration file or with the CLI, and kept as they are.' })) : null);
    slots.set('headerFiles', { row: headerRows, err: (() => { const e = el('p', { class: 'field-error', testid: 'server-form-error', data: { field: 'headerFiles' }, hidden: true }); headerRows.appendChild(e); return e; })() });
    const oauthErr = el('p', { class: 'field-error', testid: 'server-form-error', data: { field: 'oauth' }, hidden: true });
    const oauthRows = el('fieldset', { class: 'fieldset' }, el('legend', { text: 'OAuth' }),
      el('p', { class: 'hint', testid: 'server-form-oauth-help', text: 'After saving, use Authorize on the server\'s row: the authorization server opens in a new tab and sends you back to this control plane ([oauth] admin_base_url must be the address your browser uses).' }),
      row('clientId', 'Client id', clientId), row('clientSecret', 'Client secret', clientSecret, 'Sealed in the store; never shown again.'),
      row('scopes', 'Scopes', scopes, 'Added to the scopes the server asks for.'),
      row('metadataUrl', 'Client ID Metadata Document URL', metadataUrl, 'An https URL where Switchyard\'s client metadata is published; leave empty to use dynamic registration or a client id.'),
      oauthErr);
    slots.set('oauth', { row: oauthRows, err: oauthErr });

    function sync() {
      const http = transport.value === 'http';
      stdioRows.hidden = http;
      httpRows.hidden = !http;
      headerRows.hidden = !http || auth.value !== 'headers';
      oauthRows.hidden = !http || auth.value !== 'oauth';
    }
    transport.addEventListener('change', sync);
    auth.addEventListener('change', sync);
    sync();

    function clearFieldErrors() {
      for (const { row: r, err } of slots.values()) {
        err.hidden = true;
        err.textContent = '';
        r.classList.remove('has-error');
      }
    }
    /** Shows `message` next to its field when it names one (answers true), else answers false. */
    function fieldError(key, message) {
      const slot = slots.get(key);
      if (!slot) return false;
      slot.err.textContent = message;
      slot.err.hidden = false;
      slot.row.classList.add('has-error');
      if (slot.row.hidden) return false;
      slot.err.scrollIntoView({ block: 'nearest' });
      return true;
    }

    const submitBtn = el('button', { type: 'submit', class: 'btn btn-primary', testid: 'server-form-submit', text: editing ? 'Save' : 'Add server' });
    const form = el('form', { class: 'panel', testid: 'server-form', noValidate: true },
      el('h2', { text: editing ? 'Edit ' + s.name : 'Add a server' }),
      el('div', { class: 'form-grid' },
        row('name', 'Name', name, editing ? 'A server\'s name cannot change.' : 'Letters, digits, - and _; engine tool names start with it.'),
        row('transport', 'Transport', transport),
        row('era', 'Protocol era', era),
        row('timeout', 'Request timeout (ms)', timeout, 'Optional: how long one request to the server may take (default 10 minutes).'),
        row('maxMessageBytes', 'Largest message (bytes)', maxBytes, 'Optional: the largest answer taken from the server (1024 to 1073741824; default 16 MiB).')),
      stdioRows, httpRows, headerRows, oauthRows,
      el('div', { class: 'actions' },
        submitBtn,
        el('button', { type: 'button', class: 'btn', testid: 'server-form-cancel', text: 'Cancel', on: { click: onCancel } })));

    function readSpec() {
      const http = transport.value === 'http';
      const spec = { name: name.value.trim(), transport: transport.value, era: era.value };
      const t = timeout.value.trim();
      if (t !== '') {
        const n = Number(t);
        if (!Number.isInteger(n) || n < 0) { fieldError('timeout', 'A whole number of milliseconds (0 or empty: the default).'); return null; }
        if (n > 0) spec.requestTimeoutMs = n;
      }
      // Empty: the default for a new server, the stored value on an edit.
      const m = maxBytes.value.trim();
      if (m !== '') {
        const n = Number(m);
        if (!Number.isInteger(n) || n < 0) { fieldError('maxMessageBytes', 'A whole number of bytes.'); return null; }
        spec.maxMessageBytes = n;
      }
      if (http) {
        spec.url = url.value.trim();
        spec.auth = auth.value;
        const l = liveness.value.trim();
        if (l !== '') {
          const n = Number(l);
          if (!Number.isInteger(n) || n < 0) { fieldError('liveness', 'A whole number of seconds (0: never).'); return null; }
          spec.livenessIntervalSec = n;
        }
        if (auth.value === 'headers') {
          spec.headers = {};
          for (const line of headers.value.split('\n')) {
            const i = line.indexOf(':');
            if (!line.trim()) continue;
            if (i <= 0) { fieldError('headers', '"' + line.trim() + '" is not "Name: value".'); return null; }
            const hname = line.slice(0, i).trim();
            const hvalue = line.slice(i + 1).trim();
            // A secret left as [redacted] keeps its stored value (UpdateServer).
            if (hvalue === '[redacted]' && !editing) { fieldError('headers', 'Enter the value of ' + hname + ' (a new server has no stored secret).'); return null; }
            spec.headers[hname] = hvalue;
          }
        }
        if (auth.value === 'oauth') {
          const o = {};
          if (clientId.value.trim()) o.clientId = clientId.value.trim();
          if (clientSecret.value) o.clientSecret = clientSecret.value;
          const sc = scopes.value.split(/\s+/).filter(Boolean);
          if (sc.length) o.scopes = sc;
          if (metadataUrl.value.trim()) o.clientMetadataUrl = metadataUrl.value.trim();
          spec.oauth = o;
        }
      } else {
        spec.command = command.value.trim();
        spec.args = args.value.split('\n').map((a) => a.trim()).filter((a) => a !== '');
        const e = {};
        for (const line of env.value.split('\n')) {
          if (!line.trim()) continue;
          const i = line.indexOf('=');
          if (i <= 0) { fieldError('env', '"' + line.trim() + '" is not NAME=value.'); return null; }
          const ename = line.slice(0, i).trim();
          const evalue = line.slice(i + 1);
          if (evalue === '[redacted]' && !editing) { fieldError('env', 'Enter the value of ' + ename + ' (a new server has no stored secret).'); return null; }
          e[ename] = evalue;
        }
        spec.env = e;
        if (cwd.value.trim()) spec.cwd = cwd.value.trim();
      }
      // Headers read from files on the sidecar's machine are kept as configured.
      if (editing && headerFiles.length) spec.headerFiles = s.headerFiles;
      return spec;
    }

    form.addEventListener('submit', async (ev) => {
      ev.preventDefault();
      clearFieldErrors();
      const spec = readSpec();
      if (!spec) return;
      submitBtn.disabled = true;
      try {
        await onSubmit(spec);
      } catch (e) {
        if (e instanceof ApiError && e.status === 401) return;
        const problems = [];
        for (const fe of (e.fieldErrors || [])) {
          const key = specField('spec.' + String(fe.field || '').replace(/^spec\./, ''));
          if (!(key && fieldError(key, fe.problem))) problems.push((fe.field ? fe.field + ': ' : '') + fe.problem);
        }
        const key = specField(e.message);
        if (!(key && fieldError(key, e.message.replace(/^spec\.[A-Za-z_.]+:\s*/, '')))) {
          if (!(e.fieldErrors || []).length || problems.length) problems.unshift(e.message);
        }
        if (problems.length) showError(problems.join('\n'));
        else clearError();
      } finally {
        submitBtn.disabled = false;
      }
    });
    return form;
  }

  // ---------------------------------------------------------------- tools

  const HINTS = [
    ['readOnlyHint', 'read-only', true],
    ['destructiveHint', 'destructive', true],
    ['idempotentHint', 'idempotent', true],
    ['openWorldHint', 'open world', false],
  ];

  function declaredHints(t) {
    let a = t.annotations;
    if (typeof a === 'string') {
      try { a = a ? JSON.parse(a) : null; } catch (_) { a = null; }
    }
    if (!a && typeof t.annotationsJson === 'string' && t.annotationsJson) {
      try { a = JSON.parse(t.annotationsJson); } catch (_) { a = null; }
    }
    return a && typeof a === 'object' ? a : {};
  }

  function boolText(v) {
    return v === true ? 'true' : v === false ? 'false' : '—';
  }

  /** What each policy means (tooltips and the line under the policy). */
  const POLICY_HELP = {
    default: 'default: called without asking, except in ask sessions where non-read-only tools need an approval.',
    confirm: 'confirm: every call needs an approval.',
    disabled: 'disabled: hidden from engines.',
  };
  /** What each background mode means. */
  const BACKGROUND_HELP = {
    auto: 'auto: a call moves to the background once it runs longer than backgroundCalls.autoAfterSec.',
    always: 'always: every call moves to the background at once.',
  };
  const SOURCE_HELP = {
    declared: 'declared by the server',
    override: 'overridden by an admin',
    default: 'not declared: the MCP spec default',
  };

  function toolsPage(main, server) {
    const body = el('div', {});
    main.append(
      el('p', { class: 'crumbs' }, el('a', { href: '#/servers', text: 'Servers' }), ' / ', el('span', { text: server })),
      pageHeader('Tools of ' + server, 'Hints and policies as engines get them. An override replaces the declared hint; "clear" goes back to it.'),
      el('details', { class: 'legend', testid: 'tools-legend' },
        el('summary', { text: 'How to read this page' }),
        el('ul', {},
          el('li', {}, el('strong', { text: 'Source' }), ' of a hint: "declared" (by the server), "override" (set here by an admin), "default" (not declared: the MCP spec default applies: read-only false, destructive true, idempotent false, open world true).'),
          el('li', {}, el('strong', { text: 'Destructive and idempotent' }), ' only matter when read-only is false; for a read-only tool they are marked "n/a".'),
          el('li', {}, el('strong', { text: 'Policy' }), ' — ', POLICY_HELP.default, ' ', POLICY_HELP.confirm, ' ', POLICY_HELP.disabled),
          el('li', {}, el('strong', { text: 'Background' }), ' — ', BACKGROUND_HELP.auto, ' ', BACKGROUND_HELP.always),
          el('li', {}, el('strong', { text: 'Open world' }), ' is not overridable: the gateway overrides readOnly, destructive and idempotent only.'))),
      body);

    const base = 'servers/' + enc(server) + '/tools/';

    async function setHint(tool, key, value) {
      const path = base + enc(tool.upstreamName) + '/hints';
      const ok = await act(async () => {
        if (value === null) await api('DELETE', path + '?hint=' + enc(key));
        else await api('POST', path, { [key]: value });
        return true;
      });
      if (ok) {
        showNotice(value === null
          ? 'Saved: the ' + key + ' override of ' + tool.name + ' is cleared.'
          : 'Saved: ' + key + ' of ' + tool.name + ' is overridden to ' + value + '.');
        reload();
      }
    }

    async function setPolicy(tool, body) {
      const path = base + enc(tool.upstreamName) + '/policy';
      const ok = await act(async () => {
        if (body === null) await api('DELETE', path);
        else await api('POST', path, body);
        return true;
      });
      if (ok) {
        let what;
        if (body === null) what = 'the policy and background mode of ' + tool.name + ' are back to the derived ones.';
        else if (body.policy) what = 'policy of ' + tool.name + ' is ' + body.policy + '.';
        else what = 'background mode of ' + tool.name + ' is ' + body.background + '.';
        showNotice('Saved: ' + what);
        reload();
      } else {
        reload(); // the select goes back to what is stored
      }
    }

    function hintTable(t) {
      const declared = declaredHints(t);
      const hints = t.hints || {};
      const sources = t.hintSources || {};
      const readOnly = hints.readOnlyHint === true;
      return el('table', { class: 'hints' },
        el('colgroup', {}, ['hc-name', 'hc-declared', 'hc-effective', 'hc-source', 'hc-override'].map((c) => el('col', { class: c }))),
        el('thead', {}, el('tr', {}, ['Hint', 'Declared', 'Effective', 'Source', 'Override'].map((h) => el('th', { text: h })))),
        el('tbody', {}, HINTS.map(([key, label, overridable]) => {
          const src = sources[key] || '';
          const eff = hints[key];
          const na = readOnly && (key === 'destructiveHint' || key === 'idempotentHint');
          let cls = 'hint-row';
          if (key === 'openWorldHint' && eff) cls += ' hint-openworld';
          if (na) cls += ' hint-na';
          return el('tr', { class: cls, testid: 'hint-row', data: { hint: key }, title: na ? 'Not applicable: the tool is read-only (' + key + ' only matters when readOnlyHint is false).' : null },
            el('td', { text: label }),
            el('td', { class: 'mono', testid: 'hint-declared', text: boolText(declared[key]) }),
            el('td', {}, el('span', { class: 'mono strong', testid: 'hint-effective', text: boolText(eff) }),
              na ? el('span', { class: 'na', testid: 'hint-not-applicable', text: 'n/a: read-only' }) : null),
            el('td', {}, el('span', { class: 'src src-' + (src || 'none'), testid: 'hint-source', text: src || '—', title: SOURCE_HELP[src] || null })),
            el('td', {}, overridable
              ? el('div', { class: 'seg' },
                el('button', { type: 'button', class: 'seg-btn' + (src === 'override' && eff === true ? ' on' : ''), testid: 'hint-set-true', text: 'true', title: 'Override ' + key + ' to true', on: { click: () => setHint(t, key, true) } }),
                el('button', { type: 'button', class: 'seg-btn' + (src === 'override' && eff === false ? ' on' : ''), testid: 'hint-set-false', text: 'false', title: 'Override ' + key + ' to false', on: { click: () => setHint(t, key, false) } }),
                el('button', { type: 'button', class: 'seg-btn', testid: 'hint-clear', text: 'clear', disabled: src !== 'override', title: 'Clear the override of ' + key, on: { click: () => setHint(t, key, null) } }))
              : el('span', { class: 'muted small', testid: 'hint-not-overridable', text: 'not overridable', title: 'The gateway overrides readOnly, destructive and idempotent only.' })));
        })));
    }

    function toolRow(t) {
      const hints = t.hints || {};
      const policy = el('select', { class: 'input input-small', testid: 'tool-policy', attrs: { 'aria-label': 'Policy of ' + t.name } },
        ['default', 'confirm', 'disabled'].map((p) => el('option', { value: p, text: p, title: POLICY_HELP[p] })));
      policy.value = t.policy || 'default';
      policy.title = POLICY_HELP[policy.value] || '';
      policy.addEventListener('change', () => setPolicy(t, { policy: policy.value }));
      const bg = el('select', { class: 'input input-small', testid: 'tool-background', attrs: { 'aria-label': 'Background mode of ' + t.name } },
        ['auto', 'always'].map((b) => el('option', { value: b, text: b, title: BACKGROUND_HELP[b] })));
      bg.value = t.background === 'always' ? 'always' : 'auto';
      bg.title = BACKGROUND_HELP[bg.value];
      bg.addEventListener('change', () => setPolicy(t, { background: bg.value }));
      const display = t.title || t.name;
      // An admin setting: the policy or the background mode (policySet
      // covers both; "always" is only ever an admin's choice).
      const adminSet = t.policySet === true || t.background === 'always';
      return el('tr', { testid: 'tool-row', data: { tool: t.upstreamName || '', name: t.name || '' } },
        el('td', { class: 'tool-cell' },
          el('div', { class: 'strong', testid: 'tool-title', text: display }),
          el('div', { class: 'mono small', testid: 'tool-name', text: t.name }),
          el('div', { class: 'muted small' }, 'upstream: ', el('span', { class: 'mono', testid: 'tool-upstream', text: t.upstreamName })),
          hints.openWorldHint ? el('span', { class: 'badge badge-warn', testid: 'tool-open-world', text: 'open world', title: 'The tool may reach outside systems' }) : null,
          t.inCatalogue === false ? el('span', { class: 'badge badge-neutral', testid: 'tool-not-in-catalogue', text: 'not in the catalogue' }) : null),
        el('td', { class: 'desc-cell' },
          el('div', { class: 'desc', testid: 'tool-description', text: t.description || '' }),
          // The description above already ends with this summary (engines
          // read it there); it is also shown on its own, folded.
          t.outputSchemaSummary
            ? el('details', { class: 'output-summary' }, el('summary', { text: 'Output schema summary' }), el('pre', { class: 'code', testid: 'tool-output-summary', text: t.outputSchemaSummary }))
            : el('div', { class: 'muted small', testid: 'tool-output-summary', text: 'No output schema.' })),
        el('td', { class: 'hints-cell' }, hintTable(t)),
        el('td', { class: 'policy-cell' },
          el('div', { class: 'stack' }, policy,
            el('span', { class: 'small muted', testid: 'tool-policy-help', text: POLICY_HELP[policy.value] || '' }),
            el('span', { class: 'small' + (adminSet ? ' strong' : ' muted'), testid: 'tool-policy-source', text: adminSet ? 'set by an admin' : 'derived from the hints',
              title: adminSet ? 'An admin set the policy or the background mode; "clear" goes back to the derived ones.' : 'No admin setting: the policy comes from the hints.' }),
            el('button', { type: 'button', class: 'btn btn-small', testid: 'tool-policy-clear', text: 'clear', disabled: !adminSet, title: 'Back to the policy and background mode derived from the hints', on: { click: () => setPolicy(t, null) } }))),
        el('td', { class: 'bg-cell' }, el('div', { class: 'stack' }, bg,
          el('span', { class: 'small muted', testid: 'tool-background-help', text: BACKGROUND_HELP[bg.value] }))));
    }

    const reload = loader(() => api('GET', 'servers/' + enc(server) + '/tools'), (data) => {
      clear(body);
      const tools = data.tools || [];
      body.appendChild(table('tools-table', ['Tool', 'Description (as engines see it)', 'Hints', 'Policy', 'Background'], tools.map(toolRow), 'This server has no tools (yet).'));
    });
    return { route: 'tools', reload };
  }

  // ------------------------------------------------------------- sessions

  function sessionsPage(main) {
    const body = el('div', {});
    main.append(pageHeader('Sessions', 'Every engine session, with its open interaction cards.'), body);
    const reload = loader(() => api('GET', 'sessions'), (data) => {
      clear(body);
      const sessions = (data.sessions || []).slice().sort((a, b) => Number(b.createdAtMs || 0) - Number(a.createdAtMs || 0));
      body.appendChild(table('sessions-table', ['Id', 'Owner', 'Mode', 'Servers', 'Open interactions', 'Created'], sessions.map((s) => {
        const open = Number(s.openInteractions || 0);
        return el('tr', { testid: 'session-row', data: { session: s.id } },
          el('td', { class: 'mono small', text: s.id }),
          el('td', { text: s.owner || '—' }),
          el('td', {}, badge(s.permissionMode || 'ask', s.permissionMode === 'auto' ? 'warn' : 'neutral')),
          el('td', { class: 'small', text: (s.enabledServers && s.enabledServers.length) ? s.enabledServers.join(', ') : 'all servers' }),
          el('td', { testid: 'session-open-interactions' }, open
            ? el('a', { href: '#/interactions?session=' + enc(s.id), class: 'strong', text: String(open) })
            : el('span', { class: 'muted', text: '0' })),
          el('td', { class: 'small', text: fmtTime(s.createdAtMs) }));
      }), 'No sessions.'));
    });
    return { route: 'sessions', reload };
  }

  // ----------------------------------------------------------- background

  const TERMINAL = ['completed', 'failed', 'cancelled'];

  /** The Message column of a background call: its status message, else how long it runs; its immediate response. */
  function bgMessage(c) {
    const out = [];
    if (c.statusMessage) out.push(el('div', { text: c.statusMessage }));
    else if (c.status === 'working') out.push(el('div', { class: 'muted', text: 'running for ' + fmtAge(c.createdAtMs) }));
    else if (c.status === 'input_required') out.push(el('div', { class: 'muted', text: 'waiting for an answer (see Interactions)' }));
    if (c.lastPollError) out.push(el('div', { class: 'text-bad', text: 'last poll failed: ' + c.lastPollError }));
    if (c.immediateResponse) out.push(el('div', { class: 'immediate', title: 'The server\'s immediate response (what the model read when the call moved to the background)' }, el('span', { class: 'muted', text: 'immediate response: ' }), c.immediateResponse));
    return out;
  }

  function backgroundPage(main) {
    const filters = { status: '', server: '', mode: '', session: '', finished: false };
    const tokens = ['']; // the page tokens walked so far; the last is the current page's
    const statusSel = el('select', { class: 'input input-small', testid: 'bg-filter-status', attrs: { 'aria-label': 'Status' } },
      ['', 'working', 'input_required', 'completed', 'failed', 'cancelled'].map((s) => el('option', { value: s, text: s || 'any status' })));
    const modeSel = el('select', { class: 'input input-small', testid: 'bg-filter-mode', attrs: { 'aria-label': 'Mode' } },
      ['', 'task', 'wait'].map((s) => el('option', { value: s, text: s || 'any mode' })));
    const serverIn = el('input', { class: 'input input-small', testid: 'bg-filter-server', placeholder: 'server', attrs: { 'aria-label': 'Server' } });
    const sessionIn = el('input', { class: 'input input-small mono', testid: 'bg-filter-session', placeholder: 'session id', attrs: { 'aria-label': 'Session' } });
    const finished = el('input', { type: 'checkbox', testid: 'bg-filter-finished' });
    const applyBtn = el('button', { type: 'submit', class: 'btn btn-small', testid: 'bg-apply', text: 'Apply' });
    const bar = el('form', { class: 'filters', noValidate: true },
      el('label', {}, 'Status ', statusSel), el('label', {}, 'Server ', serverIn), el('label', {}, 'Mode ', modeSel),
      el('label', {}, 'Session ', sessionIn), el('label', { class: 'check' }, finished, ' include finished'), applyBtn);
    const apply = () => {
      filters.status = statusSel.value;
      filters.mode = modeSel.value;
      filters.server = serverIn.value.trim();
      filters.session = sessionIn.value.trim();
      filters.finished = finished.checked;
      tokens.length = 1;
      reload();
    };
    bar.addEventListener('submit', (ev) => { ev.preventDefault(); apply(); });
    statusSel.addEventListener('change', apply);
    modeSel.addEventListener('change', apply);
    finished.addEventListener('change', apply);
    const body = el('div', {});
    const pager = el('div', { class: 'pager' });
    main.append(pageHeader('Background calls', 'Calls that moved to the background: tasks the gateway polls, and long calls it waits for.'), bar, body, pager);

    function query() {
      const q = new URLSearchParams();
      if (filters.session) q.set('session', filters.session);
      if (filters.server) q.set('server', filters.server);
      if (filters.status) q.set('status', filters.status);
      if (filters.mode) q.set('mode', filters.mode);
      if (filters.finished || TERMINAL.includes(filters.status)) q.set('finished', 'true');
      q.set('pageSize', '50');
      const tok = tokens[tokens.length - 1];
      if (tok) q.set('pageToken', tok);
      return 'background?' + q.toString();
    }

    const reload = loader(() => api('GET', query()), (data) => {
      clear(body);
      clear(pager);
      const calls = data.calls || [];
      body.appendChild(table('background-table', ['Status', 'Mode', 'Server', 'Tool', 'Session', 'Age', 'Message', ''], calls.map((c) => {
        const done = TERMINAL.includes(c.status);
        return el('tr', { testid: 'background-row', data: { id: c.id, status: c.status || '' } },
          el('td', {}, badge(c.status || 'unknown', tone(c.status), 'background-status')),
          el('td', { text: c.mode || '' }),
          el('td', { text: c.server || '' }),
          el('td', { class: 'mono small' }, el('div', { text: c.tool || '' }), el('div', { class: 'muted small mono', text: c.id })),
          el('td', { class: 'mono small', text: c.sessionId || '—' }),
          el('td', { class: 'small', title: fmtTime(c.createdAtMs), text: fmtAge(c.createdAtMs) + (done && c.finishedAtMs ? ' (finished ' + fmtAge(c.finishedAtMs) + ' ago)' : '') }),
          el('td', { class: 'small break', testid: 'background-message' }, bgMessage(c)),
          el('td', {}, done ? null : el('button', {
            type: 'button', class: 'btn btn-small btn-danger', testid: 'background-cancel', text: 'Cancel', on: {
              click: async () => {
                if (!window.confirm('Cancel the background call ' + (c.tool || '') + ' (' + c.id + ')?')) return;
                if (await act(() => api('POST', 'background/' + enc(c.id) + '/cancel', {}))) { showNotice('Cancelled ' + c.id + '.'); reload(); }
              },
            },
          })));
      }), filters.finished ? 'No background calls match.' : 'No background call is running. Tick "include finished" to see finished ones.'));
      if (!calls.length) body.lastChild.dataset.testid = 'bg-empty';
      if (tokens.length > 1) pager.appendChild(el('button', { type: 'button', class: 'btn btn-small', testid: 'bg-first', text: 'First page', on: { click: () => { tokens.length = 1; reload(); } } }));
      if (data.nextPageToken) pager.appendChild(el('button', { type: 'button', class: 'btn btn-small', testid: 'bg-next', text: 'Next page', on: { click: () => { tokens.push(data.nextPageToken); reload(); } } }));
      if (tokens.length > 1) pager.appendChild(el('span', { class: 'muted small', text: 'Page ' + tokens.length }));
    });
    return { route: 'background', reload };
  }

  // --------------------------------------------------------- interactions

  function interactionsPage(main) {
    const params = new URLSearchParams((location.hash.split('?')[1]) || '');
    const filter = { session: params.get('session') || '', all: false };
    const sessionSel = el('select', { class: 'input input-small mono', testid: 'interactions-filter-session', attrs: { 'aria-label': 'Session' } },
      el('option', { value: '', text: 'every session' }));
    const resolved = el('input', { type: 'checkbox', testid: 'interactions-show-resolved' });
    sessionSel.addEventListener('change', () => { filter.session = sessionSel.value; reload(); });
    resolved.addEventListener('change', () => { filter.all = resolved.checked; reload(); });
    const list = el('div', { class: 'cards', testid: 'interactions-list' });
    const empty = el('p', { class: 'muted empty-state', testid: 'interactions-empty', text: 'No open interactions.', hidden: true });
    main.append(
      pageHeader('Interactions', 'Forms and URLs servers ask for, and approvals of tool calls, for every session.'),
      el('div', { class: 'filters' }, el('label', {}, 'Session ', sessionSel), el('label', { class: 'check' }, resolved, ' show resolved')),
      empty, list);
    const cards = new Map(); // id -> {node, status}

    async function load() {
      const q = new URLSearchParams();
      if (filter.session) q.set('session', filter.session);
      if (filter.all) q.set('all', 'true');
      const [ints, sess] = await Promise.all([
        api('GET', 'interactions' + (q.toString() ? '?' + q.toString() : '')),
        api('GET', 'sessions').catch(() => ({ sessions: [] })),
      ]);
      return { interactions: ints.interactions || [], sessions: sess.sessions || [] };
    }

    function render(data) {
      // The session filter keeps its choice; a session that went away stays listed while chosen.
      const ids = data.sessions.map((s) => s.id);
      if (filter.session && !ids.includes(filter.session)) ids.unshift(filter.session);
      clear(sessionSel);
      sessionSel.appendChild(el('option', { value: '', text: 'every session' }));
      for (const id of ids) sessionSel.appendChild(el('option', { value: id, text: id }));
      sessionSel.value = filter.session;
      // Keep the cards that did not change, so what an admin is typing into
      // a form survives a live update.
      const items = data.interactions.slice().sort((a, b) => Number(a.createdAtMs || 0) - Number(b.createdAtMs || 0));
      const seen = new Set();
      for (const it of items) {
        const key = it.sessionId + '/' + it.id;
        seen.add(key);
        const have = cards.get(key);
        if (have && have.status === it.status) {
          list.appendChild(have.node);
          continue;
        }
        const node = card(it, reload);
        if (have) have.node.replaceWith(node);
        cards.set(key, { node: node, status: it.status });
        list.appendChild(node);
      }
      for (const [key, c] of cards) {
        if (!seen.has(key)) { c.node.remove(); cards.delete(key); }
      }
      empty.hidden = items.length > 0;
      empty.textContent = filter.all ? 'No interactions.' : 'No open interactions.';
    }

    const reload = loader(load, render);
    return { route: 'interactions', reload };
  }

  /** Shows the answer's refusal on the card: field problems next to their fields, the rest at the top. */
  function showCardErrors(cardNode, fieldNodes, err) {
    const top = cardNode.querySelector('[data-testid="card-error"]');
    for (const f of fieldNodes.values()) {
      const fe = f.querySelector('[data-testid="field-error"]');
      fe.textContent = '';
      fe.hidden = true;
      f.classList.remove('has-error');
    }
    const rest = [];
    for (const fe of err.fieldErrors || []) {
      const f = fieldNodes.get(fe.field);
      if (f) {
        const slot = f.querySelector('[data-testid="field-error"]');
        slot.textContent = slot.textContent ? slot.textContent + '; ' + fe.problem : fe.problem;
        slot.hidden = false;
        f.classList.add('has-error');
      } else {
        rest.push((fe.field ? fe.field + ': ' : '') + fe.problem);
      }
    }
    const msgs = [];
    if (!(err.fieldErrors || []).length || rest.length) msgs.push(err.message);
    msgs.push(...rest);
    top.textContent = msgs.join('\n');
    top.hidden = msgs.length === 0;
  }

  /** What the server is told for each answer (the buttons' titles). */
  const TITLES = {
    accept: 'Accept: the answer (these values) is sent to the server.',
    acceptUrl: 'Accept: the server is told you agreed to open the URL.',
    decline: 'Decline: the server is told the user said no.',
    cancel: 'Cancel (no answer): the question is dismissed without a choice.',
  };

  function card(it, reload) {
    const open = it.status === 'open';
    const kindLabel = { form: 'Form', url: 'URL', approval: 'Approval', roots: 'Roots' }[it.kind] || it.kind || 'Interaction';
    const node = el('article', { class: 'card card-kind-' + (it.kind || 'other') + (open ? '' : ' card-resolved'), testid: 'interaction-card', data: { id: it.id, kind: it.kind || '', status: it.status || '', session: it.sessionId || '' } });
    const head = el('header', { class: 'card-head' },
      el('span', { class: 'badge badge-kind', text: kindLabel }),
      el('span', { class: 'card-title' }, el('span', { testid: 'card-server', text: it.server || '' }), it.tool ? [' · ', el('span', { class: 'mono', testid: 'card-tool', text: it.tool })] : null),
      open ? badge('open', 'warn') : badge(it.outcome || it.status || '', tone(it.outcome || it.status), 'card-outcome'));
    const meta = el('div', { class: 'card-meta muted small' },
      'session ', el('span', { class: 'mono', text: it.sessionId || '' }),
      ' · asked ', el('span', { title: fmtTime(it.createdAtMs), text: fmtAge(it.createdAtMs) + ' ago' }),
      it.expiresAtMs && open ? ' · expires ' + fmtTime(it.expiresAtMs) : null,
      !open ? [' · ', el('span', { testid: 'card-resolved', title: it.resolvedAtMs ? fmtTime(it.resolvedAtMs) : null,
        text: (it.outcome ? 'answered ' + it.outcome : (it.status || 'resolved')) + (it.resolvedAtMs ? ' ' + fmtAge(it.resolvedAtMs) + ' ago' : '') })] : null);
    const topErr = el('div', { class: 'card-error', testid: 'card-error', hidden: true });
    node.append(head, meta);
    if (it.message) node.appendChild(el('p', { class: 'card-message', testid: 'card-message', text: it.message }));
    node.appendChild(topErr);

    const fieldNodes = new Map();
    const buttons = [];
    async function answer(action, content) {
      for (const b of buttons) b.disabled = true;
      try {
        clearError();
        const body = { action: action };
        if (content !== undefined) body.content = content;
        await api('POST', 'interactions/' + enc(it.sessionId) + '/' + enc(it.id), body);
        showNotice('Answered: ' + action + '.');
        scheduleCount();
        reload();
      } catch (e) {
        if (!(e instanceof ApiError && e.status === 401)) showCardErrors(node, fieldNodes, e);
      } finally {
        for (const b of buttons) b.disabled = false;
      }
    }
    const btn = (testid, text, cls, onClick, title) => {
      const b = el('button', { type: 'button', class: 'btn ' + (cls || ''), testid: testid, text: text, title: title || null, on: { click: onClick } });
      buttons.push(b);
      return b;
    };

    if (it.kind === 'form') {
      const fields = Array.isArray(it.fields) ? it.fields : [];
      const form = el('form', { class: 'card-form', noValidate: true });
      const readers = [];
      for (const f of fields) {
        const { node: fnode, read } = formField(f, open);
        fieldNodes.set(f.name, fnode);
        form.appendChild(fnode);
        readers.push(read);
      }
      if (!fields.length) form.appendChild(el('p', { class: 'muted small', text: 'This form has no fields.' }));
      const submit = () => {
        const content = {};
        for (const r of readers) r(content);
        answer('accept', content);
      };
      form.addEventListener('submit', (ev) => { ev.preventDefault(); submit(); });
      node.appendChild(form);
      if (open) {
        node.appendChild(el('div', { class: 'actions' },
          btn('card-accept', 'Accept', 'btn-primary', submit, TITLES.accept),
          btn('card-decline', 'Decline', '', () => answer('decline'), TITLES.decline),
          btn('card-cancel', 'Cancel (no answer)', 'btn-ghost', () => answer('cancel'), TITLES.cancel)));
      }
    } else if (it.kind === 'url') {
      let parsed = null;
      try { parsed = new URL(it.url); } catch (_) { parsed = null; }
      const safe = parsed && (parsed.protocol === 'https:' || parsed.protocol === 'http:');
      const domain = it.urlDomain || (parsed ? parsed.hostname : '');
      node.appendChild(el('div', { class: 'url-box' },
        el('p', { class: 'url-domain' }, 'You will be sent to: ', el('strong', { testid: 'card-domain', text: domain || '(no domain)' })),
        el('p', { class: 'mono small break', testid: 'card-url', text: it.url || '' }),
        !safe ? el('p', { class: 'text-bad small', text: 'This is not an http or https URL; it is shown as text only.' }) : null));
      if (open) {
        node.appendChild(el('div', { class: 'actions' },
          safe ? el('a', { class: 'btn', href: parsed.href, target: '_blank', rel: 'noopener noreferrer', testid: 'card-open', text: 'Open' }) : null,
          btn('card-accept', 'Accept', 'btn-primary', () => answer('accept'), TITLES.acceptUrl),
          btn('card-decline', 'Decline', '', () => answer('decline'), TITLES.decline),
          btn('card-cancel', 'Cancel (no answer)', 'btn-ghost', () => answer('cancel'), TITLES.cancel)));
      }
    } else if (it.kind === 'approval') {
      let args = it.argumentsJson || '';
      try { args = JSON.stringify(JSON.parse(args), null, 2); } catch (_) { /* shown as it came */ }
      node.appendChild(el('div', { class: 'approval' },
        el('p', {}, 'Call ', el('strong', { class: 'mono', text: it.tool || '' }), ' on ', el('strong', { text: it.server || '' }), ' with:'),
        el('pre', { class: 'code', testid: 'card-arguments', text: args || '{}' })));
      if (open) {
        node.appendChild(el('div', { class: 'actions' },
          btn('card-approve', 'Approve', 'btn-primary', () => answer('approve'), 'The call goes ahead.'),
          btn('card-deny', 'Deny', 'btn-danger', () => answer('deny'), 'The call is refused; the engine is told it was denied.')));
      }
    } else if (open) {
      node.appendChild(el('p', { class: 'muted small', text: 'This kind of interaction is answered by the engine.' }));
      node.appendChild(el('div', { class: 'actions' },
        btn('card-cancel', 'Cancel (no answer)', 'btn-ghost', () => answer('cancel'), TITLES.cancel)));
    }
    return node;
  }

  function toLocalDateTime(v) {
    const d = new Date(v);
    if (isNaN(d.getTime())) return '';
    const p = (n) => String(n).padStart(2, '0');
    return d.getFullYear() + '-' + p(d.getMonth() + 1) + '-' + p(d.getDate()) + 'T' + p(d.getHours()) + ':' + p(d.getMinutes());
  }

  /** A form field's format, in words. */
  const FORMATS = { email: 'an e-mail address', uri: 'a URL', date: 'a date', 'date-time': 'a date and time' };

  /** One field of a form card: its node, and a reader that puts its value into the content. */
  function formField(f, open) {
    const name = f.name;
    const limits = f.limits || {};
    const label = f.title || name;
    const hints = [];
    if (limits.min_length != null) hints.push('at least ' + limits.min_length + ' characters');
    if (limits.max_length != null) hints.push('at most ' + limits.max_length + ' characters');
    if (limits.minimum != null) hints.push('minimum ' + limits.minimum);
    if (limits.maximum != null) hints.push('maximum ' + limits.maximum);
    if (limits.min_items) hints.push('choose at least ' + limits.min_items);
    if (limits.max_items != null) hints.push('choose at most ' + limits.max_items);
    if (limits.format) hints.push(FORMATS[limits.format] || 'format: ' + limits.format);
    const id = 'f-' + Math.random().toString(36).slice(2) + '-' + name.replace(/[^A-Za-z0-9_-]/g, '_');
    const wrap = el('div', { class: 'field', testid: 'field', data: { field: name, kind: f.kind || '' } });
    const labelNode = el('label', { class: 'field-label', htmlFor: id }, label, f.required ? el('span', { class: 'req', text: ' *', title: 'required' }) : null);
    const def = f.default;
    let control;
    let read = () => {};
    const options = Array.isArray(f.options) ? f.options : [];

    switch (f.kind) {
      case 'string': {
        const fmt = limits.format;
        let type = 'text';
        if (fmt === 'email') type = 'email';
        else if (fmt === 'uri') type = 'url';
        else if (fmt === 'date') type = 'date';
        else if (fmt === 'date-time') type = 'datetime-local';
        control = el('input', { type: type, id: id, name: name, class: 'input', disabled: !open });
        if (def != null) control.value = type === 'datetime-local' ? toLocalDateTime(def) : String(def);
        read = (c) => {
          let v = control.value;
          if (v === '') return;
          if (type === 'datetime-local') {
            const d = new Date(v);
            if (!isNaN(d.getTime())) v = d.toISOString();
          }
          c[name] = v;
        };
        break;
      }
      case 'number':
      case 'integer': {
        control = el('input', { type: 'text', inputMode: f.kind === 'integer' ? 'numeric' : 'decimal', id: id, name: name, class: 'input input-num', disabled: !open });
        if (def != null) control.value = String(def);
        read = (c) => {
          const v = control.value.trim();
          if (v === '') return;
          const n = Number(v);
          // Not a number: sent as typed, for the gateway to say what is wrong.
          c[name] = v !== '' && !isNaN(n) ? n : v;
        };
        break;
      }
      case 'boolean': {
        control = el('input', { type: 'checkbox', id: id, name: name, disabled: !open, checked: def === true });
        read = (c) => { c[name] = control.checked; };
        break;
      }
      case 'single_select': {
        control = el('select', { id: id, name: name, class: 'input', disabled: !open },
          el('option', { value: '', text: '— choose —' }),
          options.map((o) => el('option', { value: String(o.value), text: o.label || String(o.value) })));
        control.value = def != null ? String(def) : '';
        read = (c) => {
          if (control.value === '') return;
          const o = options.find((x) => String(x.value) === control.value);
          c[name] = o ? o.value : control.value;
        };
        break;
      }
      case 'multi_select': {
        const chosen = Array.isArray(def) ? def.map(String) : [];
        const boxes = options.map((o) => {
          const cb = el('input', { type: 'checkbox', name: name, value: String(o.value), disabled: !open, checked: chosen.includes(String(o.value)) });
          return { cb, o };
        });
        control = el('div', { class: 'checks', id: id, attrs: { role: 'group' } },
          boxes.map(({ cb, o }) => el('label', { class: 'check' }, cb, ' ', o.label || String(o.value))));
        read = (c) => { c[name] = boxes.filter((b) => b.cb.checked).map((b) => b.o.value); };
        break;
      }
      default: {
        control = el('input', { type: 'text', id: id, name: name, class: 'input', disabled: true, value: '', placeholder: 'not supported by forms' });
        hints.unshift('unsupported field' + (f.unsupported ? ': ' + f.unsupported : ''));
        read = () => {};
      }
    }
    const isCheckbox = f.kind === 'boolean';
    append(wrap, [
      isCheckbox ? el('label', { class: 'check field-label' }, control, ' ', label, f.required ? el('span', { class: 'req', text: ' *' }) : null) : labelNode,
      isCheckbox ? null : control,
      f.description ? el('p', { class: 'hint', text: f.description }) : null,
      hints.length ? el('p', { class: 'hint', testid: 'field-hint', text: hints.join(' · ') }) : null,
      f.kind === 'string' && limits.format === 'date-time' ? el('p', { class: 'hint', testid: 'field-tz', text: '(your local time, sent as UTC)' }) : null,
      el('p', { class: 'field-error', testid: 'field-error', hidden: true, attrs: { 'aria-live': 'polite' } })]);
    if (f.kind === 'unsupported' || !['string', 'number', 'integer', 'boolean', 'single_select', 'multi_select'].includes(f.kind)) wrap.classList.add('field-unsupported');
    return { node: wrap, read: read };
  }

  // ---------------------------------------------------------------- start

  async function start() {
    $('logout').addEventListener('click', logout);
    $('alert-close').addEventListener('click', clearError);
    $('notice-close').addEventListener('click', hideNotice);
    window.addEventListener('hashchange', route);
    try {
      const s = await api('GET', 'session');
      loggedIn(s);
    } catch (e) {
      if (e instanceof ApiError && e.status === 401) showLogin(e.body, null);
      else {
        showLogin(null, null);
        showError(e.message);
      }
    }
  }

  start();
})();
