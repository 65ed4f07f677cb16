/* Figures rendered by the server ([data-figure]) and the live fleet heatmap. */
(function () {
  "use strict";
  const GC = (window.GC = window.GC || {});

  function drawFigures() {
    document.querySelectorAll("[data-figure]").forEach((node) => {
      const fig = GC.readJSON(node.dataset.figure);
      if (fig) Plotly.newPlot(node, fig.data, fig.layout, fig.config);
    });
  }

  /* Live heatmap: the newest utilization of each GPU, redrawn at most once a second;
   * a GPU silent for longer than the stale threshold turns blank. */
  function liveHeatmap(settings) {
    const node = document.querySelector("[data-heatmap]");
    if (!node || !settings.heat_index) return;
    const index = settings.heat_index;
    const seen = new Map();
    // A GPU in MIG mode reports no utilization of its own: its cell is its slices',
    // each weighted by its share of the GPU (monitoring.figures.sliced_util).
    const slices = settings.slice_index || {};
    const parts = new Map();
    function onSlice(z, g) {
      const [row, col, share, parent] = slices[g.uuid];
      if (!g.m || g.m.gpu_util === undefined || g.stale) return;
      if (!parts.has(parent)) parts.set(parent, new Map());
      parts.get(parent).set(g.uuid, [g.m.gpu_util, share]);
      let sum = 0, weight = 0;
      parts.get(parent).forEach(([u, w]) => { sum += u * w; weight += w; });
      z[row][col] = sum / weight;
      seen.set(parent, performance.now());
      dirty = true;
    }
    // A cell leads to its host's page.
    node.on("plotly_click", (ev) => {
      const url = (settings.host_urls || {})[ev.points[0].y];
      if (url) location.href = url;
    });
    let dirty = false;
    Object.keys(index).forEach((uuid) => seen.set(uuid, performance.now()));
    GC.live.on("gpus", (data) => {
      const z = node.data && node.data[0].z;
      if (!z) return;
      (data.gpus || []).forEach((g) => {
        if (slices[g.uuid]) return onSlice(z, g);
        const at = index[g.uuid];
        if (!at || !g.m || g.m.gpu_util === undefined) return;
        z[at[0]][at[1]] = g.stale ? null : g.m.gpu_util;
        if (!g.stale) seen.set(g.uuid, performance.now());
        dirty = true;
      });
    });
    setInterval(() => {
      const z = node.data && node.data[0].z;
      if (!z) return;
      const limit = settings.stale_after_s * 1000;
      seen.forEach((t, uuid) => {
        const at = index[uuid];
        if (performance.now() - t > limit && z[at[0]][at[1]] !== null) {
          z[at[0]][at[1]] = null;
          dirty = true;
        }
      });
      if (dirty) {
        dirty = false;
        Plotly.restyle(node, { z: [z] }, [0]);
      }
    }, 1000);
  }

  document.addEventListener("DOMContentLoaded", () => {
    drawFigures();
    const settings = GC.readJSON("live-settings");
    if (settings) liveHeatmap(settings);
  });
})();
