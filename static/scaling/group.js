// Scaling group page: draw the server-built plotly figures.
(function () {
  "use strict";
  var figures = JSON.parse(document.getElementById("scaling-figures").textContent);
  document.querySelectorAll("[data-figure]").forEach(function (el) {
    var fig = figures[el.dataset.figure];
    if (fig && window.Plotly) {
      window.Plotly.newPlot(el, fig.data, fig.layout, Object.assign({ responsive: true, displaylogo: false }, fig.config || {}));
    }
  });
})();
