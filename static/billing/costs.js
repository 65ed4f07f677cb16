// Cost explorer: draw the server-built plotly figures, and show budget alerts and spot
// preemption notices pushed live on /ws/live/ for this team.
(function () {
  "use strict";
  var figures = JSON.parse(document.getElementById("cost-figures").textContent);
  var teamId = JSON.parse(document.getElementById("cost-team").textContent);
  Object.keys(figures).forEach(function (name) {
    var el = document.getElementById("chart-" + name);
    if (el && window.Plotly) { window.Plotly.newPlot(el, figures[name].data, figures[name].layout, figures[name].config); }
  });

  var banner = document.getElementById("live-banner");
  function show(kind, text) {
    var item = document.createElement("div");
    item.className = "msg " + kind;
    item.textContent = text;
    banner.appendChild(item);
    banner.hidden = false;
  }
  function handle(msg) {
    if (!msg || !msg.data || (msg.data.team !== undefined && msg.data.team !== teamId)) { return; }
    if (msg.event === "budget") { show(msg.data.percent >= 100 ? "error" : "warning", "Budget: " + msg.data.message); }
    if (msg.event === "preemption") {
      show("warning", "Spot preemption: " + msg.data.name + " will be preempted at " +
        new Date(msg.data.preempt_at).toISOString().replace(".000", "") + " (" + msg.data.seconds + " s notice).");
    }
  }
  if (!("WebSocket" in window)) { return; }
  var delay = 1000;
  function connect() {
    var ws = new WebSocket((location.protocol === "https:" ? "wss://" : "ws://") + location.host + "/ws/live/");
    ws.onopen = function () { delay = 1000; ws.send(JSON.stringify({ subscribe: { kind: "team", id: teamId } })); };
    ws.onmessage = function (e) { try { handle(JSON.parse(e.data)); } catch (err) { /* not ours */ } };
    ws.onclose = function (e) {
      if (e.code >= 4400 && e.code < 4500) { return; }  // refused: retrying will not help
      setTimeout(connect, delay); delay = Math.min(delay * 2, 60000);
    };
  }
  connect();
})();
