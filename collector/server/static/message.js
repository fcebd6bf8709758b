// The message page (#message?id=...): the outcome per consumer group above the timeline, the
// W3C trace id with a link to its other messages and, when the collector sets trace_ui_url,
// to the external trace UI (Jaeger, Tempo).  showTrace (app.js) renders the rest.
"use strict";

const OUTCOME_LABELS = { consumed: "consumed", retrying: "retrying", failed: "failed", dead: "dead",
  pending: "not yet consumed" };
let consoleConfig = null;  // GET /v1/console/config, once it answered

async function loadConsoleConfig() {
  if (consoleConfig === null) consoleConfig = await api("/v1/console/config");
  return consoleConfig;
}

function renderMessageExtras(doc) {
  const tbody = $("group-outcomes").querySelector("tbody");
  tbody.replaceChildren();
  // tracehook replay re-deliveries per group (the last one); a group only replayed to has no outcome yet.
  const replays = {};
  for (const r of doc.replays || []) replays[r.group] = r;
  const groups = [...new Set([...Object.keys(doc.outcomes || {}), ...Object.keys(replays)])].sort();
  for (const group of groups) {
    const o = (doc.outcomes || {})[group] || { outcome: "pending", attempts: 0, last_status: "not received",
      last_ms: 0, error: "" };
    const replay = replays[group];
    const error = (o.error || "") + (replay ? (o.error ? " · " : "") + "replayed " + fmtTime(replay.time_ms) +
      " to " + ((replay.props || {})["replay.target"] || "?") + " by " + (replay.app || "?") : "");
    tbody.append(el("tr", { class: "group-outcome", "data-group": group, "data-outcome": o.outcome,
      "data-replayed": replay ? String(replay.time_ms) : "" },
      el("td", { text: group }),
      el("td", {}, el("span", { class: "outcome outcome-" + o.outcome, text: OUTCOME_LABELS[o.outcome] || o.outcome })),
      el("td", { text: String(o.attempts) }), el("td", { text: String(o.last_status || "").toLowerCase() }),
      el("td", { text: fmtTime(o.last_ms) }), el("td", { text: error })));
  }
  if (groups.length === 0) {
    tbody.append(el("tr", { class: "no-groups" }, el("td", { colspan: "6", text: "no consumer group has received it yet" })));
  }
  renderTraceLinks(doc.trace_id || "");
  renderBody(doc);
}

// The kept body (GET /v1/messages/{id}'s body fields): as text when it is UTF-8, else as hex; only
// ever through textContent.  data-body says which case the page shows (tests read it).
function renderBody(doc) {
  const state = $("body-state"), text = $("body-text");
  text.hidden = true;
  text.textContent = "";
  let kind = "none", line = "No body was kept for this message.";
  if (doc.body_erased) {
    kind = "erased";
    line = "The body was erased; the trace stays.";
  } else if (doc.body_withheld) {
    kind = "withheld";
    line = "Body withheld (" + doc.body_len + " bytes): this token lacks the body scope.";
  } else if (typeof doc.body === "string") {
    kind = "shown";
    const bytes = new Uint8Array((doc.body.match(/../g) || []).map((h) => parseInt(h, 16)));
    let shown;
    try {
      shown = new TextDecoder("utf-8", { fatal: true }).decode(bytes);
    } catch (e) {
      shown = doc.body;
      kind = "hex";
    }
    line = bytes.length + " bytes" + (doc.body_truncated ? " kept of " + doc.body_len + " (truncated)" : "") +
      (kind === "hex" ? ", shown as hex" : "");
    text.textContent = shown;
    text.hidden = false;
  }
  state.textContent = line;
  $("message-body").dataset.body = kind;
}

function renderTraceLinks(traceId) {
  const search = $("trace-search-link");
  const external = $("trace-ui-link");
  search.hidden = !traceId;
  external.hidden = true;
  if (!traceId) return;
  search.setAttribute("href", viewHash("search", { mode: "trace", trace_id: traceId }));
  loadConsoleConfig().then((config) => {
    if (!config.trace_ui_url || $("w3c-trace-id").textContent !== traceId) return;
    external.setAttribute("href", config.trace_ui_url.split("{trace_id}").join(encodeURIComponent(traceId)));
    external.hidden = false;
  }).catch(() => { consoleConfig = null; });  // e.g. no token yet: try again on the next message
}

function showMessage(params) {
  const id = params.get("id") || "";
  document.querySelector("input[name=mode][value=id]").checked = true;
  showFields();
  $("msg-id").value = id;
  $("search").hidden = false;
  if (!id) return setStatus("Enter a message id.", true);
  return showTrace(id);
}

registerView("message", ["search", "trace"], showMessage);
