// Backtracking pages, read-only: offsets at a time with a group's reset plan (#offsets?...), and
// the replay list of a group in a window (#replay?...) with downloads.  Applying a reset stays in
// the CLI: the page prints the exact command.
"use strict";

function field(id, name, placeholder, size) {
  return el("input", { id, name, placeholder, "aria-label": placeholder, size: String(size || 20) });
}

function backtrackSection(id, title, formId, fields, extra) {
  const form = el("form", { id: formId, class: "fields", autocomplete: "off" }, ...fields,
    el("button", { type: "submit", text: "Show" }));
  const section = el("section", { id, hidden: "" }, el("h2", { text: title }), form, ...extra);
  document.querySelector("main").append(section);
  return form;
}

// --- offsets at a time, and a group's reset plan ------------------------------------------

const offsetsForm = backtrackSection("offsets-view", "Offsets at a time, and a group's reset plan", "offsets-form", [
  field("off-topic", "topic", "topic"), field("off-group", "group", "consumer group (optional)"),
  field("off-time", "time", "time: -2h, ISO, epoch ms", 24),
  el("label", {}, el("input", { id: "off-force", name: "force", type: "checkbox" }), " force (move forward too)"),
], [
  el("p", { id: "off-summary" }),
  el("table", { id: "offsets-table" }, el("thead"), el("tbody")),
  el("div", { id: "off-cli", class: "cli", hidden: "" },
    el("p", { text: "This page is read-only. A reset is applied from the CLI, with the consumer group stopped " +
      "(dry run without --apply; the broker's committed offsets are the current positions there):" }),
    el("pre", {}, el("code", { id: "off-cli-command" }))),
]);

function offsetsState() {
  return { topic: $("off-topic").value.trim(), group: $("off-group").value.trim(),
    time: $("off-time").value.trim(), force: $("off-force").checked ? "1" : "" };
}

// The time as the CLI takes it back exactly: ISO-8601 in UTC, to the millisecond.
function isoTime(ms) {
  return new Date(Number(ms)).toISOString();
}

