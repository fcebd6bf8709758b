// The search view: by message id, trace id, topic + key, topic + indexed property, topic + time (filtered by a consumer
// group's outcome), dead letters.  The form only writes the URL (#search?...); route() renders it.
"use strict";

const SEARCH_FIELDS = ["mode", "topic", "key", "prop_name", "prop_value", "trace_id", "group", "outcome", "begin",
  "end"];
const FIELD_INPUTS = { topic: "topic", key: "key", prop_name: "prop-name", prop_value: "prop-value",
  trace_id: "trace-id-q", group: "group", outcome: "outcome", begin: "begin", end: "end" };
const PAGE_SIZE = "20";

function searchMode() {
  return document.querySelector("input[name=mode]:checked").value;
}

function showFields() {
  const m = searchMode();
  $("msg-id").hidden = m !== "id";
  $("trace-id-q").hidden = m !== "trace";
  $("topic").hidden = m === "id" || m === "trace";
  $("key").hidden = m !== "key";
  $("prop-name").hidden = m !== "prop";
  $("prop-value").hidden = m !== "prop";
  $("group").hidden = m === "id" || m === "trace";
  $("outcome").hidden = m !== "topic" && m !== "key" && m !== "prop";
  $("begin").hidden = m === "id" || m === "trace";
  $("end").hidden = m === "id" || m === "trace";
}

// The form as URL state (only the fields its mode uses).
function formState() {
  const m = searchMode();
  const state = { mode: m };
  for (const [name, id] of Object.entries(FIELD_INPUTS)) {
    // A property name or value is searched as typed (spaces are part of it); other fields are trimmed.
    if (!$(id).hidden) state[name] = name.startsWith("prop_") ? $(id).value : $(id).value.trim();
  }
  return state;
}

// URL state back into the form, so a reloaded or shared link shows what it searched.
function fillForm(params) {
  const m = params.get("mode") || "topic";
  const radio = document.querySelector("input[name=mode][value=" + CSS.escape(m) + "]");
  if (radio) radio.checked = true;
  for (const [name, id] of Object.entries(FIELD_INPUTS)) $(id).value = params.get(name) || "";
  showFields();
}

function submitSearch() {
  const m = searchMode();
  if (m === "id") {
    const id = $("msg-id").value.trim();
    if (!id) return setStatus("Enter a message id.", true);
    return openView("message", { id });
  }
  openView("search", formState());
}

// What the URL asks for as an API call: [path, params], or a message for the user.
function searchRequest(params) {
  const m = params.get("mode") || "topic";
  const get = (name) => (params.get(name) || "").trim();
  const query = { limit: PAGE_SIZE, cursor: get("cursor") };
  if (m === "trace") {
    if (!get("trace_id")) return "Enter a trace id.";
    return ["/v1/messages", { ...query, trace_id: get("trace_id") }];
  }
  const topic = get("topic");
  if (!topic) return "Enter a topic.";
  Object.assign(query, { begin: get("begin"), end: get("end") });
  const base = "/v1/topics/" + encodeURIComponent(topic);
  if (m === "dead") return [base + "/dead", { ...query, group: get("group") }];
  const filters = { group: get("group"), outcome: get("outcome") };
  if (m === "key") {
    if (!get("key")) return "Enter a key.";
    return [base + "/messages", { ...query, ...filters, key: get("key") }];
  }
  if (m === "prop") {
    const name = params.get("prop_name") || "";
    if (!name) return "Enter a property name.";
    return [base + "/messages", { ...query, ...filters, prop_name: name, prop_value: params.get("prop_value") || "" }];
  }
  return [base + "/messages", { ...query, ...filters }];
}

async function showSearch(params) {
  fillForm(params);
  $("search").hidden = false;
  const request = searchRequest(params);
  if (typeof request === "string") {
    $("results").hidden = true;
    return setStatus(params.toString() ? request : "");
  }
  const [path, query] = request;
  setStatus("Searching…");
  try {
    const page = await api(path, query);
    renderResults(page, params);
    // A filtered page already scanned up to its row budget: another look ahead would cost as much again.
    const filtered = Boolean(query.outcome || (query.group && path.endsWith("/messages")));
    const more = page.next_cursor && !filtered ? await hasMore(path, query, page.next_cursor).catch(() => true)
      : Boolean(page.next_cursor);
    setNextLink(params, more ? page.next_cursor : null);
    setStatus(page.items.length + " message(s)" + (params.get("cursor") ? " on this page" : "") +
      (more ? ", more available" : "") + (filtered && more && page.items.length < Number(PAGE_SIZE)
        ? " (a filtered page stops after a bounded scan; the next page goes on from there)" : ""));
    if ((params.get("mode") || "topic") === "dead" && !params.get("cursor")) await renderDeadCounts(params.get("topic"), query);
    else $("dead-counts").hidden = true;
  } catch (error) {
    $("results").hidden = true;
    setStatus(error.message, true);
  }
}

// A cursor only says the scan stopped at the page size: look one page ahead, so the last
// page does not offer a next page that turns out empty.
async function hasMore(path, query, cursor) {
  const probe = await api(path, { ...query, cursor });
  return probe.items.length > 0 || Boolean(probe.next_cursor);
}

function setNextLink(params, cursor) {
  const link = $("more");
  link.hidden = !cursor;
  if (!cursor) return link.removeAttribute("href");
  const state = Object.fromEntries(params.entries());
  link.setAttribute("href", viewHash("search", { ...state, cursor }));
}

// One row per message; the row is a link to the message page (Tab to it, Enter opens it).
function renderResults(page, params) {
  const tbody = $("results-table").querySelector("tbody");
  tbody.replaceChildren();
  for (const item of page.items) tbody.append(resultRow(item));
  $("results").hidden = false;
  $("trace").hidden = true;
}

function resultRow(item) {
  const href = viewHash("message", { id: item.msg_id });
  const link = el("a", { text: item.msg_id, href, class: "msg-link", tabindex: "-1" });
  return linkRow(el("tr", { class: "result", "data-msg-id": item.msg_id },
    el("td", {}, link),
    el("td", { text: item.keys || "" }), el("td", { text: item.tags || "" }),
    el("td", { text: item.broker || "" }), el("td", { text: String(item.queue ?? "") }),
    el("td", { text: String(item.offset ?? "") }), el("td", { text: fmtTime(item.time_ms) }),
    el("td", { class: "send-status", text: sendStatus(item) }),
    el("td", { class: "outcomes" }, ...outcomeBadges(item.groups || {}))), href);
}

// Make a listing row one keyboard stop: Tab focuses it, Enter (or a click) opens href,
// the arrow keys move to the row above or below.
function linkRow(row, href) {
  row.tabIndex = 0;
  row.dataset.href = href;
  row.addEventListener("click", (event) => {
    if (event.target.closest("a")) return;  // the link itself navigates
    window.location.hash = href;
  });
  row.addEventListener("keydown", (event) => {
    if (event.key === "Enter") window.location.hash = href;
    else if (event.key === "ArrowDown" && row.nextElementSibling) row.nextElementSibling.focus();
    else if (event.key === "ArrowUp" && row.previousElementSibling) row.previousElementSibling.focus();
    else return;
    event.preventDefault();
  });
  return row;
}

registerView("search", ["search", "results"], showSearch);
$("search").addEventListener("submit", (event) => { event.preventDefault(); submitSearch(); });
for (const radio of document.querySelectorAll("input[name=mode]")) radio.addEventListener("change", showFields);
showFields();
