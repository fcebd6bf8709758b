// The trace search page: talks to the native JSON API (/v1/...) and renders
// every value with textContent, never as HTML.  Shared helpers and the message
// page live here; the router is console.js, the views search.js, message.js, backtrack.js.
"use strict";

const EVENT_NAMES = { 1: "send", 2: "received", 3: "finished", 4: "end transaction", 5: "dead letter", 6: "replayed" };
const STATUS_NAMES = { 0: "ok", 1: "failed", 2: "timeout", 3: "exception", 4: "retry_later", 5: "unknown" };
const $ = (id) => document.getElementById(id);

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(attrs || {})) {
    if (name === "text") node.textContent = value;
    else node.setAttribute(name, value);
  }
  for (const child of children) node.append(child);
  return node;
}

// Every time on the page is UTC and says so (the CLI prints UTC too).
function fmtTime(ms) {
  if (!ms || ms <= 0) return "";
  return new Date(Number(ms)).toISOString().replace("T", " ").replace("Z", " UTC");
}

function fmtCost(us) {
  us = Number(us || 0);
  return us >= 1000 ? (us / 1000).toFixed(1) + " ms" : us + " µs";
}

function nameOf(table, value) {
  return typeof value === "string" ? value.toLowerCase() : (table[value] || String(value));
}

function setStatus(text, isError) {
  $("status").textContent = text;
  $("status").className = isError ? "error" : "";
}

async function api(path, params) {
  const url = new URL(path, window.location.href);
  // An empty prop_value is a value (the empty one); other empty params are left out.
  for (const [k, v] of Object.entries(params || {})) if (v || (k === "prop_value" && v === "")) url.searchParams.set(k, v);
  const headers = {};
  const token = $("token").value.trim();
  if (token) headers.Authorization = "Bearer " + token;
  const response = await fetch(url, { headers });
  const body = await response.json().catch(() => ({}));
  if (!response.ok) {
    const error = new Error(body.detail || body.error || response.statusText);
    error.status = response.status;
    throw error;
  }
  return body;
}

// Bucket sizes the dead-letter chart picks from: the smallest that gives at most MAX_DEAD_BARS bars.
const DEAD_BUCKETS_S = [60, 300, 900, 1800, 3600, 3 * 3600, 6 * 3600, 12 * 3600, 86400, 7 * 86400, 30 * 86400];
const MAX_DEAD_BARS = 48;

function fmtDuration(ms) {
  const s = ms / 1000;
  if (s % 86400 === 0) return s / 86400 + " d";
  if (s % 3600 === 0) return s / 3600 + " h";
  return s / 60 + " min";
}

async function renderDeadCounts(topic, params) {
  const box = $("dead-counts");
  const path = "/v1/topics/" + encodeURIComponent(topic) + "/dead/counts";
  const window_ = { begin: params.begin, end: params.end };
  // The window's edges come from the server (begin/end may be relative); one bucket over it costs a key scan.
  let counts = await api(path, { ...window_, bucket: "400d" });
  const groups = Object.keys(counts.totals || {});
  if (groups.length > 0) {
    const span = counts.end_ms - counts.begin_ms;
    const bucketS = DEAD_BUCKETS_S.find((b) => Math.floor(span / (b * 1000)) + 1 <= MAX_DEAD_BARS)
      || DEAD_BUCKETS_S[DEAD_BUCKETS_S.length - 1];
    counts = await api(path, { ...window_, bucket: bucketS + "s" });
  }
  box.replaceChildren(el("div", { class: "dc-title", text: "dead letters by group" +
    (groups.length ? " per " + fmtDuration(counts.bucket_ms) : ": none") }));
  box.dataset.bucketMs = String(counts.bucket_ms);
  const peak = Math.max(1, ...Object.values(counts.groups || {}).flat());
  const sorted = Object.entries(counts.totals || {}).sort((a, b) => b[1] - a[1] || a[0].localeCompare(b[0]));
  for (const [group, total] of sorted) {
    const track = el("div", { class: "dc-track" });
    counts.groups[group].forEach((count, i) => {
      const start = counts.buckets[i];
      const end = Math.min(start + counts.bucket_ms - 1, counts.end_ms);
      const fill = el("div", { class: "dc-fill" + (count ? " nonzero" : "") });
      // CSSOM, not a style attribute: the page's CSP forbids inline styles.
      fill.style.height = (count / peak) * 100 + "%";
      track.append(el("div", { class: "dc-bar", "data-count": String(count), "data-start": String(start),
        title: group + ": " + count + " dead letter(s)\n" + fmtTime(start) + " – " + fmtTime(end) }, fill));
    });
    box.append(el("div", { class: "dc-row", "data-group": group },
      el("div", { class: "dc-label", title: group },
        el("span", { class: "dead-total", "data-group": group, text: group + " " + total })),
      track));
  }
  if (sorted.length > 0) {
    box.append(el("div", { class: "dc-axis" }, el("span", { text: fmtTime(counts.begin_ms) }),
      el("span", { text: "peak " + peak + " per " + fmtDuration(counts.bucket_ms) }),
      el("span", { text: fmtTime(counts.end_ms) })));
  }
  box.hidden = false;
}

