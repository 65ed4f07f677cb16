// The instance page's cost ticker: metered spend plus the price per hour times the
// seconds since data-since (where metering stopped, or the run began if later), redrawn
// every second: billing.pricing.so_far, the figure the page was drawn with.
(function () {
  const el = document.getElementById("cost-ticker");
  if (!el || !el.dataset.rate || !el.dataset.since) return;
  const base = Number(el.dataset.base), rate = Number(el.dataset.rate);
  const since = Date.parse(el.dataset.since);
  const fmt = new Intl.NumberFormat("en-US", { minimumFractionDigits: 2, maximumFractionDigits: 2 });
  function tick() {
    const hours = Math.floor(Math.max(0, Date.now() - since) / 1000) / 3600;
    el.textContent = fmt.format(base + rate * hours);
  }
  tick();
  setInterval(tick, 1000);
})();
