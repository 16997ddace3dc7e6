// memledger's operator console. Everything shown is untrusted text: it only ever reaches the
// page through textContent and attributes, never as markup.
"use strict";

const SVG = "http://www.w3.org/2000/svg";
const state = { tenant: "", key: "", space: null, item: null, history: null, cursor: null };

function $(id) { return document.getElementById(id); }

function el(tag, text, attrs) {
  const node = document.createElement(tag);
  if (text !== undefined && text !== null) node.textContent = String(text);
  for (const [name, value] of Object.entries(attrs || {})) node.setAttribute(name, value);
  return node;
}

function svg(tag, attrs, text) {
  const node = document.createElementNS(SVG, tag);
  for (const [name, value] of Object.entries(attrs || {})) node.setAttribute(name, String(value));
  if (text !== undefined) node.textContent = String(text);
  return node;
}

function say(message, isError) {
  const status = $("status");
  status.textContent = message;
  status.className = isError ? "error" : "";
}

async function api(method, path, body) {
  const headers = { "accept": "application/json" };
  if (state.tenant) headers["X-Memledger-Tenant"] = state.tenant;
  if (state.key) headers["Authorization"] = "Bearer " + state.key;
  if (body !== undefined) headers["content-type"] = "application/json";
  const response = await fetch(path, { method, headers,
    body: body === undefined ? undefined : JSON.stringify(body) });
  const answer = await response.json().catch(() => ({}));
  if (!response.ok) {
    const error = (answer && answer.error) || {};
    throw new Error(`${response.status} ${error.code || ""}: ${error.message || response.statusText}`);
  }
  return answer;
}

function seg(value) { return encodeURIComponent(value); }

async function guarded(work) {
  try { await work(); } catch (error) { say(error.message, true); }
}

// --- spaces and items -----------------------------------------------------------------------

async function loadSpaces() {
  const answer = await api("GET", "/v1/spaces?limit=200");
  const list = $("space-list");
  list.replaceChildren();
  for (const space of answer.spaces) {
    const button = el("button", space.space_id + (space.status === "active" ? "" : ` (${space.status})`),
                      { "data-space": space.space_id, "class": "space" });
    button.addEventListener("click", () => guarded(() => loadItems(space.space_id)));
    const entry = el("li");
    entry.append(button);
    list.append(entry);
  }
  say(`${answer.spaces.length} space(s) as of position ${answer.basis.position}`);
}

async function loadItems(space) {
  state.space = space;
  $("items-of").textContent = "of " + space;
  const answer = await api("GET", `/v1/spaces/${seg(space)}/items?include_archived=true&limit=200`);
  const list = $("item-list");
  list.replaceChildren();
  for (const item of answer.items) {
    const button = el("button", `[${item.kind}, ${item.status}] ${item.content}`,
                      { "data-item": item.item_id, "class": "item" });
    button.addEventListener("click", () => guarded(() => loadHistory(item.item_id)));
    const entry = el("li");
    entry.append(button);
    list.append(entry);
  }
}

async function loadHistory(itemId) {
  state.item = itemId;
  const history = await api("GET", `/v1/spaces/${seg(state.space)}/items/${seg(itemId)}/history`);
  state.history = history;
  $("item-view").hidden = false;
  $("item-id").textContent = itemId;
  const changes = $("item-changes");
  changes.replaceChildren();
  for (const change of history.changes) {
    changes.append(el("li", `position ${change.position} ${change.event_type} by ${change.actor || "?"}` +
                                (change.reason ? ` (${change.reason})` : "")));
  }
  const slider = $("as-of");
  const positions = history.versions.map((v) => v.sys_from);
  slider.min = String(Math.min(...positions, history.basis.position));
  slider.max = String(history.basis.position);
  slider.value = slider.max;
  drawHistory();
}

// --- the bi-temporal picture: valid time across, record time (positions) down ---------------

const BOX = { left: 60, top: 20, width: 680, height: 260 };
const PALETTE = ["#9ec1ef", "#f2c14e", "#9fd8a4", "#e8a0bf", "#c3b1e1", "#f4a582"];

function timeOf(value, fallback) { return value ? Date.parse(value) : fallback; }

