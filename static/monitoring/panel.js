/* A chart panel: the charts of one GPU or slice, a range picker for all of them,
 * history from the metrics API, live extension from websocket samples, zoom that
 * re-queries finer data, and per-chart CSV and PNG downloads.
 *
 * Figures come from the server (monitoring/charts.py); each trace's meta names the
 * metric, statistic and scale it draws, so this file never builds a figure itself. */
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
  const OVERLAY_COLORS = ["#2563eb", "#16a34a", "#d97706", "#dc2626", "#7c3aed", "#0891b2", "#db2777", "#65a30d"];
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

  function inputValue(ms) {
    return new Date(ms).toISOString().slice(0, 16);
  }

  /* A null between two readings further apart than a few typical steps, so that a
   * silent agent shows as a gap rather than a straight line across it. */
  function gapLimit(xs, floorMs) {
    if (xs.length < 3) return Infinity;
    const steps = [];
    for (let i = 1; i < xs.length; i++) steps.push(xs[i] - xs[i - 1]);
    steps.sort((a, b) => a - b);
    return Math.max(5 * steps[Math.floor(steps.length / 2)], floorMs);
  }

  function withGaps(times, values, floorMs) {
    const ms = times.map((t) => GC.toMs(t));
    const limit = gapLimit(ms, floorMs);
    const x = [];
    const y = [];
    for (let i = 0; i < ms.length; i++) {
      if (i && ms[i] - ms[i - 1] > limit) {
        x.push(GC.plotTime((ms[i] + ms[i - 1]) / 2));
        y.push(null);
      }
      x.push(GC.plotTime(ms[i]));
      y.push(values[i]);
    }
    return [x, y];
  }

  function clone(obj) {
    return JSON.parse(JSON.stringify(obj));
  }

  class Panel {
    constructor(root, config) {
      this.root = root;
      this.config = config;
      this.client = config.client;
      this.device = config.devices[0];
      // Several devices of one instance: every device overlaid per chart (one fetch
      // answers for all), with a toggle to one device at a time.
      this.overlay = config.devices.length > 1 && config.source.kind === "instance";
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
      this.load();
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
      this.drawFrames();
      this.pressRange("live");
    }

    drawFrames() {
      this.grid.innerHTML = "";
      this.charts = {};
      const figures = this.config.figure_sets[this.device.figures];
      Object.entries(figures).forEach(([name, fig]) => {
        const plot = el("div", { class: "plot", "data-chart": name, role: "img", "aria-label": fig.layout.title.text });
        const csv = el("button", { type: "button", text: "CSV", title: "Download the data as CSV" });
        const png = el("button", { type: "button", text: "PNG", title: "Download the chart as PNG" });
        csv.addEventListener("click", () => this.downloadCsv(name));
        png.addEventListener("click", () => this.downloadPng(name));
        const tools = el("div", { class: "chart-tools", role: "group", "aria-label": fig.layout.title.text + " downloads" }, [csv, png]);
        const card = el("section", { class: "chart-card" }, [tools, plot]);
        const basis = this.device.tflops_basis;
        if (name === "tflops" && basis) card.appendChild(el("p", { class: "muted chart-note", text: basis.text }));
        this.grid.appendChild(card);
        const chart = { name, plot, template: fig, hasData: {} };
        this.charts[name] = chart;
        Plotly.newPlot(plot, clone(fig.data), clone(fig.layout), fig.config);
        plot.on("plotly_relayout", (ev) => this.onZoom(ev));
      });
      this.drawProcs();
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
      this.drawFrames();
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
      const src = this.config.source;
      const base = src.url.replace("{uuid}", encodeURIComponent(this.device.uuid));
      const params = new URLSearchParams();
      this.config.metrics.forEach((m) => params.append("metric", m));
      params.set("start", new Date(start).toISOString());
      params.set("end", new Date(end).toISOString());
      return base + "?" + params.toString();
    }

    seriesOf(body) {
      if (body.series) return body.series;
      const entry = (body.gpus || {})[this.device.uuid] || {};
      return entry.series || entry;
    }

    async load() {
      const generation = ++this.generation;
      const [start, end] = this.currentWindow();
      this.note("Loading…");
      let body, throttle;
      try {
        const [resp, tresp] = await Promise.all([
          fetch(this.url(start, end), { credentials: "same-origin", headers: { Accept: "application/json" } }),
          this.config.throttle_url && this.charts.clocks
            ? fetch(this.throttleUrl(start, end), { credentials: "same-origin" }).catch(() => null)
            : Promise.resolve(null),
        ]);
        body = await resp.json();
        if (!resp.ok) throw new Error(Object.values(body).flat().join(" ") || resp.statusText);
        throttle = tresp && tresp.ok ? await tresp.json() : { segments: [] };
      } catch (err) {
        if (generation === this.generation) this.note("Could not load the history: " + err.message, true);
        return;
      }
      if (generation !== this.generation) return;
      this.buffer = {};
      this.lastLiveT = null;
      const series = this.seriesOf(body);
      this.revision++;
      let points = 0;
      Object.values(this.charts).forEach((chart) => {
        const n = this.overlay
          ? this.fillOverlay(chart, body.gpus || {}, body.tier, [start, end])
          : this.fill(chart, series, throttle.segments || [], body.tier, [start, end]);
        points = Math.max(points, n);
      });
      const label = (RANGES.find((r) => r[0] === this.range) || [0, "Custom"])[1];
      const tier = { raw: "raw samples", "1m": "1-minute rollups", "1h": "1-hour rollups" }[body.tier] || body.tier;
      this.note(
        (this.range === "live" ? "Live, last 15 min" : label) + " · " + tier + " · " + points.toLocaleString() + " points per series"
      );
    }

    throttleUrl(start, end) {
      const params = new URLSearchParams({ start: new Date(start).toISOString(), end: new Date(end).toISOString() });
      return this.config.throttle_url.replace("{uuid}", encodeURIComponent(this.device.uuid)) + "?" + params;
    }

    fill(chart, series, segments, tier, span) {
      const data = clone(chart.template.data);
      const layout = clone(chart.template.layout);
      let points = 0;
      chart.hasData = {};
      data.forEach((trace) => {
        const meta = trace.meta || {};
        if (meta.stat === "throttle") {
          this.fillThrottle(trace, layout, segments);
          return;
        }
        const s = series[meta.metric];
        if (!s) return;
        const values = (s[meta.stat] || []).map((v) => (v === null ? null : v * meta.scale));
        [trace.x, trace.y] = withGaps(s.t || [], values, this.config.stale_after_s * 1000);
        points = Math.max(points, (s.t || []).length);
        const any = trace.y.some((v) => v !== null);
        chart.hasData[meta.metric] = chart.hasData[meta.metric] || any;
      });
      // Traces the GPU does not report (no GPM on an A100) stay out of the legend;
      // on raw samples min = max = avg, so the envelope lines go too.
      data.forEach((trace) => {
        const meta = trace.meta || {};
        if (meta.stat === "throttle" || !meta.metric) return;
        if (!chart.hasData[meta.metric]) trace.visible = false;
        if (tier === "raw" && meta.envelope) trace.visible = false;
      });
      layout.uirevision = this.range + ":" + this.revision;
      chart.emptyNote = !Object.values(chart.hasData).some(Boolean);
      this.finishLayout(chart, layout, span);
      this.silent++;
      Plotly.react(chart.plot, data, layout, chart.template.config).finally(() => this.silent--);
      chart.layout = layout;
      return points;
    }

    /* Past ranges show the whole window, data or not; live follows the data, and an
     * empty chart shows the requested window too (not plotly's default, year 2000). */
    finishLayout(chart, layout, span) {
      if (this.range !== "live" || chart.emptyNote) layout.xaxis.range = span.map((ms) => GC.plotTime(ms));
      if (chart.emptyNote) {
        layout.annotations.push({
          xref: "paper", yref: "paper", x: 0.5, y: 0.5, showarrow: false,
          text: "No readings in this range", font: { size: 13, color: this.client.palette.muted },
        });
      }
    }

    primaryIndex(chart) {
      return chart.template.data.findIndex((t) => t.meta && t.meta.metric && !t.meta.envelope && t.meta.stat !== "throttle");
    }

    /* One line per device for the chart's first metric, named after the device. */
    fillOverlay(chart, gpus, tier, span) {
      const base = chart.template.data[this.primaryIndex(chart)];
      const layout = clone(chart.template.layout);
      const colors = this.client.series_colors || OVERLAY_COLORS;
      let points = 0;
      chart.hasData = {};
      const data = this.config.devices.map((device, k) => {
        const trace = clone(base);
        const entry = gpus[device.uuid] || {};
        const s = (entry.series || entry)[base.meta.metric] || { t: [], avg: [] };
        const values = (s[base.meta.stat] || []).map((v) => (v === null ? null : v * base.meta.scale));
        [trace.x, trace.y] = withGaps(s.t || [], values, this.config.stale_after_s * 1000);
        trace.name = device.label;
        trace.line = Object.assign({}, trace.line, { color: colors[k % colors.length] });
        trace.hovertemplate = trace.hovertemplate.replace(/<extra>.*<\/extra>/, "<extra>" + device.label + "</extra>");
        trace.meta = Object.assign({}, base.meta, { uuid: device.uuid });
        points = Math.max(points, (s.t || []).length);
        if (trace.y.some((v) => v !== null)) chart.hasData[device.uuid] = true;
        return trace;
      });
      layout.showlegend = true;
      layout.uirevision = this.range + ":" + this.revision + ":all";
      chart.emptyNote = !Object.values(chart.hasData).some(Boolean);
      chart.overlayData = data;
      this.finishLayout(chart, layout, span);
      this.silent++;
      Plotly.react(chart.plot, data, layout, chart.template.config).finally(() => this.silent--);
      chart.layout = layout;
      return points;
    }

    fillThrottle(trace, layout, segments) {
      const pal = this.client.palette;
      trace.x = [];
      trace.y = [];
      trace.text = [];
      const colors = [];
      segments.forEach((seg) => {
        const slowdown = (seg.mask & this.client.slowdown_mask) !== 0;
        const color = slowdown ? pal.bad : pal.warn;
        const x0 = GC.plotTime(seg.start);
        layout.shapes.push({
          type: "rect", xref: "x", x0, x1: GC.plotTime(seg.end), yref: "paper", y0: 0, y1: 1,
          fillcolor: color, opacity: 0.16, line: { width: 0 }, layer: "below",
        });
        trace.x.push(x0);
        trace.y.push(1);
        trace.text.push(seg.reasons.join(", "));
        colors.push(color);
      });
      trace.marker.color = colors.length ? colors : pal.bad;
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

    onLiveOverlay(gpus) {
      gpus.forEach((g) => {
        const k = this.config.devices.findIndex((d) => d.uuid === g.uuid);
        if (k < 0) return;
        if (!g.stale) this.lastLive = performance.now();
        if (this.range !== "live" || !g.m) return;
        const x = GC.plotTime(g.t);
        if (!x) return;
        const device = this.config.devices[k];
        Object.values(this.charts).forEach((chart) => {
          const base = chart.template.data[this.primaryIndex(chart)];
          const metric = base.meta.metric;
          const v = metric === "tflops_est" ? this.liveTflops(device, g.m) : g.m[metric];
          if (v === null || v === undefined) return;
          const buf = (this.buffer[chart.name] = this.buffer[chart.name] || { idx: [], x: [], y: [], text: [] });
          this.push(buf, k, x, v * base.meta.scale);
          if (!chart.hasData[device.uuid]) chart.hasData[device.uuid] = true;
        });
      });
    }

    onLive(gpus) {
      if (this.overlay) return this.onLiveOverlay(gpus);
      const g = gpus.find((x) => x.uuid === this.device.uuid);
      if (!g) return;
      if (!g.stale) this.lastLive = performance.now();
      if (this.range !== "live" || !g.m) return;
      const x = GC.plotTime(g.t);
      if (!x) return;
      const ms = GC.toMs(g.t);
      const gap = this.lastLiveT && ms - this.lastLiveT > this.config.stale_after_s * 1000;
      this.lastLiveT = ms;
      Object.values(this.charts).forEach((chart) => {
        const buf = (this.buffer[chart.name] = this.buffer[chart.name] || { idx: [], x: [], y: [], text: [] });
        chart.template.data.forEach((trace, i) => {
          const meta = trace.meta || {};
          if (meta.stat === "throttle") {
            const reasons = (g.m.clocks_event_reasons || 0) & ~1;
            if (reasons && reasons !== this.liveThrottle) {
              this.push(buf, i, x, 1, this.reasonNames(reasons));
            }
            this.liveThrottle = reasons;
            return;
          }
          const v = meta.metric === "tflops_est" ? this.liveTflops(this.device, g.m) : g.m[meta.metric];
          if (v === null || v === undefined) return;
          if (meta.envelope) return;
          if (gap) this.push(buf, i, x, null);
          this.push(buf, i, x, v * meta.scale);
          if (!chart.hasData[meta.metric]) {
            chart.hasData[meta.metric] = true;
            chart.reveal = (chart.reveal || []).concat([i]);
          }
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
        if (!chart || !buf.idx.length) return;
        // The throttle marks carry hover text; the lines have none, and extendTraces
        // refuses to extend an attribute a trace lacks, so they go in two calls.
        const throttleIdx = this.overlay ? -1 : chart.template.data.findIndex((t) => (t.meta || {}).stat === "throttle");
        const lines = { x: [], y: [] };
        const lineIdx = [];
        buf.idx.forEach((i, k) => {
          if (i === throttleIdx) return;
          lineIdx.push(i);
          lines.x.push(buf.x[k]);
          lines.y.push(buf.y[k]);
        });
        const t = buf.idx.indexOf(throttleIdx);
        if (chart.reveal) {
          Plotly.restyle(chart.plot, { visible: true }, chart.reveal);
          chart.reveal = null;
        }
        if (chart.emptyNote) {
          chart.emptyNote = false;
          Plotly.relayout(chart.plot, { annotations: chart.template.layout.annotations });
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
      const unit = chart.template.unit;
      const header = ["time_utc"].concat(
        traces.map((t) => (t.meta.stat === "throttle" ? "throttle_reasons" : t.meta.metric + "_" + t.meta.stat + " (" + unit + ")"))
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
        height: chart.template.layout.height,
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
