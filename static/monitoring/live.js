/* Live updates over /ws/live/: one socket per page, subscriptions by team, instance,
 * host or fleet, reconnect with exponential backoff and jitter, coalesced GPU tiles,
 * stale marking. Vanilla JS, no build step. */
(function () {
  "use strict";
  const GC = (window.GC = window.GC || {});

  GC.readJSON = function (id) {
    const el = document.getElementById(id);
    return el ? JSON.parse(el.textContent) : null;
  };

  GC.toMs = function (t) {
    if (t === null || t === undefined || t === "") return NaN;
    if (typeof t === "number") return t < 1e12 ? t * 1000 : t;
    return Date.parse(t);
  };

  /* UTC wall clock "YYYY-MM-DD HH:MM:SS.sss", the way the server draws times. */
  GC.plotTime = function (t) {
    const ms = GC.toMs(t);
    return isNaN(ms) ? null : new Date(ms).toISOString().slice(0, 23).replace("T", " ");
  };

  /* ---- the socket -------------------------------------------------------------- */

  class Live {
    constructor() {
      this.subs = new Map();
      this.handlers = {};
      this.attempt = 0;
      this.ws = null;
      this.timer = null;
      this.stopped = false;
    }

    on(event, fn) {
      (this.handlers[event] = this.handlers[event] || []).push(fn);
    }

    subscribe(sub) {
      const key = sub.kind + ":" + (sub.id === undefined || sub.id === null ? "" : sub.id);
      if (this.subs.has(key)) return;
      this.subs.set(key, sub);
      if (this.ws && this.ws.readyState === WebSocket.OPEN) this.send(sub);
      else this.start();
    }

    send(sub) {
      const body = { kind: sub.kind };
      if (sub.id !== null && sub.id !== undefined) body.id = sub.id;
      this.ws.send(JSON.stringify({ subscribe: body }));
    }

    start() {
      if (this.ws || this.timer || this.stopped) return;
      const scheme = location.protocol === "https:" ? "wss:" : "ws:";
      this.status("connecting");
      const ws = (this.ws = new WebSocket(scheme + "//" + location.host + "/ws/live/"));
      ws.onopen = () => {
        this.attempt = 0;
        this.status("live");
        this.subs.forEach((sub) => this.send(sub));
        this.emit("open", {});
      };
      ws.onmessage = (e) => {
        let msg;
        try {
          msg = JSON.parse(e.data);
        } catch (err) {
          return;
        }
        if (msg && msg.event) this.emit(msg.event, msg.data || {});
      };
      ws.onclose = (e) => {
        this.ws = null;
        this.emit("close", { code: e.code });
        if (e.code === 4403 || e.code === 4401 || e.code === 4400) {
          this.stopped = true;
          this.status("denied", e.code === 4403 ? "not allowed to watch this" : "refused (" + e.code + ")");
          return;
        }
        this.retry();
      };
    }

    retry() {
      // 1 s, 2 s, 4 s … 15 s, with jitter so that a restarted server is not stampeded.
      const base = Math.min(15000, 1000 * Math.pow(2, this.attempt++));
      const delay = Math.round(base * (0.5 + Math.random() * 0.5));
      this.status("reconnecting", "reconnecting in " + Math.ceil(delay / 1000) + " s");
      this.timer = setTimeout(() => {
        this.timer = null;
        this.start();
      }, delay);
    }

    emit(event, data) {
      (this.handlers[event] || []).forEach((fn) => {
        try {
          fn(data);
        } catch (err) {
          console.error(err);
        }
      });
    }

    status(state, text) {
      document.querySelectorAll("[data-live-status]").forEach((el) => {
        el.dataset.state = state;
        el.textContent = text || { live: "live", connecting: "connecting…", reconnecting: "reconnecting", denied: "denied" }[state];
        el.title = "Live updates: " + el.textContent;
      });
    }
  }

  GC.live = new Live();

  /* ---- GPU tiles ----------------------------------------------------------------- */

  function level(value, warnAt, badAt) {
    if (value === null || value === undefined || isNaN(value)) return "unknown";
    return value >= badAt ? "bad" : value >= warnAt ? "warn" : "ok";
  }

  /* The browser half of monitoring.charts.tile: same rounding, units and levels. */
  GC.tile = function (m, facts, client) {
    const gib = client.gib;
    const total = m.mem_total || facts.memTotal;
    const limit = m.power_limit_mw || facts.powerLimit;
    const has = (k) => m[k] !== null && m[k] !== undefined;
    const memPct = has("mem_used") && total ? (100 * m.mem_used) / total : null;
    const powerPct = has("power_mw") && limit ? (100 * m.power_mw) / limit : null;
    const L = client.levels;
    const reasons = (m.clocks_event_reasons || 0) & client.slowdown_mask;
    return {
      util: has("gpu_util") ? Math.round(m.gpu_util) : null,
      utilLevel: !has("gpu_util") ? "unknown" : m.gpu_util < 5 ? "idle" : m.gpu_util < 50 ? "low" : "busy",
      tensor: has("tensor_active_pct") ? Math.round(m.tensor_active_pct) : null,
      mem: has("mem_used") ? (m.mem_used / gib).toFixed(1) + (total ? " / " + Math.round(total / gib) : "") + " GiB" : null,
      memLevel: level(memPct, L.mem_pct[0], L.mem_pct[1]),
      power: has("power_mw") ? Math.round(m.power_mw / 1000) + (limit ? " / " + Math.round(limit / 1000) : "") + " W" : null,
      powerLevel: level(powerPct, L.power_pct[0], L.power_pct[1]),
      temp: has("temp_c") ? Math.round(m.temp_c) + " °C" : null,
      tempLevel: level(m.temp_c, L.temp_c[0], L.temp_c[1]),
      throttle: client.throttle.filter((r) => reasons & r[0]).map((r) => r[1]).join(", "),
    };
  };

  function setField(tile, name, text, lvl) {
    const el = tile.querySelector('[data-f="' + name + '"]');
    if (!el) return;
    el.textContent = text === null || text === undefined ? "—" : text;
    if (lvl !== undefined) el.className = "lvl-" + lvl;
  }

  /* Tensor activity comes with the slower readings; a tile that got this many readings
   * and none with it says the GPU does not report it, whatever the page assumed. */
  const NO_TENSOR_AFTER = 30;

  function setTensor(tile, value, without) {
    const el = tile.querySelector('[data-f="tensor"]');
    if (!el) return;
    if (value !== null) {
      el.textContent = value + " %";
      el.removeAttribute("title");
      return;
    }
    let why = el.dataset.missing || "—";
    let title = el.dataset.missingTitle || "";
    if (why === "not yet" && without >= NO_TENSOR_AFTER) {
      why = "not reported";
      title = "No tensor-core activity in " + without + " readings: this GPU or its driver does not report NVML's GPM metrics.";
    }
    el.textContent = why;
    el.title = title;
  }

  class Tiles {
    constructor(settings) {
      this.client = settings.client;
      this.staleMs = settings.stale_after_s * 1000;
      this.byUuid = new Map();
      this.pending = new Map();
      this.last = new Map();
      this.seen = new Map();
      this.withoutTensor = new Map();
      this.parentOf = new Map();
      this.sliceUtil = new Map();
      this.listeners = [];
      document.querySelectorAll(".gpu-tile[data-uuid]").forEach((el) => {
        const list = this.byUuid.get(el.dataset.uuid) || [];
        list.push(el);
        this.byUuid.set(el.dataset.uuid, list);
        // Fresh at render: count the silence from now; stale: already silent.
        this.seen.set(el.dataset.uuid, el.classList.contains("stale") ? -Infinity : performance.now());
        // A GPU in MIG mode has no utilization of its own: its slices' readings make it,
        // each by its share of the GPU (monitoring.figures.sliced_util).
        if (el.dataset.slices) {
          el.dataset.slices.split(",").forEach((pair) => {
            const [slice, share] = pair.split("=");
            this.parentOf.set(slice, [el.dataset.uuid, Number(share)]);
          });
          if (el.dataset.slicedUtil !== "") this.last.set(el.dataset.uuid, { uuid: el.dataset.uuid, m: { gpu_util: Number(el.dataset.slicedUtil) } });
        }
      });
      GC.live.on("gpus", (data) => this.offer(data.gpus || []));
      setInterval(() => this.sweep(), 2000);
      this.flushing = false;
    }

    /* A slice's utilization, as its GPU's share: the GPU's utilization of its slices. */
    fromSlice(g) {
      const [parent, share] = this.parentOf.get(g.uuid);
      if (g.stale || !g.m || g.m.gpu_util === null || g.m.gpu_util === undefined) return null;
      if (!this.sliceUtil.has(parent)) this.sliceUtil.set(parent, new Map());
      const parts = this.sliceUtil.get(parent);
      parts.set(g.uuid, [g.m.gpu_util, share]);
      let sum = 0, weight = 0;
      parts.forEach(([u, w]) => { sum += u * w; weight += w; });
      return { uuid: parent, t: g.t, m: { gpu_util: sum / weight } };
    }

    offer(gpus) {
      const now = performance.now();
      gpus = gpus.concat(gpus.filter((g) => this.parentOf.has(g.uuid)).map((g) => this.fromSlice(g)).filter(Boolean));
      gpus.forEach((g) => {
        if (!g.stale) this.seen.set(g.uuid, now);
        // Slow metrics (energy, GPM) come every few readings: keep the last value seen.
        const merged = Object.assign({}, (this.pending.get(g.uuid) || this.last.get(g.uuid) || {}).m, g.m);
        const entry = Object.assign({}, g, { m: merged });
        const hasTensor = merged.tensor_active_pct !== null && merged.tensor_active_pct !== undefined;
        this.withoutTensor.set(g.uuid, hasTensor ? 0 : (this.withoutTensor.get(g.uuid) || 0) + 1);
        this.last.set(g.uuid, entry);
        this.pending.set(g.uuid, entry);
      });
      if (!this.flushing) {
        this.flushing = true;
        // Redraw at most twice a second, whatever the message rate.
        setTimeout(() => requestAnimationFrame(() => this.flush()), 500);
      }
    }

    flush() {
      this.flushing = false;
      const batch = this.pending;
      this.pending = new Map();
      batch.forEach((g, uuid) => {
        (this.byUuid.get(uuid) || []).forEach((el) => this.paint(el, g));
      });
      this.listeners.forEach((fn) => fn(batch));
      this.sweep();
    }

    paint(el, g) {
      const facts = { memTotal: +el.dataset.memTotal || null, powerLimit: +el.dataset.powerLimit || null };
      const t = GC.tile(g.m || {}, facts, this.client);
      el.classList.remove("util-idle", "util-low", "util-busy", "util-unknown");
      el.classList.add("util-" + t.utilLevel);
      setField(el, "util", t.util);
      setTensor(el, t.tensor, this.withoutTensor.get(g.uuid) || 0);
      setField(el, "mem", t.mem, t.memLevel);
      setField(el, "power", t.power, t.powerLevel);
      setField(el, "temp", t.temp, t.tempLevel);
      setField(el, "throttle", t.throttle ? "throttled: " + t.throttle : "");
      const bar = el.querySelector(".bar > span");
      if (bar) bar.style.width = (t.util || 0) + "%";
      el.dataset.t = g.t;
    }

    sweep() {
      const now = performance.now();
      this.byUuid.forEach((els, uuid) => {
        const stale = now - (this.seen.get(uuid) || -Infinity) > this.staleMs;
        els.forEach((el) => el.classList.toggle("stale", stale));
      });
    }

    isStale(uuid) {
      return performance.now() - (this.seen.get(uuid) || -Infinity) > this.staleMs;
    }
  }

  /* ---- page wiring ---------------------------------------------------------------- */

  function banner(text) {
    const el = document.getElementById("live-banner");
    if (!el) return;
    el.querySelector("[data-text]").textContent = text;
    el.classList.add("on");
  }

  /* A row for an alert that opened while the Alerts page was open, in the page's columns;
   * its buttons come with the next load. */
  function alertRow(d, rows) {
    const body = document.querySelector("#alerts tbody");
    const f = rows.filters;
    if (!body || !rows.shows_open) return false;
    if ((f.kind && f.kind !== d.kind) || (f.category && f.category !== d.category)) return false;
    if ((f.severity && f.severity !== d.severity) || (f.team && f.team !== d.team)) return false;
    const td = (label, text, cls) => {
      const cell = document.createElement("td");
      cell.dataset.label = label;
      if (cls) cell.className = cls;
      if (text !== null) cell.textContent = text;
      return cell;
    };
    const span = (cls, text) => {
      const el = document.createElement("span");
      el.className = cls;
      el.textContent = text;
      return el;
    };
    const tr = document.createElement("tr");
    tr.dataset.alert = d.id;
    tr.dataset.category = d.category;
    tr.className = "live-new";
    const opened = td("Opened", d.opened_at.slice(0, 19).replace("T", " "), "mono");
    const severity = td("Severity", null);
    severity.appendChild(span("severity " + d.severity, d.severity));
    const state = td("State", null);
    state.appendChild(span("state " + d.state, d.state));
    const kind = td("Kind", rows.kinds[d.kind] || d.kind);
    if (rows.categories[d.category] && rows.categories[d.category] !== kind.textContent) {
      const sub = document.createElement("div");
      sub.className = "muted small";
      sub.textContent = rows.categories[d.category];
      kind.appendChild(sub);
    }
    [opened, severity, kind, state, td("What", d.message), td("Where", "—"), td("Seen", "1×", "num"), td("", "", "acks")]
      .forEach((cell) => tr.appendChild(cell));
    const empty = body.querySelector("td[colspan]");
    if (empty) empty.parentElement.remove();
    body.insertBefore(tr, body.firstChild);
    return true;
  }

  GC.startPage = function (settings) {
    GC.tiles = new Tiles(settings);
    GC.live.on("instance", (d) => {
      document.querySelectorAll('[data-instance-state="' + d.id + '"]').forEach((el) => {
        el.textContent = d.state;
        el.className = "state " + d.state;
      });
      if (settings.reload_on_instance) banner("Instance " + d.name + " is now " + d.state + ".");
    });
    const seen = {};
    const bump = (by, category) => {
      const counters = [...document.querySelectorAll("[data-alert-count]")];
      counters.push(...document.querySelectorAll('[data-category-count="' + category + '"] strong'));
      counters.forEach((el) => { el.textContent = Math.max(0, Number(el.textContent) + by); });
    };
    GC.live.on("alert", (d) => {
      const row = document.querySelector('[data-alert="' + d.id + '"] .state');
      const before = seen[d.id] || (row ? row.textContent : null);
      seen[d.id] = d.state;
      // Open counts: a new alert adds one, a resolved one (seen open) takes one away.
      if (d.state === "open" && before === null) bump(1, d.category);
      if (d.state === "resolved" && before !== null && before !== "resolved") bump(-1, d.category);
      if (row) {
        row.textContent = d.state;
        row.className = "state " + d.state;
      } else if (d.state === "open" && !(settings.alert_rows && alertRow(d, settings.alert_rows))) {
        banner("New alert: " + d.message);
      }
    });
    (settings.subscribe || []).forEach((s) => GC.live.subscribe(s));
    if (!(settings.subscribe || []).length) GC.live.start();
  };

  document.addEventListener("DOMContentLoaded", () => {
    const settings = GC.readJSON("live-settings");
    if (settings) GC.startPage(settings);
  });
})();
