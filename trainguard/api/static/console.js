// TrainGuard console: vanilla JS over the advisor API, refreshed by polling.
// Every value from the API is untrusted (job names, log lines, node names): it only ever reaches the
// page through text nodes and attribute setters, never through HTML parsing.
"use strict";

const POLL_MS = 2000;
const AGREEMENT_WINDOW_S = 7 * 86400;
const TOKEN_KEY = "trainguard.token";
const ATTENTION_STATES = new Set(["recovering", "held", "waiting"]);
const BAD_STATES = new Set(["failed", "stopped"]);

const CHART_REFRESH_MS = 15000;
const VIEWS = ["workloads", "fleet", "nodes"];

const state = {
  selected: null,   // {cluster, job_id, submit_time, key}
  events: [],       // timeline of the selected workload
  signature: "",
  detail: null,
  view: "workloads",
  chartSignature: {},  // chart name -> JSON last drawn (redraw only on change: keeps hovers steady)
  chartLoadedAt: {},   // view -> when its data was last fetched
  nodes: null,         // last node report
  pickedNode: null,
  modePicked: false,   // the operator chose a mode in the select and has not applied it yet
  workloads: [],
};

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(attrs || {})) {
    if (value === undefined || value === null || value === false) continue;
    if (name === "class") node.className = value;
    else if (name.startsWith("on")) node.addEventListener(name.slice(2), value);
    else node.setAttribute(name, value === true ? "" : String(value));
  }
  for (const child of children) {
    if (child === undefined || child === null) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

function fmtTime(ts) {
  if (ts === null || ts === undefined) return "";
  const d = new Date(ts * 1000);
  return d.toLocaleString(undefined, { hour12: false }) + "." + String(d.getMilliseconds()).padStart(3, "0");
}

function showMessage(text, kind) {
  const box = document.getElementById("message");
  box.textContent = text;
  box.className = kind || "";
}

function token() { return sessionStorage.getItem(TOKEN_KEY) || ""; }

function askToken() {
  const given = window.prompt("Your API token (settings api.operators):", token());
  if (given !== null) sessionStorage.setItem(TOKEN_KEY, given.trim());
  return given !== null;
}

async function api(path, options) {
  const opts = Object.assign({ method: "GET", headers: {} }, options || {});
  const send = async () => {
    const headers = Object.assign({ "Accept": "application/json" }, opts.headers);
    if (token()) headers["Authorization"] = "Bearer " + token();
    if (opts.body !== undefined) headers["Content-Type"] = "application/json";
    return fetch(path, {
      method: opts.method, headers, body: opts.body === undefined ? undefined : JSON.stringify(opts.body),
    });
  };
  let resp = await send();
  if (resp.status === 401 && opts.interactive && askToken()) resp = await send();
  const text = await resp.text();
  let data = null;
  try { data = text ? JSON.parse(text) : null; } catch (_) { data = text; }
  if (!resp.ok) {
    let detail = data && data.detail !== undefined ? data.detail : data;
    if (typeof detail !== "string") detail = JSON.stringify(detail);
    const err = new Error(resp.status + " " + detail);
    err.status = resp.status;
    throw err;
  }
  return data;
}

function workloadPath(w) {
  return "/api/v1/workloads/" + [w.cluster, w.job_id, String(w.submit_time)].map(encodeURIComponent).join("/");
}

function markers(w) {
  const out = [];
  if (BAD_STATES.has(w.state)) out.push(el("span", { class: "marker bad", title: "ended: " + w.state }, "×"));
  else if (ATTENTION_STATES.has(w.state)) out.push(el("span", { class: "marker", title: w.state }, "!"));
  if (w.last_category && w.last_category !== "healthy" && !BAD_STATES.has(w.state)) {
    out.push(el("span", { class: "marker", title: "last failure: " + w.last_category }, "●"));
  }
  if (w.paused) out.push(el("span", { class: "marker", title: "monitoring paused" }, "paused"));
  return out;
}

function renderWorkloads(items) {
  const body = document.querySelector("#workloads tbody");
  const rows = items.map((w) => {
    const selected = state.selected && state.selected.key === w.workload_key;
    return el("tr", {
      class: "workload" + (selected ? " selected" : ""),
      "data-key": w.workload_key,
      "data-testid": "workload-row",
      onclick: () => selectWorkload(w),
    },
      el("td", { "data-testid": "markers" }, ...markers(w)),
      el("td", {}, w.workload_key),
      el("td", { "data-testid": "name" }, w.name),
      el("td", {}, el("span", { class: "badge state-" + w.state, "data-testid": "state" }, w.state)),
      el("td", {}, el("span", { class: "badge mode-" + w.mode, "data-testid": "mode" }, w.mode)),
      el("td", { "data-testid": "attempts" }, w.attempts),
      el("td", { "data-testid": "category" }, w.last_category || "–"),
      el("td", {}, (w.excluded_nodes || []).join(", ")),
      el("td", { class: "muted" }, fmtTime(w.updated_at)),
    );
  });
  body.replaceChildren(...rows);
  document.getElementById("workloads-empty").hidden = items.length > 0;
  const clusters = [...new Set(items.map((w) => w.cluster))].sort();
  const picker = document.getElementById("cluster-select");
  const current = picker.value;
  if (clusters.join("\n") !== [...picker.options].map((o) => o.value).join("\n")) {
    picker.replaceChildren(...clusters.map((c) => el("option", { value: c }, c)));
    if (clusters.includes(current)) picker.value = current;
  }
}

function renderAgreement(report) {
  const body = document.querySelector("#agreement tbody");
  body.replaceChildren(...report.rows.map((r) => el("tr", { "data-testid": "agreement-row" },
    el("td", {}, r.scope), el("td", {}, r.key), el("td", {}, r.decisions), el("td", {}, r.agreed),
    el("td", {}, Math.round(r.rate * 100) + " %"))));
}

function fact(dl, name, value) {
  dl.append(el("dt", {}, name), el("dd", { "data-testid": "fact-" + name.replace(/\W+/g, "-") }, value));
}

function renderDetail(detail) {
  const s = detail.status;
  document.getElementById("detail-title").textContent = (s.name ? s.name + " — " : "") + s.workload_key;
  const dl = document.getElementById("detail-facts");
  dl.replaceChildren();
  fact(dl, "state", s.state + (s.paused ? " (paused)" : ""));
  fact(dl, "mode", s.mode);
  fact(dl, "attempts", String(s.attempts));
  fact(dl, "excluded nodes", detail.excluded_nodes.join(", ") || "none");
  fact(dl, "last category", s.last_category || "–");
  const link = detail.temporal_url
    ? el("a", { href: detail.temporal_url, target: "_blank", rel: "noopener noreferrer", class: "temporal",
                "data-testid": "temporal-link" }, "open in Temporal UI ↗")
    : null;
  dl.append(el("dt", {}, "workflow"),
    el("dd", { "data-testid": "fact-workflow" }, s.workflow_id, link ? " · " : null, link));
  const modeSelect = document.getElementById("workload-mode-select");
  // A poll must not undo a choice the operator has made but not applied yet.
  if (document.activeElement !== modeSelect && !state.modePicked) modeSelect.value = s.mode;
  document.getElementById("pause-button").textContent = s.paused ? "Resume monitoring" : "Pause monitoring";
  const box = document.getElementById("advice");
  const a = detail.current_advice;
  if (!a) { box.replaceChildren(el("p", { class: "muted" }, "No advice yet.")); return; }
  const decision = detail.current_decision;
  box.replaceChildren(
    el("p", {},
      el("strong", { "data-testid": "advice-action" }, a.action), " → desired state ", a.desired_state,
      " (generation ", a.generation, ", ", a.mode, a.execute ? ", executed" : ", advisory", ")"),
    el("p", { "data-testid": "advice-reason" }, a.reason),
    el("p", { class: "muted" }, "category ", a.category, " · attribution ", a.attribution,
      a.exclude_nodes.length ? " · exclude " + a.exclude_nodes.join(", ") : "",
      " · reconciliation ", a.disposition,
      a.observed_generation !== null ? " (observed generation " + a.observed_generation + ")" : ""),
    el("p", { "data-testid": "decision" }, decision
      ? "Operator " + (decision.agree ? "agreed" : "disagreed") + (decision.who ? " (" + decision.who + ")" : "")
        + (decision.did_instead ? ": " + decision.did_instead : "")
      : "No operator decision yet."),
    el("div", { class: "actions" },
      el("button", { type: "button", "data-testid": "agree", onclick: () => decide(a.advice_id, true) }, "Agree"),
      el("button", { type: "button", "data-testid": "disagree", onclick: () => decide(a.advice_id, false) },
        "Disagree…")),
  );
}

function timelineItem(e) {
  const head = el("div", {},
    el("span", { class: "muted" }, fmtTime(e.ts)), " ",
    el("span", { class: "badge", "data-testid": "event-type" }, e.event_type.replace(/_/g, " ")), " ",
    el("span", { "data-testid": "event-actor" }, "by " + e.actor), " ",
    el("span", { class: "muted" }, "attempt " + e.attempt),
    e.category ? el("span", {}, " · " + e.category) : null,
    e.action ? el("span", {}, " · action " + e.action) : null,
    e.nodes && e.nodes.length ? el("span", {}, " · nodes " + e.nodes.join(", ")) : null,
  );
  const item = el("li", { class: "type-" + e.event_type + " level-" + e.level, "data-testid": "event",
                          "data-event-type": e.event_type }, head);
  if (e.message) item.append(el("div", { "data-testid": "event-message" }, e.message));
  if (e.evidence && e.evidence.length) {
    item.append(el("pre", { class: "evidence", "data-testid": "evidence" }, e.evidence.join("\n")));
  }
  return item;
}

function renderTimeline() {
  const list = document.getElementById("timeline");
  list.replaceChildren(...state.events.map(timelineItem));
}

async function refreshEvents() {
  // The whole timeline is re-read each time: an event can be recorded late with an earlier timestamp,
  // and a "since the last one" poll would never show it.
  const sel = state.selected;
  const params = new URLSearchParams({ workload: sel.key, limit: "1000" });
  const events = [];
  for (let page = 0; page < 10; page++) {
    const data = await api("/api/v1/events?" + params.toString());
    if (state.selected !== sel) return;
    events.push(...data.items);
    if (!data.next_cursor) break;
    params.set("cursor", data.next_cursor);
  }
  const signature = events.map((e) => e.id).join(",");
  if (signature === state.signature) return;
  state.signature = signature;
  state.events = events;
  renderTimeline();
}

function changed(name, data) {
  const text = JSON.stringify(data);
  if (state.chartSignature[name] === text) return false;
  state.chartSignature[name] = text;
  return true;
}

function evidenceItem(e, withWorkload) {
  const item = el("li", { "data-testid": "evidence-item", "data-event-id": e.id },
    el("div", {},
      el("span", { class: "muted" }, fmtTime(e.ts)), " ",
      el("span", { class: "badge" }, e.event_type.replace(/_/g, " ")), " ",
      withWorkload ? workloadLink(e.workload_key) : null,
      el("span", { class: "muted" }, " attempt " + e.attempt),
      e.category ? " · " + e.category : null,
      e.action ? " · " + e.action : null,
      e.nodes.length ? " · nodes " + e.nodes.join(", ") : null));
  if (e.message) item.append(el("div", {}, e.message));
  if (e.evidence.length) item.append(el("pre", { class: "evidence" }, e.evidence.join("\n")));
  return item;
}

function workloadLink(key) {
  return el("a", { href: "#" + encodeURIComponent(key), "data-testid": "workload-link",
                   onclick: (ev) => { ev.preventDefault(); openWorkload(key); } }, key);
}

function showWorkloadEvidence(e) {
  const box = document.getElementById("workload-evidence");
  box.className = "evidence-panel filled";
  const list = el("ol", { class: "evidence-list" }, evidenceItem(e, false));
  box.replaceChildren(list);
}

async function refreshTimeline(sel) {
  const tl = await api(workloadPath(sel) + "/timeline");
  if (state.selected !== sel) return null;
  // A live attempt's bar grows with the clock: redraw on new events, else once a minute (hovers stay put).
  const stable = Object.assign({}, tl, { now: Math.floor(Date.now() / 60000),
    attempts: tl.attempts.map((a) => Object.assign({}, a, { end: null })) });
  if (changed("timeline", stable)) await TGCharts.timeline(tl, showWorkloadEvidence);
  return tl;
}

async function refreshSelected() {
  if (!state.selected) return;
  const sel = state.selected;
  const detail = await api(workloadPath(sel));
  if (state.selected !== sel) return;
  const tl = await refreshTimeline(sel);
  if (state.selected !== sel) return;
  state.detail = detail;
  renderDetail(Object.assign({ temporal_url: tl ? tl.temporal_url : null }, detail));
  await refreshEvents();
}

function selectWorkload(w) {
  state.selected = { cluster: w.cluster, job_id: w.job_id, submit_time: w.submit_time, key: w.workload_key };
  state.events = [];
  state.signature = "";
  state.modePicked = false;
  delete state.chartSignature.timeline;
  document.getElementById("timeline").replaceChildren();
  const box = document.getElementById("workload-evidence");
  box.className = "evidence-panel muted";
  box.textContent = "Click a bar or a mark for its audit evidence; drag across the chart to zoom into a "
    + "recovery, double-click to zoom out.";
  document.getElementById("detail").hidden = false;
  for (const row of document.querySelectorAll("#workloads tr.workload")) {
    row.classList.toggle("selected", row.dataset.key === w.workload_key);
  }
  history.replaceState(null, "", "#" + encodeURIComponent(w.workload_key));
  refreshSelected().catch((err) => showMessage("Cannot load workload: " + err.message, "error"));
}

function openWorkload(key) {
  showView("workloads");
  const found = state.workloads.find((w) => w.workload_key === key);
  if (found) selectWorkload(found);
  else showMessage("Workload " + key + " is not in the list (it may have been pruned).", "error");
}

function showView(name) {
  if (!VIEWS.includes(name)) name = "workloads";
  state.view = name;
  for (const v of VIEWS) document.getElementById("view-" + v).hidden = v !== name;
  for (const tab of document.querySelectorAll("#views .tab")) {
    tab.classList.toggle("active", tab.dataset.view === name);
  }
  if (name !== "workloads") history.replaceState(null, "", "#" + name);
  else if (state.selected) history.replaceState(null, "", "#" + encodeURIComponent(state.selected.key));
  else history.replaceState(null, "", location.pathname);
  TGCharts.resize();
  refreshCharts(true).catch((err) => showMessage("Cannot load charts: " + err.message, "error"));
}

async function refreshFleet() {
  const days = document.getElementById("fleet-days").value;
  const summary = await api("/api/v1/fleet/summary?days=" + encodeURIComponent(days));
  const total = summary.recoveries.reduce((n, r) => n + r.count, 0);
  const lost = summary.goodput.reduce((n, r) => n + r.lost_s, 0);
  document.getElementById("fleet-totals").textContent =
    total + " recoveries · " + (lost / 3600).toFixed(1) + " h of training lost in the last " + days + " days";
  if (changed("fleet", summary)) await TGCharts.fleet(summary, openWorkload);
}

function renderNodeTable(report) {
  const body = document.querySelector("#nodes tbody");
  body.replaceChildren(...report.nodes.map((n) => el("tr", {
    "data-testid": "node-row", "data-node": n.node, class: n.node === state.pickedNode ? "picked" : "",
    onclick: () => pickNode(n.node),
  },
    el("td", {}, n.node), el("td", {}, n.incidents), el("td", {}, n.exclusions), el("td", {}, n.advised_exclusions),
    el("td", {}, n.drains),
    el("td", {}, ...n.workloads.slice(0, 6).flatMap((k, i) => (i ? [", ", workloadLink(k)] : [workloadLink(k)])),
      n.workloads.length > 6 ? " … +" + (n.workloads.length - 6) : null))));
}

function pickNode(node) {
  state.pickedNode = node;
  const found = state.nodes && state.nodes.nodes.find((n) => n.node === node);
  for (const row of document.querySelectorAll("#nodes tbody tr")) {
    row.classList.toggle("picked", row.dataset.node === node);
  }
  document.getElementById("node-evidence-title").textContent = "Evidence for " + node;
  document.getElementById("node-evidence").replaceChildren(
    ...(found ? found.evidence.map((e) => evidenceItem(e, true)) : []));
}

async function refreshNodes() {
  const days = document.getElementById("nodes-days").value;
  const report = await api("/api/v1/fleet/nodes?days=" + encodeURIComponent(days));
  state.nodes = report;
  if (!changed("nodes", report)) return;
  renderNodeTable(report);
  await TGCharts.nodes(report, pickNode);
  if (state.pickedNode) pickNode(state.pickedNode);
}

async function refreshCharts(force) {
  const view = state.view;
  if (view === "workloads") return;
  const last = state.chartLoadedAt[view] || 0;
  if (!force && Date.now() - last < CHART_REFRESH_MS) return;
  state.chartLoadedAt[view] = Date.now();
  if (view === "fleet") await refreshFleet();
  else await refreshNodes();
}

async function refreshAll() {
  const page = await api("/api/v1/workloads?limit=1000");
  state.workloads = page.items;
  renderWorkloads(page.items);
  if (!state.selected && location.hash.length > 1 && !VIEWS.includes(location.hash.slice(1))) {
    const wanted = decodeURIComponent(location.hash.slice(1));
    const found = page.items.find((w) => w.workload_key === wanted);
    if (found) selectWorkload(found);
  }
  await refreshCharts(false);
  if (state.view === "workloads") await refreshSelected();
  const since = Date.now() / 1000 - AGREEMENT_WINDOW_S;
  renderAgreement(await api("/api/v1/agreement?since=" + since.toFixed(3)));
  document.getElementById("live").textContent = "live · updated " + new Date().toLocaleTimeString();
}

async function setWorkloadMode(event) {
  event.preventDefault();
  if (!state.selected) return;
  const mode = document.getElementById("workload-mode-select").value;
  if (!token() && !askToken()) return;
  state.modePicked = false;
  try {
    const status = await api(workloadPath(state.selected) + "/mode", {
      method: "PUT", body: { mode, reason: "switched from the console" }, interactive: true,
    });
    showMessage("Mode of " + status.workload_key + " is now " + status.mode + ".", "ok");
    await refreshAll();
  } catch (err) {
    showMessage("Mode switch failed: " + err.message, "error");
  }
}

async function togglePause() {
  if (!state.selected || !state.detail) return;
  const paused = !state.detail.status.paused;
  if (!token() && !askToken()) return;
  try {
    await api(workloadPath(state.selected) + "/paused", {
      method: "PUT", body: { paused, reason: "from the console" }, interactive: true,
    });
    showMessage((paused ? "Pause" : "Resume") + " requested for " + state.selected.key + ".", "ok");
  } catch (err) {
    showMessage("Pause/resume failed: " + err.message, "error");
  }
}

async function setClusterMode(event) {
  event.preventDefault();
  const cluster = document.getElementById("cluster-select").value;
  const mode = document.getElementById("cluster-mode-select").value;
  if (!cluster) return;
  if (!token() && !askToken()) return;
  try {
    await api("/api/v1/clusters/" + encodeURIComponent(cluster) + "/mode", {
      method: "PUT", body: { mode, reason: "switched from the console" }, interactive: true,
    });
    showMessage("Cluster " + cluster + " set to " + mode + " mode.", "ok");
  } catch (err) {
    showMessage("Cluster mode switch failed: " + err.message, "error");
  }
}

async function decide(adviceId, agree) {
  let didInstead = "";
  if (!agree) {
    const answer = window.prompt("What did you do instead?", "");
    if (answer === null) return;
    didInstead = answer;
  }
  if (!token() && !askToken()) return;
  try {
    await api("/api/v1/advice/" + adviceId.split("/").map(encodeURIComponent).join("/") + "/decision", {
      method: "POST", body: { decision: agree ? "agree" : "disagree", didInstead }, interactive: true,
    });
    showMessage("Decision recorded.", "ok");
    await refreshAll();
  } catch (err) {
    showMessage("Decision failed: " + err.message, "error");
  }
}

async function loop() {
  try {
    await refreshAll();
  } catch (err) {
    document.getElementById("live").textContent = "disconnected: " + err.message;
    if (err.status === 401) askToken();
  }
  setTimeout(loop, POLL_MS);
}

document.addEventListener("DOMContentLoaded", () => {
  document.getElementById("workload-mode").addEventListener("submit", setWorkloadMode);
  document.getElementById("workload-mode-select").addEventListener("change", () => { state.modePicked = true; });
  document.getElementById("pause-button").addEventListener("click", togglePause);
  document.getElementById("cluster-mode").addEventListener("submit", setClusterMode);
  document.getElementById("token-button").addEventListener("click", askToken);
  for (const tab of document.querySelectorAll("#views .tab")) {
    tab.addEventListener("click", () => showView(tab.dataset.view));
  }
  document.getElementById("fleet-days").addEventListener("change", () => showView("fleet"));
  document.getElementById("nodes-days").addEventListener("change", () => showView("nodes"));
  const wanted = location.hash.slice(1);
  if (VIEWS.includes(wanted)) showView(wanted);
  loop();
});
