// The launch form: slices offered only for the chosen GPU model, and the price per hour
// and free capacity of the chosen combination, from /api/v1/launch-quote/.
(function () {
  const form = document.getElementById("launch-form");
  if (!form) return;
  const field = (name) => form.querySelector(`[name="${name}"]`);
  const model = field("gpu_model"), slice = field("slice_profile"), pricing = field("pricing_model");
  const count = field("gpu_count"), team = field("team"), box = document.getElementById("launch-quote");
  const maxPrice = field("max_price"), image = field("image");
  const spotBox = document.getElementById("spot-outlook"), spotSummary = document.getElementById("spot-summary");
  const spotChart = document.getElementById("spot-chart");
  const fmt = new Intl.NumberFormat("en-US", { minimumFractionDigits: 2, maximumFractionDigits: 2 });

  // Images that do not support the chosen GPU model are not offered.
  function filterImages() {
    if (!image || !model) return;
    for (const option of image.options) {
      if (!option.value) continue;
      const models = (option.dataset.models || "").split(" ");
      const fits = models.includes(model.value);
      option.hidden = option.disabled = !fits;
      if (!fits && option.selected) image.value = "";
    }
  }

  // The max price is for spot only.
  function showMaxPrice() {
    if (!maxPrice) return;
    const wrap = maxPrice.closest(".field");
    const spot = pricing.value === "spot";
    if (wrap) wrap.hidden = !spot;
    if (!spot) maxPrice.value = "";
  }

  function showSpot(body) {
    const spot = body.spot;
    if (!spotBox || !spot || pricing.value !== "spot") { if (spotBox) spotBox.hidden = true; return; }
    spotBox.hidden = false;
    spotSummary.innerHTML = "";
    const line = document.createElement("div");
    line.innerHTML = `Spot now <strong class="mono"></strong> per GPU-hour · last ${spot.days} days ` +
      `<span class="mono"></span> · <span class="saving"></span>`;
    line.querySelector("strong").textContent = spot.price_per_gpu_hour;
    line.querySelector("span.mono").textContent = `${spot.low}–${spot.high}`;
    line.querySelector("span.saving").textContent = spot.saving_pct === null ? "no on-demand price to compare" :
      `saves ${spot.saving_pct}% against on-demand (${spot.on_demand_per_gpu_hour})`;
    spotSummary.append(line);
    if (maxPrice && maxPrice.value && Number(maxPrice.value) < Number(spot.price_per_gpu_hour)) {
      const warn = document.createElement("div");
      warn.className = "error-text small";
      warn.textContent = "Your max price is below the spot price now: the launch would be refused.";
      spotSummary.append(warn);
    }
    if (window.Plotly && spotChart) {
      window.Plotly.react(spotChart, spot.figure.data, spot.figure.layout, { displaylogo: false, responsive: true, displayModeBar: false });
    }
  }

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
      if (!response.ok) { refused(body); return; }
      const price = body.price_per_hour === null ? "no price" : `${fmt.format(Number(body.price_per_hour))}/h`;
      box.innerHTML = "";
      const head = document.createElement("div");
      head.innerHTML = `<strong class="mono"></strong> for ${body.gpu_count} × <span class="mono"></span> · ` +
        `<span class="${body.fits ? "" : "error-text"}"></span>`;
      head.querySelector("strong").textContent = price;
      head.querySelector("span.mono").textContent = body.sku;
      head.querySelector("span:last-child").textContent =
        `${body.free} free, at most ${body.free_on_one_host} for one instance (one host, one NVLink group)${body.fits ? "" : ": does not fit now"}`;
      const note = document.createElement("div");
      note.className = "muted small";
      note.textContent = body.note;
      box.append(head, note);
      showSpot(body);
    } catch (err) {
      box.textContent = "Price unavailable right now.";
    }
  }

  // What the server said of a submitted field stands under it until the field changes.
  const marked = (name) => { const el = field(name); return el && el.closest(".field")?.querySelector(".errorlist"); };
  form.addEventListener("input", (event) => event.target.closest(".field")?.querySelector(".errorlist")?.remove());
  form.addEventListener("change", (event) => event.target.closest(".field")?.querySelector(".errorlist")?.remove());

  // A quote refused for a field already marked says so once, under the field.
  function refused(body) {
    const rest = Object.entries(body).filter(([name]) => !marked(name)).map(([, messages]) => messages).flat();
    if (rest.length) { box.textContent = rest.join(" "); return; }
    box.innerHTML = '<span class="muted">Correct the marked field to see the price.</span>';
  }

  for (const el of [model, slice, pricing, count, team]) {
    if (el) el.addEventListener("change", () => { filterSlices(); filterImages(); showMaxPrice(); quote(); });
  }
  if (count) count.addEventListener("input", quote);
  if (maxPrice) maxPrice.addEventListener("change", quote);
  filterSlices();
  filterImages();
  showMaxPrice();
  quote();
})();
