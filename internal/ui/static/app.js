// Flotilla dashboard: plain JavaScript, no dependencies, no build step.
//
// Data flow. Views read the same-origin API (/v1/state paged and filtered
// on the server, /v1/machines, /v1/units/NAME), revalidating with ETags.
// One EventSource on /v1/events patches what is on screen as events arrive
// and schedules a throttled re-read, so the page converges on the leader's
// state within about a second however many events arrive, and never holds
// more than one page of units. On "reset" (or a reconnection) everything
// is re-read.
//
// Tokens. A cluster run with --acl answers 401 without an API token: the
// page then asks for one (role read is enough) and keeps it in
// sessionStorage, for this tab only, sending it as "Authorization: Bearer"
// (and as ?token= to /v1/events, which EventSource cannot give headers).
//
// Safety. Every piece of data reaches the DOM through textContent or
// attribute setters (see h() below), never parsed as HTML; the page's CSP
// forbids inline script.
'use strict';

const API = '/v1';
const PAGE_SIZES = [50, 100, 250, 500];
const DEFAULT_PAGE_SIZE = 100;
const REFRESH_MS = 1000; // at most one re-read per view per second while events flow
const POLL_MS = 5000; // re-read period while the event stream is down
const HISTORY_PER_UNIT = 50;
const HISTORY_UNITS = 10000; // units whose history is kept (oldest dropped)
const JOURNAL_LINES = 50;
const JOURNAL_MAX_LINES = 1000;

// ---------------------------------------------------------------- helpers

// h builds an element. props: class, text, dataset, on<event>, or any
// attribute; children: nodes or strings (always as text).
function h(tag, props, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(props || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k === 'class') el.className = v;
    else if (k === 'text') el.textContent = v;
    else if (k === 'dataset') Object.assign(el.dataset, v);
    else if (k.startsWith('on')) el.addEventListener(k.slice(2), v);
    else el.setAttribute(k, v === true ? '' : String(v));
  }
  for (const c of children.flat()) {
    if (c === undefined || c === null || c === false) continue;
    el.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return el;
}

// fill replaces el's children, skipping null, undefined and false as h() does.
function fill(el, ...children) {
  el.replaceChildren(...children.flat().filter((c) => c !== undefined && c !== null && c !== false)
    .map((c) => (c instanceof Node ? c : document.createTextNode(String(c)))));
}

const $ = (sel, root = document) => root.querySelector(sel);
const nf = new Intl.NumberFormat('en-US');
const fmtInt = (n) => nf.format(n || 0);
const shortHash = (s) => (s ? s.slice(0, 7) : '—');
const unitHref = (name) => '#/unit/' + encodeURIComponent(name);
const unitsHref = (params) => {
  const q = new URLSearchParams();
  for (const [k, v] of Object.entries(params)) if (v) q.set(k, v);
  const s = q.toString();
  return '#/units' + (s ? '?' + s : '');
};

function fmtBytes(b) {
  if (!b) return '—';
  const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
  let i = 0;
  while (b >= 1024 && i < units.length - 1) { b /= 1024; i++; }
  return (b >= 10 || i === 0 ? Math.round(b) : b.toFixed(1)) + ' ' + units[i];
}

function fmtCPU(pct) {
  if (!pct) return '—';
  const cpus = pct / 100;
  return (Number.isInteger(cpus) ? cpus : cpus.toFixed(2)) + (cpus === 1 ? ' CPU' : ' CPUs');
}

function fmtTime(iso) {
  if (!iso) return '';
  const d = new Date(iso);
  return isNaN(d) ? iso : d.toLocaleTimeString([], { hour12: false });
}

function fmtDateTime(iso) {
  if (!iso) return '—';
  const d = new Date(iso);
  return isNaN(d) ? iso : d.toLocaleString([], { hour12: false });
}

function ago(iso) {
  const d = new Date(iso);
  if (!iso || isNaN(d)) return '';
  const s = Math.max(0, Math.round((Date.now() - d) / 1000));
  if (s < 60) return s + 's ago';
  if (s < 3600) return Math.floor(s / 60) + 'm ago';
  if (s < 86400) return Math.floor(s / 3600) + 'h ago';
  return Math.floor(s / 86400) + 'd ago';
}

// throttle returns a function that runs fn at most once per ms, trailing:
// calls during the wait are folded into the one run at its end.
function throttle(fn, ms) {
  let timer = null;
  const t = () => {
    if (timer) return;
    timer = setTimeout(() => { timer = null; fn(); }, ms);
  };
  t.cancel = () => { clearTimeout(timer); timer = null; };
  return t;
}