// The send's status, or that no send was traced (the message was found through its consumers).
function sendStatus(item) {
  return item.send_traced === false ? "not traced" : nameOf(STATUS_NAMES, item.status);
}

// One badge per consumer group: "billing: consumed", "audit: dead (3 attempts)".
function outcomeBadges(groups) {
  return Object.keys(groups).sort().map((group) => {
    const o = groups[group];
    const attempts = o.attempts > 1 ? " (" + o.attempts + " attempts)" : "";
    return el("span", { class: "outcome outcome-" + o.outcome, "data-group": group, "data-outcome": o.outcome,
      title: o.error || "", text: group + ": " + o.outcome + attempts });
  });
}

// Props the adapters record, under a readable label (others show under their own name).
const PROP_LABELS = { "amqp.exchange": "exchange", "amqp.routing_key": "routing key" };

// The send's props as [label, value] rows, next to the topic: RabbitMQ's exchange and routing key
// say where the message was sent (the topic alone cannot tell two routing keys of one exchange apart).
function propFields(props) {
  return Object.keys(props || {}).sort().map((name) => {
    const value = props[name];
    return [PROP_LABELS[name] || name, name === "amqp.exchange" && value === "" ? "(default exchange)" : value];
  });
}

async function showTrace(msgId) {
  setStatus("Loading trace…");
  let doc;
  try {
    doc = await api("/v1/messages/" + encodeURIComponent(msgId));
  } catch (error) {
    $("trace").hidden = true;
    return setStatus(error.status === 404 ? "No trace for message " + msgId : error.message, true);
  }
  $("trace-id").textContent = doc.msg_id;
  $("w3c-trace-id").textContent = doc.trace_id || "";
  const info = $("trace-info");
  info.replaceChildren();
  const fields = [["topic", doc.topic], ...propFields(doc.props), ["keys", doc.keys], ["tags", doc.tags],
    ["broker", doc.broker], ["queue", doc.queue], ["offset", doc.offset], ["born", fmtTime(doc.born_ms)],
    ["stored", fmtTime(doc.store_ms)]];
  for (const [name, value] of fields) info.append(el("dt", { text: name }), el("dd", { text: String(value ?? "") }));
  renderMessageExtras(doc);  // message.js: outcome per group, trace links
  renderTimeline(doc.timeline);
  renderEvents(doc.events || []);
  $("trace").hidden = false;
  setStatus("");
}

function barTitle(bar, row) {
  const lines = [
    (row.kind === "producer" ? "producer " : "consumer ") + row.group,
    bar.kind + ": " + (bar.tx_state || bar.status), "cost: " + fmtCost(bar.cost_us),
    "host: " + (bar.host || "?"), "client: " + (bar.client_id || "?"),
    "start: " + fmtTime(bar.start_ms), "retry: " + bar.retry,
  ];
  if (bar.broker) lines.push("broker: " + bar.broker + " queue " + bar.queue + " offset " + bar.offset);
  if (bar.error) lines.push("error: " + bar.error);
  if (bar.replay_target) lines.push("replayed to: " + bar.replay_target + " (by " + (bar.app || "?") + ")");
  return lines.join("\n");
}

