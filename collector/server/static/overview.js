// The console's start page: topics and consumer groups over a window, from GET /v1/overview
// (rollups only).  The window lives in the URL's query string (?window=1h, or ?begin=&end=),
// so a view can be shared.  Every value is rendered with textContent; charts are uPlot
// (static/vendor/uplot, see VERSION there).  Times are UTC, as everywhere on the page.
// Uses el() from app.js, which loads first.
"use strict";

(function () {
  const WINDOWS = [["15m", "15 min"], ["1h", "1 h"], ["24h", "24 h"]];
  const DEFAULT_WINDOW = "1h";
  const COLUMNS = [
    ["consumed", "consumed"], ["retrying", "retrying"], ["failed", "failed"], ["dead", "dead"],
    ["pending", "in flight"], ["not_received", "not received"], ["retried", "retried"],
  ];
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

  function setWindow(params) {
    const url = new URL(window.location.href);
    for (const name of ["window", "begin", "end"]) url.searchParams.delete(name);
    for (const [name, value] of Object.entries(params)) if (value) url.searchParams.set(name, value);
    window.history.pushState(null, "", url);
    load();
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

  // Open the existing listings through the search form (topic + time; a group's dead letters).
  function openListing(mode, topic, group, data) {
    const form = document.getElementById("search");
    const radio = document.querySelector(`input[name=mode][value=${mode}]`);
    if (!form || !radio) return;
    radio.checked = true;
    radio.dispatchEvent(new Event("change"));
    document.getElementById("topic").value = topic;
    if (document.getElementById("group")) document.getElementById("group").value = group || "";
    document.getElementById("begin").value = new Date(data.begin_ms).toISOString();
    document.getElementById("end").value = new Date(data.end_ms).toISOString();
    form.requestSubmit();
  }

  function listingLink(text, mode, topic, group, data, label) {
    const a = el("a", { href: "#", text, "aria-label": label });
    a.addEventListener("click", (event) => { event.preventDefault(); openListing(mode, topic, group, data); });
    return a;
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
        el("td", {}, listingLink(g.group || "(no group)", "dead", topic.topic, g.group, data,
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

  function render(win, data) {
    for (const c of charts) c.destroy();
    charts = [];
    section.replaceChildren(controls(win, data));
    if (!data.topics.length) {
      section.append(el("p", { class: "ov-empty", text: "No traced messages in this window." }));
      return;
    }
    const width = Math.max(320, Math.min(section.clientWidth || 900, 1400) - 16);
    for (const topic of data.topics) {
      const card = el("div", { class: "ov-topic", "data-topic": topic.topic });
      const failedSends = el("span", { class: "ov-failed-sends", "data-col": "failed_sends",
                                       text: `${topic.failed_sends} failed send${topic.failed_sends === 1 ? "" : "s"}`,
                                       title: "sends the broker refused: never stored, so no group can consume them" });
      if (topic.failed_sends > 0) failedSends.classList.add("bad");
      const title = el("h3", {}, listingLink(topic.topic, "topic", topic.topic, "", data, `messages of ${topic.topic}`),
                       el("span", { class: "ov-sent", "data-col": "sent", text: `${topic.sent} sent` }), failedSends);
      card.append(title);
      section.append(card);  // in the document first, so uPlot can measure
      card.append(chart(topic, data, width), groupTable(topic, data));
    }
  }

  async function load() {
    const win = currentWindow();
    const mine = ++loading;
    section.setAttribute("aria-busy", "true");
    try {
      const data = await fetchOverview(win);
      if (mine !== loading) return;
      render(win, data);
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