function shellQuote(text) {
  return /^[A-Za-z0-9._:\/=@%+-]+$/.test(text) ? text : "'" + text.replace(/'/g, "'\\''") + "'";
}

function resetCommand(plan) {
  const parts = ["tracehook", "kafka-reset", "--bootstrap", "BROKER:9092", "--group", plan.group,
    "--topic", plan.topic, "--time=" + isoTime(plan.time_ms), "--collector", window.location.origin];
  if (plan.force) parts.push("--force");
  parts.push("--apply");
  return parts.map(shellQuote).join(" ");
}

// `tracehook replay` for the window and group: re-publish to a topic only the group reads.
function replayCommand(topic, group, begin, end) {
  const parts = ["tracehook", "replay", topic, "--group", group];
  if (begin) parts.push("--begin=" + begin);
  if (end) parts.push("--end=" + end);
  parts.push("--bootstrap", "BROKER:9092", "--to-topic", topic + "." + group + "-replay",
    "--collector", window.location.origin);
  return parts.map(shellQuote).join(" ");
}

async function showOffsets(params) {
  const get = (name) => params.get(name) || "";
  $("off-topic").value = get("topic");
  $("off-group").value = get("group");
  $("off-time").value = get("time");
  $("off-force").checked = Boolean(get("force"));
  $("offsets-view").hidden = false;
  const table = $("offsets-table");
  table.tHead.replaceChildren();
  table.tBodies[0].replaceChildren();
  $("off-summary").textContent = "";
  $("off-cli").hidden = true;
  if (!get("topic") || !get("time")) return setStatus(params.toString() ? "Enter a topic and a time." : "");
  setStatus("Loading offsets…");
  let doc;
  try {
    doc = await api("/v1/topics/" + encodeURIComponent(get("topic")) + "/offsets",
      { time: get("time"), group: get("group"), force: get("force") ? "true" : "" });
  } catch (error) {
    return setStatus(error.message, true);
  }
  setStatus("");
  const isPlan = "group" in doc;
  const heads = isPlan ? ["queue", "target", "current", "planned", "action"] : ["queue", "offset"];
  table.tHead.append(el("tr", {}, ...heads.map((h) => el("th", { text: h }))));
  for (const q of doc.queues) {
    const cells = isPlan ? [q.queue, q.target, q.current === null ? "-" : q.current, q.planned, q.action]
      : [q.queue, q.offset];
    table.tBodies[0].append(el("tr", { class: "queue" + (isPlan ? " action-" + q.action : ""),
      "data-queue": String(q.queue), ...(isPlan ? { "data-action": q.action } : {}) },
      ...cells.map((c) => el("td", { text: String(c) }))));
  }
  const at = "at " + fmtTime(doc.time_ms);
  if (!isPlan) {
    $("off-summary").textContent = doc.queues.length ? "First offset stored " + at + ", per queue."
      : "Nothing indexed on this topic.";
    return;
  }
  const counts = {};
  for (const q of doc.queues) counts[q.action] = (counts[q.action] || 0) + 1;
  $("off-summary").textContent = "Reset plan of group " + doc.group + " " + at + " (" +
    (doc.force ? "force" : "rewind only") + "): " +
    (Object.entries(counts).map(([a, n]) => n + " " + a).join(", ") || "no queue indexed");
  $("off-cli-command").textContent = resetCommand(doc);
  $("off-cli").hidden = false;
}

// --- the replay list ------------------------------------------------------------------------

const replayForm = backtrackSection("replay-view", "Replay list: what a group never consumed", "replay-form", [
  field("rp-topic", "topic", "topic"), field("rp-group", "group", "consumer group"),
  field("rp-begin", "begin", "since: 1h, 7d, ISO (default 30d)"), field("rp-end", "end", "end (default now)"),
], [
  el("p", { class: "downloads" }, "Download the whole list: ",
    el("button", { id: "rp-jsonl", type: "button", text: "JSON lines" }), " ",
    el("button", { id: "rp-csv", type: "button", text: "CSV" })),
  el("table", { id: "replay-table" }, el("thead", {}, el("tr", {},
    ...["message id", "queue", "offset", "stored", "status", "attempts", "last attempt", "replayed", "error"]
      .map((h) => el("th", { text: h })))), el("tbody")),
  el("a", { id: "rp-more", class: "button", hidden: "" }, "Next page"),
  el("div", { class: "cli" }, el("p", { text: "The same list from the CLI:" }),
    el("pre", {}, el("code", { id: "rp-cli-command" }))),
  el("div", { class: "cli" },
    el("p", {}, "Re-deliver exactly these messages to the group (Kafka; a dry run until you add ",
      el("code", { text: "--apply" }), "; see docs/backtracking.md): ",
      el("button", { id: "rp-replay-copy", type: "button", text: "Copy" })),
    el("pre", {}, el("code", { id: "rp-replay-command" }))),
]);

$("rp-replay-copy").addEventListener("click", async () => {
  try {
    await navigator.clipboard.writeText($("rp-replay-command").textContent);
    setStatus("Copied the replay command.");
  } catch (error) {
    setStatus("Copy failed (" + error.message + "); select the command and copy it by hand.", true);
  }
});

function replayState() {
  return { topic: $("rp-topic").value.trim(), group: $("rp-group").value.trim(),
    begin: $("rp-begin").value.trim(), end: $("rp-end").value.trim() };
}

function replayQuery(params) {
  const get = (name) => params.get(name) || "";
  return { group: get("group"), begin: get("begin"), end: get("end") };
}

async function showReplay(params) {
  const get = (name) => params.get(name) || "";
  for (const name of ["topic", "group", "begin", "end"]) $("rp-" + name).value = get(name);
  $("replay-view").hidden = false;
  const tbody = $("replay-table").tBodies[0];
  tbody.replaceChildren();
  $("rp-more").hidden = true;
  const ready = Boolean(get("topic") && get("group"));
  for (const id of ["rp-jsonl", "rp-csv"]) $(id).disabled = !ready;
  const cli = ["tracehook", "replay-list", get("topic") || "TOPIC", "--group", get("group") || "GROUP"];
  if (get("begin")) cli.push("--begin=" + get("begin"));
  if (get("end")) cli.push("--end=" + get("end"));
  $("rp-cli-command").textContent = cli.concat(["--format", "csv", "--collector", window.location.origin])
    .map(shellQuote).join(" ");
  $("rp-replay-command").textContent = replayCommand(get("topic") || "TOPIC", get("group") || "GROUP",
    get("begin"), get("end"));
  if (!ready) return setStatus(params.toString() ? "Enter a topic and a consumer group." : "");
  setStatus("Loading the replay list…");
  let page;
  const path = "/v1/topics/" + encodeURIComponent(get("topic")) + "/unconsumed";
  try {
    page = await api(path, { ...replayQuery(params), limit: "50", cursor: get("cursor") });
  } catch (error) {
    return setStatus(error.message, true);
  }
  for (const item of page.items) {
    const href = viewHash("message", { id: item.msg_id });
    tbody.append(linkRow(el("tr", { class: "result replay-item", "data-msg-id": item.msg_id, "data-status": item.status },
      el("td", {}, el("a", { text: item.msg_id, href, tabindex: "-1" })),
      el("td", { text: String(item.queue) }), el("td", { text: String(item.offset) }),
      el("td", { text: fmtTime(item.time_ms) }), el("td", { text: item.status.toLowerCase() }),
      el("td", { text: String(item.attempts) }), el("td", { text: fmtTime(item.last_attempt_ms) }),
      el("td", { class: "replayed", text: item.replayed_ms ? fmtTime(item.replayed_ms) : "–" }),
      el("td", { text: item.error || "" })), href));
  }
  if (page.next_cursor) {
    $("rp-more").setAttribute("href", viewHash("replay", { ...Object.fromEntries(params.entries()), cursor: page.next_cursor }));
    $("rp-more").hidden = false;
  }
  setStatus(page.items.length + " message(s) to replay" + (get("cursor") ? " on this page" : "") +
    (page.next_cursor ? ", more on the next page" : ""));
}

// Downloads go through fetch (they need the query token header), then a Blob.
async function downloadReplay(format) {
  const [, params] = parseHash(window.location.hash);
  const url = new URL("/v1/topics/" + encodeURIComponent(params.get("topic") || "") + "/unconsumed/export",
    window.location.href);
  for (const [k, v] of Object.entries({ ...replayQuery(params), format })) if (v) url.searchParams.set(k, v);
  const headers = {};
  const token = $("token").value.trim();
  if (token) headers.Authorization = "Bearer " + token;
  setStatus("Preparing the download…");
  const response = await fetch(url, { headers });
  if (!response.ok) {
    const body = await response.json().catch(() => ({}));
    return setStatus(body.detail || response.statusText, true);
  }
  const name = /filename="([^"]+)"/.exec(response.headers.get("Content-Disposition") || "");
  const link = el("a", { href: URL.createObjectURL(await response.blob()), download: name ? name[1] : "replay." + format });
  document.body.append(link);
  link.click();
  link.remove();
  setTimeout(() => URL.revokeObjectURL(link.href), 60_000);
  setStatus("");
}

registerView("offsets", ["offsets-view"], showOffsets);
registerView("replay", ["replay-view"], showReplay);
offsetsForm.addEventListener("submit", (event) => { event.preventDefault(); openView("offsets", offsetsState()); });
replayForm.addEventListener("submit", (event) => { event.preventDefault(); openView("replay", replayState()); });
$("rp-jsonl").addEventListener("click", () => downloadReplay("jsonl"));
$("rp-csv").addEventListener("click", () => downloadReplay("csv"));
