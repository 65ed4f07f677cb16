/* A chart panel: the charts of one GPU or slice (or every device of an instance,
 * overlaid), a range picker for all of them, live extension from websocket samples,
 * zoom that re-queries finer data, and per-chart CSV and PNG downloads.
 *
 * Every figure, history and look alike, comes whole from the server
 * (monitoring/panels.py, built by monitoring/charts.py) and is drawn as it comes. This
 * file only extends traces with live readings: each trace's meta names the metric,
 * statistic and scale it draws, and gap_s, the silence after which its line breaks. */
(function () {
  "use strict";
  const GC = (window.GC = window.GC || {});

  const RANGES = [
    ["live", "Live", 15 * 60],
    ["1h", "1 h", 3600],
    ["24h", "24 h", 86400],
    ["7d", "7 d", 7 * 86400],
    ["30d", "30 d", 30 * 86400],
    ["custom", "Custom", null],
  ];
  const LIVE_MAX_POINTS = 3000;
  const FLUSH_MS = 500;

  function el(tag, attrs, children) {
    const node = document.createElement(tag);
    Object.entries(attrs || {}).forEach(([k, v]) => {
      if (k === "text") node.textContent = v;
      else if (k.startsWith("on")) node.addEventListener(k.slice(2), v);
      else node.setAttribute(k, v);
    });
    (children || []).forEach((c) => node.appendChild(c));
    return node;
  }

  function isoFromPlot(value) {
    // plotly hands back the UTC wall clock we drew: "2026-12-02 10:00:00.123"
    const text = String(value).replace(" ", "T");
    return (text.length <= 10 ? text + "T00:00:00" : text) + "Z";
  }

  function plotMs(value) {
    return Date.parse(isoFromPlot(value));
  }

  function inputValue(ms) {
    return new Date(ms).toISOString().slice(0, 16);
  }

  /* The time of a trace's last reading, in ms (null when it has none). */
  function lastMs(trace) {
    const xs = trace.x || [];
    for (let k = xs.length - 1; k >= 0; k--) {
      if ((trace.y || [])[k] !== null && (trace.y || [])[k] !== undefined) return plotMs(xs[k]);
    }
    return null;
  }

  class Panel {
    constructor(root, config) {
      this.root = root;
      this.config = config;
      this.client = config.client;
      this.device = config.devices[0];
      // Several devices of one instance: every device overlaid per chart (one fetch
      // answers for all), with a toggle to one device at a time.
      this.overlay = Boolean(config.overlay_url);
      this.lastClock = {};
      this.range = "live";
      this.window = null;
      this.charts = {};
      this.buffer = {};
      this.revision = 0;
      this.silent = 0;
      this.generation = 0;
      this.lastLive = -Infinity;
      this.startedAt = performance.now();
      this.liveThrottle = null;
      this.build();
      GC.live.on("gpus", (d) => this.onLive(d.gpus || []));
      GC.live.on("open", () => {
        if (this.range === "live") this.load();
      });
      if (config.live) GC.live.subscribe(config.live);
      setInterval(() => this.flush(), FLUSH_MS);
      setInterval(() => this.markStale(), 2000);
      if (config.first) this.show(config.first);
      else this.load();
    }

    /* ---- DOM ---------------------------------------------------------------------- */

    build() {
      const id = this.root.id || "panel";
      const bar = el("div", { class: "panel-toolbar" });
      if (this.config.devices.length > 1) {
        const select = el("select", { id: id + "-device", "aria-label": "Device" });
        if (this.overlay) select.appendChild(el("option", { value: "all", text: "All " + this.config.devices.length + " devices, overlaid" }));
        this.config.devices.forEach((d, i) => select.appendChild(el("option", { value: i, text: d.label })));
        select.addEventListener("change", () => {
          this.overlay = select.value === "all";
          this.setDevice(this.overlay ? this.config.devices[0] : this.config.devices[+select.value]);
        });
        bar.appendChild(el("div", { class: "field" }, [el("label", { for: id + "-device", text: "Device" }), select]));
      }
      const group = el("div", { class: "range-group", role: "group", "aria-label": "Time range" });
      this.rangeButtons = {};
      RANGES.forEach(([key, label]) => {
        const b = el("button", { type: "button", "data-range": key, "aria-pressed": "false", text: label });
        b.addEventListener("click", () => (key === "custom" ? this.openCustom() : this.setRange(key)));
        this.rangeButtons[key] = b;
        group.appendChild(b);
      });
      bar.appendChild(el("div", { class: "field" }, [el("label", { text: "Range (UTC)" }), group]));
      this.customStart = el("input", { type: "datetime-local", id: id + "-start", "aria-label": "Start (UTC)" });
      this.customEnd = el("input", { type: "datetime-local", id: id + "-end", "aria-label": "End (UTC)" });
      this.custom = el("form", { class: "custom-range" }, [
        el("div", {}, [el("label", { for: id + "-start", text: "From (UTC)" }), this.customStart]),
        el("div", {}, [el("label", { for: id + "-end", text: "To (UTC)" }), this.customEnd]),
        el("button", { type: "submit", class: "primary", text: "Apply" }),
      ]);
      this.custom.addEventListener("submit", (e) => {
        e.preventDefault();
        const start = Date.parse(this.customStart.value + ":00Z");
        const end = Date.parse(this.customEnd.value + ":00Z");
        if (isNaN(start) || isNaN(end) || start >= end) {
          this.note("Pick a start before the end.", true);
          return;
        }
        this.setWindow(start, end, "custom");
      });
      bar.appendChild(this.custom);
      this.staleFlag = el("span", { class: "stale-flag", role: "status", text: "stale: the agent has gone quiet" });
      this.noteEl = el("span", { class: "panel-note", "aria-live": "polite" });
      bar.appendChild(el("div", { class: "field" }, [this.staleFlag, el("br"), this.noteEl]));
      this.root.appendChild(bar);
      this.grid = el("div", { class: "charts" });
      this.root.appendChild(this.grid);
      if (this.config.procs) {
        this.procs = el("section", { class: "procs-section" });
        this.root.appendChild(this.procs);
      }
      this.drawProcs();
      this.pressRange("live");
    }

    /* A card for each chart of the figures, in their order; drawn again when the set
     * of charts changes (another device, the overlay). */
    drawFrames(figures) {
      this.grid.innerHTML = "";
      this.charts = {};
      Object.entries(figures).forEach(([name, fig]) => {
        const title = fig.layout.title.text;
        const plot = el("div", { class: "plot", "data-chart": name, role: "img", "aria-label": title });
        const csv = el("button", { type: "button", text: "CSV", title: "Download the data as CSV" });
        const png = el("button", { type: "button", text: "PNG", title: "Download the chart as PNG" });
        csv.addEventListener("click", () => this.downloadCsv(name));
        png.addEventListener("click", () => this.downloadPng(name));
        const tools = el("div", { class: "chart-tools", role: "group", "aria-label": title + " downloads" }, [csv, png]);
        const card = el("section", { class: "chart-card" }, [tools, plot]);
        const basis = this.device.tflops_basis;
        if (name === "tflops" && basis) card.appendChild(el("p", { class: "muted chart-note", text: basis.text }));
        this.grid.appendChild(card);
        this.charts[name] = { name, plot, figure: fig, plotted: false };
      });
    }

    drawProcs() {
      if (!this.procs) return;
      // Overlaid: every device's processes, with the device named; else this device's.
      const devices = this.overlay ? this.config.devices : [this.device];
      const rows = [];
      devices.forEach((d) => (this.config.procs[d.uuid] || []).forEach((p) => rows.push(Object.assign({ device: d.label }, p))));
      const cols = (this.overlay ? ["Device"] : []).concat(["PID", "Name", "User", "Command", "Container / cgroup", "SM", "Memory", "Share of the GPU"]);
      const body = el("tbody");
      rows.forEach((p) => {
        const bar = el("div", { class: "bar", title: p.pct === null ? "" : p.pct + " %" }, [el("span")]);
        bar.firstChild.style.width = (p.pct || 0) + "%";
        const cells = [
          el("td", { class: "mono", text: String(p.pid) }),
          el("td", { text: p.name || "—" }),
          el("td", { text: p.user || "—" }),
          el("td", { class: "mono cmd", text: p.cmd || "—", title: p.cmd || "" }),
          el("td", { class: "mono", text: p.cgroup || "—", title: p.cgroup || "" }),
          el("td", { class: "num", text: p.sm_util === null || p.sm_util === undefined ? "—" : Math.round(p.sm_util) + " %" }),
          el("td", { class: "num", text: p.gib === null ? "—" : p.gib + " GiB" }),
          el("td", { class: "bar-cell" }, [bar]),
        ];
        if (this.overlay) cells.unshift(el("td", { text: p.device }));
        body.appendChild(el("tr", {}, cells));
      });
      if (!rows.length) {
        body.appendChild(el("tr", {}, [el("td", { colspan: String(cols.length), class: "muted", text: "No compute processes in the last hour's readings." })]));
      }
      const numeric = new Set(["SM", "Memory"]);
      const head = el("thead", {}, [el("tr", {}, cols.map((t) => el("th", { class: numeric.has(t) ? "num" : "", text: t })))]);
      this.procs.innerHTML = "";
      this.procs.appendChild(el("h2", { text: "Processes" + (rows.length ? " (as of " + rows[0].time.slice(11, 19) + " UTC)" : "") }));
      this.procs.appendChild(el("div", { class: "table-wrap" }, [el("table", { class: "procs", id: "procs" }, [head, body])]));
    }

    pressRange(key) {
      Object.entries(this.rangeButtons).forEach(([k, b]) => b.setAttribute("aria-pressed", String(k === key)));
      this.custom.classList.toggle("open", key === "custom");
    }

    note(text, error) {
      this.noteEl.textContent = "";
      this.noteEl.appendChild(el("span", { class: error ? "err" : "", text }));
    }

    /* ---- range and device ----------------------------------------------------------- */

    setDevice(device) {
      this.device = device;
      this.lastLive = -Infinity;
      this.startedAt = performance.now();
      // The charts stay until the new figures replace them; live readings wait for those.
      this.switching = true;
      this.buffer = {};
      this.drawProcs();
      this.load();
    }

    setRange(key) {
      this.range = key;
      this.pressRange(key);
      this.window = null;
      this.load();
    }

    openCustom() {
      const [start, end] = this.currentWindow();
      this.customStart.value = inputValue(start);
      this.customEnd.value = inputValue(end);
      this.pressRange("custom");
      this.customStart.focus();
    }

    setWindow(start, end, key) {
      this.range = key;
      this.window = [start, end];
      this.pressRange(key);
      this.load();
    }

    currentWindow() {
      if (this.window) return this.window;
      const span = (RANGES.find((r) => r[0] === this.range) || RANGES[0])[2] || 3600;
      const end = Date.now();
      return [end - span * 1000, end];
    }

    onZoom(ev) {
      if (this.silent) return;
      if (ev["xaxis.range[0]"] !== undefined && ev["xaxis.range[1]"] !== undefined) {
        const start = Date.parse(isoFromPlot(ev["xaxis.range[0]"]));
        const end = Date.parse(isoFromPlot(ev["xaxis.range[1]"]));
        if (!isNaN(start) && !isNaN(end) && end > start) this.setWindow(start, end, "custom");
      } else if (ev["xaxis.autorange"]) {
        this.setRange(this.range === "custom" ? "1h" : this.range);
      }
    }

    /* ---- history -------------------------------------------------------------------- */

    url(start, end) {
      const base = this.overlay
        ? this.config.overlay_url
        : this.config.figures_url.replace("{uuid}", encodeURIComponent(this.device.uuid));
      const params = new URLSearchParams({ start: new Date(start).toISOString(), end: new Date(end).toISOString() });
      if (this.range === "live") params.set("live", "1");
      return base + (base.includes("?") ? "&" : "?") + params.toString();
    }

    async load() {
      const generation = ++this.generation;
      const [start, end] = this.currentWindow();
      this.note("Loading…");
      let body;
      try {
        const resp = await fetch(this.url(start, end), { credentials: "same-origin", headers: { Accept: "application/json" } });
        body = await resp.json();
        if (!resp.ok) throw new Error(Object.values(body).flat().join(" ") || resp.statusText);
      } catch (err) {
        if (generation === this.generation) this.note("Could not load the history: " + err.message, true);
        return;
      }
      if (generation !== this.generation) return;
      this.show(body);
    }

    show(body) {
      this.buffer = {};
      this.draw(body.figures);
      this.switching = false;
      const label = (RANGES.find((r) => r[0] === this.range) || [0, "Custom"])[1];
      const tier = { raw: "raw samples", "1m": "1-minute rollups", "1h": "1-hour rollups" }[body.tier] || body.tier;
      this.note(
        (this.range === "live" ? "Live, last 15 min" : label) + " · " + tier + " · " + body.points.toLocaleString() + " points per series"
      );
    }

    /* The server's figures, drawn as they come; live extension starts after each
     * trace's last reading. */
    draw(figures) {
      const names = Object.keys(figures);
      if (names.join("|") !== Object.keys(this.charts).join("|")) this.drawFrames(figures);
      this.revision++;
      names.forEach((name) => {
        const chart = this.charts[name];
        const fig = figures[name];
        fig.layout.uirevision = this.range + ":" + this.revision + (this.overlay ? ":all" : "");
        chart.figure = fig;
        chart.empty = fig.empty;
        chart.last = fig.data.map(lastMs);
        chart.reveal = [];
        this.silent++;
        const drawn = chart.plotted
          ? Plotly.react(chart.plot, fig.data, fig.layout, fig.config)
          : Plotly.newPlot(chart.plot, fig.data, fig.layout, fig.config).then(() => {
              chart.plot.on("plotly_relayout", (ev) => this.onZoom(ev));
            });
        chart.plotted = true;
        drawn.finally(() => this.silent--);
      });
    }

    /* ---- live ----------------------------------------------------------------------- */

    /* tflops_est of a live reading: tensor activity (slow readings) with the newest SM
     * clock seen for that device (fast readings), on the device's basis. */
    liveTflops(device, m) {
      if (m.sm_clock_mhz !== undefined && m.sm_clock_mhz !== null) this.lastClock[device.uuid] = m.sm_clock_mhz;
      const b = device.tflops_basis;
      if (!b || m.tensor_active_pct === undefined || m.tensor_active_pct === null) return undefined;
      const clock = this.lastClock[device.uuid];
      const ratio = clock === undefined ? 1 : Math.min(1, Math.max(0, clock / b.max_clock_mhz));
      return (m.tensor_active_pct / 100) * b.peak_tflops * ratio * b.factor;
    }

    /* One live value for trace ``i`` of ``chart``: after a silence longer than the
     * trace's gap_s a null first, so the line breaks as it does in the history; a
     * reading no newer than the trace's last is already drawn. */
    extend(chart, i, ms, value) {
      const trace = chart.figure.data[i];
      const last = chart.last[i];
      if (last !== null && ms <= last) return;
      const gapMs = (trace.meta.gap_s || this.config.stale_after_s) * 1000;
      const buf = (this.buffer[chart.name] = this.buffer[chart.name] || { idx: [], x: [], y: [], text: [] });
      if (last !== null && ms - last > gapMs) this.push(buf, i, GC.plotTime((ms + last) / 2), null);
      this.push(buf, i, GC.plotTime(ms), value * trace.meta.scale);
      chart.last[i] = ms;
      if (trace.visible === false) {
        trace.visible = true;
        chart.reveal.push(i);
      }
    }

    onLiveOverlay(gpus) {
      gpus.forEach((g) => {
        const device = this.config.devices.find((d) => d.uuid === g.uuid);
        if (!device) return;
        if (!g.stale) this.lastLive = performance.now();
        if (this.range !== "live" || !g.m) return;
        const ms = GC.toMs(g.t);
        if (isNaN(ms)) return;
        Object.values(this.charts).forEach((chart) => {
          const i = chart.figure.data.findIndex((t) => t.meta && t.meta.uuid === g.uuid);
          if (i < 0) return;
          const metric = chart.figure.data[i].meta.metric;
          const v = metric === "tflops_est" ? this.liveTflops(device, g.m) : g.m[metric];
          if (v !== null && v !== undefined) this.extend(chart, i, ms, v);
        });
      });
    }

    onLive(gpus) {
      if (this.switching) return;
      if (this.overlay) return this.onLiveOverlay(gpus);
      const g = gpus.find((x) => x.uuid === this.device.uuid);
      if (!g) return;
      if (!g.stale) this.lastLive = performance.now();
      if (this.range !== "live" || !g.m) return;
      const ms = GC.toMs(g.t);
      if (isNaN(ms)) return;
      Object.values(this.charts).forEach((chart) => {
        chart.figure.data.forEach((trace, i) => {
          const meta = trace.meta || {};
          if (meta.stat === "throttle") {
            const reasons = (g.m.clocks_event_reasons || 0) & ~1;
            if (reasons && reasons !== this.liveThrottle) {
              const buf = (this.buffer[chart.name] = this.buffer[chart.name] || { idx: [], x: [], y: [], text: [] });
              this.push(buf, i, GC.plotTime(ms), 1, this.reasonNames(reasons));
            }
            this.liveThrottle = reasons;
            return;
          }
          if (!meta.metric || meta.envelope) return;
          const v = meta.metric === "tflops_est" ? this.liveTflops(this.device, g.m) : g.m[meta.metric];
          if (v !== null && v !== undefined) this.extend(chart, i, ms, v);
        });
      });
    }

    reasonNames(mask) {
      return this.client.throttle.filter((r) => mask & r[0]).map((r) => r[1]).join(", ");
    }

    push(buf, i, x, y, text) {
      let k = buf.idx.indexOf(i);
      if (k < 0) {
        buf.idx.push(i);
        buf.x.push([]);
        buf.y.push([]);
        buf.text.push([]);
        k = buf.idx.length - 1;
      }
      buf.x[k].push(x);
      buf.y[k].push(y);
      buf.text[k].push(text || "");
    }

    flush() {
      const pending = this.buffer;
      this.buffer = {};
      Object.entries(pending).forEach(([name, buf]) => {
        const chart = this.charts[name];
        if (!chart || !chart.plotted || !buf.idx.length) return;
        // The throttle marks carry hover text; the lines have none, and extendTraces
        // refuses to extend an attribute a trace lacks, so they go in two calls.
        const throttleIdx = chart.figure.data.findIndex((t) => (t.meta || {}).stat === "throttle");
        const lines = { x: [], y: [] };
        const lineIdx = [];
        buf.idx.forEach((i, k) => {
          if (i === throttleIdx) return;
          lineIdx.push(i);
          lines.x.push(buf.x[k]);
          lines.y.push(buf.y[k]);
        });
        const t = buf.idx.indexOf(throttleIdx);
        if (chart.reveal.length) {
          Plotly.restyle(chart.plot, { visible: true }, chart.reveal);
          chart.reveal = [];
        }
        if (chart.empty) {
          // The first reading of an empty chart: the note goes, the axis follows the data.
          chart.empty = false;
          const notes = (chart.figure.layout.annotations || []).filter((a) => a.name !== "empty");
          Plotly.relayout(chart.plot, { annotations: notes, "xaxis.autorange": true });
        }
        if (lineIdx.length) Plotly.extendTraces(chart.plot, lines, lineIdx, LIVE_MAX_POINTS);
        if (t >= 0) {
          Plotly.extendTraces(chart.plot, { x: [buf.x[t]], y: [buf.y[t]], text: [buf.text[t]] }, [throttleIdx], LIVE_MAX_POINTS);
        }
      });
    }

    markStale() {
      // Stale: live, and nothing from this device for longer than the threshold.
      const since = Math.max(this.lastLive, this.startedAt);
      const stale = this.range === "live" && performance.now() - since > this.config.stale_after_s * 1000;
      this.staleFlag.classList.toggle("on", stale);
    }

    /* ---- downloads ------------------------------------------------------------------ */

    filename(name, ext) {
      const device = this.device.label.replace(/[^A-Za-z0-9._-]+/g, "-").replace(/^-+|-+$/g, "");
      return device + "-" + name + "-" + this.range + "." + ext;
    }

    downloadCsv(name) {
      const chart = this.charts[name];
      const traces = chart.plot.data.filter((t) => t.meta && t.meta.metric && t.visible !== false);
      const unit = chart.figure.unit;
      const header = ["time_utc"].concat(
        traces.map((t) =>
          t.meta.stat === "throttle"
            ? "throttle_reasons"
            : (t.meta.uuid ? t.name + " " : "") + t.meta.metric + "_" + t.meta.stat + " (" + unit + ")"
        )
      );
      const rows = new Map();
      traces.forEach((t, col) => {
        (t.x || []).forEach((x, k) => {
          if (!rows.has(x)) rows.set(x, new Array(traces.length).fill(""));
          const v = t.meta.stat === "throttle" ? (t.text || [])[k] : t.y[k];
          rows.get(x)[col] = v === null || v === undefined ? "" : v;
        });
      });
      const quote = (v) => (/[",\n]/.test(String(v)) ? '"' + String(v).replace(/"/g, '""') + '"' : String(v));
      const lines = [header.map(quote).join(",")];
      Array.from(rows.keys())
        .sort()
        .forEach((x) => lines.push([isoFromPlot(x)].concat(rows.get(x)).map(quote).join(",")));
      const blob = new Blob([lines.join("\n") + "\n"], { type: "text/csv" });
      const a = el("a", { href: URL.createObjectURL(blob), download: this.filename(name, "csv") });
      document.body.appendChild(a);
      a.click();
      setTimeout(() => {
        URL.revokeObjectURL(a.href);
        a.remove();
      }, 0);
    }

    downloadPng(name) {
      const chart = this.charts[name];
      Plotly.downloadImage(chart.plot, {
        format: "png",
        filename: this.filename(name, "png").replace(/\.png$/, ""),
        width: Math.max(chart.plot.clientWidth, 640),
        height: chart.figure.layout.height,
      });
    }
  }

  GC.Panel = Panel;

  async function start(root) {
    let config = root.dataset.config ? GC.readJSON(root.dataset.config) : null;
    if (!config && root.dataset.configUrl) {
      const resp = await fetch(root.dataset.configUrl, { credentials: "same-origin" });
      if (!resp.ok) {
        root.textContent = "Charts are unavailable (" + resp.status + ").";
        return;
      }
      config = await resp.json();
    }
    if (!config || !config.devices.length) {
      root.appendChild(el("p", { class: "muted", text: "No GPU telemetry for this yet." }));
      return;
    }
    root.panel = new Panel(root, config);
  }

  document.addEventListener("DOMContentLoaded", () => {
    document.querySelectorAll("[data-chart-panel]").forEach((root) => start(root));
  });
})();
