// Audit export with progress: stream the download, count lines against the event count
// the server announces, then hand the file to the browser. Without JS the links download.
(function () {
  "use strict";
  const box = document.querySelector(".export-progress");
  if (!box || !window.ReadableStream) return;
  const bar = box.querySelector("progress");
  const status = box.querySelector(".export-status");
  const fmt = new Intl.NumberFormat();

  function filename(response, fallback) {
    const match = /filename="([^"]+)"/.exec(response.headers.get("Content-Disposition") || "");
    return match ? match[1] : fallback;
  }

  async function download(link) {
    const buttons = document.querySelectorAll("[data-export]");
    buttons.forEach((b) => b.setAttribute("aria-disabled", "true"));
    box.hidden = false;
    bar.removeAttribute("value");
    status.textContent = "Preparing export…";
    try {
      const response = await fetch(link.href, { credentials: "same-origin", headers: { Accept: "*/*" } });
      if (!response.ok) {
        let detail = response.statusText;
        try { detail = JSON.stringify(await response.json()); } catch (e) { /* not JSON */ }
        throw new Error(`${response.status}: ${detail}`);
      }
      const total = Number(response.headers.get("X-Audit-Event-Count") || 0);
      bar.max = Math.max(total, 1);
      const reader = response.body.getReader();
      const parts = [];
      let lines = 0;
      let bytes = 0;
      for (;;) {
        const { done, value } = await reader.read();
        if (done) break;
        parts.push(value);
        bytes += value.length;
        for (let i = 0; i < value.length; i++) if (value[i] === 10) lines++;
        const rows = Math.min(Math.max(lines - 1, 0), total);
        bar.value = rows;
        status.textContent = `${fmt.format(rows)} of ${fmt.format(total)} events · ${fmt.format(Math.round(bytes / 1024))} KiB`;
      }
      const blob = new Blob(parts, { type: response.headers.get("Content-Type") || "application/octet-stream" });
      const a = document.createElement("a");
      a.href = URL.createObjectURL(blob);
      a.download = filename(response, "audit-export");
      document.body.appendChild(a);
      a.click();
      a.remove();
      setTimeout(() => URL.revokeObjectURL(a.href), 10000);
      bar.value = bar.max;
      status.textContent = `Done: ${fmt.format(total)} events exported (${a.download}).`;
    } catch (err) {
      status.textContent = `Export failed — ${err.message}`;
    } finally {
      buttons.forEach((b) => b.removeAttribute("aria-disabled"));
    }
  }

  document.querySelectorAll("[data-export]").forEach((link) =>
    link.addEventListener("click", (event) => {
      event.preventDefault();
      if (link.getAttribute("aria-disabled") !== "true") download(link);
    })
  );
})();