// A typed filter without glob characters matches as a substring.
function toGlob(q) {
  q = (q || '').trim();
  if (!q) return '';
  return /[*?[]/.test(q) ? q : '*' + q + '*';
}

// --------------------------------------------------------------------- API

class APIError extends Error {
  constructor(status, message, code) { super(message); this.status = status; this.code = code; }
}

const TOKEN_KEY = 'flotilla-token';
const apiToken = () => sessionStorage.getItem(TOKEN_KEY) || '';

// withToken adds the tab's API token, if any, to request headers.
function withToken(headers) {
  const t = apiToken();
  if (t) headers.Authorization = 'Bearer ' + t;
  return headers;
}

// askToken asks for an API token after a 401 and reloads with it; it
// returns false when the user gives none.
let askedToken = false;
function askToken(message) {
  if (askedToken) return false;
  askedToken = true;
  const t = window.prompt('This Flotilla cluster needs an API token (flotilla token create --role read).\n' + message, '');
  if (!t) return false;
  sessionStorage.setItem(TOKEN_KEY, t.trim());
  window.location.reload();
  return true;
}

// The last answer per URL, for If-None-Match: an unchanged answer costs the
// server a 304 and no encoding.
const cache = new Map();
const CACHE_MAX = 64;

async function apiError(r) {
  let msg = r.status + ' ' + r.statusText;
  let code = '';
  try {
    const e = await r.json();
    if (e && e.error) { msg = e.error; code = e.code || ''; }
  } catch (_) { /* not an API error body */ }
  return new APIError(r.status, msg, code);
}

// getJSON returns {data, source, fresh}; fresh is false when the server
// said 304 (the data is the previous answer's).
async function getJSON(url, signal) {
  const prev = cache.get(url);
  const headers = withToken({ Accept: 'application/json' });
  if (prev) headers['If-None-Match'] = prev.etag;
  let r;
  try {
    r = await fetch(url, { headers, signal, cache: 'no-store' });
  } catch (e) {
    if (e.name === 'AbortError') throw e;
    throw new APIError(0, 'cannot reach the Flotilla API: ' + e.message, 'unreachable');
  }
  if (r.status === 304 && prev) return { data: prev.data, source: prev.source, fresh: false };
  if (!r.ok) {
    const e = await apiError(r);
    if (e.status === 401) askToken(e.message);
    throw e;
  }
  const data = await r.json();
  const source = r.headers.get('X-Flotilla-State-Source') || 'leader';
  const etag = r.headers.get('ETag');
  if (etag) {
    cache.delete(url);
    cache.set(url, { etag, data, source });
    if (cache.size > CACHE_MAX) cache.delete(cache.keys().next().value);
  }
  return { data, source, fresh: true };
}

function stateURL(params) {
  const q = new URLSearchParams();
  for (const [k, v] of Object.entries(params)) if (v !== '' && v !== undefined && v !== null) q.set(k, v);
  return API + '/state?' + q.toString();
}

// ------------------------------------------------------------ unit states

const ACTIVE_CLASS = {
  active: 'ok', reloading: 'busy', activating: 'busy', deactivating: 'busy',
  failed: 'bad', inactive: 'idle',
};

// unitStatus is what a unit's badge says, from an api.StateUnit (or a
// unit patched by events).
function unitStatus(u) {
  if (u.removed) return { label: 'destroyed', cls: 'gone' };
  if (isTemplate(u.name)) return { label: 'template', cls: 'idle' };
  if (u.desiredState !== 'inactive' && !u.machine && !u.global) return { label: 'unplaced', cls: 'warn' };
  if (u.active) return { label: u.active, cls: ACTIVE_CLASS[u.active] || 'idle' };
  if (u.global) return { label: 'global', cls: 'info' };
  if (u.desiredState === 'inactive') return { label: 'inactive', cls: 'idle' };
  return { label: 'pending', cls: 'busy' };
}

// A template (web@.service) is never scheduled itself; its instances are.
const isTemplate = (name) => /@\.[^.@]+$/.test(name || '');

function badge(label, cls, title) {
  return h('span', { class: 'badge ' + cls, title }, label);
}

// A unit's health while active, as its machine judges it: by its
// [X-Check], else healthy while active (for Type=notify, once it sent
// READY=1), unhealthy after a WatchdogSec= timeout.
const HEALTH_CLASS = { healthy: 'ok', unhealthy: 'bad', unknown: 'busy' };

function healthBadge(health) {
  if (!health) return null;
  return h('span', { class: 'badge health ' + (HEALTH_CLASS[health] || 'idle'), dataset: { health },
    title: 'Health, as the unit\'s machine judges it' }, health);
}

function statusBadge(u) {
  const s = unitStatus(u);
  return badge(s.label, s.cls);
}

// ---------------------------------------------------------------- the app

const app = {
  main: null,
  view: null,
  events: null,
  history: new Map(), // unit -> its events, oldest first
  historyOrder: new Array(HISTORY_UNITS), // units with a history, a ring in order of arrival
  historyNext: 0,
  summary: null,
  source: 'leader',
};

// Per-unit history of what the event stream said, since the page opened.
// Recording is on the hot path (a mass start is hundreds of thousands of
// events), so it keeps the events as they came and describes them only
// when the unit's page shows them. Once HISTORY_UNITS units have a
// history, the unit whose history began first loses it.
function recordHistory(ev) {
  if (!ev.unit || (ev.type !== 'unit' && ev.type !== 'state')) return;
  let list = app.history.get(ev.unit);
  if (!list) {
    const evict = app.historyOrder[app.historyNext];
    if (evict !== undefined) app.history.delete(evict);
    app.historyOrder[app.historyNext] = ev.unit;
    app.historyNext = (app.historyNext + 1) % HISTORY_UNITS;
    list = [];
    app.history.set(ev.unit, list);
  }
  list.push(ev);
  if (list.length > HISTORY_PER_UNIT) list.shift();
}

// describe says what a unit or state event changed, for the history.
function describe(ev) {
  if (ev.type === 'unit') {
    if (ev.removed) return { text: 'destroyed', cls: 'gone' };
    let text = 'desired ' + ev.desiredState;
    const unplaced = ev.desiredState !== 'inactive' && !ev.machine && !ev.global;
    if (ev.global) text += ', global';
    else if (ev.machine) text += ', placed on ' + ev.machine;
    else if (unplaced) text += ', unplaced' + (ev.reason ? ': ' + ev.reason : '');
    return { text, cls: unplaced ? 'warn' : 'info' };
  }
  if (ev.removed) return { text: ev.machine + ' no longer reports it', cls: 'idle' };
  return { text: ev.machine + ': ' + (ev.active || 'unknown') + (ev.sub ? ' (' + ev.sub + ')' : ''),
    cls: ACTIVE_CLASS[ev.active] || 'idle' };
}

// ---------------------------------------------------------- event stream

// EventStream follows /v1/events. It reconnects by itself, resuming after
// the last event seen (?since=), so nothing is missed across a dropped
// connection or a leader change; a position the server does not know gets
// a "reset" event, and the views re-read.
class EventStream {
  constructor(onEvent, onReset, onLive) {
    this.onEvent = onEvent;
    this.onReset = onReset;
    this.onLive = onLive;
    this.lastId = '';
    this.retryMs = 500;
    this.es = null;
    this.timer = null;
    this.open();
  }

  open() {
    this.timer = null;
    const q = new URLSearchParams();
    if (this.lastId) q.set('since', this.lastId);
    if (apiToken()) q.set('token', apiToken());
    const url = API + '/events' + (q.toString() ? '?' + q.toString() : '');
    const es = new EventSource(url);
    this.es = es;
    es.onopen = () => {
      this.retryMs = 500;
      this.onLive(true);
      // Re-read on every (re)connection: the first has no position at all,
      // and a resumed one may have reached a new leader.
      this.onReset();
    };
    const handle = (e) => {
      let ev;
      try { ev = JSON.parse(e.data); } catch (_) { return; }
      if (e.lastEventId) this.lastId = e.lastEventId;
      if (ev.type === 'reset') this.onReset();
      else this.onEvent(ev);
    };
    for (const type of ['unit', 'state', 'machine', 'reset']) es.addEventListener(type, handle);
    es.onerror = () => {
      // Take reconnection over from the browser, which would resume from
      // the URL's stale ?since= and gives up for good on a 503.
      es.close();
      if (this.es !== es) return;
      this.es = null;
      this.onLive(false);
      this.timer = setTimeout(() => this.open(), this.retryMs);
      this.retryMs = Math.min(this.retryMs * 2, 10000);
    };
  }
}

function onEvent(ev) {
  recordHistory(ev);
  if (app.summary && ev.revision > app.summary.revision) {
    app.summary.revision = ev.revision;
    if (!app.revisionFrame) {
      app.revisionFrame = requestAnimationFrame(() => {
        app.revisionFrame = 0;
        const el = $('#revision');
        if (el) el.textContent = fmtInt(app.summary.revision);
      });
    }
  }
  refreshSummary.schedule();
  if (app.view && app.view.onEvent) app.view.onEvent(ev);
}

function onReset() {
  refreshSummary.now();
  if (app.view && app.view.refresh) app.view.refresh();
}

function setLive(live) {
  const el = $('#live');
  el.className = 'live ' + (live ? 'on' : 'off');
  $('.label', el).textContent = live ? 'live' : 'reconnecting';
  el.title = live ? 'Following the event stream (/v1/events)'
    : 'The event stream is down (no leader, or a proxy in the way): polling every ' + POLL_MS / 1000 + 's while it reconnects';
  // Without events, poll: /v1/state answers even without a leader (from
  // etcd), and ETags make an unchanged answer cheap.
  clearInterval(app.pollTimer);
  app.pollTimer = live ? 0 : setInterval(onReset, POLL_MS);
}

// ----------------------------------------------------------- cluster header

const refreshSummary = (() => {
  let running = false;
  const run = async () => {
    if (running) { t(); return; }
    if (document.hidden) return; // visibilitychange catches up
    running = true;
    try {
      const [all, active, failed, unplaced] = await Promise.all([
        getJSON(stateURL({ limit: 1 })),
        getJSON(stateURL({ state: 'active', limit: 1 })),
        getJSON(stateURL({ state: 'failed', limit: 1 })),
        getJSON(stateURL({ state: 'unplaced', limit: 1 })),
      ]);
      const s = all.data;
      app.source = all.source;
      app.summary = {
        revision: Math.max(s.revision, app.summary ? app.summary.revision : 0),
        leader: s.leader,
        machines: s.machines || [],
        total: s.total,
        active: active.data.total,
        failed: failed.data.total,
        unplaced: unplaced.data.total,
      };
      app.summaryError = null;
    } catch (e) {
      if (e.name !== 'AbortError') app.summaryError = e;
    } finally {
      running = false;
    }
    renderCluster();
  };
  const t = throttle(run, REFRESH_MS);
  return { schedule: t, now: () => { t.cancel(); run(); } };
})();

function renderCluster() {
  const s = app.summary;
  const cluster = $('#cluster');
  const summary = $('#summary');
  if (!s) {
    fill(cluster);
    fill(summary, app.summaryError ? h('span', { class: 'error-text' }, app.summaryError.message) : '');
    return;
  }
  fill(cluster,
    h('span', { class: 'kv' }, h('span', { class: 'k' }, 'leader'),
      s.leader ? h('span', { class: 'v mono' }, s.leader) : h('span', { class: 'v warn-text' }, 'none')),
    h('span', { class: 'kv' }, h('span', { class: 'k' }, 'revision'), h('span', { class: 'v mono', id: 'revision' }, fmtInt(s.revision))),
  );
  const other = Math.max(0, s.total - s.active - s.failed - s.unplaced);
  const chip = (label, n, cls, href, title) =>
    h('a', { class: 'chip ' + cls + (n === 0 && cls !== 'total' ? ' zero' : ''), href, title },
      h('span', { class: 'n' }, fmtInt(n)), h('span', { class: 'l' }, label));
  fill(summary,
    chip('machines', s.machines.length, 'total', '#/machines', 'Machines connected to the leader'),
    h('span', { class: 'sep' }),
    chip('units', s.total, 'total', unitsHref({}), 'All units'),
    chip('active', s.active, 'ok', unitsHref({ state: 'active' }), 'Units whose machine reports them active'),
    chip('failed', s.failed, 'bad', unitsHref({ state: 'failed' }), 'Units whose machine reports them failed'),
    chip('unplaced', s.unplaced, 'warn', unitsHref({ state: 'unplaced' }), 'Wanted units no machine can take'),
    chip('other', other, 'idle', unitsHref({}), 'Inactive, starting, stopping or not reported yet'),
    app.source === 'etcd' ? h('span', { class: 'banner-inline warn-text' },
      'No leader answers: showing the durable record from etcd, without current states') : null,
    app.summaryError ? h('span', { class: 'banner-inline error-text' }, app.summaryError.message) : null,
  );
}

// ------------------------------------------------------------- units view

const STATE_OPTIONS = [
  ['', 'Any state'],
  ['Reported', ['active', 'activating', 'deactivating', 'reloading', 'failed', 'inactive']],
  ['Desired', ['launched', 'loaded']],
  ['Placement', ['unplaced']],
];

class UnitsView {
  constructor(params) {
    this.params = this.normalize(params);
    this.rows = new Map(); // name -> {unit, sig, els: [tr, reasonTr?]}
    this.page = null;
    this.error = null;
    this.prevOf = new Map(); // filter + after -> after of the previous page
    this.abort = null;
    this.refreshLater = throttle(() => this.refresh(), REFRESH_MS);
  }

  normalize(p) {
    const limit = parseInt(p.get('limit'), 10);
    return {
      q: p.get('q') || '',
      state: p.get('state') || '',
      machine: p.get('machine') || '',
      after: p.get('after') || '',
      limit: PAGE_SIZES.includes(limit) ? limit : DEFAULT_PAGE_SIZE,
    };
  }

  filterKey(p = this.params) { return JSON.stringify([p.q, p.state, p.machine, p.limit]); }

  href(over) {
    const p = { ...this.params, ...over };
    return unitsHref({ q: p.q, state: p.state, machine: p.machine, after: p.after,
      limit: p.limit === DEFAULT_PAGE_SIZE ? '' : p.limit });
  }

  go(over, replace) {
    const hash = this.href(over);
    if (replace) history.replaceState(null, '', hash);
    else history.pushState(null, '', hash);
    route();
  }

  mount(main) {
    this.filter = h('input', {
      type: 'search', class: 'filter', placeholder: 'Filter units: name or glob (web@*.service)',
      'aria-label': 'Filter units by name or glob', spellcheck: 'false', autocomplete: 'off',
      oninput: () => this.typed(),
    });
    this.filter.value = this.params.q;
    this.stateSel = h('select', { 'aria-label': 'State', onchange: () => this.go({ state: this.stateSel.value, after: '' }) });
    for (const [label, opts] of STATE_OPTIONS) {
      if (!Array.isArray(opts)) { this.stateSel.append(h('option', { value: label }, opts)); continue; }
      const g = h('optgroup', { label });
      for (const o of opts) {
        const [v, text] = Array.isArray(o) ? o : [o, o];
        g.append(h('option', { value: v }, text));
      }
      this.stateSel.append(g);
    }
    this.machineSel = h('select', { 'aria-label': 'Machine', onchange: () => this.go({ machine: this.machineSel.value, after: '' }) });
    this.sizeSel = h('select', { 'aria-label': 'Units per page', onchange: () => this.go({ limit: parseInt(this.sizeSel.value, 10), after: '' }) },
      PAGE_SIZES.map((n) => h('option', { value: n }, n + ' / page')));
    this.count = h('span', { class: 'count', 'aria-live': 'polite' });
    this.first = h('button', { type: 'button', title: 'First page', onclick: () => this.go({ after: '' }) }, '« First');
    this.prev = h('button', { type: 'button', title: 'Previous page', onclick: () => this.go({ after: this.prevAfter() }) }, '‹ Prev');
    this.next = h('button', { type: 'button', title: 'Next page', onclick: () => this.page && this.page.next && this.nextPage() }, 'Next ›');
    this.tbody = h('tbody');
    this.banner = h('div', { class: 'banner', hidden: true });
    this.empty = h('div', { class: 'empty', hidden: true });
    fill(main,
      h('div', { class: 'toolbar' }, this.filter, this.stateSel, this.machineSel,
        h('span', { class: 'spacer' }), this.count,
        h('span', { class: 'pager' }, this.first, this.prev, this.next), this.sizeSel),
      this.banner,
      h('div', { class: 'table-wrap' },
        h('table', { class: 'grid units' },
          h('thead', {}, h('tr', {},
            h('th', { class: 'c-unit' }, 'Unit'), h('th', { class: 'c-state' }, 'State'),
            h('th', { class: 'c-desired' }, 'Desired'), h('th', { class: 'c-machine' }, 'Machine'),
            h('th', { class: 'c-hash' }, 'Hash'))),
          this.tbody)),
      this.empty,
    );
    this.keys = (e) => {
      if (e.key === '/' && document.activeElement !== this.filter && !e.ctrlKey && !e.metaKey) {
        e.preventDefault();
        this.filter.focus();
      }
    };
    document.addEventListener('keydown', this.keys);
    this.syncControls();
    this.refresh();
  }

  unmount() {
    this.refreshLater.cancel();
    clearTimeout(this.typeTimer);
    if (this.abort) this.abort.abort();
    document.removeEventListener('keydown', this.keys);
  }

  // update takes new route parameters without rebuilding the page (so the
  // filter box keeps focus while typing).
  update(params) {
    const p = this.normalize(params);
    if (JSON.stringify(p) === JSON.stringify(this.params)) return;
    this.params = p;
    this.syncControls();
    this.refresh();
  }

  syncControls() {
    const p = this.params;
    if (document.activeElement !== this.filter) this.filter.value = p.q;
    this.stateSel.value = p.state;
    if (this.stateSel.value !== p.state) {
      // A state typed into the URL that the menu does not offer.
      this.stateSel.append(h('option', { value: p.state }, p.state));
      this.stateSel.value = p.state;
    }
    this.sizeSel.value = String(p.limit);
    this.renderMachines(this.page ? this.page.machines : []);
    document.title = 'Units · Flotilla';
  }

  typed() {
    clearTimeout(this.typeTimer);
    this.typeTimer = setTimeout(() => this.go({ q: this.filter.value.trim(), after: '' }, true), 250);
  }

  prevAfter() {
    const k = this.filterKey() + '\u0000' + this.params.after;
    return this.prevOf.get(k) || '';
  }

  nextPage() {
    this.prevOf.set(this.filterKey() + '\u0000' + this.page.next, this.params.after);
    this.go({ after: this.page.next });
  }

  async refresh() {
    if (document.hidden) return;
    if (this.abort) this.abort.abort();
    const abort = new AbortController();
    this.abort = abort;
    const p = this.params;
    const filter = { unit: toGlob(p.q), state: p.state, machine: p.machine };
    try {
      const reqs = [getJSON(stateURL({ ...filter, limit: p.limit, after: p.after }), abort.signal)];
      // The offset of a later page: all that match, less those after it.
      if (p.after) reqs.push(getJSON(stateURL({ ...filter, limit: 1 }), abort.signal));
      const [page, all] = await Promise.all(reqs);
      if (abort.signal.aborted) return;
      this.error = null;
      this.page = page.data;
      this.grandTotal = all ? all.data.total : page.data.total;
      this.render();
    } catch (e) {
      if (e.name === 'AbortError') return;
      this.error = e;
      this.renderBanner();
    }
  }

  renderBanner() {
    if (this.error) {
      this.banner.hidden = false;
      this.banner.className = 'banner error';
      this.banner.textContent = this.error.message + (this.page ? ' (showing the last answer)' : '');
    } else {
      this.banner.hidden = true;
    }
  }

  renderMachines(machines) {
    const want = this.params.machine;
    const ids = machines.map((m) => m.id);
    if (want && !ids.includes(want)) ids.push(want);
    const sig = ids.join('\u0000');
    if (this.machineSig !== sig) {
      this.machineSig = sig;
      fill(this.machineSel, h('option', { value: '' }, 'Any machine'),
        ids.map((id) => h('option', { value: id }, id)));
    }
    this.machineSel.value = want;
  }

  render() {
    const page = this.page;
    this.renderBanner();
    this.renderMachines(page.machines || []);
    const offset = Math.max(0, this.grandTotal - page.total);
    const n = page.units.length;
    this.count.textContent = n ? `${fmtInt(offset + 1)}–${fmtInt(offset + n)} of ${fmtInt(this.grandTotal)}`
      : `0 of ${fmtInt(this.grandTotal)}`;
    this.first.disabled = !this.params.after;
    this.prev.disabled = !this.params.after;
    this.next.disabled = !page.next;

    const old = this.rows;
    this.rows = new Map();
    const els = [];
    for (const u of page.units) {
      const prev = old.get(u.name);
      const row = prev && prev.sig === sig(u) ? prev : this.makeRow(u, prev);
      this.rows.set(u.name, row);
      els.push(...row.els);
    }
    fill(this.tbody, ...els);
    this.empty.hidden = n > 0;
    if (!n) {
      const filtered = this.params.q || this.params.state || this.params.machine;
      fill(this.empty,
        h('strong', {}, filtered ? 'No unit matches these filters.' : 'No units yet.'),
        filtered ? h('span', { class: 'muted' }, ' ', h('a', { href: unitsHref({}) }, 'Clear the filters'), ' to see every unit.')
          : h('span', { class: 'muted' }, ' Start one with ', h('code', {}, 'flotilla start hello.service'), '.'));
    }
  }

  makeRow(u, prev) {
    const status = unitStatus(u);
    const tr = h('tr', { dataset: { unit: u.name, state: status.label } },
      h('td', { class: 'c-unit' }, h('a', { href: unitHref(u.name), class: 'unit-link' }, u.name)),
      h('td', { class: 'c-state' }, badge(status.label, status.cls), u.sub ? h('span', { class: 'sub' }, u.sub) : null,
        u.removed ? null : healthBadge(u.health)),
      h('td', { class: 'c-desired' }, u.removed ? '—' : u.desiredState),
      h('td', { class: 'c-machine' }, u.global ? h('span', { class: 'muted' }, 'every matching machine')
        : u.machine ? h('a', { href: unitsHref({ machine: u.machine }), class: 'mono' }, u.machine)
          : h('span', { class: 'muted' }, '—')),
      h('td', { class: 'c-hash mono', title: u.hash || '' }, shortHash(u.hash)),
    );
    const els = [tr];
    if (u.reason && !u.removed) {
      tr.classList.add('has-reason');
      els.push(h('tr', { class: 'reason-row', dataset: { reasonFor: u.name } },
        h('td', { colspan: 5 }, h('span', { class: 'reason' }, h('span', { class: 'reason-icon', 'aria-hidden': 'true' }, '!'),
          h('span', { class: 'reason-label' }, 'Not placed: '), u.reason))));
    }
    if (prev) for (const el of els) flash(el);
    return { unit: u, sig: sig(u), els };
  }

  // onEvent patches a unit on this page at once; the throttled re-read
  // then brings totals, order and filter membership up to date.
  onEvent(ev) {
    if (ev.type === 'unit' || ev.type === 'state') {
      const row = this.rows.get(ev.unit);
      if (row) {
        const u = { ...row.unit };
        if (ev.type === 'unit') {
          if (ev.removed) u.removed = true;
          else Object.assign(u, { desiredState: ev.desiredState, machine: ev.machine || '', global: !!ev.global,
            reason: ev.reason || '', hash: ev.hash || u.hash });
          if (u.machine !== row.unit.machine) Object.assign(u, { load: '', active: '', sub: '', health: '' });
        } else if (ev.machine === u.machine) {
          Object.assign(u, ev.removed ? { load: '', active: '', sub: '', health: '' }
            : { load: ev.load, active: ev.active, sub: ev.sub, health: ev.health || '' });
        }
        if (sig(u) !== row.sig) {
          const fresh = this.makeRow(u, row);
          this.rows.set(u.name, fresh);
          const first = row.els[0];
          first.before(...fresh.els);
          for (const el of row.els) el.remove();
        }
      }
    }
    this.refreshLater();
  }
}

function sig(u) {
  return [u.name, u.hash, u.desiredState, u.machine, u.global, u.load, u.active, u.sub, u.health, u.reason, u.removed].join('\u0000');
}

function flash(el) {
  el.classList.remove('flash');
  void el.offsetWidth; // restart the animation
  el.classList.add('flash');
  el.addEventListener('animationend', () => el.classList.remove('flash'), { once: true });
}

// ----------------------------------------------------------- machines view

class MachinesView {
  constructor() {
    this.abort = null;
    this.refreshLater = throttle(() => this.refresh(), REFRESH_MS);
  }

  mount(main) {
    document.title = 'Machines · Flotilla';
    this.banner = h('div', { class: 'banner', hidden: true });
    this.tbody = h('tbody');
    this.empty = h('div', { class: 'empty', hidden: true }, h('strong', {}, 'No machine is connected to the leader.'));
    fill(main,
      h('div', { class: 'toolbar' }, h('h1', { class: 'view-title' }, 'Machines'), h('span', { class: 'spacer' }),
        this.count = h('span', { class: 'count' })),
      this.banner,
      h('div', { class: 'table-wrap' },
        h('table', { class: 'grid machines' },
          h('thead', {}, h('tr', {},
            h('th', {}, 'Machine'), h('th', {}, 'IP'), h('th', {}, 'Metadata'), h('th', { class: 'num' }, 'Units'),
            h('th', {}, 'CPU'), h('th', {}, 'Memory'), h('th', {}, 'Version'))),
          this.tbody)),
      this.empty);
    this.refresh();
  }

  unmount() {
    this.refreshLater.cancel();
    if (this.abort) this.abort.abort();
  }

  async refresh() {
    if (document.hidden) return;
    if (this.abort) this.abort.abort();
    const abort = new AbortController();
    this.abort = abort;
    try {
      const { data } = await getJSON(API + '/machines', abort.signal);
      if (abort.signal.aborted) return;
      this.banner.hidden = true;
      this.render(data.machines || []);
    } catch (e) {
      if (e.name === 'AbortError') return;
      this.banner.hidden = false;
      this.banner.className = 'banner error';
      this.banner.textContent = e.message;
    }
  }

  render(machines) {
    this.count.textContent = fmtInt(machines.length) + (machines.length === 1 ? ' machine' : ' machines');
    this.empty.hidden = machines.length > 0;
    fill(this.tbody, ...machines.map((m) => {
      const md = Object.entries(m.metadata || {}).sort(([a], [b]) => a.localeCompare(b));
      return h('tr', { dataset: { machine: m.id } },
        h('td', {}, h('span', { class: 'mono strong' }, m.id), m.leader ? badge('leader', 'leader', 'This machine runs the elected engine') : null,
          m.apiAddr ? h('div', { class: 'muted small mono' }, 'api ' + m.apiAddr) : null),
        h('td', { class: 'mono' }, m.ip || '—'),
        h('td', {}, md.length ? md.map(([k, v]) => h('span', { class: 'tag' }, h('span', { class: 'tk' }, k), '=', h('span', { class: 'tv' }, v)))
          : h('span', { class: 'muted' }, 'none')),
        h('td', { class: 'num' }, h('a', { href: unitsHref({ machine: m.id }) }, fmtInt(m.units))),
        h('td', {}, resource(m.capacity && m.capacity.cpuPercent, m.free && m.free.cpuPercent, fmtCPU)),
        h('td', {}, resource(m.capacity && m.capacity.memoryBytes, m.free && m.free.memoryBytes, fmtBytes)),
        h('td', { class: 'muted' }, m.version || '—'));
    }));
  }

  onEvent(ev) {
    // Machines come and go ("machine"); unit counts follow placements ("unit").
    if (ev.type === 'machine' || ev.type === 'unit') this.refreshLater();
  }
}

// resource shows a capacity, with a bar of what is used when the leader
// reports what is free (0 free: not tracked).
function resource(capacity, free, fmt) {
  if (!capacity) return h('span', { class: 'muted', title: 'Not limited' }, '—');
  if (!free || free > capacity) return h('span', {}, fmt(capacity));
  const used = capacity - free;
  const pct = Math.round((used / capacity) * 100);
  const bar = h('span', { class: 'bar-fill' + (pct > 90 ? ' hot' : '') });
  bar.style.width = pct + '%';
  return h('div', { class: 'resource', title: fmt(free) + ' free of ' + fmt(capacity) },
    h('span', {}, fmt(capacity)), h('span', { class: 'bar' }, bar), h('span', { class: 'muted small' }, pct + '% used'));
}

// --------------------------------------------------------------- unit view

class UnitView {
  constructor(name) {
    this.name = name;
    this.unit = null;
    this.abort = new AbortController();
    this.refreshLater = throttle(() => this.refresh(), 300);
    this.journalState = 'idle'; // idle, streaming, waiting
    this.journalLines = [];
  }

  mount(main) {
    document.title = this.name + ' · Flotilla';
    this.banner = h('div', { class: 'banner', hidden: true });
    this.head = h('div', { class: 'unit-head' });
    this.details = h('dl', { class: 'details' });
    this.historyList = h('ol', { class: 'history' });
    this.machinesCard = h('section', { class: 'card', hidden: true });
    this.file = h('pre', { class: 'code file' });
    this.journal = h('pre', { class: 'code journal' });
    this.journalNote = h('span', { class: 'note' });
    fill(main,
      h('nav', { class: 'crumbs' }, h('a', { href: '#/units' }, 'Units'), h('span', { class: 'slash' }, '/'), h('span', { class: 'mono' }, this.name)),
      this.banner,
      this.head,
      h('div', { class: 'cols' },
        h('section', { class: 'card' }, h('h2', {}, 'Status'), this.details),
        h('section', { class: 'card' }, h('h2', {}, 'State history'), this.historyList,
          h('p', { class: 'muted small' }, 'Changes seen on the event stream since this dashboard was opened, newest first.'))),
      this.machinesCard,
      h('section', { class: 'card' }, h('h2', {}, 'Unit file'), this.file),
      h('section', { class: 'card' }, h('h2', {}, 'Journal ', this.journalNote), this.journal),
    );
    this.refresh();
    this.renderHistory();
  }

  unmount() {
    this.refreshLater.cancel();
    clearTimeout(this.journalTimer);
    this.abort.abort();
  }

  async refresh() {
    try {
      const { data } = await getJSON(API + '/units/' + encodeURIComponent(this.name), this.abort.signal);
      this.unit = data;
      this.banner.hidden = true;
      this.render();
      if (data.global) this.refreshMachines();
      if (this.journalState === 'idle' || (this.journalState === 'waiting' && data.state)) this.followJournal();
    } catch (e) {
      if (e.name === 'AbortError') return;
      this.banner.hidden = false;
      this.banner.className = 'banner ' + (e.status === 404 ? 'warn' : 'error');
      this.banner.textContent = e.status === 404 ? 'Unit ' + this.name + ' does not exist (or no longer does).' : e.message;
      if (this.unit && e.status === 404) { this.unit = { ...this.unit, removed: true }; this.render(); }
    }
  }

  async refreshMachines() {
    try {
      const { data } = await getJSON(API + '/unit-states?name=' + encodeURIComponent(this.name), this.abort.signal);
      const states = data.states || [];
      this.machinesCard.hidden = false;
      fill(this.machinesCard, h('h2', {}, 'Machines'),
        states.length ? h('table', { class: 'grid compact' },
          h('thead', {}, h('tr', {}, h('th', {}, 'Machine'), h('th', {}, 'State'), h('th', {}, 'PID'), h('th', {}, 'Since'))),
          h('tbody', {}, states.map((s) => h('tr', {},
            h('td', { class: 'mono' }, s.machine),
            h('td', {}, badge(s.active || 'unknown', ACTIVE_CLASS[s.active] || 'idle'), s.sub ? h('span', { class: 'sub' }, s.sub) : null,
              healthBadge(s.health)),
            h('td', { class: 'mono' }, s.pid || '—'),
            h('td', { title: fmtDateTime(s.since) }, ago(s.since) || '—')))))
          : h('p', { class: 'muted' }, 'No machine reports this unit yet.'));
    } catch (e) {
      if (e.name !== 'AbortError') this.machinesCard.hidden = true;
    }
  }

  // status folds the unit's report into the fields unitStatus reads.
  status() {
    const u = this.unit;
    const s = u.state || {};
    return { name: u.name, desiredState: u.desiredState, machine: u.machine, global: u.global,
      active: s.active, sub: s.sub, health: s.health, removed: u.removed };
  }

  render() {
    const u = this.unit;
    const s = u.state || {};
    const st = this.status();
    fill(this.head,
      h('h1', { class: 'unit-title' }, h('span', { class: 'mono' }, u.name), statusBadge(st),
        st.sub ? h('span', { class: 'sub' }, st.sub) : null,
        u.removed ? null : healthBadge(st.health),
        u.global && unitStatus(st).label !== 'global' ? badge('global', 'info') : null),
      u.description ? h('p', { class: 'desc' }, u.description) : null,
      u.reason && !u.removed ? h('div', { class: 'callout warn', role: 'alert' },
        h('strong', {}, 'Not placed. '), u.reason) : null,
    );
    const rows = [
      ['Desired state', u.desiredState],
      ['Current state', u.currentState, 'What the target machine has carried out'],
      ['Machine', u.global ? 'every machine that fits (global)' : u.machine
        ? h('a', { href: unitsHref({ machine: u.machine }), class: 'mono' }, u.machine) : 'not scheduled'],
      ['Active', s.active ? h('span', {}, s.active, s.sub ? ' (' + s.sub + ')' : '') : '—'],
      ['Health', s.health || '—', 'As the machine judges it: by [X-Check], else healthy while active (Type=notify: once READY=1 came); unhealthy after a WatchdogSec= timeout'],
      ['Load', s.load || '—'],
      ['PID', s.pid || '—'],
      ['Since', s.since ? h('span', { title: fmtDateTime(s.since) }, fmtDateTime(s.since) + ' · ' + ago(s.since)) : '—'],
      ['Result', s.result || '—'],
      ['Message', s.message || '—'],
      ['Hash', h('span', { class: 'mono small' }, u.hash || '—')],
    ];
    fill(this.details, ...rows.flatMap(([k, v, title]) => [h('dt', { title }, k), h('dd', {}, v === undefined || v === '' ? '—' : v)]));
    if (this.file.textContent !== (u.file || '')) this.file.textContent = u.file || '(no file)';
    this.renderHistory();
  }

  renderHistory() {
    const items = [];
    if (this.unit) {
      const s = this.unit.state || {};
      const st = unitStatus(this.status());
      items.push(h('li', { class: 'now' }, h('span', { class: 'when' }, 'now'), badge(st.label, st.cls),
        h('span', { class: 'what' }, 'desired ' + this.unit.desiredState +
          (s.active ? ', ' + s.active + (s.sub ? ' (' + s.sub + ')' : '') + ' on ' + s.machine : ''))));
    }
    const list = app.history.get(this.name) || [];
    let shown = 0;
    for (let i = list.length - 1; i >= 0; i--) {
      const e = describe(list[i]);
      // An event may repeat what the one before it said (a file change
      // that moved nothing): show the change once.
      if (i > 0 && describe(list[i - 1]).text === e.text) continue;
      shown++;
      items.push(h('li', {}, h('span', { class: 'when', title: fmtDateTime(list[i].time) }, fmtTime(list[i].time)),
        h('span', { class: 'dot ' + e.cls }), h('span', { class: 'what' }, e.text)));
    }
    if (!shown) items.push(h('li', { class: 'muted' }, h('span', { class: 'when' }), 'No change seen yet.'));
    fill(this.historyList, ...items);
  }

  async followJournal() {
    clearTimeout(this.journalTimer);
    this.journalState = 'streaming';
    this.setJournalNote('following', 'on');
    const url = API + '/units/' + encodeURIComponent(this.name) + '/journal?lines=' + JOURNAL_LINES + '&follow=true';
    this.journalLines = [];
    let partial = '';
    try {
      const r = await fetch(url, { signal: this.abort.signal, headers: withToken({ Accept: 'text/plain' }) });
      if (!r.ok) {
        const e = await apiError(r);
        this.journalState = 'waiting';
        this.setJournalNote('', '');
        this.journal.textContent = e.status === 404 ? 'No journal yet: ' + e.message : e.message;
        return;
      }
      this.journal.textContent = '';
      const reader = r.body.pipeThrough(new TextDecoderStream()).getReader();
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        const parts = (partial + value).split('\n');
        partial = parts.pop();
        this.appendJournal(parts);
      }
      if (partial) this.appendJournal([partial]);
      this.setJournalNote('stream ended; reconnecting', 'off');
    } catch (e) {
      if (e.name === 'AbortError') return;
      this.setJournalNote('disconnected; reconnecting', 'off');
    }
    this.journalState = 'waiting';
    this.journalTimer = setTimeout(() => { if (this.journalState === 'waiting') this.followJournal(); }, 3000);
  }

  setJournalNote(text, cls) {
    this.journalNote.className = 'note ' + cls;
    this.journalNote.textContent = text;
  }

  appendJournal(lines) {
    if (!lines.length) return;
    const pre = this.journal;
    const atBottom = pre.scrollTop + pre.clientHeight >= pre.scrollHeight - 4;
    this.journalLines.push(...lines);
    if (this.journalLines.length > JOURNAL_MAX_LINES) this.journalLines.splice(0, this.journalLines.length - JOURNAL_MAX_LINES);
    pre.textContent = this.journalLines.join('\n');
    if (atBottom) pre.scrollTop = pre.scrollHeight;
  }

  onEvent(ev) {
    if (ev.unit !== this.name) return;
    this.renderHistory();
    this.refreshLater();
  }
}

