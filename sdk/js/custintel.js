/*! custintel.js 1.0.0: browser tracker for the custintel Ingest API. MIT licence.
 *
 *   <script src="https://YOUR-CUSTINTEL/sdk/v1/custintel.js" data-key="pk_..." async></script>
 * calls init itself and sends to the origin it came from; or: custintel.init("pk_...", {apiHost}).
 * Calls made before it loads are queued by this stub and replayed:
 *   window.custintel = window.custintel || [];
 *   "init track page identify group reset flush optOut optIn".split(" ").forEach(function (m) { custintel[m] = custintel[m] || function () { custintel.push([m].concat([].slice.call(arguments))); }; });
 *
 * What each call sends to POST {apiHost}/api/i/v1/{publicKey}/events:
 *   page({title})            `pageview` (also on load and on URL changes by pushState,
 *                            replaceState and popstate, unless capturePageviews: false)
 *   track(eventName, props)  `custom` (props flat: string, number, boolean, null; others as JSON text)
 *   identify({email, userId, traits, customerId, customerTraits})
 *                            `identify`; the user and customer then go with every later batch
 *                            as userIdentity and customerIdentity
 *   group(customerId, customerTraits)  customerIdentity for later batches (no event)
 *   reset()                  forgets the identity; new visitorId and session (call it on logout)
 *   flush()                  sends the queue now; a Promise
 *   optOut() / optIn()       remembered; opted out, nothing is queued or sent
 * By itself: `engagement` (activeTimeMs, totalTimeMs since the last report, sessionId) each 60 s
 * while active and when the page is hidden; with captureForms, `form` (formId, formFields) on
 * submit, never with password, card, CVC, SSN, tax id, IBAN, token or hidden fields.
 * Every event: url, path, referrer, utm (the session's landing utm_*), timestamp (Unix ms),
 * messageId. Options: apiHost, capturePageviews (true), captureForms (false), captureEngagement
 * (true), flushIntervalMs (2000), respectDoNotTrack (false), debug (false).
 * localStorage custintel:{publicKey}:visitor, :user, :customer, :optout, :queue:{page}
 * (unsent events; the next page sends what a page left); sessionStorage :session.
 */