function renderTimeline(timeline) {
  const box = $("timeline");
  box.replaceChildren();
  const start = timeline.start_ms;
  const span = Math.max(timeline.end_ms - start, 1);
  for (const row of timeline.rows) {
    if (row.kind === "producer" && row.bars.length === 0) continue;
    const track = el("div", { class: "tl-track" });
    for (const bar of row.bars) {
      const left = ((bar.start_ms - start) / span) * 100;
      const width = Math.max(((bar.end_ms - bar.start_ms) / span) * 100, 0.5);
      const label = bar.kind === "dead" || bar.kind === "replay" ? bar.kind : fmtCost(bar.cost_us) + (bar.retry ? " r" + bar.retry : "");
      const node = el("div", {
        class: "tl-bar " + bar.outcome + (bar.kind === "dead" ? " dead" : ""),
        "data-outcome": bar.outcome, "data-status": bar.status, "data-kind": bar.kind,
        title: barTitle(bar, row), text: label,
      });
      // CSSOM properties, not a style attribute: the page's CSP forbids inline styles.
      node.style.left = Math.min(left, 99.5) + "%";
      node.style.width = Math.min(width, 100 - Math.min(left, 99.5)) + "%";
      track.append(node);
    }
    const label = el("div", { class: "tl-label", title: row.group },
      el("span", { class: "kind", text: row.kind === "producer" ? "producer" : "consumer" }),
      el("span", { class: "group", text: row.group || "(no group)" }));
    box.append(el("div", { class: "tl-row", "data-kind": row.kind, "data-group": row.group }, label, track));
  }
  box.append(renderAxis(start, span));
}

// A "nice" tick step (1, 2 or 5 times a power of ten, in ms) giving at most maxTicks intervals over span.
function tickStep(span, maxTicks) {
  const raw = span / maxTicks;
  const power = Math.pow(10, Math.floor(Math.log10(Math.max(raw, 1))));
  return [1, 2, 5, 10].map((m) => m * power).find((step) => step >= raw) || 10 * power;
}

function fmtOffset(ms) {
  return ms >= 1000 && ms % 1000 === 0 ? "+" + ms / 1000 + " s" : "+" + ms + " ms";
}

// The axis under the rows: the start time (UTC), then a tick every tickStep ms, positioned like the bars.
function renderAxis(start, span) {
  const axis = el("div", { class: "tl-axis" }, el("span", { class: "tl-start", text: fmtTime(start) }));
  const ticks = el("div", { class: "tl-ticks" });
  const step = tickStep(span, 6);
  for (let t = 0; t <= span; t += step) {
    const tick = el("span", { class: "tl-tick", "data-offset-ms": String(t), text: fmtOffset(t) });
    tick.style.left = (t / span) * 100 + "%";  // CSSOM: the page's CSP forbids inline styles
    ticks.append(tick);
  }
  axis.append(ticks);
  return axis;
}

// Event order: time, then the event's own sequence (delivery attempt, then received < finished < dead),
// so "received retry 1" never shows before "finished retry 0" when both carry the same millisecond.
const EVENT_RANK = { 1: 0, 4: 1, 6: 2, 2: 3, 3: 4, 5: 5 };

function eventOrder(a, b) {
  return (a.time_ms - b.time_ms) || ((a.retry || 0) - (b.retry || 0))
    || ((EVENT_RANK[a.type] ?? 9) - (EVENT_RANK[b.type] ?? 9));
}

function eventStatus(e) {
  if (e.type === 2) return "";  // a receive has no outcome of its own
  if (e.type === 5) return "dead";
  if (e.type === 6) return "replayed";
  return nameOf(STATUS_NAMES, e.status ?? 0);
}

function renderEvents(events) {
  const tbody = $("events-table").querySelector("tbody");
  tbody.replaceChildren();
  for (const e of [...events].sort(eventOrder)) {
    tbody.append(el("tr", {},
      el("td", { text: fmtTime(e.time_ms) }), el("td", { text: nameOf(EVENT_NAMES, e.type) }),
      el("td", { text: e.group || "" }), el("td", { text: e.host || "" }),
      el("td", { text: eventStatus(e) }), el("td", { text: e.type === 2 ? "" : fmtCost(e.cost_us) }),
      el("td", { text: String(e.retry || 0) }), el("td", { text: e.error || "" })));
  }
}

$("token").value = window.localStorage.getItem("tracehook-token") || "";
$("token").addEventListener("change", () => window.localStorage.setItem("tracehook-token", $("token").value));
