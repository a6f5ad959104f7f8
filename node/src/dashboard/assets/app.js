// The hub's dashboard: plain DOM, no framework. Every element is built with createElement and
// textContent (never innerHTML from data); the server's CSP allows no inline script or style.
'use strict';

const TOKEN_KEY = 'hub-token';
const SVG_NS = 'http://www.w3.org/2000/svg';
const OPEN_CHANGE_REQUESTS = new Set(['pending-approval']); // ChangeRequestStatus::is_open

const S = {
  token: null, // null: no token (insecure dev mode)
  session: null,
  applied: 0,
  authGen: 0, // bumped by every login attempt and logout: stale session answers are dropped
  waitGen: 0,
  waitAbort: null,
  renderGen: 0,
  routeKey: null,
  errorSource: null, // 'load' (cleared by the next load), 'wait' (by the next wait) or 'action'
  ui: { activeOnly: false, audit: { actor: '', kind: '' }, auditDraft: { actor: '', kind: '' }, reasons: {} },
};

const $ = (id) => document.getElementById(id);

// ---------- DOM helpers ----------

function fill(node, attrs, children) {
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === null || v === undefined || v === false) continue;
    node.setAttribute(k, v === true ? '' : String(v));
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

/** An HTML element: attributes via setAttribute, string children as text nodes. */
function el(tag, attrs, ...children) {
  return fill(document.createElement(tag), attrs, children);
}

/** An SVG element (attributes such as x, y, points are geometry, not CSS). */
function svg(tag, attrs, ...children) {
  return fill(document.createElementNS(SVG_NS, tag), attrs, children);
}

function on(node, event, fn) {
  node.addEventListener(event, fn);
  return node;
}

function dash(v) {
  if (v === null || v === undefined || v === '') return '—';
  if (Array.isArray(v)) return v.length ? v.map(dash).join(', ') : '—';
  if (typeof v === 'boolean') return v ? 'yes' : 'no';
  if (typeof v === 'object') return JSON.stringify(v);
  return String(v);
}

const norm = (s) => String(s == null ? '' : s).toLowerCase().replace(/[^a-z0-9]+/g, '-');

const TONES = [
  [/^(succeeded|merged|applied|passed|pass|up-to-date|healthy|leader|true|yes)$/, 'ok'],
  [/fail|error|refused|rejected|unhealthy|unreachable/, 'bad'],
  [/^(running|issued|progressing|promoting|finalising|waitingpromotion|resuming-updates)$/, 'busy'],
  [/blocked|pending|paused|suppress|degraded|inconclusive|halted/, 'warn'],
  [/^(initialized|initializing|waiting|cancelled|terminating|follower|learner|candidate|unknown)$/, 'idle'],
];

function tone(text) {
  const s = norm(text);
  for (const [re, t] of TONES) if (re.test(s)) return t;
  return '';
}

/** A coloured status label: classes `badge tone-<ok|bad|busy|warn|idle> st-<status>`. */
function badge(text, attrs) {
  const t = tone(text);
  const cls = ['badge', t && 'tone-' + t, text != null && 'st-' + norm(text)].filter(Boolean).join(' ');
  return el('span', Object.assign({ class: cls }, attrs || {}), dash(text));
}

function link(href, text) {
  return text == null || text === '' ? '—' : el('a', { href }, String(text));
}

const enc = encodeURIComponent;
const hrefEnv = (name) => '#/environments/' + enc(name);
const hrefEntity = (id) => '#/entities/' + enc(id);
const hrefPlan = (id) => '#/plans/' + enc(id);
const hrefActivity = (id) => '#/activity/' + enc(id);
const hrefCanary = (id) => '#/canaries/' + String(id).split('/').map(enc).join('/');

const fromTo = (from, to) => dash(from) + ' → ' + dash(to);

function cell(v) {
  if (v instanceof Node || Array.isArray(v)) return el('td', null, v);
  return el('td', null, dash(v));
}

function row(attrs, cells) {
  return el('tr', attrs, cells.map(cell));
}

function table(id, headers, rows, empty) {
  const body = el('tbody', null, rows);
  if (!rows.length) {
    body.append(el('tr', { class: 'empty' }, el('td', { colspan: headers.length }, empty || 'none')));
  }
  return el('div', { class: 'table-wrap' },
    el('table', { id }, el('thead', null, el('tr', null, headers.map((h) => el('th', null, h)))), body));
}

/** A definition list of [label, value] pairs; pairs whose value is undefined are left out. */
function kv(pairs, attrs) {
  const dl = el('dl', Object.assign({ class: 'kv' }, attrs || {}));
  for (const [k, v] of pairs) {
    if (v === undefined) continue;
    dl.append(el('dt', null, k), el('dd', null, v instanceof Node || Array.isArray(v) ? v : dash(v)));
  }
  return dl;
}

function card(title, attrs, ...children) {
  return el('section', Object.assign({ class: 'card' }, attrs || {}), title ? el('h2', null, title) : null, children);
}

function crumbs(...parts) {
  return el('nav', { class: 'crumbs', 'aria-label': 'Breadcrumb' },
    parts.filter(Boolean).map(([text, href], i) => [i ? el('span', { class: 'sep' }, '›') : null, href ? link(href, text) : el('span', null, text)]));
}

function stat(label, value) {
  return el('div', { class: 'stat' }, el('div', { class: 'stat-label' }, label), el('div', { class: 'stat-value' }, value));
}

function list(items, attrs) {
  return items && items.length ? el('ul', Object.assign({ class: 'plain' }, attrs || {}), items.map((i) => el('li', null, dash(i)))) : '—';
}

function fmtNum(v) {
  if (typeof v !== 'number' || !Number.isFinite(v)) return '—';
  return String(Math.round(v * 1000) / 1000);
}

const page = (name, ...nodes) => ({ page: name, nodes: nodes.flat().filter(Boolean) });

// ---------- API ----------

