// The console's start page: one compact row per topic × consumer group over a window, problems
// first, from GET /v1/overview (rollups only).  The window, the sort, the filter and the page live
// in the URL's query string (?window=1h&sort=lag&filter=pay&cursor=50), so a view can be shared
// and a reload reproduces it.  A topic's chart and group table open on demand (the row's toggle).  Every value is rendered with textContent; charts are uPlot
// (static/vendor/uplot, see VERSION there).  Times are UTC, as everywhere on the page.
// Uses el() from app.js, which loads first.
"use strict";

(function () {
  const WINDOWS = [["15m", "15 min"], ["1h", "1 h"], ["24h", "24 h"]];
  const DEFAULT_WINDOW = "1h";
  const PAGE_ROWS = 50;
  const COLUMNS = [
    ["consumed", "consumed"], ["retrying", "retrying"], ["failed", "failed"], ["dead", "dead"],
    ["pending", "in flight"], ["not_received", "not received"], ["retried", "retried"],
  ];
  // The compact table's counts: [column, heading, the listing behind it (console.js #search)].  A group
  // count's listing filters by the outcome of the same name, so it lists exactly what the count counts
  // (tests/collector/query/backtrack/test_console_api.py reads these lines).
  const ROW_COLUMNS = [
    ["sent", "sent", { mode: "topic" }],
    ["consumed", "consumed", { mode: "topic", group: true, outcome: "consumed" }],
    ["failed", "failed", { mode: "topic", group: true, outcome: "failed" }],
    ["dead", "dead", { mode: "dead", group: true }],
    ["not_received", "not received", { mode: "topic", group: true, outcome: "not_received" }],
    ["failed_sends", "failed sends", { mode: "topic" }],
  ];
  const SORTS = [["problems", "problems first"], ["topic", "topic"], ["group", "group"], ["sent", "sent"],
                 ["consumed", "consumed"], ["failed", "failed"], ["dead", "dead"], ["not_received", "not received"],
                 ["failed_sends", "failed sends"], ["p99", "p99 latency"], ["lag", "lag"]];
  const COLORS = ["#1a5fb4", "#2e9e5b", "#e66100", "#813d9c", "#008080", "#865e3c", "#c64600", "#5e5c64"];
  const section = document.getElementById("overview");
  if (!section) return;
  let charts = [];
  let loading = 0;

  function fmtTime(ms) {
    return new Date(Number(ms)).toISOString().slice(0, 16).replace("T", " ");
  }

  function fmtMs(ms) {
    if (ms === null || ms === undefined) return "–";
    if (ms >= 60000) return (ms / 60000).toFixed(1) + " min";
    if (ms >= 1000) return (ms / 1000).toFixed(ms >= 10000 ? 0 : 1) + " s";
    return Math.round(ms) + " ms";
  }

  function fmtLag(s) {
    if (!s) return "0";
    if (s >= 86400) return (s / 86400).toFixed(1) + " d";
    if (s >= 3600) return (s / 3600).toFixed(1) + " h";
    if (s >= 60) return (s / 60).toFixed(1) + " min";
    return s.toFixed(0) + " s";
  }

  // The window the URL asks for: {window} or {begin, end} (custom).
  function currentWindow() {
    const q = new URLSearchParams(window.location.search);
    if (q.get("begin") || q.get("end")) return { begin: q.get("begin") || "", end: q.get("end") || "" };
    return { window: q.get("window") || DEFAULT_WINDOW };
  }

  // The rows the URL asks for: sort, filter and page (cursor).
  function currentRows() {
    const q = new URLSearchParams(window.location.search);
    return { sort: q.get("sort") || "", filter: q.get("filter") || "", cursor: q.get("cursor") || "" };
  }

  // Change the URL's state (a new history entry) and load it; any change but the page's starts at row 1.
  function setParams(changes, names) {
    const url = new URL(window.location.href);
    for (const name of [...names, "cursor"]) url.searchParams.delete(name);
    for (const [name, value] of Object.entries(changes)) if (value) url.searchParams.set(name, value);
    window.history.pushState(null, "", url);
    load();
  }

  function setWindow(params) {
    setParams(params, ["window", "begin", "end"]);
  }

  async function fetchOverview(params) {
    const url = new URL("/v1/overview", window.location.href);
    for (const [k, v] of Object.entries(params)) if (v) url.searchParams.set(k, v);
    const headers = {};
    const token = document.getElementById("token");
    if (token && token.value.trim()) headers.Authorization = "Bearer " + token.value.trim();
    const response = await fetch(url, { headers });
    const body = await response.json().catch(() => ({}));
    if (!response.ok) throw new Error(body.detail || body.error || response.statusText);
    return body;
  }

  // The deep link of the listing behind a count (console.js's #search view, same window).
  function listingHref(spec, topic, group, data) {
    return viewHash("search", { mode: spec.mode, topic, group: spec.group ? group || "" : "",
                                outcome: spec.outcome || "", begin: new Date(data.begin_ms).toISOString(),
                                end: new Date(data.end_ms).toISOString() });
  }

  function listingLink(text, spec, topic, group, data, label) {
    return el("a", { href: listingHref(spec, topic, group, data), text, "aria-label": label });
  }

  function controls(win, data) {
    const bar = el("div", { class: "ov-bar" }, el("h2", { id: "overview-title", text: "Overview" }));
    const group = el("div", { class: "ov-windows", role: "group", "aria-label": "time window" });
    for (const [value, label] of WINDOWS) {
      const button = el("button", { type: "button", "data-window": value, text: label,
                                    "aria-pressed": String(win.window === value) });
      button.addEventListener("click", () => setWindow({ window: value }));
      group.append(button);
    }
    const custom = el("button", { type: "button", "data-window": "custom", text: "custom",
                                  "aria-pressed": String(!win.window || !WINDOWS.some(([w]) => w === win.window)) });
    group.append(custom);
    bar.append(group);
    const form = el("form", { id: "ov-custom", class: "ov-custom", autocomplete: "off" },
      el("input", { id: "ov-begin", placeholder: "begin: ISO, -2h", "aria-label": "window begin" }),
      el("input", { id: "ov-end", placeholder: "end (default now)", "aria-label": "window end" }),
      el("button", { type: "submit", text: "Apply" }));
    form.hidden = custom.getAttribute("aria-pressed") !== "true";
    form.querySelector("#ov-begin").value = win.begin || win.window || "";
    form.querySelector("#ov-end").value = win.end || "";
    custom.addEventListener("click", () => { form.hidden = false; form.querySelector("#ov-begin").focus(); });
    form.addEventListener("submit", (event) => {
      event.preventDefault();
      const begin = form.querySelector("#ov-begin").value.trim();
      const end = form.querySelector("#ov-end").value.trim();
      if (/^\d+[smhd]$/.test(begin) && !end) setWindow({ window: begin });
      else setWindow({ begin, end });
    });
    bar.append(form);
    if (data) {
      bar.append(el("span", { id: "ov-range", class: "ov-range",
                              text: `${fmtTime(data.begin_ms)} – ${fmtTime(data.end_ms)} UTC` }));
    }
    return bar;
  }

  function groupTable(topic, data) {
    const head = el("tr", {}, el("th", { text: "consumer group" }),
      ...COLUMNS.map(([, label]) => el("th", { class: "num", text: label })),
      el("th", { class: "num", text: "p50" }), el("th", { class: "num", text: "p90" }),
      el("th", { class: "num", text: "p99" }), el("th", { class: "num", text: "lag" }));
    const body = el("tbody");
    for (const g of topic.groups) {
      const row = el("tr", { class: "ov-group", "data-group": g.group },
        el("td", { class: "ov-name", title: g.group || "(no group)" },
           listingLink(g.group || "(no group)", { mode: "dead", group: true }, topic.topic, g.group, data,
                       `dead letters of ${g.group} on ${topic.topic}`)));
      for (const [name] of COLUMNS) {
        const cell = el("td", { class: "num", "data-col": name, text: String(g[name]) });
        if ((name === "failed" || name === "dead") && g[name] > 0) cell.classList.add("bad");
        row.append(cell);
      }
      for (const p of ["p50", "p90", "p99"]) row.append(el("td", { class: "num", "data-col": p, text: fmtMs(g.latency_ms[p]) }));
      const lag = el("td", { class: "num", "data-col": "lag", "data-lag-s": String(g.lag_s), text: fmtLag(g.lag_s),
                             title: "age of the oldest message this group has not consumed yet" });
      if (g.lag_s >= 300) lag.classList.add("bad");
      row.append(lag);
      body.append(row);
    }
    if (!topic.groups.length) {
      body.append(el("tr", {}, el("td", { colspan: String(COLUMNS.length + 5), class: "ov-none",
                                          text: "no consumer group received these messages" })));
    }
    return el("table", { class: "ov-groups" }, el("thead", {}, head), body);
  }

  function chart(topic, data, width) {
    const holder = el("div", { class: "ov-chart", "data-topic": topic.topic });
    if (typeof window.uPlot !== "function") return holder;
    const series = [{}, { label: "sent", stroke: "#5e5c64", width: 1.5 }];
    const columns = [data.times, topic.series.sent];
    const failed = data.times.map(() => 0);
    topic.groups.forEach((g, i) => {
      series.push({ label: "consumed: " + (g.group || "(no group)"), stroke: COLORS[i % COLORS.length], width: 1.5 });
      columns.push(g.series.consumed);
      g.series.failed.forEach((n, j) => { failed[j] += n; });
    });
    if (failed.some((n) => n > 0)) {
      series.push({ label: "failed + dead", stroke: "#d64541", width: 1.5 });
      columns.push(failed);
    }
    if (topic.series.failed_sends.some((n) => n > 0)) {
      series.push({ label: "failed sends", stroke: "#a51d2d", width: 1.5, dash: [4, 3] });
      columns.push(topic.series.failed_sends);
    }
    // 24-hour UTC ticks; the date too when the window spans more than a day.
    const long = data.end_ms - data.begin_ms > 86400000;
    const tick = (ts) => new Date(ts).toISOString().slice(long ? 5 : 11, 16).replace("T", " ");
    const opts = {
      width, height: 150, ms: 1,
      tzDate: (ts) => window.uPlot.tzDate(new Date(ts), "Etc/UTC"),
      scales: { x: { time: true, range: [data.times[0], data.end_ms] } },
      axes: [{ label: "time (UTC)", labelSize: 18, size: 40, values: (u, splits) => splits.map(tick) }, { size: 46 }],
      series,
      legend: { live: false },
      cursor: { drag: { x: false, y: false } },
    };
    charts.push(new window.uPlot(opts, columns, holder));
    holder.append(el("div", { class: "ov-tz", text: "time axis: UTC" }));
    return holder;
  }

  // The row filter and sort, in the URL like the window.
  function rowControls(rows) {
    const form = el("form", { id: "ov-rows", class: "ov-rows", autocomplete: "off", role: "search" });
    const sort = el("select", { id: "ov-sort", "aria-label": "sort rows" });
    for (const [value, label] of SORTS) sort.append(el("option", { value, text: label }));
    sort.value = rows.sort || "problems";
    sort.addEventListener("change", () => setParams({ sort: sort.value === "problems" ? "" : sort.value,
                                                      filter: rows.filter }, ["sort", "filter"]));
    const filter = el("input", { id: "ov-filter", type: "search", placeholder: "filter topic or group",
                                 "aria-label": "filter rows by topic or group name" });
    filter.value = rows.filter;
    form.append(el("label", { text: "sort " }, sort), filter, el("button", { type: "submit", text: "Filter" }));
    form.addEventListener("submit", (event) => {
      event.preventDefault();
      setParams({ sort: rows.sort, filter: filter.value.trim() }, ["sort", "filter"]);
    });
    return form;
  }

  function nameCell(text, link) {
    return el("td", { class: "ov-name", title: text }, link || el("span", { text }));
  }

  function countCell(row, name, spec, data) {
    const value = row[name];
    const cell = el("td", { class: "num", "data-col": name });
    const listed = row.group !== null || !spec.group;  // a topic without groups has no group listing
    if (value > 0 && listed) {
      cell.append(listingLink(String(value), spec, row.topic, row.group, data,
                              `${name.replace("_", " ")} of ${row.group || "the topic"} on ${row.topic}`));
    } else {
      cell.textContent = String(value);
    }
    if (["failed", "dead", "failed_sends"].includes(name) && value > 0) cell.classList.add("bad");
    return cell;
  }

  function rowsTable(data) {
    const head = el("tr", {}, el("th", { class: "ov-toggle-col" }, el("span", { class: "ov-sr", text: "chart" })),
      el("th", { text: "topic" }), el("th", { text: "consumer group" }),
      ...ROW_COLUMNS.map(([, label]) => el("th", { class: "num", text: label })),
      el("th", { class: "num", text: "p99" }), el("th", { class: "num", text: "lag" }));
    const body = el("tbody");
    data.rows.forEach((row, i) => {
      const tr = el("tr", { class: "ov-row", "data-topic": row.topic, "data-group": row.group || "", "data-index": String(i) });
      const toggle = el("button", { type: "button", class: "ov-toggle", "aria-expanded": "false", text: "▸",
                                    "aria-label": `chart and groups of ${row.topic}` });
      toggle.addEventListener("click", () => toggleDetail(tr, toggle, row.topic, data));
      tr.append(el("td", { class: "ov-toggle-col" }, toggle),
        nameCell(row.topic, listingLink(row.topic, { mode: "topic" }, row.topic, null, data, `messages of ${row.topic}`)),
        nameCell(row.group === null ? "(no group)" : row.group || "(no group)"));
      for (const [name, , spec] of ROW_COLUMNS) tr.append(countCell(row, name, spec, data));
      tr.append(el("td", { class: "num", "data-col": "p99", text: fmtMs(row.p99_ms) }));
      const lag = el("td", { class: "num", "data-col": "lag", "data-lag-s": String(row.lag_s),
                             title: "age of the oldest message this group has not consumed yet" });
      if (row.lag_s > 0 && row.group !== null) {
        lag.append(listingLink(fmtLag(row.lag_s), { mode: "topic", group: true, outcome: "not_consumed" },
                               row.topic, row.group, data, `messages ${row.group} has not consumed on ${row.topic}`));
      } else {
        lag.textContent = fmtLag(row.lag_s);
      }
      if (row.lag_s >= 300) lag.classList.add("bad");
      tr.append(lag);
      if (row.dead > 0 || row.failed > 0 || row.failed_sends > 0 || row.lag_s >= 300) tr.classList.add("ov-problem");
      body.append(tr);
    });
    const cols = el("colgroup", {}, el("col", { class: "ov-c-toggle" }), el("col", { class: "ov-c-topic" }),
                    el("col", { class: "ov-c-group" }), ...ROW_COLUMNS.map(() => el("col", { class: "ov-c-num" })),
                    el("col", { class: "ov-c-num" }), el("col", { class: "ov-c-num" }));
    return el("table", { id: "ov-table", class: "ov-table" }, cols, el("thead", {}, head), body);
  }

  // A topic's chart and group table, under its row, only when asked for: one request for that
  // topic's series (the table's request carries none).
  async function toggleDetail(tr, toggle, name, data) {
    const open = tr.nextElementSibling && tr.nextElementSibling.classList.contains("ov-detail") ? tr.nextElementSibling : null;
    if (open) {
      const chartOf = charts.find((c) => open.contains(c.root));
      if (chartOf) { chartOf.destroy(); charts = charts.filter((c) => c !== chartOf); }
      open.remove();
      toggle.setAttribute("aria-expanded", "false");
      toggle.textContent = "▸";
      return;
    }
    const cell = el("td", { colspan: String(ROW_COLUMNS.length + 5) });
    const detail = el("tr", { class: "ov-detail", "data-topic": name, "aria-busy": "true" }, cell);
    tr.after(detail);
    toggle.setAttribute("aria-expanded", "true");
    toggle.textContent = "▾";
    let topic;
    try {
      const one = await fetchOverview({ begin: String(data.begin_ms), end: String(data.end_ms), topic: name });
      topic = one.topics.find((t) => t.topic === name);
      if (!topic) throw new Error("no rollups for this topic in the window any more");
      data = { ...data, times: one.times };
    } catch (error) {
      cell.replaceChildren(el("p", { class: "ov-error", role: "alert", text: error.message }));
      detail.removeAttribute("aria-busy");
      return;
    }
    if (!detail.isConnected) return;  // closed (or the page reloaded) meanwhile
    const card = el("div", { class: "ov-topic", "data-topic": name });
    const failedSends = el("span", { class: "ov-failed-sends", "data-col": "failed_sends",
                                     text: `${topic.failed_sends} failed send${topic.failed_sends === 1 ? "" : "s"}`,
                                     title: "sends the broker refused: never stored, so no group can consume them" });
    if (topic.failed_sends > 0) failedSends.classList.add("bad");
    card.append(el("h3", {}, el("span", { class: "ov-title", title: name }, name),
                   el("span", { class: "ov-sent", "data-col": "sent", text: `${topic.sent} sent` }), failedSends));
    cell.append(card);  // in the document first, so uPlot can measure
    const width = Math.max(280, Math.min(cell.clientWidth || 900, 1400) - 24);
    card.append(chart(topic, data, width), groupTable(topic, data));
    detail.removeAttribute("aria-busy");
  }

  function pager(data, rows) {
    const first = Number(rows.cursor || 0);
    const bar = el("div", { class: "ov-pager" },
      el("span", { id: "ov-count", text: data.total_rows ? `rows ${first + 1}–${first + data.rows.length} of ${data.total_rows}` : "" }));
    if (first > 0) {
      const back = el("button", { type: "button", id: "ov-first", text: "First rows" });
      back.addEventListener("click", () => setParams({ sort: rows.sort, filter: rows.filter }, ["sort", "filter"]));
      bar.append(back);
    }
    if (data.next_cursor) {
      const next = el("button", { type: "button", id: "ov-next", text: "Next rows" });
      next.addEventListener("click", () => setParams({ sort: rows.sort, filter: rows.filter, cursor: data.next_cursor },
                                                     ["sort", "filter"]));
      bar.append(next);
    }
    return bar;
  }

  function render(win, rows, data) {
    for (const c of charts) c.destroy();
    charts = [];
    section.replaceChildren(controls(win, data), rowControls(rows));
    if (data.index_set_aside > 0) {  // events the index job could not store: the rest is indexed, someone should look
      section.append(el("p", { class: "ov-set-aside", role: "status",
        text: `${data.index_set_aside} event(s) could not be indexed and were set aside: run tracehook set-aside list ` +
              "(docs/index-job.md, “Events set aside”)." }));
    }
    if (!data.rows.length) {
      const text = rows.filter ? `No topic or group matches “${rows.filter}” in this window.` : "No traced messages in this window.";
      section.append(el("p", { class: "ov-empty", text }));
      return;
    }
    section.append(rowsTable(data), pager(data, rows));
  }

  async function load() {
    const win = currentWindow();
    const rows = currentRows();
    const mine = ++loading;
    section.setAttribute("aria-busy", "true");
    try {
      const data = await fetchOverview({ ...win, ...rows, limit: String(PAGE_ROWS), series: "0" });
      if (mine !== loading) return;
      render(win, rows, data);
      section.dataset.loaded = String(Date.now());
    } catch (error) {
      if (mine !== loading) return;
      section.replaceChildren(controls(win, null), el("p", { class: "ov-error", role: "alert", text: error.message }));
      section.dataset.loaded = String(Date.now());
    } finally {
      if (mine === loading) section.removeAttribute("aria-busy");
    }
  }

  // The overview is the start page: shown while no other view (results, a trace, ...) is.
  function syncVisibility() {
    const others = [...document.querySelectorAll("main > section")].filter((s) => s !== section);
    const hide = others.some((s) => !s.hidden);
    if (section.hidden !== hide) section.hidden = hide;  // (an unchanged write would notify the observer again)
  }

  new MutationObserver(syncVisibility).observe(document.querySelector("main"),
    { attributes: true, attributeFilter: ["hidden"], subtree: true });
  window.addEventListener("popstate", load);
  const token = document.getElementById("token");
  if (token) token.addEventListener("change", load);
  const home = document.getElementById("home");
  if (home) home.addEventListener("click", () => { home.href = "/" + window.location.search; });
  syncVisibility();
  load();
})();
