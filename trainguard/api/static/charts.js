// TrainGuard console charts: plotly.js (served by the app from the plotly wheel) over the chart API.
// Plotly renders a subset of HTML in its text and hover labels, so every value from the API (job names,
// node names, log lines) goes through esc() before it reaches a chart; the evidence panels are built
// from text nodes only. Only <br> is used for markup: <i>, <b> and the like become style attributes,
// which the app's CSP (style-src 'self') refuses.
"use strict";

const TGCharts = (() => {
  const CONFIG = { displayModeBar: false, responsive: true };
  const FONT = { family: "system-ui, sans-serif", size: 12, color: "#1d2330" };
  const OUTCOME_COLORS = {
    "resumed": "#2e9d4b", "completed": "#1b5e20", "advice only": "#9aa3b5", "waiting for operator": "#e08a00",
    "watchdog released": "#8e44ad", "action failed": "#c62828", "stopped": "#7f1d1d", "in progress": "#2f5bd3",
  };
  const PALETTE = ["#2f5bd3", "#e08a00", "#2e9d4b", "#c62828", "#8e44ad", "#00838f", "#6d4c41", "#d81b60",
                   "#7cb342", "#5e35b1", "#f4511e", "#546e7a"];
  const STEP_STYLE = {
    advice: ["diamond", "#2f5bd3"], action: ["circle", "#2e9d4b"], action_failed: ["x", "#c62828"],
    watchdog: ["triangle-up", "#8e44ad"], drain: ["square", "#7f1d1d"], mode: ["star", "#6d4c41"],
    resumed: ["triangle-right", "#1b5e20"], end: ["hexagon", "#1d2330"], restart: ["circle-open", "#2f5bd3"],
  };

  function esc(value) {
    return String(value === null || value === undefined ? "" : value)
      .replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;");
  }

  function pad(n, width) { return String(n).padStart(width || 2, "0"); }

  // Plotly reads "YYYY-MM-DD HH:MM:SS.sss" as wall-clock time: the operator's local time, as in the tables.
  function plotTime(ts) {
    const d = new Date(ts * 1000);
    return d.getFullYear() + "-" + pad(d.getMonth() + 1) + "-" + pad(d.getDate()) + " " + pad(d.getHours()) + ":"
      + pad(d.getMinutes()) + ":" + pad(d.getSeconds()) + "." + pad(d.getMilliseconds(), 3);
  }

  function fmtDuration(s) {
    if (s < 90) return s.toFixed(s < 10 ? 1 : 0) + " s";
    if (s < 5400) return (s / 60).toFixed(1) + " min";
    return (s / 3600).toFixed(1) + " h";
  }

  function baseLayout(extra) {
    return Object.assign({
      font: FONT, margin: { l: 50, r: 16, t: 10, b: 40 }, paper_bgcolor: "#fff", plot_bgcolor: "#fff",
      hoverlabel: { align: "left" }, showlegend: true,
      legend: { orientation: "h", y: -0.18, font: { size: 11 } },
    }, extra || {});
  }

  function empty(div, text) {
    Plotly.purge(div);
    div.classList.add("chart-empty");
    div.dataset.points = "0";
    div.replaceChildren(document.createTextNode(text));
  }

  function draw(div, traces, layout, points) {
    if (div.classList.contains("chart-empty")) { div.classList.remove("chart-empty"); div.replaceChildren(); }
    div.dataset.points = String(points);
    return Plotly.react(div, traces, layout, CONFIG);
  }

  function onClick(div, handler) {
    // react() keeps listeners across redraws: bind once per element.
    if (div.dataset.clickBound) return;
    div.dataset.clickBound = "1";
    div.on("plotly_click", (ev) => { if (ev && ev.points && ev.points.length) handler(ev.points[0]); });
  }

  function days(since, until) {
    const out = [];
    const d = new Date(since * 1000);
    d.setUTCHours(0, 0, 0, 0);
    while (d.getTime() / 1000 <= until) {
      out.push(d.toISOString().slice(0, 10));
      d.setUTCDate(d.getUTCDate() + 1);
    }
    return out;
  }

  function stackedByDay(div, summary, field, colors) {
    const axis = days(summary.since, summary.until);
    const groups = new Map();
    for (const row of summary.recoveries) {
      const key = row[field];
      if (!groups.has(key)) groups.set(key, new Map());
      const byDay = groups.get(key);
      byDay.set(row.day, (byDay.get(row.day) || 0) + row.count);
    }
    if (!groups.size) return empty(div, "No recoveries in this window.");
    const names = [...groups.keys()].sort();
    const traces = names.map((name, i) => ({
      type: "bar", name: esc(name), x: axis, y: axis.map((d) => groups.get(name).get(d) || 0),
      marker: { color: (colors && colors[name]) || PALETTE[i % PALETTE.length] },
      hoverinfo: "text", hovertext: axis.map((d) => d + ": " + (groups.get(name).get(d) || 0) + " × " + esc(name)),
    }));
    return draw(div, traces, baseLayout({
      barmode: "stack", xaxis: { type: "date", tickformat: "%b %d" },
      yaxis: { title: { text: "recoveries" }, rangemode: "tozero", dtick: 1 },
    }), summary.recoveries.length);
  }

  function latency(div, summary) {
    const labels = { detection: "detection", action: "action", back_to_training: "back to training" };
    const colors = { detection: "#2f5bd3", action: "#e08a00", back_to_training: "#2e9d4b" };
    const traces = [];
    let points = 0;
    for (const kind of ["detection", "action", "back_to_training"]) {
      const dist = summary.latencies[kind];
      if (!dist || !dist.count) continue;
      points += dist.values.length;
      traces.push({
        type: "box", orientation: "h", name: labels[kind] + " (n=" + dist.count + ")",
        x: dist.values.map((v) => Math.max(v, 0.01)), boxpoints: "all", jitter: 0.4, pointpos: 0,
        marker: { color: colors[kind], size: 5, opacity: 0.7 }, line: { width: 1.5 },
        hoverinfo: "x",
      });
    }
    if (!traces.length) return empty(div, "No latencies recorded in this window.");
    return draw(div, traces, baseLayout({
      showlegend: false, margin: { l: 150, r: 16, t: 10, b: 40 },
      xaxis: { type: "log", title: { text: "seconds" } },
    }), points);
  }

  function goodput(div, summary, onWorkload) {
    const rows = summary.goodput.slice().reverse();  // largest loss on top
    if (!rows.length) return empty(div, "No time lost in this window.");
    const trace = {
      type: "bar", orientation: "h", name: "time lost",
      y: rows.map((r) => esc(r.name || r.workload_key)), x: rows.map((r) => r.lost_s / 60),
      customdata: rows.map((r) => r.workload_key), marker: { color: "#c62828" },
      hoverinfo: "text",
      hovertext: rows.map((r) => esc(r.workload_key) + "<br>lost " + fmtDuration(r.lost_s)
        + (r.goodput === null ? "" : " · goodput " + (r.goodput * 100).toFixed(2) + " %")
        + "<br>" + r.attempts + " restart(s) · " + esc(r.state)),
    };
    const drawn = draw(div, [trace], baseLayout({
      showlegend: false, margin: { l: 160, r: 16, t: 10, b: 40 },
      xaxis: { title: { text: "minutes lost" }, rangemode: "tozero" }, yaxis: { automargin: true },
    }), rows.length);
    return drawn.then(() => onClick(div, (pt) => onWorkload(pt.customdata)));
  }

  function fleet(summary, onWorkload) {
    return Promise.all([
      stackedByDay(document.getElementById("chart-by-category"), summary, "category", null),
      stackedByDay(document.getElementById("chart-by-outcome"), summary, "outcome", OUTCOME_COLORS),
      latency(document.getElementById("chart-latency"), summary),
      goodput(document.getElementById("chart-goodput"), summary, onWorkload),
    ]);
  }

  function nodes(report, onNode) {
    const div = document.getElementById("chart-nodes");
    const rows = report.nodes.slice(0, 25);
    if (!rows.length) return Promise.resolve(empty(div, "No node was implicated in this window."));
    const y = rows.map((r) => esc(r.node));
    const series = [
      ["incidents", "incidents", "#c62828"], ["exclusions", "exclusions set", "#e08a00"],
      ["advised_exclusions", "exclusions advised", "#f3c27a"], ["drains", "drains", "#7f1d1d"],
    ];
    const traces = series.map(([field, name, color]) => ({
      type: "bar", orientation: "h", name, y, x: rows.map((r) => r[field]), marker: { color },
      customdata: rows.map((r) => r.node), hoverinfo: "text",
      hovertext: rows.map((r) => esc(r.node) + ": " + r[field] + " " + name
        + "<br>" + r.workloads.length + " workload(s)"),
    }));
    const drawn = draw(div, traces, baseLayout({
      barmode: "group", bargap: 0.25, margin: { l: 90, r: 16, t: 10, b: 40 },
      yaxis: { autorange: "reversed", automargin: true },
      xaxis: { title: { text: "count over the last " + report.days + " days" }, rangemode: "tozero", dtick: 1 },
      legend: { orientation: "h", y: 1.06, yanchor: "bottom" },
    }), rows.length * series.length);
    return drawn.then(() => onClick(div, (pt) => onNode(pt.customdata)));
  }

  function timeline(tl, onEvidence) {
    const div = document.getElementById("workload-chart");
    const evidence = [];
    const ref = (e) => { evidence.push(e); return evidence.length - 1; };
    const byId = new Map();
    for (const m of [...tl.faults, ...tl.steps]) byId.set(m.evidence.id, m.evidence);
    const rowNames = ["attempts", "time lost", "faults", "recovery steps"];
    const attempts = {
      type: "bar", orientation: "h", name: "attempts", y: tl.attempts.map(() => "attempts"),
      base: tl.attempts.map((a) => plotTime(a.start)), x: tl.attempts.map((a) => Math.max(1000, (a.end - a.start) * 1000)),
      marker: { color: tl.attempts.map((a) => (a.attempt % 2 ? "#5b8def" : "#9fbcf7")) },
      text: tl.attempts.map((a) => a.label), textposition: "inside", insidetextanchor: "middle",
      hoverinfo: "text", customdata: tl.attempts.map((a) => (byId.has(a.evidence_id) ? ref(byId.get(a.evidence_id)) : null)),
      hovertext: tl.attempts.map((a) => esc(a.label) + "<br>" + plotTime(a.start).slice(0, 19) + " → "
        + plotTime(a.end).slice(0, 19) + (a.nodes.length ? "<br>nodes " + esc(a.nodes.join(", ")) : "")),
    };
    const lost = {
      type: "bar", orientation: "h", name: "time lost", y: tl.lost.map(() => "time lost"),
      base: tl.lost.map((s) => plotTime(s.start)), x: tl.lost.map((s) => Math.max(1000, (s.end - s.start) * 1000)),
      marker: { color: "#c62828" }, text: tl.lost.map((s) => s.label), textposition: "inside",
      hoverinfo: "text", customdata: tl.lost.map((s) => (byId.has(s.evidence_id) ? ref(byId.get(s.evidence_id)) : null)),
      hovertext: tl.lost.map((s) => "fault → training resumed: " + esc(s.label)),
    };
    const marks = (items, name, y, styleOf) => ({
      type: "scatter", mode: "markers", name, y: items.map(() => y), x: items.map((m) => plotTime(m.ts)),
      marker: {
        size: 12, symbol: items.map((m) => styleOf(m)[0]), color: items.map((m) => styleOf(m)[1]),
        line: { width: 1, color: "#fff" },
      },
      customdata: items.map((m) => ref(m.evidence)), hoverinfo: "text",
      hovertext: items.map((m) => esc(m.label) + "<br>" + plotTime(m.ts).slice(11, 23)
        + (m.evidence.message ? "<br>" + esc(m.evidence.message.slice(0, 160)) : "")
        + (m.evidence.evidence.length ? "<br>› " + esc(m.evidence.evidence[0].slice(0, 160)) : "")),
    });
    const faults = marks(tl.faults, "faults", "faults", () => ["x", "#c62828"]);
    const steps = marks(tl.steps, "recovery steps", "recovery steps", (m) => STEP_STYLE[m.kind] || ["circle", "#546e7a"]);
    const points = tl.attempts.length + tl.lost.length + tl.faults.length + tl.steps.length;
    const drawn = draw(div, [attempts, lost, faults, steps], baseLayout({
      barmode: "overlay", showlegend: false, margin: { l: 110, r: 16, t: 10, b: 36 },
      xaxis: { type: "date" },
      yaxis: { type: "category", categoryorder: "array", categoryarray: rowNames.slice().reverse(), fixedrange: true },
      hovermode: "closest",
    }), points);
    return drawn.then(() => {
      div.evidence = evidence;
      onClick(div, (pt) => {
        const found = pt.customdata === null || pt.customdata === undefined ? null : div.evidence[pt.customdata];
        if (found) onEvidence(found);
      });
    });
  }

  function resize() {
    for (const div of document.querySelectorAll(".js-plotly-plot")) {
      if (div.offsetParent !== null) Plotly.Plots.resize(div);
    }
  }

  return { fleet, nodes, timeline, resize, esc };
})();