class ApiError extends Error {
  constructor(status, message) {
    super(message);
    this.status = status;
  }
}

async function request(method, path, body, token, signal) {
  const headers = {};
  if (token) headers.authorization = 'Bearer ' + token;
  if (body !== undefined) headers['content-type'] = 'application/json';
  let res;
  try {
    res = await fetch(path, {
      method, headers, signal, cache: 'no-store',
      body: body === undefined ? undefined : JSON.stringify(body),
    });
  } catch (e) {
    if (e.name === 'AbortError') throw e;
    throw new ApiError(0, 'network error: ' + e.message);
  }
  let data = null;
  try {
    data = await res.json();
  } catch (_) {
    data = null;
  }
  if (!res.ok) {
    const msg = data && typeof data.error === 'string' ? data.error : `${res.status} ${res.statusText}`.trim();
    throw new ApiError(res.status, msg);
  }
  return data;
}

/** An authenticated call; a 401 sends the tab back to the login screen with the message. */
async function api(method, path, body, signal) {
  try {
    return await request(method, path, body, S.token, signal);
  } catch (e) {
    if (e.status === 401 && S.session) toLogin(e.message);
    throw e;
  }
}

const get = (path, signal) => api('GET', path, undefined, signal);
const query = (q) => api('POST', '/api/query', q);

// ---------- banners ----------

function showError(message, source) {
  $('error').textContent = message;
  $('error-bar').hidden = false;
  S.errorSource = source;
}

function clearError() {
  $('error').textContent = '';
  $('error-bar').hidden = true;
  S.errorSource = null;
}

function showNotice(message) {
  $('notice').textContent = message;
  $('notice-bar').hidden = false;
}

function clearNotice() {
  $('notice').textContent = '';
  $('notice-bar').hidden = true;
}

// ---------- session ----------

async function trySession(token) {
  const gen = ++S.authGen;
  const session = await request('GET', '/api/session', undefined, token);
  if (gen !== S.authGen) return false;
  if (session && session.may_read === false) {
    // Known, but holding no role: there is nothing this token may see.
    throw new Error(session.identity + ' holds no role: an admin grants one with hubctl role bind');
  }
  enterApp(token, session || {});
  return true;
}

async function onLogin() {
  const button = $('login');
  const token = $('token').value.trim();
  $('login-error').textContent = '';
  button.disabled = true;
  try {
    await trySession(token || null);
    $('token').value = '';
  } catch (e) {
    $('login-error').textContent = e.message;
  } finally {
    button.disabled = false;
  }
}

function enterApp(token, session) {
  S.token = token;
  S.session = session;
  if (token) sessionStorage.setItem(TOKEN_KEY, token);
  const roles = (session.roles || []).map((r) => r.role + (r.environments && r.environments.length ? ' (' + r.environments.join(', ') + ')' : ''));
  $('identity').textContent = session.identity || 'anonymous';
  $('identity').setAttribute('title', roles.length ? 'roles: ' + roles.join('; ') : 'no roles');
  $('login-error').textContent = '';
  $('login-screen').hidden = true;
  $('app').hidden = false;
  S.applied = 0;
  $('applied-index').textContent = '0';
  S.routeKey = null;
  render();
  startWait();
}

function toLogin(message) {
  stopWait();
  S.authGen++;
  S.renderGen++;
  S.token = null;
  S.session = null;
  S.routeKey = null;
  sessionStorage.removeItem(TOKEN_KEY);
  const view = $('view');
  view.replaceChildren();
  delete view.dataset.page;
  delete view.dataset.loadedAt;
  clearError();
  clearNotice();
  $('identity').textContent = '';
  $('app').hidden = true;
  $('login-screen').hidden = false;
  $('login-error').textContent = message || '';
  $('token').focus();
}

// ---------- live updates ----------

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

function startWait() {
  stopWait();
  const gen = S.waitGen;
  const ctl = new AbortController();
  S.waitAbort = ctl;
  waitLoop(gen, ctl.signal);
}

function stopWait() {
  S.waitGen++;
  if (S.waitAbort) S.waitAbort.abort();
  S.waitAbort = null;
}

async function waitLoop(gen, signal) {
  while (gen === S.waitGen) {
    try {
      const r = await get('/api/wait?after=' + S.applied, signal);
      if (gen !== S.waitGen) return;
      const m = Number(r && r.applied_index);
      if (S.errorSource === 'wait') clearError();
      if (m > S.applied) {
        S.applied = m;
        $('applied-index').textContent = String(m);
        render();
      }
    } catch (e) {
      if (gen !== S.waitGen || e.status === 401) return;
      if (e.status) showError('live updates: ' + e.message, 'wait');
      await sleep(2000);
    }
  }
}

// ---------- routing and rendering ----------

const ROUTES = {
  cluster: [pageCluster],
  environments: [pageEnvironments, pageEnvironment],
  entities: [null, pageEntity],
  plans: [pagePlans, pagePlan],
  activity: [pageActivity, pageActivity],
  canaries: [pageCanaries, pageCanary],
  modules: [pageModules],
  audit: [pageAudit],
};

function safeDecode(s) {
  try {
    return decodeURIComponent(s);
  } catch (_) {
    return s;
  }
}

