// TrainGuard console: vanilla JS over the advisor API, refreshed by polling.
// Every value from the API is untrusted (job names, log lines, node names): it only ever reaches the
// page through text nodes and attribute setters, never through HTML parsing.
"use strict";

const POLL_MS = 2000;
const AGREEMENT_WINDOW_S = 7 * 86400;
const TOKEN_KEY = "trainguard.token";
const ATTENTION_STATES = new Set(["recovering", "held", "waiting"]);
const BAD_STATES = new Set(["failed", "stopped"]);

const state = {
  selected: null,   // {cluster, job_id, submit_time, key}
  events: [],       // timeline of the selected workload
  signature: "",
  detail: null,
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
  fact(dl, "workflow", s.workflow_id);
  const modeSelect = document.getElementById("workload-mode-select");
  if (document.activeElement !== modeSelect) modeSelect.value = s.mode;
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

async function refreshSelected() {
  if (!state.selected) return;
  const sel = state.selected;
  const detail = await api(workloadPath(sel));
  if (state.selected !== sel) return;
  state.detail = detail;
  renderDetail(detail);
  await refreshEvents();
}

function selectWorkload(w) {
  state.selected = { cluster: w.cluster, job_id: w.job_id, submit_time: w.submit_time, key: w.workload_key };
  state.events = [];
  state.signature = "";
  document.getElementById("timeline").replaceChildren();
  document.getElementById("detail").hidden = false;
  for (const row of document.querySelectorAll("#workloads tr.workload")) {
    row.classList.toggle("selected", row.dataset.key === w.workload_key);
  }
  history.replaceState(null, "", "#" + encodeURIComponent(w.workload_key));
  refreshSelected().catch((err) => showMessage("Cannot load workload: " + err.message, "error"));
}

async function refreshAll() {
  const page = await api("/api/v1/workloads?limit=1000");
  renderWorkloads(page.items);
  if (!state.selected && location.hash.length > 1) {
    const wanted = decodeURIComponent(location.hash.slice(1));
    const found = page.items.find((w) => w.workload_key === wanted);
    if (found) selectWorkload(found);
  }
  await refreshSelected();
  const since = Date.now() / 1000 - AGREEMENT_WINDOW_S;
  renderAgreement(await api("/api/v1/agreement?since=" + since.toFixed(3)));
  document.getElementById("live").textContent = "live · updated " + new Date().toLocaleTimeString();
}

async function setWorkloadMode(event) {
  event.preventDefault();
  if (!state.selected) return;
  const mode = document.getElementById("workload-mode-select").value;
  if (!token() && !askToken()) return;
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
  document.getElementById("pause-button").addEventListener("click", togglePause);
  document.getElementById("cluster-mode").addEventListener("submit", setClusterMode);
  document.getElementById("token-button").addEventListener("click", askToken);
  loop();
});