(() => {
  'use strict';
  const w = typeof window === 'object' ? window : null;
  if (!w || (w.custintel && w.custintel.version)) return;
  const d = document, nav = navigator;

  const MAX_BATCH = 100; // events per request (the API's limit)
  const MAX_BYTES = 900000; // bytes per request (the API's limit: 1 MB)
  const BEACON_BYTES = 60000; // beacons a page may leave behind (64 KB)
  const MAX_QUEUE = 1000; // events a page keeps while offline
  const IDLE = 30 * 60000; // a session ends after 30 minutes without activity
  const ACTIVE = 5000; // active: the page is visible and the user did something within 5 s
  const STALE = 5 * 60000; // another page's queue is taken over when unwritten for this long,
  const GRACE = 3000; // or this long after that page was left
  const BEACON_KEEP = 23 * 3600000; // beaconed events are re-sent within the 24 h messageId window

  let cfg = null, prefix, pending = []; // pending: calls made before init
  let queue = [], savedAt = 0, closedAt = 0, inflight = null, retryAt = 0, attempt = 0;
  let session = null, lastUrl, lastReferrer = d.referrer, visible = d.visibilityState !== 'hidden';
  let active = 0, total = 0, lastTick = Date.now(), lastInput = 0, lastReport = Date.now();
  const now = Date.now;

  const log = (...a) => cfg && cfg.debug && console.log('[custintel]', ...a);
  const warn = (...a) => console.warn('[custintel]', ...a);
  const bytes = (s) => new Blob([s]).size;

  // UUID v4; randomUUID exists in secure contexts (https, localhost) only.
  const uuid = () => crypto.randomUUID ? crypto.randomUUID() : '10000000-1000-4000-8000-100000000000'
    .replace(/[018]/g, (c) => (c ^ (crypto.getRandomValues(new Uint8Array(1))[0] & (15 >> (c / 4)))).toString(16));
  const tabId = uuid(); // names this page's queue

  // JSON storage that never throws; in memory where storage is blocked (sandboxed frames).
  const store = (s) => {
    const m = new Map();
    try { s = w[s]; s.length; } catch (e) {
      s = { getItem: (k) => m.get(k) ?? null, setItem: (k, v) => m.set(k, v), removeItem: (k) => m.delete(k) };
    }
    return {
      get(k) { try { return JSON.parse(s.getItem(k)); } catch (e) { return null; } },
      set(k, v) { try { s.setItem(k, JSON.stringify(v)); } catch (e) { /* full */ } },
      del(k) { try { s.removeItem(k); } catch (e) { /* no storage */ } },
      keys() { try { return Object.keys(s); } catch (e) { return []; } },
    };
  };
  const local = store('localStorage'), sess = store('sessionStorage');

  const visitor = () => {
    let v = local.get(prefix + 'visitor');
    if (typeof v !== 'string') local.set(prefix + 'visitor', (v = uuid()));
    return v;
  };

  const optedOut = () => !!local.get(prefix + 'optout') ||
    (cfg.respectDoNotTrack && (nav.doNotTrack === '1' || w.doNotTrack === '1' || nav.globalPrivacyControl === true));

  const utmOf = (href) => {
    const out = {};
    new URL(href).searchParams.forEach((v, k) => /^utm_(source|medium|campaign|term|content)$/.test(k) && v && (out[k.slice(4)] = v));
    return Object.keys(out).length ? out : null;
  };

  // The session (sessionStorage): a reload keeps it; a new tab or 30 idle minutes start another.
  const touchSession = (t) => {
    if (!session || t - session.last > IDLE) {
      if (session) reportEngagement(t);
      session = { id: uuid(), last: t, utm: utmOf(location.href) };
    }
    session.last = t;
    sess.set(prefix + 'session', session);
  };

  const capture = (type, fields) => {
    if (optedOut()) return;
    const t = now();
    if (type !== 'engagement') touchSession(t);
    const e = { type, messageId: uuid(), timestamp: t, url: location.href, path: location.pathname || '/' };
    if (lastReferrer) e.referrer = lastReferrer;
    if (session.utm) e.utm = session.utm;
    for (const k in fields) if (fields[k] != null) e[k] = fields[k];
    log('capture', e);
    queue.push({ v: visitor(), e });
    if (queue.length > MAX_QUEUE) queue.shift(), warn('queue full: the oldest event was dropped');
    save();
    if (queue.length >= MAX_BATCH) setTimeout(tick);
  };

  // Custom event properties are flat: objects go as their JSON text (a Date as its ISO string).
  const flat = (props) => {
    const out = {};
    for (const [k, v] of Object.entries(props || {})) {
      try { out[k] = v && typeof v === 'object' ? (v.toJSON ? v.toJSON() : JSON.stringify(v)) : v; } catch (e) { out[k] = String(v); }
    }
    return out;
  };
  const plain = (o) => { try { return o && typeof o === 'object' ? JSON.parse(JSON.stringify(o)) : undefined; } catch (e) { return undefined; } };
  // Ids and emails the API takes (a bad one in userIdentity would fail every later batch).
  const ident = (v) => (/^(string|number)$/.test(typeof v) && (v = String(v).trim()) && v.length <= 200 ? v : undefined);
  const email = (v) => (typeof v === 'string' && /^[^@\s]+@[^@\s]*\.\S*$/.test(v.trim()) ? v.trim().toLowerCase() : undefined);

  const page = (p = {}) => {
    const str = (k) => (typeof p[k] === 'string' ? p[k] : undefined);
    capture('pageview', { title: str('title') || d.title || undefined, url: str('url'), path: str('path'), referrer: str('referrer') });
  };

  const track = (name, props) => {
    if (typeof name !== 'string' || !name.trim()) return warn('track() needs an event name');
    capture('custom', { eventName: name, properties: flat(props) });
  };

  const group = (customerId, traits) => {
    const id = ident(customerId);
    if (!id) return warn('customerId must be a string of 1 to 200 characters:', customerId);
    local.set(prefix + 'customer', { v: visitor(), customerId: id, customerTraits: plain(traits) });
    return id;
  };

  const identify = (who = {}) => {
    const mail = email(who.email), userId = ident(who.userId), traits = plain(who.traits);
    if (who.email != null && !mail) warn('identify(): not an email address:', who.email);
    if (!mail && !userId) return who.customerId != null ? group(who.customerId, who.customerTraits) : warn('identify() needs an email or a userId');
    const v = visitor();
    let old = local.get(prefix + 'user');
    if (!old || old.v !== v || (userId && old.userId && old.userId !== userId)) old = {};
    const user = { v, email: mail || old.email, userId: userId || old.userId };
    if (old.traits || traits) user.traits = { ...old.traits, ...traits };
    local.set(prefix + 'user', user);
    const customerId = who.customerId != null ? group(who.customerId, who.customerTraits) : undefined;
    capture('identify', { email: mail, userId, traits, customerId, customerTraits: customerId && plain(who.customerTraits) });
  };

  const reset = () => {
    flushEngagement();
    for (const k of ['user', 'customer', 'visitor']) local.del(prefix + k);
    session = null;
    touchSession(now());
  };

  const optOut = () => {
    local.set(prefix + 'optout', true);
    queue = [];
    for (const k of local.keys()) if (k.startsWith(prefix + 'queue:')) local.del(k);
  };
  const optIn = () => local.del(prefix + 'optout');

  // Time since the last call: total while visible (and the session not idle), active if input too.
  const accrue = (t) => {
    const from = lastTick;
    lastTick = t;
    if (!visible || !session || t <= from) return;
    const to = Math.min(t, from + 15000, session.last + IDLE); // a longer gap: the machine slept
    if (to > from) total += to - from;
    const activeTo = Math.min(to, lastInput + ACTIVE);
    if (activeTo > from) active += activeTo - Math.max(from, lastInput);
  };

  // Each report carries the time since the session's previous one; the API adds them up.
  const reportEngagement = (t) => {
    if (!cfg.captureEngagement || !session || total < 1) return;
    capture('engagement', { activeTimeMs: Math.round(active), totalTimeMs: Math.round(total), sessionId: session.id });
    active = total = 0;
    lastReport = t;
  };
  const flushEngagement = () => { accrue(now()); reportEngagement(now()); };

  const onInput = () => {
    const t = now();
    accrue(t);
    lastInput = t;
    if (t - session.last > 5000) touchSession(t);
  };

  const qkey = (id) => prefix + 'queue:' + id;
  const save = () => {
    savedAt = now();
    if (queue.length) local.set(qkey(tabId), { hb: savedAt, closed: closedAt, q: queue });
    else local.del(qkey(tabId));
  };

  const merge = (entries) => {
    const seen = new Set(queue.map((x) => x.e.messageId)), t = now();
    for (const x of entries || []) {
      if (!x || !x.e || seen.has(x.e.messageId) || (x.b && t - x.b > BEACON_KEEP)) continue;
      seen.add(x.e.messageId);
      queue.push(x);
    }
  };

  // Takes over the queues of pages left (or silent long): copied here first, removed there after.
  const adopt = (grace) => {
    const t = now();
    for (const k of local.keys()) {
      if (!k.startsWith(prefix + 'queue:') || k === qkey(tabId)) continue;
      const o = local.get(k);
      if (o && (o.closed ? t - o.closed < grace : t - o.hb < STALE)) continue;
      merge(o && o.q);
      save();
      local.del(k);
    }
  };

  const endpoint = () => `${cfg.apiHost}/api/i/v1/${encodeURIComponent(cfg.key)}/events`;

  const body = (entries) => {
    const v = entries[0].v, u = local.get(prefix + 'user'), c = local.get(prefix + 'customer');
    const b = { source: 'client', visitorId: v, sentAt: now(), events: entries.map((x) => x.e) };
    if (u && u.v === v) b.userIdentity = { ...u, v: undefined };
    if (c && c.v === v) b.customerIdentity = { ...c, v: undefined };
    return JSON.stringify(b);
  };

  // The next batch: queued events of one visitor, oldest first, about `max` bytes at most.
  const take = (max, skip) => {
    const out = [];
    let size = 500, v;
    for (const x of queue) {
      if (out.length >= MAX_BATCH) break;
      if ((skip && skip(x)) || (v !== undefined && x.v !== v)) continue;
      v = x.v;
      size += bytes(JSON.stringify(x.e)) + 1;
      if (out.length && size > max) break;
      out.push(x);
    }
    return out;
  };

  const drop = (entries) => {
    const ids = new Set(entries.map((x) => x.e.messageId));
    queue = queue.filter((x) => !ids.has(x.e.messageId));
    save();
  };

  // Exponential backoff with jitter, at most a minute; longer when the API says Retry-After.
  const backoff = (retryAfter) => {
    let ms = Math.min(60000, 1000 * 2 ** attempt++) * (0.5 + Math.random() / 2);
    const ra = retryAfter && (isNaN(retryAfter) ? Date.parse(retryAfter) - now() : retryAfter * 1000);
    if (ra > 0) ms = Math.max(ms, Math.min(ra, 3600000));
    retryAt = now() + ms;
    log('retry in', Math.round(ms), 'ms');
  };

  // One batch: removed after a 2xx, dropped (warned) on another 4xx, retried on 429, 5xx, errors.
  const send = () => {
    if (inflight) return inflight;
    if (optedOut()) { queue = []; save(); }
    const batch = take(MAX_BYTES);
    if (!batch.length) return Promise.resolve(true);
    const text = body(batch), ctl = new AbortController(), timer = setTimeout(() => ctl.abort(), 30000);
    log('sending', batch.length, 'events');
    inflight = fetch(endpoint(), {
      method: 'POST',
      headers: { 'Content-Type': 'application/json' },
      body: text,
      keepalive: bytes(text) < BEACON_BYTES,
      signal: ctl.signal,
    }).then((r) => {
      if (r.status === 429 || r.status >= 500) return backoff(r.headers.get('Retry-After')), false;
      if (r.status === 207 || r.status >= 300) {
        const what = r.status === 207 ? 'some events were refused:' : `batch refused (${r.status}):`;
        r.json().then((j) => warn(what, j.errors), () => warn(what));
      }
      attempt = retryAt = 0;
      drop(batch);
      return true;
    }, (err) => (log('network error', err), backoff(), false)).then((ok) => {
      clearTimeout(timer);
      inflight = null;
      if (ok && queue.length >= MAX_BATCH) setTimeout(tick);
      return ok;
    });
    return inflight;
  };

  const tick = () => {
    if (!optedOut()) adopt(GRACE);
    if (queue.length && now() >= retryAt) send();
    else if (queue.length && now() - savedAt > 30000) save(); // heartbeat: this page is alive
  };

  const flush = () => {
    if (!cfg) return new Promise((resolve) => pending.push(['flush', resolve]));
    retryAt = 0;
    let rounds = Math.ceil(queue.length / MAX_BATCH) + 1;
    const loop = () => Promise.resolve(inflight).then(() =>
      queue.length && rounds-- > 0 ? send().then((ok) => ok && loop()) : undefined);
    return loop().then(() => undefined);
  };

  // Hidden or left: beacon what is not beaconed yet. It stays queued (a beacon's fate is unknown):
  // the next page re-sends it with the same messageIds and the API drops repeats.
  const onHide = (left) => {
    if (visible) flushEngagement();
    visible = false;
    let room = BEACON_BYTES;
    while (nav.sendBeacon && !optedOut()) {
      const batch = take(room, (x) => x.b);
      if (!batch.length) break;
      const text = body(batch), n = bytes(text);
      if (n > room || !nav.sendBeacon(endpoint(), text)) break; // a string goes as text/plain
      room -= n;
      for (const x of batch) x.b = now();
    }
    if (left) closedAt = now();
    save();
  };

  const urlChanged = () => {
    const href = location.href, prev = lastUrl;
    if (href === prev) return;
    lastUrl = href;
    // A new #fragment alone is an anchor, not a page (unless it routes: #/... or #!...).
    if (prev.split('#')[0] === href.split('#')[0] && !/^#[/!]/.test(location.hash)) return;
    lastReferrer = prev;
    if (cfg.capturePageviews) page();
  };

  const SKIP_TYPES = /^(password|hidden|file|submit|button|reset|image)$/;
  const SENSITIVE_PART = /pass(w|phrase|port)|secret|token|creditcard|card(num|exp|code|holder)|cc(num|exp)|cv[cv]|security|iban|(api|access|private)key|(routing|account)num|bankaccount|tax(id|num)|nationalid/;
  const SENSITIVE_WORD = /^(pwd|pin|ssn|csc|cvn|otp|sin|tin|cc|vat|bic|swift)$/;

  const luhn = (v) => {
    let sum = 0, s = v.replace(/[ -]/g, '');
    [...s].reverse().forEach((c, i) => { c *= i % 2 + 1; sum += c > 9 ? c - 9 : c; });
    return /^\d{13,19}$/.test(s) && sum % 10 === 0;
  };

  // Fields that never leave the page: by type, by words of name, id or autocomplete, by value.
  const sensitive = (el) => {
    const ac = el.getAttribute('autocomplete') || '';
    if (SKIP_TYPES.test(el.type) || el.closest('[data-custintel-ignore]') || /\b(cc-|new-password|current-password|one-time-code)/.test(ac)) return true;
    const words = `${el.name} ${el.id} ${ac}`.replace(/([a-z0-9])([A-Z])/g, '$1 $2').toLowerCase().split(/[^a-z0-9]+/);
    const v = String(el.value).trim();
    return SENSITIVE_PART.test(words.join('')) || words.some((x) => SENSITIVE_WORD.test(x)) || /^\d{3}-\d{2}-\d{4}$/.test(v) || luhn(v);
  };

  const onSubmit = (ev) => {
    const form = ev.target;
    if (!cfg.captureForms || !(form instanceof HTMLFormElement) || form.closest('[data-custintel-ignore]')) return;
    const fields = {};
    for (const el of form.elements) {
      const name = el.name || el.id, type = el.type;
      if (!name || el.disabled || sensitive(el)) continue;
      let v = String(el.value).slice(0, 1000);
      if (/^(checkbox|radio)$/.test(type)) {
        if (!el.checked) continue;
        if (v === 'on') v = true;
      } else if (type === 'select-multiple') v = [...el.selectedOptions].map((o) => o.value);
      fields[name] = name in fields ? [].concat(fields[name], v) : v;
    }
    const id = ['id', 'name', 'action'].map((a) => form.getAttribute(a)).find(Boolean);
    capture('form', { formId: id || 'form', formFields: fields });
  };

  const init = (key, o) => {
    if (cfg) return warn('init() was already called');
    o = o || {};
    if (typeof key !== 'string' || !key.startsWith('pk_')) return warn('init() needs a public key (pk_...):', key);
    cfg = { capturePageviews: true, captureForms: false, captureEngagement: true, respectDoNotTrack: false, debug: false, ...o, key };
    cfg.apiHost = String(o.apiHost || (script && script.src ? new URL(script.src).origin : location.origin)).replace(/\/+$/, '');
    cfg.flushIntervalMs = Math.max(100, +o.flushIntervalMs || 2000);
    prefix = `custintel:${key}:`;
    session = sess.get(prefix + 'session');
    if (!session || !session.id) session = null;
    touchSession((lastInput = now()));
    if (!optedOut()) adopt(0); // what the previous page left (a reload, a link followed, offline)
    log('init', cfg, 'visitor', visitor(), 'page', tabId);

    // Calls made before init (the stub's too) go first: an optOut or identify there counts for the
    // first pageview.
    const calls = pending;
    pending = [];
    for (const [m, ...a] of calls) m === 'flush' ? flush().then(a[0]) : api[m] && api[m](...a);
    lastUrl = location.href;
    if (cfg.capturePageviews) page();
    for (const m of ['pushState', 'replaceState']) {
      const orig = history[m];
      history[m] = function (...a) {
        const r = orig.apply(this, a);
        try { urlChanged(); } catch (e) { warn(e); }
        return r;
      };
    }
    w.addEventListener('popstate', urlChanged);
    for (const t of ['mousemove', 'mousedown', 'keydown', 'scroll', 'touchstart', 'wheel']) {
      w.addEventListener(t, onInput, { capture: true, passive: true });
    }
    d.addEventListener('visibilitychange', () => {
      if (d.visibilityState === 'hidden') return onHide(false);
      visible = true; // also back from the back/forward cache: this page's queue is alive again
      lastTick = now();
      closedAt = retryAt = 0;
      onInput();
    });
    w.addEventListener('pagehide', () => onHide(true));
    w.addEventListener('online', () => { retryAt = 0; tick(); });
    d.addEventListener('submit', onSubmit, true);
    setInterval(tick, cfg.flushIntervalMs);
    setInterval(() => {
      accrue(now());
      if (now() - lastReport >= 60000 && active > 0) reportEngagement(now());
    }, 5000);
    setTimeout(tick); // after the caller's next statements: an optOut right after init holds
  };

  const later = (m, fn) => (...a) => (cfg ? fn(...a) : void pending.push([m, ...a]));

  const api = {
    version: '1.0.0',
    init,
    flush,
    getVisitorId: () => (cfg ? visitor() : null),
    isOptedOut: () => !!cfg && optedOut(),
  };
  for (const [m, fn] of Object.entries({ page, track, identify, group, reset, optOut, optIn })) api[m] = later(m, fn);

  const script = d.currentScript || d.querySelector('script[data-key][src*="custintel"]');
  const stub = w.custintel;
  w.custintel = api;

  // The stub's calls wait for init: its own init call, else the script tag's data-key.
  const calls = Array.isArray(stub) ? stub : [];
  pending = calls.filter((c) => c[0] !== 'init');
  const first = calls.find((c) => c[0] === 'init');
  if (first) init(first[1], first[2]);
  else if (script && script.dataset.key) init(script.dataset.key);
})();
