// The launch form: slices offered only for the chosen GPU model, and the price per hour
// and free capacity of the chosen combination, from /api/v1/launch-quote/.
(function () {
  const form = document.getElementById("launch-form");
  if (!form) return;
  const field = (name) => form.querySelector(`[name="${name}"]`);
  const model = field("gpu_model"), slice = field("slice_profile"), pricing = field("pricing_model");
  const count = field("gpu_count"), team = field("team"), box = document.getElementById("launch-quote");
  const fmt = new Intl.NumberFormat("en-US", { minimumFractionDigits: 2, maximumFractionDigits: 2 });

  function filterSlices() {
    if (!slice || !model) return;
    const prefix = model.value + " ";
    for (const option of slice.options) {
      if (!option.value) continue;
      const mine = option.textContent.startsWith(prefix);
      option.hidden = option.disabled = !mine;
      if (!mine && option.selected) slice.value = "";
    }
  }

  let pending = 0;
  async function quote() {
    const mine = ++pending;
    const params = new URLSearchParams({ gpu_model: model.value, pricing_model: pricing.value, gpu_count: count.value || "1" });
    if (team && team.value) params.set("team", team.value);
    const chosen = slice && slice.value ? slice.options[slice.selectedIndex].textContent.trim().split(" ").pop() : "";
    if (chosen) params.set("slice_profile", chosen);
    try {
      const response = await fetch(`${form.dataset.quoteUrl}?${params}`, { headers: { Accept: "application/json" } });
      const body = await response.json();
      if (mine !== pending) return;
      if (!response.ok) { box.textContent = Object.values(body).flat().join(" "); return; }
      const price = body.price_per_hour === null ? "no price" : `${fmt.format(Number(body.price_per_hour))}/h`;
      box.innerHTML = "";
      const head = document.createElement("div");
      head.innerHTML = `<strong class="mono"></strong> for ${body.gpu_count} × <span class="mono"></span> · ` +
        `<span class="${body.fits ? "" : "error-text"}"></span>`;
      head.querySelector("strong").textContent = price;
      head.querySelector("span.mono").textContent = body.sku;
      head.querySelector("span:last-child").textContent =
        `${body.free} free, ${body.free_on_one_host} on one host${body.fits ? "" : ": does not fit now"}`;
      const note = document.createElement("div");
      note.className = "muted small";
      note.textContent = body.note;
      box.append(head, note);
    } catch (err) {
      box.textContent = "Price unavailable right now.";
    }
  }

  for (const el of [model, slice, pricing, count, team]) {
    if (el) el.addEventListener("change", () => { filterSlices(); quote(); });
  }
  if (count) count.addEventListener("input", quote);
  filterSlices();
  quote();
})();
