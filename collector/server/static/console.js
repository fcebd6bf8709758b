// The console's router: every view is a deep link "#<view>?<params>" (state in the URL, so a
// reload restores it and the back button works).  Views register here; app.js's helpers are shared.
//   #search?mode=key&topic=orders&key=k1&group=billing&outcome=failed&begin=-1h&cursor=...
//   #message?id=MSG_ID            (older links "#id=MSG_ID" still open it)
//   #offsets?topic=orders&group=billing&time=-2h&force=1
//   #replay?topic=orders&group=billing&begin=-6h&end=-1h&cursor=...
"use strict";

const consoleViews = {};  // view name -> { sections: [element ids], show(params) }
const CONSOLE_SECTIONS = new Set();

// Register a view: the ids of the sections it shows, and the function that renders its URL state.
function registerView(name, sections, show) {
  consoleViews[name] = { sections, show };
  for (const id of sections) CONSOLE_SECTIONS.add(id);
}

// "#name?a=1&b=2" -> ["name", URLSearchParams]; "#id=X" (the first page's links) -> message X.
function parseHash(hash) {
  const text = (hash || "").replace(/^#/, "");
  const legacy = /^id=(.+)$/.exec(text);
  if (legacy) return ["message", new URLSearchParams({ id: decodeURIComponent(legacy[1]) })];
  const at = text.indexOf("?");
  const name = at < 0 ? text : text.slice(0, at);
  return [name, new URLSearchParams(at < 0 ? "" : text.slice(at + 1))];
}

// The deep link of a view: empty parameters are left out, so links stay short.
function viewHash(name, params) {
  const query = new URLSearchParams();
  for (const [key, value] of Object.entries(params)) {
    if (value !== undefined && value !== null && String(value) !== "") query.set(key, String(value));
  }
  const text = query.toString();
  return "#" + name + (text ? "?" + text : "");
}

// Go to a view; when the URL already says so (the same search again), render it anyway.
function openView(name, params) {
  const hash = viewHash(name, params);
  if (window.location.hash === hash) route();
  else window.location.hash = hash;
}

function showSections(name) {
  const wanted = new Set(consoleViews[name] ? consoleViews[name].sections : []);
  for (const id of CONSOLE_SECTIONS) {
    const node = document.getElementById(id);
    if (node && !wanted.has(id)) node.hidden = true;
  }
  for (const link of document.querySelectorAll("#console-nav a")) {
    if (link.dataset.view === name) link.setAttribute("aria-current", "page");
    else link.removeAttribute("aria-current");
  }
}

// Render the view the URL names.  Other hashes (the start page) get the page as first loaded:
// the search form and none of these views; whatever else they show is left to other scripts.
// When the view has rendered, <body data-shown> holds the hash it rendered (tests wait for it).
async function route() {
  const hash = window.location.hash;
  delete document.body.dataset.shown;
  const [name, params] = parseHash(hash);
  const view = consoleViews[name];
  showSections(view ? name : null);
  if (!view) {
    document.getElementById("search").hidden = false;
  } else {
    setStatus("");
    await view.show(params);
  }
  if (window.location.hash === hash) document.body.dataset.shown = hash;
}

window.addEventListener("hashchange", route);
document.addEventListener("DOMContentLoaded", route);  // after every view script has registered
