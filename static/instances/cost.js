// The instance page's cost ticker: metered spend plus the price per hour times the
// seconds since it was metered, redrawn every second. Reads its figures from data-*.
(function () {
  const el = document.getElementById("cost-ticker");
  if (!el || !el.dataset.rate || !el.dataset.asOf) return;
  const base = Number(el.dataset.base), rate = Number(el.dataset.rate);
  const asOf = Date.parse(el.dataset.asOf);
  const fmt = new Intl.NumberFormat("en-US", { minimumFractionDigits: 2, maximumFractionDigits: 2 });
  function tick() {
    const hours = Math.max(0, Date.now() - asOf) / 3600000;
    el.textContent = fmt.format(base + rate * hours);
  }
  tick();
  setInterval(tick, 1000);
})();