// Record time is drawn by change, not by position: each position at which the item changed
// gets a band of equal height, so a long quiet stretch of the log does not squash the rest.
function bands(history) {
  const head = history.basis.position;
  const marks = new Set([head + 1]);
  for (const v of history.versions) {
    marks.add(v.sys_from);
    if (v.sys_to !== null) marks.add(v.sys_to);
  }
  const sorted = [...marks].sort((a, b) => a - b);
  const step = BOX.height / Math.max(sorted.length - 1, 1);
  return (p) => {
    let index = 0;
    while (index + 1 < sorted.length && sorted[index + 1] <= p) index += 1;
    const next = sorted[index + 1] ?? sorted[index] + 1;
    const within = Math.min(Math.max((p - sorted[index]) / (next - sorted[index]), 0), 1);
    return BOX.top + (index + within) * step;
  };
}

function colourOf(content, colours) {
  if (!colours.has(content)) colours.set(content, PALETTE[colours.size % PALETTE.length]);
  return colours.get(content);
}

function drawHistory() {
  const history = state.history;
  const picture = $("history");
  picture.replaceChildren();
  if (!history || history.versions.length === 0) return;
  const head = history.basis.position;
  const froms = history.versions.map((v) => timeOf(v.valid_from, 0));
  const tos = history.versions.map((v) => v.valid_to).filter((v) => v).map((v) => Date.parse(v));
  const start = Math.min(...froms);
  const end = Math.max(...froms, ...tos, Date.now()) + 1;
  const x = (t) => BOX.left + ((t - start) / (end - start)) * BOX.width;
  const y = bands(history);
  const asOf = Number($("as-of").value);
  $("as-of-value").textContent = String(asOf);
  const known = $("as-of-versions");
  known.replaceChildren();
  const colours = new Map();
  history.versions.forEach((version, index) => {
    const sysTo = version.sys_to === null ? head + 1 : version.sys_to;
    const current = version.sys_from <= asOf && asOf < sysTo;
    const left = x(timeOf(version.valid_from, start));
    const right = x(timeOf(version.valid_to, end));
    const top = y(version.sys_from);
    const content = String(version.attrs.content ?? "");
    const rect = svg("rect", {
      x: left, y: top, width: Math.max(right - left, 2), height: Math.max(y(sysTo) - top, 2),
      fill: colourOf(content, colours), class: "version" + (current ? " current" : ""),
      "data-index": index, "data-sys-from": version.sys_from,
      "data-sys-to": version.sys_to === null ? "" : version.sys_to });
    rect.append(svg("title", {}, `${content}\nvalid ${version.valid_from} to ` +
                                 `${version.valid_to || "∞"}\nknown ${version.sys_from} to ${version.sys_to || "now"}`));
    picture.append(rect);
    const fits = Math.floor((right - left - 8) / 6.5);  // characters of 11px text
    if (fits >= 6) {
      picture.append(svg("text", { x: left + 4, y: top + 14, class: "label" },
                         content.length > fits ? content.slice(0, fits - 1) + "…" : content));
    }
    if (current) {
      known.append(el("li", `valid ${version.valid_from} to ${version.valid_to || "∞"}: ${content}`,
                       { "class": "known" }));
    }
  });
  picture.append(svg("line", { x1: BOX.left, x2: BOX.left + BOX.width, y1: y(asOf), y2: y(asOf),
                               class: "basis", "data-position": asOf }));
  axes(picture, history, x, y, [start, end]);
}

function axes(picture, history, x, y, [start, end]) {
  const dates = new Set([start, end]);
  for (const v of history.versions) {
    if (v.valid_from) dates.add(Date.parse(v.valid_from));
    if (v.valid_to) dates.add(Date.parse(v.valid_to));
  }
  let lastX = -Infinity;
  for (const t of [...dates].sort((a, b) => a - b)) {
    const atEnd = t === end;
    if (x(t) - lastX < 70 && !atEnd) continue;
    lastX = x(t);
    picture.append(svg("text", { x: x(t), y: BOX.top + BOX.height + 16, class: "axis",
                                 "text-anchor": atEnd ? "end" : "start" },
                       atEnd ? "now" : new Date(t).toISOString().slice(0, 10)));
  }
  const positions = new Set(history.versions.map((v) => v.sys_from));
  for (const p of positions) {
    picture.append(svg("text", { x: 4, y: y(p) + 12, class: "axis" }, `pos ${p}`));
  }
  picture.append(svg("text", { x: BOX.left, y: 12, class: "axis" }, "valid time →   record time ↓"));
}

// --- the changes feed -----------------------------------------------------------------------