function parseRoute() {
  const raw = location.hash.replace(/^#\/?/, '');
  const [name, ...rest] = raw.split('/').filter(Boolean).map(safeDecode);
  const handlers = ROUTES[name];
  if (!handlers) return null;
  const arg = rest.length ? rest.join('/') : null;
  const fn = arg === null ? handlers[0] : handlers[1];
  return fn ? { name, arg, fn, key: raw } : null;
}

function markNav(name) {
  for (const a of document.querySelectorAll('.nav a')) {
    a.classList.toggle('active', a.getAttribute('href') === '#/' + (name === 'entities' ? 'environments' : name));
  }
}

/** Renders the current route. `reset`: a user-driven reload (filter, action) that tests wait on. */
async function render(opts) {
  if (!S.session) return;
  let route = parseRoute();
  if (!route) {
    history.replaceState(null, '', '#/cluster');
    route = parseRoute();
  }
  const view = $('view');
  const gen = ++S.renderGen;
  const at = S.applied;
  const same = route.key === S.routeKey;
  if (!same || (opts && opts.reset)) {
    delete view.dataset.page;
    delete view.dataset.loadedAt;
  }
  if (!same) {
    S.routeKey = route.key;
    clearNotice();
    clearError();
    markNav(route.name);
    view.replaceChildren(el('p', { class: 'loading' }, 'Loading…'));
  }
  try {
    const out = await route.fn(route.arg);
    if (gen !== S.renderGen) return;
    swapView(view, out.nodes, same);
    if (S.errorSource === 'load') clearError();
    view.dataset.page = out.page;
    view.dataset.loadedAt = String(at);
  } catch (e) {
    if (gen !== S.renderGen || e.status === 401 || e.name === 'AbortError') return;
    showError(e.message, 'load');
    if (!same) view.replaceChildren(el('p', { class: 'empty' }, 'This page could not be loaded.'));
  }
}

/** Replaces the view, keeping the scroll position and the focused input across a reload. */
function swapView(view, nodes, keepScroll) {
  const y = window.scrollY;
  const focus = focusKey(view, document.activeElement);
  view.replaceChildren(...nodes);
  if (focus) restoreFocus(view, focus);
  window.scrollTo(0, keepScroll ? y : 0);
}

function focusKey(view, a) {
  if (!a || !view.contains(a)) return null;
  for (const attr of ['id', 'data-reason']) {
    if (a.hasAttribute(attr)) return { attr, value: a.getAttribute(attr), start: a.selectionStart, end: a.selectionEnd };
  }
  return null;
}

function restoreFocus(view, f) {
  const n = [...view.querySelectorAll('[' + f.attr + ']')].find((x) => x.getAttribute(f.attr) === f.value);
  if (!n) return;
  n.focus();
  try {
    if (f.start != null) n.setSelectionRange(f.start, f.end);
  } catch (_) { /* not a text input */ }
}

// ---------- pages ----------

async function pageCluster() {
  const c = await get('/api/cluster');
  const members = c.members || [];
  const leader = c.has_leader !== false && c.leader != null ? 'node ' + c.leader : 'none';
  const rows = members.map((m) => row(
    { 'data-member': m.id, class: m.error ? 'has-error' : null },
    [m.id, m.addr, badge(m.role), m.term, m.last_applied, m.lag, el('code', null, dash(m.digest)), m.error],
  ));
  return page('cluster',
    el('h1', null, 'Cluster'),
    el('div', { class: 'stats' },
      stat('Leader', el('span', { id: 'leader' }, leader)),
      stat('Term', el('span', { id: 'term' }, dash(c.term))),
      stat('Applied index', dash(c.applied_index)),
      stat('Members', String(members.length))),
    card('Members', null, table('members', ['id', 'address', 'role', 'term', 'last applied', 'lag', 'digest', 'error'], rows, 'no members')));
}

async function pageEnvironments() {
  const r = await get('/api/environments');
  const rows = (r.environments || []).map((e) => row(
    { 'data-env': e.name },
    [link(hrefEnv(e.name), e.name), e.description, e.entity_count, e.created],
  ));
  return page('environments',
    el('h1', null, 'Environments'),
    card(null, null, table('environments', ['name', 'description', 'entities', 'created'], rows, 'no environments')));
}

async function pageEnvironment(env) {
  const r = await get('/api/entities?environment=' + enc(env));
  const rows = (r.entities || []).map((e) => row(
    { 'data-entity': e.id },
    [link(hrefEntity(e.id), e.name), e.kind, e.product_id, e.release_channel, el('code', null, e.id)],
  ));
  return page('environment',
    crumbs(['Environments', '#/environments'], [env]),
    el('h1', null, env),
    card('Entities', null, table('entities', ['name', 'kind', 'product', 'channel', 'id'], rows, 'no entities')));
}

function timeline(id, entries) {
  const sorted = (entries || []).slice().sort((a, b) => (Number(b.index) || 0) - (Number(a.index) || 0));
  return [
    el('ol', { id, class: 'timeline' }, sorted.map((e) => el('li', { 'data-kind': e.kind },
      el('time', null, dash(e.time)), badge(e.kind), el('span', { class: 'msg' }, dash(e.message))))),
    sorted.length ? null : el('p', { class: 'empty' }, 'no activity'),
  ];
}

function meetsText(x) {
  if (x.meets_constraints === 'issued') return 'a plan is issued';
  if (x.meets_constraints === true) return 'all constraints pass';
  if (x.meets_constraints === false) return 'blocked' + (x.may_clear_at ? ', may clear at ' + x.may_clear_at : '');
  return null;
}

function planStatusLine(p) {
  return [link(hrefPlan(p.plan), p.plan), ' ', p.kind ? el('span', { class: 'muted' }, p.kind + ' ') : null, badge(p.status)];
}

async function pageEntity(ref) {
  const [x, act, ent] = await Promise.all([
    query({ query: 'explain', entity: ref }),
    query({ query: 'activity', entity: ref }),
    query({ query: 'entity', entity: ref }).catch((e) => { if (e.status === 401) throw e; return null; }),
  ]);
  const title = ent ? ent.environment + '/' + ent.name : x.entity;
  const cand = x.candidate;
  const constraints = (x.constraints || []).map((c) => row(
    { 'data-constraint': c.constraint, class: c.passed ? 'passed' : 'blocked' },
    [c.constraint, badge(c.passed ? 'passed' : 'blocked'), c.reason, c.may_clear_at],
  ));
  const last = x.last_execution;
  const insecure = (x.insecure_registries || []).map((r) =>
    el('p', { class: 'warn-line' }, `registry ${r.name} (${r.url}) does not verify certificates`));
  return page('entity',
    crumbs(['Environments', '#/environments'], ent ? [ent.environment, hrefEnv(ent.environment)] : null, [title]),
    el('h1', null, title),
    ent ? el('p', { class: 'muted' }, `${ent.kind} · ${dash(ent.product_id)} · channel ${dash(ent.release_channel)} · `,
      `running ${dash(ent.reported && ent.reported.version)} `, badge(ent.reported && ent.reported.health), ' · ', el('code', null, ent.id)) : null,
    insecure,
    el('p', { id: 'summary', class: 'summary' }, dash(x.summary)),
    el('p', { class: 'muted' }, 'evaluated at ', el('span', { id: 'evaluated-at' }, dash(x.evaluated_at))),
    el('div', { class: 'grid2' },
      card('Candidate', { id: 'candidate' }, cand
        ? kv([['kind', cand.kind], ['version', fromTo(cand.from_version, cand.to_version)], ['reason', cand.reason]])
        : el('p', { class: 'empty' }, 'no candidate'),
      x.skipped && x.skipped.length ? [el('h3', null, 'Passed over'), list(x.skipped)] : null),
      card('Issued', { id: 'issued' }, x.issued ? el('p', null, planStatusLine(x.issued)) : el('p', { class: 'empty' }, 'nothing issued')),
      card('Last execution', { id: 'last-execution' }, last
        ? [el('p', null, planStatusLine(last)), last.failure ? el('p', { class: 'failure-line' }, last.failure) : null]
        : el('p', { class: 'empty' }, 'no execution yet'))),
    card('Constraints', null, meetsText(x) ? el('p', { class: 'muted' }, meetsText(x)) : null,
      table('constraints', ['constraint', 'passed', 'reason', 'may clear at'], constraints, 'no constraints evaluated')),
    card('Activity', null, el('p', null, link(hrefActivity(x.entity), 'full timeline')), timeline('activity', act.entries)));
}

function failureText(p) {
  if (p.failure) return p.failure.stage + ': ' + p.failure.message;
  return p.cancel_reason || null;
}

async function pagePlans() {
  const q = { query: 'plans', limit: 100 };
  if (S.ui.activeOnly) q.active = true;
  const r = await query(q);
  const box = el('input', { id: 'active-only', type: 'checkbox', checked: S.ui.activeOnly });
  on(box, 'change', () => {
    S.ui.activeOnly = box.checked;
    render({ reset: true });
  });
  const rows = (r.plans || []).map((p) => row(
    { 'data-plan': p.id, 'data-status': p.status },
    [link(hrefPlan(p.id), p.id), link(hrefEntity(p.entity), p.entity), p.kind, badge(p.status),
      fromTo(p.from_version, p.to_version), p.issued, failureText(p)],
  ));
  return page('plans',
    el('h1', null, 'Plans'),
    el('div', { class: 'toolbar' }, el('label', { class: 'check' }, box, ' active only (issued or running)'),
      el('span', { class: 'muted' }, 'newest first, at most 100')),
    card(null, null, table('plans', ['plan', 'entity', 'kind', 'status', 'version', 'issued', 'failure'], rows, 'no plans')));
}

async function pagePlan(id) {
  const p = await query({ query: 'plan', id });
  const tasks = (p.tasks || []).map((t) => row(
    { 'data-task': t.name, 'data-state': t.state },
    [t.name, badge(t.state), t.attempt, t.started, t.ended, t.error],
  ));
  const f = p.failure;
  return page('plan',
    crumbs(['Plans', '#/plans'], [p.id]),
    el('h1', null, 'Plan ', p.id, ' ', badge(p.status, { id: 'plan-status' })),
    card('Details', null, kv([
      ['entity', link(hrefEntity(p.entity), p.entity)], ['environment', link(hrefEnv(p.environment), p.environment)],
      ['kind', p.kind], ['command', p.command], ['actor', p.actor],
      ['rolls back', p.rolls_back === undefined ? undefined : link(hrefPlan(p.rolls_back), p.rolls_back)],
      ['version', fromTo(p.from_version, p.to_version)], ['reason', p.reason], ['cancel reason', p.cancel_reason],
      ['created', p.created], ['issued', p.issued], ['started', p.started], ['ended', p.ended],
      ['issued at index', p.issued_index], ['secrets revision', p.secrets_revision],
      ['from config sha256', p.from_config_sha256],
      ['artifacts', (p.artifacts || []).length ? el('ul', { class: 'plain' }, p.artifacts.map((a) =>
        el('li', null, el('code', null, a.uri), ' ', el('span', { class: 'muted' }, dash(a.sha256))))) : '—'],
    ])),
    f ? card('Failure', { id: 'failure', class: 'card danger' }, kv([
      ['stage', f.stage], ['message', f.message],
      ['not ready', list(f.not_ready, { class: 'plain not-ready' })],
      ['validation errors', list(f.validation_errors, { class: 'plain validation-errors' })],
    ])) : null,
    card('Tasks', null, table('tasks', ['task', 'state', 'attempt', 'started', 'ended', 'error'], tasks, 'no tasks')),
    card('Output', null, p.output ? el('pre', { id: 'output' }, p.output) : el('p', { class: 'empty' }, 'no output')),
    p.to_config ? card(null, null, el('details', null, el('summary', null, 'Configuration'), el('pre', null, p.to_config))) : null);
}

async function entityOptions() {
  const envs = (await get('/api/environments')).environments || [];
  const lists = await Promise.all(envs.map((e) => get('/api/entities?environment=' + enc(e.name))));
  return lists.flatMap((l) => l.entities || []);
}

async function pageActivity(ref) {
  const [entities, act] = await Promise.all([entityOptions(), ref ? query({ query: 'activity', entity: ref }) : null]);
  const select = el('select', { id: 'activity-entity', 'aria-label': 'Entity' },
    el('option', { value: '' }, '— pick an entity —'),
    entities.map((e) => el('option', { value: e.id }, `${e.environment}/${e.name} (${e.kind})`)));
  if (act && !entities.some((e) => e.id === act.entity)) select.append(el('option', { value: act.entity }, act.entity));
  select.value = act ? act.entity : '';
  on(select, 'change', () => {
    if (select.value) location.hash = hrefActivity(select.value);
  });
  return page('activity',
    el('h1', null, 'Activity'),
    el('div', { class: 'toolbar' }, el('label', { for: 'activity-entity' }, 'Entity '), select,
      act ? link(hrefEntity(act.entity), 'explain') : null),
    card(act ? 'Timeline of ' + act.entity : 'Timeline', null,
      act ? timeline('timeline', act.entries) : [el('ol', { id: 'timeline', class: 'timeline' }),
        el('p', { class: 'empty' }, 'Pick an entity to see its timeline, newest first.')]));
}

function weightMeter(w) {
  return [el('meter', { min: 0, max: 100, value: Number(w) || 0 }), ' ', dash(w), '%'];
}

async function pageCanaries() {
  const r = await query({ query: 'canaries' });
  const rows = (r.canaries || []).map((c) => row(
    { 'data-canary': c.id, 'data-phase': c.status },
    [link(hrefCanary(c.id), c.id), link(hrefEntity(c.entity), c.entity), badge(c.status), weightMeter(c.weight),
      c.last_transition, c.promoted],
  ));
  return page('canaries',
    el('h1', null, 'Canaries'),
    card(null, null, table('canaries', ['canary', 'entity', 'phase', 'weight', 'last transition', 'promoted'], rows, 'no canaries')));
}

// ----- the canary chart -----

const CH = { w: 760, h: 260, l: 46, r: 14, t: 14, b: 30 };
const METRICS = {
  'request-success-rate': { label: 'success rate', unit: '%' },
  'request-duration': { label: 'p99', unit: ' ms' },
};

const metricPairs = (m) => (Array.isArray(m) ? m : Object.entries(m || {}));
const r1 = (v) => Math.round(v * 10) / 10;
const clamp = (v, lo, hi) => Math.min(hi, Math.max(lo, Number(v) || 0));
const shortTime = (t) => (/^\d{4}-\d\d-\d\dT(\d\d:\d\d:\d\d)/.exec(t || '') || [])[1] || dash(t);
const metricTitle = (n) => (METRICS[n] ? `${METRICS[n].label} (${n})` : n);

function metricValue(sample, name) {
  const p = metricPairs(sample.metrics).find(([n]) => n === name);
  const v = p ? p[1] : null;
  return typeof v === 'number' && Number.isFinite(v) ? v : null;
}

function withUnit(name, v) {
  return v === null || v === undefined ? '—' : fmtNum(v) + (METRICS[name] ? METRICS[name].unit : '');
}

function metricNames(samples) {
  const names = [];
  for (const s of samples) for (const [n] of metricPairs(s.metrics)) if (!names.includes(n)) names.push(n);
  return names;
}

function valueRange(values) {
  if (!values.length) return [0, 1];
  let lo = Math.min(...values);
  let hi = Math.max(...values);
  if (hi === lo) { lo -= 1; hi += 1; }
  const pad = (hi - lo) * 0.08;
  return [lo - pad, hi + pad];
}

const pointsAttr = (pts) => pts.map(([x, y]) => x + ',' + y).join(' ');

function dot(x, y, cls, title) {
  return svg('circle', { class: 'point ' + cls, cx: x, cy: y, r: 2.5 }, svg('title', null, title));
}

/** Phase bands (one per run of equal phases) and a vertical line at each change. */
function phaseMarks(samples, X, right, top, ph) {
  const segs = [];
  for (const s of samples) if (!segs.length || segs[segs.length - 1].phase !== s.phase) segs.push({ phase: s.phase, from: s });
  const out = [];
  segs.forEach((g, k) => {
    const next = segs[k + 1];
    const x1 = X(g.from.time_ms);
    const x2 = next ? X(next.from.time_ms) : right;
    out.push(svg('rect', { class: 'band tone-' + (tone(g.phase) || 'idle'), 'data-phase': g.phase, x: x1, y: top, width: Math.max(r1(x2 - x1), 1), height: ph },
      svg('title', null, `${g.phase}: ${g.from.time} – ${next ? next.from.time : 'now'}`)));
    if (x2 - x1 > 70) out.push(svg('text', { class: 'band-label', x: x1 + 4, y: top + 12 }, g.phase));
    if (k) {
      out.push(svg('line', { class: 'phase-change', 'data-phase': g.phase, x1, x2: x1, y1: top, y2: top + ph },
        svg('title', null, `${segs[k - 1].phase} → ${g.phase} at ${g.from.time} (step ${g.from.step})`)));
    }
  });
  return out;
}

function canaryChart(samples, names) {
  const { w, h, l, r, t, b } = CH;
  const pw = w - l - r;
  const ph = h - t - b;
  const root = svg('svg', { id: 'canary-chart', class: 'chart', viewBox: `0 0 ${w} ${h}`, role: 'img', 'aria-label': 'canary weight and analysis metrics over time' });
  const Y = (frac) => r1(t + ph - frac * ph);
  for (const v of [0, 25, 50, 75, 100]) {
    root.append(svg('line', { class: 'grid', x1: l, x2: l + pw, y1: Y(v / 100), y2: Y(v / 100) }),
      svg('text', { class: 'axis-label', x: l - 6, y: Y(v / 100) + 4, 'text-anchor': 'end' }, v + '%'));
  }
  root.append(svg('line', { class: 'axis', x1: l, x2: l + pw, y1: t + ph, y2: t + ph }));
  if (!samples.length) {
    root.append(svg('text', { class: 'chart-empty', x: l + pw / 2, y: t + ph / 2, 'text-anchor': 'middle' }, 'no samples yet'));
    return root;
  }
  const times = samples.map((s) => Number(s.time_ms));
  const t0 = Math.min(...times);
  const t1 = Math.max(...times);
  const X = (ms) => r1(t1 > t0 ? l + ((Number(ms) - t0) / (t1 - t0)) * pw : l + pw / 2);
  root.append(...phaseMarks(samples, X, l + pw, t, ph));
  const wp = [];
  for (const s of samples) {
    const x = X(s.time_ms);
    if (wp.length) wp.push([x, wp[wp.length - 1][1]]); // a step line: the weight holds until the next step
    wp.push([x, Y(clamp(s.canary_weight, 0, 100) / 100)]);
  }
  root.append(svg('polyline', { 'data-series': 'weight', class: 'series series-weight', points: pointsAttr(wp) }));
  names.forEach((name, k) => {
    const pts = samples.map((s) => [s, metricValue(s, name)]).filter(([, v]) => v !== null);
    const [lo, hi] = valueRange(pts.map(([, v]) => v));
    const xy = pts.map(([s, v]) => [X(s.time_ms), Y((v - lo) / (hi - lo))]);
    root.append(svg('polyline', { 'data-series': name, class: 'series series-' + (k % 8), points: pointsAttr(xy) }));
    pts.forEach(([s, v], i) => root.append(dot(xy[i][0], xy[i][1], 'series-' + (k % 8), `${s.time} · ${name}: ${withUnit(name, v)}`)));
  });
  samples.forEach((s) => root.append(dot(X(s.time_ms), Y(clamp(s.canary_weight, 0, 100) / 100), 'series-weight',
    `${s.time} · step ${s.step} · ${s.phase} · weight ${s.canary_weight}%`)));
  const first = samples[0];
  const last = samples[samples.length - 1];
  root.append(svg('text', { class: 'axis-label', x: l, y: h - 8, 'text-anchor': 'start' }, shortTime(first.time)));
  if (samples.length > 1) root.append(svg('text', { class: 'axis-label', x: l + pw, y: h - 8, 'text-anchor': 'end' }, shortTime(last.time)));
  return root;
}

function chartLegend(samples, names) {
  return el('ul', { class: 'legend', id: 'chart-legend' },
    el('li', { class: 'legend-weight' }, el('span', { class: 'swatch series-weight' }), 'canary weight (0–100 %)'),
    names.map((n, k) => {
      const vals = samples.map((s) => metricValue(s, n)).filter((v) => v !== null);
      const span = vals.length ? ` ${withUnit(n, Math.min(...vals))} – ${withUnit(n, Math.max(...vals))}` : ' no data';
      return el('li', { 'data-legend': n }, el('span', { class: 'swatch series-' + (k % 8) }), metricTitle(n), el('span', { class: 'muted' }, span));
    }),
    el('li', { class: 'legend-phase' }, el('span', { class: 'swatch band-swatch' }), 'shading: phase (hover for times)'));
}

function latestTable(samples, names, obs) {
  const last = samples[samples.length - 1];
  const rows = [];
  if (last) {
    rows.push(row(null, ['sample', `${dash(last.time)} (step ${dash(last.step)})`]),
      row(null, ['phase', badge(last.phase)]), row(null, ['weight', dash(last.canary_weight) + '%']));
    const ordered = names.filter((n) => METRICS[n]).concat(names.filter((n) => !METRICS[n]));
    for (const n of ordered) rows.push(row({ 'data-metric': n }, [metricTitle(n), withUnit(n, metricValue(last, n))]));
  } else if (obs && (obs.windows || []).length) {
    const win = obs.windows[obs.windows.length - 1];
    rows.push(row(null, ['observed', obs.observed]),
      row({ 'data-metric': 'request-success-rate' }, [metricTitle('request-success-rate'), withUnit('request-success-rate', win.success_rate)]),
      row({ 'data-metric': 'request-duration' }, [metricTitle('request-duration'), withUnit('request-duration', win.p99_ms)]));
  }
  return table('latest', ['latest', 'value'], rows, 'no samples yet');
}

function observationCard(o) {
  if (!o) return null;
  const windows = (o.windows || []).map((w) => row(null, [w.interval_ms, w.requests, withUnit('request-success-rate', w.success_rate), withUnit('request-duration', w.p99_ms)]));
  return card('Observation', null, kv([
    ['observed', o.observed], ['applied step', o.applied_step],
    ['primary', `${dash(o.primary_revision)} · ${dash(o.primary_ready_percent)}% ready`],
    ['canary', `${dash(o.canary_revision)} · ${dash(o.canary_ready_percent)}% ready`],
  ]), table('windows', ['interval (ms)', 'requests', 'success rate', 'p99'], windows, 'no metric windows'));
}

function statusCard(sb) {
  sb = sb || {};
  const conds = (sb.conditions || []).map((c) => row({ 'data-condition': c.type },
    [c.type, badge(c.status), c.reason, c.message, c.lastTransitionTime, c.lastUpdateTime]));
  return card('Status', { id: 'status-block' }, kv([
    ['phase', badge(sb.phase)], ['canaryWeight', sb.canaryWeight], ['failedChecks', sb.failedChecks],
    ['iterations', sb.iterations], ['lastAppliedSpec', sb.lastAppliedSpec], ['lastPromotedSpec', sb.lastPromotedSpec],
  ]), table('conditions', ['type', 'status', 'reason', 'message', 'last transition', 'last update'], conds, 'no conditions'));
}

/** The statistical judges of a canary (issue 20): their settings, the inconclusive count
 *  against its limit, and the last verdict of each judged metric with the numbers behind it. */
function judgesCard(j) {
  if (!j) return null;
  const judges = (j.metrics || []).map((m) => row({ 'data-judge': m.name },
    [m.name, m.baseline, m.direction, m.effectSize, m.confidence, m.intervalMs]));
  const verdicts = (j.verdicts || []).map((v) => row({ 'data-verdict': v.metric },
    [v.metric, badge(v.verdict), v.step, v.reason]));
  const limit = j.inconclusiveLimit == null ? 'no limit' : 'limit ' + j.inconclusiveLimit;
  return card('Judges', { id: 'judges' },
    kv([['inconclusive in a row', `${dash(j.inconclusive)} (${limit})`], ['samples taken', j.samplesTime],
      ['samples at step', j.samplesStep]]),
    table('judge-settings', ['metric', 'baseline', 'direction', 'effect size', 'confidence', 'interval (ms)'], judges, 'no judges'),
    table('judge-verdicts', ['metric', 'verdict', 'step', 'why'], verdicts, 'no verdict yet'));
}

async function pageCanary(id) {
  const c = await query({ query: 'canary', id });
  const samples = (c.history || []).filter((s) => s && Number.isFinite(Number(s.time_ms)));
  const names = metricNames(samples);
  const actions = (c.actions || []).map((a) => el('li', { 'data-step': a.step }, el('span', { class: 'muted' }, 'step ' + dash(a.step) + ' '), dash(a.action)));
  const weights = (c.committed_weights || []).map((w) => `step ${w.step}: ${w.canary_weight}%`);
  return page('canary',
    crumbs(['Canaries', '#/canaries'], [c.id]),
    el('h1', null, 'Canary ', c.id),
    el('div', { class: 'stats' },
      stat('Phase', badge(c.status, { id: 'phase' })),
      stat('Weight', [el('span', { id: 'weight' }, dash(c.weight)), '%']),
      stat('Step', dash(c.step)),
      stat('Next tick', dash(c.next_tick))),
    el('div', { class: 'chart-row' },
      card('Weight and analysis over time', { class: 'card chart-card' }, canaryChart(samples, names), chartLegend(samples, names)),
      card('Latest sample', { class: 'card latest-card' }, latestTable(samples, names, c.observation))),
    el('div', { class: 'grid2' },
      statusCard(c.status_block),
      card('Canary', null, kv([
        ['entity', link(hrefEntity(c.entity), c.entity)], ['namespace', c.namespace], ['name', c.name],
        ['target', c.target ? `${c.target.version} (revision ${c.target.revision})` : null],
        ['primary revision', c.primary_revision], ['canary revision', c.canary_revision],
        ['promoted', c.promoted], ['last transition', c.last_transition], ['queued steps', c.queued_steps],
        ['committed weights', weights.length ? weights.join(', ') : null],
      ]))),
    judgesCard((c.status_block || {}).judges),
    ignoredCard((c.status_block || {}).ignoredFields),
    observationCard(c.observation),
    card('Recent actions', null, actions.length ? el('ol', { id: 'actions', class: 'actions' }, actions)
      : [el('ol', { id: 'actions', class: 'actions' }), el('p', { class: 'empty' }, 'no actions yet')]),
    eventsCard((c.status_block || {}).events),
    c.yaml ? card(null, null, el('details', null, el('summary', null, 'Canary resource'), el('pre', null, c.yaml))) : null);
}

/** Approve and Reject (with a reason) for an open request the caller may decide; `kind` is
 * `change_request` or `window_exception`, the actions' suffix. */
/** The resource's fields the hub accepted and does not act on, each with why (issue 52). */
function ignoredCard(fields) {
  if (!fields || !fields.length) return null;
  const rows = fields.map((f) => row({ 'data-path': f.path }, [el('code', null, f.path), f.reason]));
  return card('Ignored fields', null, table('ignored-fields', ['path', 'why'], rows));
}

/** The canary's events, newest first, as `kubectl describe canary` lists them (issue 52). */
function eventsCard(events) {
  const rows = (events || []).slice().reverse().map((e) => row({ 'data-event-type': e.type },
    [badge(e.type === 'Warning' ? 'warning' : 'normal'), e.reason,
      e.count > 1 ? `${e.lastTimestamp} (×${e.count} since ${e.firstTimestamp})` : e.lastTimestamp, e.message]));
  return card('Events', null, table('events', ['type', 'reason', 'last seen', 'message'], rows, 'no events yet'));
}

function decideControls(item, open, kind) {
  if (item.may_decide !== true || !open) return null;
  const reason = el('input', { type: 'text', 'data-reason': item.id, placeholder: 'reason (optional)', 'aria-label': 'Reason to reject ' + item.id });
  reason.value = S.ui.reasons[item.id] || '';
  on(reason, 'input', () => { S.ui.reasons[item.id] = reason.value; });
  const approve = el('button', { type: 'button', 'data-action': 'approve', class: 'btn ok' }, 'Approve');
  const reject = el('button', { type: 'button', 'data-action': 'reject', class: 'btn bad' }, 'Reject');
  const controls = [approve, reject, reason];
  on(approve, 'click', () => decide(item.id, { action: 'approve_' + kind, id: item.id }, controls));
  on(reject, 'click', () => decide(item.id, { action: 'reject_' + kind, id: item.id, reason: reason.value }, controls));
  return el('div', { class: 'decide' }, approve, reason, reject);
}

/** A request's approvals (issue 55): its policy, who approved, who still must, the expiry. */
function approvalCell(a) {
  if (!a) return '—';
  const who = (a.approvals || []).map((x) => x.identity);
  const left = a.outstanding || [];
  return [
    el('div', { class: 'muted' }, a.policy),
    who.length ? el('div', null, 'approved by ' + who.join(', ')) : null,
    left.length ? el('div', { class: 'warn-line' }, 'waiting for ' + left.join('; ')) : null,
    a.expires ? el('div', { class: a.expired ? 'warn-line' : 'muted' }, (a.expired ? 'expired ' : 'expires ') + a.expires) : null,
  ];
}

async function decide(id, body, controls) {
  for (const c of controls) c.disabled = true;
  clearNotice();
  try {
    const r = await api('POST', '/api/action', body);
    delete S.ui.reasons[id];
    if (S.errorSource === 'action') clearError();
    showNotice(r && r.summary ? r.summary : id + ': done');
  } catch (e) {
    if (e.status === 401) return;
    showError(e.message, 'action');
    for (const c of controls) c.disabled = false;
  }
  render({ reset: true });
}

async function pageModules() {
  const [m, i, c, w] = await Promise.all([
    query({ query: 'modules' }), query({ query: 'module_installations' }), query({ query: 'change_requests' }),
    query({ query: 'window_exceptions' }),
  ]);
  const modules = (m.modules || []).map((x) => row({ 'data-module': x.name }, [x.name, x.latest, dash(x.versions), x.installations]));
  const installs = (i.installations || []).map((x) => row({ 'data-installation': x.id },
    [x.id, x.module, x.version, x.channel, x.policy, badge(x.status), link(hrefEnv(x.environment), x.environment), x.entities, x.updated]));
  const crNumber = (x) => Number(String(x.id).replace(/\D/g, '')) || 0;
  const crs = (c.change_requests || []).slice().sort((a, b) => crNumber(b) - crNumber(a)).map((x) => row({ 'data-cr': x.id, 'data-status': x.status },
    [x.id, x.installation, fromTo(x.from_version, x.to_version), badge(x.status),
      [dash(x.reason), x.blocked ? el('div', { class: 'warn-line' }, 'blocked: ' + x.blocked) : null,
        x.message ? el('div', { class: 'muted' }, x.message) : null],
      approvalCell(x.approval), x.created, x.decided_by,
      decideControls(x, OPEN_CHANGE_REQUESTS.has(x.status), 'change_request') || '']));
  const wxNumber = (x) => Number(String(x.id).replace(/\D/g, '')) || 0;
  const exceptions = (w.window_exceptions || []).slice().sort((a, b) => wxNumber(b) - wxNumber(a)).map((x) => row({ 'data-wx': x.id, 'data-status': x.status },
    [x.id, x.scope, x.start + ' → ' + x.end, badge(x.status),
      [dash(x.reason), x.message ? el('div', { class: 'muted' }, x.message) : null],
      x.approval.requester, approvalCell(x.approval), x.decided_by,
      decideControls(x, x.status === 'pending', 'window_exception') || '']));
  return page('modules',
    el('h1', null, 'Modules'),
    card('Modules', null, table('modules', ['name', 'latest', 'versions', 'installations'], modules, 'no modules')),
    card('Installations', null, table('installations', ['installation', 'module', 'version', 'channel', 'policy', 'status', 'environment', 'entities', 'updated'], installs, 'no installations')),
    card('Change requests', null, table('change-requests', ['id', 'installation', 'version', 'status', 'reason', 'approvals', 'created', 'decided by', ''], crs, 'no change requests')),
    card('Window-exception requests', null, table('window-exceptions', ['id', 'scope', 'range', 'status', 'reason', 'requested by', 'approvals', 'decided by', ''], exceptions, 'no window-exception requests')));
}

async function pageAudit() {
  const f = S.ui.audit;
  const q = { query: 'audit', limit: 200 };
  if (f.actor) q.actor = f.actor;
  if (f.kind) q.kind = f.kind;
  const r = await query(q);
  const draft = S.ui.auditDraft;
  const actor = el('input', { id: 'audit-actor', type: 'text', placeholder: 'actor, e.g. token/alice', 'aria-label': 'Actor' });
  const kind = el('input', { id: 'audit-kind', type: 'text', placeholder: 'command, e.g. PutSecret', 'aria-label': 'Command kind' });
  actor.value = draft.actor;
  kind.value = draft.kind;
  on(actor, 'input', () => { draft.actor = actor.value; });
  on(kind, 'input', () => { draft.kind = kind.value; });
  const button = el('button', { id: 'audit-filter', type: 'button', class: 'btn primary' }, 'Filter');
  const apply = () => {
    S.ui.audit = { actor: actor.value.trim(), kind: kind.value.trim() };
    render({ reset: true });
  };
  on(button, 'click', apply);
  for (const input of [actor, kind]) on(input, 'keydown', (e) => { if (e.key === 'Enter') apply(); });
  const rows = (r.audit || []).map((a) => row({ 'data-index': a.index, class: a.outcome === 'refused' ? 'refused' : null }, [
    a.index, a.time, a.actor, a.method,
    [dash(a.command || a.action), a.action && a.command && a.action !== a.command ? el('span', { class: 'muted' }, ' (' + a.action + ')') : null],
    a.target, badge(a.outcome), a.error || a.reason,
  ]));
  return page('audit',
    el('h1', null, 'Audit'),
    el('div', { class: 'toolbar' }, actor, kind, button,
      el('span', { class: 'muted' }, `newest first, at most 200 · the log keeps ${dash(r.retention)} rows, ${dash(r.dropped)} dropped`)),
    card(null, null, table('audit', ['index', 'time', 'actor', 'method', 'command', 'target', 'outcome', 'error / reason'], rows, 'no audit rows')));
}

// ---------- start ----------

async function boot() {
  on($('login'), 'click', onLogin);
  on($('token'), 'keydown', (e) => { if (e.key === 'Enter') onLogin(); });
  on($('logout'), 'click', () => toLogin(''));
  on($('error-dismiss'), 'click', clearError);
  on($('notice-dismiss'), 'click', clearNotice);
  window.addEventListener('hashchange', () => render());
  const stored = sessionStorage.getItem(TOKEN_KEY);
  const gen = S.authGen;
  try {
    await trySession(stored || null); // no stored token: an insecure node answers without one
  } catch (e) {
    if (gen + 1 !== S.authGen) return; // the operator logged in meanwhile
    toLogin(stored ? e.message : '');
  }
}

boot();