// ------------------------------------------------------------------ router

function parseHash() {
  const raw = location.hash.replace(/^#/, '') || '/units';
  const i = raw.indexOf('?');
  const path = i < 0 ? raw : raw.slice(0, i);
  const params = new URLSearchParams(i < 0 ? '' : raw.slice(i + 1));
  return { path, params };
}

let routed = null;

function route() {
  // Back and forward fire both popstate and hashchange: route once.
  if (routed === location.hash && app.view) return;
  routed = location.hash;
  const { path, params } = parseHash();
  let kind = 'units';
  if (path === '/machines') kind = 'machines';
  else if (path.startsWith('/unit/')) kind = 'unit';
  for (const a of document.querySelectorAll('.tabs a')) {
    a.classList.toggle('active', a.dataset.view === kind || (kind === 'unit' && a.dataset.view === 'units'));
  }
  if (kind === 'units' && app.view instanceof UnitsView) {
    app.view.update(params);
    return;
  }
  if (app.view) app.view.unmount();
  let name = '';
  if (kind === 'unit') {
    try { name = decodeURIComponent(path.slice('/unit/'.length)); } catch (_) { name = path.slice('/unit/'.length); }
  }
  app.view = kind === 'machines' ? new MachinesView() : kind === 'unit' ? new UnitView(name) : new UnitsView(params);
  app.view.mount(app.main);
  window.scrollTo(0, 0);
}

function start() {
  app.main = $('#main');
  window.addEventListener('hashchange', route);
  window.addEventListener('popstate', route);
  document.addEventListener('visibilitychange', () => {
    if (document.hidden) return;
    refreshSummary.now();
    if (app.view && app.view.refresh) app.view.refresh();
  });
  setLive(false);
  $('#live .label').textContent = 'connecting';
  route();
  refreshSummary.now();
  app.events = new EventStream(onEvent, onReset, setLive);
  // Relative times ("3m ago") age even when nothing happens.
  setInterval(() => { if (app.view instanceof UnitView && app.view.unit) app.view.render(); }, 30000);
}

start();