async function loadChanges(after) {
  const space = $("changes-space").value.trim();
  const base = space ? `/v1/spaces/${seg(space)}/changes` : "/v1/changes";
  const limit = Math.max(1, Math.min(1000, Number($("changes-limit").value) || 20));
  const query = `?limit=${limit}` + (after ? "&after=" + encodeURIComponent(after) : "");
  const page = await api("GET", base + query);
  state.cursor = page.next_cursor;
  $("changes-cursor").textContent = page.next_cursor;
  const rows = $("changes-rows");
  rows.replaceChildren();
  for (const change of page.changes) {
    const row = el("tr", undefined, { "class": "change" });
    for (const value of [change.position, change.recorded_at, change.event_type, change.subject, change.actor || ""]) {
      row.append(el("td", value));
    }
    rows.append(row);
  }
  say(`${page.changes.length} change(s); the read models are at position ${page.position}`);
}

// --- a retrieval and its replay ---------------------------------------------------------------

function resultList(results) {
  const list = el("ol");
  for (const result of results || []) {
    list.append(el("li", `${result.ref} score ${result.score ?? "-"} (${result.section})`));
  }
  return list;
}

async function loadRetrieval() {
  const id = $("retrieval-id").value.trim();
  const record = await api("GET", `/v1/retrievals/${seg(id)}`);
  const box = $("retrieval-record");
  box.replaceChildren(el("p", `${record.operation} by ${record.actor} at position ${record.basis.position}: ` +
                                `"${record.query || ""}" (policy ${record.policy_version})`),
                      resultList(record.results));
}

async function replayRetrieval() {
  const id = $("retrieval-id").value.trim();
  const replay = await api("POST", `/v1/retrievals/${seg(id)}/replay`);
  const box = $("retrieval-replayed");
  const verdict = el("p", replay.same ? "replayed: the same answer" :
                       `replayed: ${replay.differences.length} difference(s)` +
                       (replay.same_items ? " (same items)" : ""),
                     { "class": replay.same ? "same" : "differs", "id": "replay-verdict" });
  const differences = el("ul");
  for (const difference of replay.differences || []) differences.append(el("li", JSON.stringify(difference)));
  box.replaceChildren(verdict, resultList(replay.replayed), differences);
}

// --- erasure receipts -------------------------------------------------------------------------

async function loadErasures() {
  const answer = await api("GET", "/v1/erasures?limit=100");
  const rows = $("erasure-rows");
  rows.replaceChildren();
  for (const receipt of answer.receipts) {
    const row = el("tr", undefined, { "class": "receipt" });
    row.append(el("td", receipt.position), el("td", receipt.subject_id), el("td", receipt.recorded_at),
               el("td", JSON.stringify(receipt.purged)));
    rows.append(row);
  }
  say(`${answer.receipts.length} erasure receipt(s)`);
}

// --- wiring -----------------------------------------------------------------------------------

function show(tab) {
  for (const panel of document.querySelectorAll(".panel")) panel.hidden = panel.id !== tab;
  for (const button of document.querySelectorAll(".tab")) {
    button.setAttribute("aria-selected", String(button.dataset.tab === tab));
  }
}

function start() {
  state.tenant = sessionStorage.getItem("memledger.tenant") || "";
  state.key = sessionStorage.getItem("memledger.key") || "";
  $("tenant").value = state.tenant;
  $("credentials").addEventListener("submit", (event) => {
    event.preventDefault();
    state.tenant = $("tenant").value.trim();
    state.key = $("api-key").value.trim();
    sessionStorage.setItem("memledger.tenant", state.tenant);
    sessionStorage.setItem("memledger.key", state.key);
    guarded(loadSpaces);
  });
  for (const button of document.querySelectorAll(".tab")) {
    button.addEventListener("click", () => show(button.dataset.tab));
  }
  $("as-of").addEventListener("input", drawHistory);
  $("changes-first").addEventListener("click", () => guarded(() => loadChanges(null)));
  $("changes-next").addEventListener("click", () => guarded(() => loadChanges(state.cursor)));
  $("retrieval-load").addEventListener("click", () => guarded(loadRetrieval));
  $("retrieval-replay").addEventListener("click", () => guarded(replayRetrieval));
  $("erasures-load").addEventListener("click", () => guarded(loadErasures));
  show("spaces");
  guarded(loadSpaces);
}

document.addEventListener("DOMContentLoaded", start);
