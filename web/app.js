/* app.js: the Tensormorph web UI. Plain ES2017, no dependencies; every number comes from the
** JSON API of `tensormorph serve` (docs/API.md). Views: Architecture (module tree, boundaries,
** plan editing -> recipe), Quantization Diff; the Heatmap is heatmap.js, the Scalar Inspector
** scalar.js, deep links / tensor list / dark mode nav.js. */
"use strict";

const $ = (sel) => document.querySelector(sel);
const TILE = 256;             /* tile side in tile pixels */
const MAX_TILES = 256;        /* tiles kept in memory */

const state = {
  session: null, inspect: null, arch: null, qdiff: null,
  tensors: new Map(),         /* name -> inspect entry (data tensors) */
  plan: new Map(),            /* module path -> scheme key ("exclude", "int8-channel", ...) */
  heat: null,                 /* current heatmap: {name, mode, meta, level, ox, oy} */
  tiles: new Map(), pending: new Set(),
  selected: null,             /* {r, c} element shown in the inspector */
};

/* ---- helpers -------------------------------------------------------------------------------- */

async function api(path) {
  const r = await fetch(path, { headers: { "Accept": "application/json" } });
  const j = await r.json();
  if (!r.ok) throw new Error(j.error || ("HTTP " + r.status));
  return j;
}

/* A failed request: its message in the view's own message line `where` (an element, kept until
** the next success clears it) when given, and as a toast. */
function showError(e, where) {
  const msg = String(e && e.message ? e.message : e);
  if (where) { where.textContent = msg; where.hidden = false; }
  const el = $("#error");
  el.textContent = msg;
  el.hidden = false;
  clearTimeout(showError.timer);
  showError.timer = setTimeout(() => { el.hidden = true; }, 8000);
}

/* Natural order: "layers.2" before "layers.10" (runs of digits compare as numbers, the rest by
** code point; ties by the whole string). */
function natCmp(a, b) {
  const re = /(\d+)|(\D+)/g, x = a.match(re) || [], y = b.match(re) || [];
  for (let i = 0; i < Math.min(x.length, y.length); i++) {
    const p = x[i], q = y[i], dp = p.charCodeAt(0) < 58 && p.charCodeAt(0) > 47, dq = q.charCodeAt(0) < 58 && q.charCodeAt(0) > 47;
    if (dp && dq) {
      const d = p.replace(/^0+/, "").length - q.replace(/^0+/, "").length || (p.replace(/^0+/, "") < q.replace(/^0+/, "") ? -1 : p.replace(/^0+/, "") > q.replace(/^0+/, "") ? 1 : 0);
      if (d) return d;
    } else if (p !== q) return p < q ? -1 : 1;
  }
  return x.length - y.length || (a < b ? -1 : a > b ? 1 : 0);
}

function el(tag, attrs, ...kids) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k === "class") e.className = v;
    else if (k === "text") e.textContent = v;
    else if (k.startsWith("on")) e.addEventListener(k.slice(2), v);
    else e.setAttribute(k, v);
  }
  for (const k of kids) if (k != null) e.append(k);
  return e;
}

/* A page's <section class="view">, hidden until its tab opens (app.js switchView). */
function viewSection(id) {
  const sec = el("section", { id, class: "view" });
  sec.hidden = true;
  return sec;
}

function fmtCount(n) {
  if (n >= 1e9) return (n / 1e9).toFixed(2) + "B";
  if (n >= 1e6) return (n / 1e6).toFixed(2) + "M";
  if (n >= 1e3) return (n / 1e3).toFixed(1) + "K";
  return String(n);
}
function fmtBytes(n) {
  if (n >= 1 << 30) return (n / (1 << 30)).toFixed(2) + " GiB";
  if (n >= 1 << 20) return (n / (1 << 20)).toFixed(2) + " MiB";
  if (n >= 1 << 10) return (n / (1 << 10)).toFixed(1) + " KiB";
  return n + " B";
}
function fmtNum(v) {
  if (typeof v === "string") return v;          /* "nan", "inf", "-inf" */
  if (v === null || v === undefined) return "-";
  return String(v);
}
/* Six significant digits for display (integers as they are); the full value goes in a title and
** data-full (numCell) for hover and copy. */
function fmt6(v) {
  if (typeof v !== "number" || !isFinite(v)) return fmtNum(v);
  if (Number.isInteger(v) && Math.abs(v) < 1e15) return String(v);
  const a = Math.abs(v);
  return a !== 0 && (a < 1e-4 || a >= 1e6) ? v.toExponential(5).replace(/\.?0+e/, "e") : String(Number(v.toPrecision(6)));
}
function numCell(v, attrs) {
  const td = el("td", Object.assign({ text: fmt6(v), title: fmtNum(v), "data-full": fmtNum(v) }, attrs || {}));
  td.classList.add("num");
  return td;
}
function fmtShort(v) {
  if (typeof v !== "number" || !isFinite(v)) return fmtNum(v);
  const a = Math.abs(v);
  return a !== 0 && (a < 1e-3 || a >= 1e5) ? v.toExponential(3) : v.toPrecision(4);
}

function b64bytes(s) {
  const bin = atob(s);
  const u = new Uint8Array(bin.length);
  for (let i = 0; i < bin.length; i++) u[i] = bin.charCodeAt(i);
  return u.buffer;
}

/* ---- colour maps (the same as `tensormorph heatmap`) ------------------------------------------ */

function diverging(t) {           /* -1 blue, 0 white, +1 red */
  if (Number.isNaN(t)) return [96, 96, 96];
  t = Math.max(-1, Math.min(1, t));
  const e = t >= 0 ? [178, 24, 43] : [33, 102, 172];
  const a = Math.abs(t);
  return [Math.round(255 + (e[0] - 255) * a), Math.round(255 + (e[1] - 255) * a), Math.round(255 + (e[2] - 255) * a)];
}
const SEQ = [[0, 0, 4], [87, 16, 110], [188, 55, 84], [249, 142, 9], [252, 255, 164]];
function sequential(t) {          /* 0 black-purple .. 1 pale yellow */
  if (Number.isNaN(t)) return [96, 96, 96];
  t = Math.max(0, Math.min(1, t));
  const x = t * 4, k = Math.min(3, Math.floor(x)), f = x - k;
  return [0, 1, 2].map((i) => Math.round(SEQ[k][i] + (SEQ[k + 1][i] - SEQ[k][i]) * f));
}
function groupColour(id) {        /* golden-ratio hue steps: neighbouring units differ */
  if (id < 0) return [96, 96, 96];
  const h = ((id * 0.6180339887498949) % 1) * 6, s = 0.65, l = id % 2 ? 0.45 : 0.62;
  const c = (1 - Math.abs(2 * l - 1)) * s, x = c * (1 - Math.abs((h % 2) - 1)), m = l - c / 2;
  const rgb = [[c, x, 0], [x, c, 0], [0, c, x], [0, x, c], [x, 0, c], [c, 0, x]][Math.min(5, Math.floor(h))];
  return rgb.map((v) => Math.round((v + m) * 255));
}

/* ---- Architecture ------------------------------------------------------------------------------ */

const PLAN_SCHEMES = {
  "": null,
  "exclude": null,
  "int8-channel": { type: "int8", granularity: "channel", symmetric: true },
  "int8-tensor": { type: "int8", granularity: "tensor", symmetric: true },
  "int4-g128": { type: "int4", granularity: "group:128", symmetric: true },
  "int4-g32": { type: "int4", granularity: "group:32", symmetric: true },
  "int4-g128-asym": { type: "int4", granularity: "group:128", symmetric: false },
  "fp8": { type: "fp8_e4m3", granularity: "channel", symmetric: true },
};
const PLAN_LABELS = {
  "": "(default)", "exclude": "exclude", "int8-channel": "int8 channel", "int8-tensor": "int8 tensor",
  "int4-g128": "int4 group:128", "int4-g32": "int4 group:32", "int4-g128-asym": "int4 group:128 asym",
  "fp8": "fp8 e4m3 channel",
};

/* quantized: styled as a quantized badge; title: a tooltip (the API's long description) */
function badge(text, quantized, title) {
  const cls = text === "mixed" ? "badge mixed" : (quantized ? "badge q" : "badge");
  return el("span", { class: cls, text, title: title || "" });
}

function renderTree() {
  const tree = $("#tree");
  tree.textContent = "";
  const root = state.arch.root;
  const header = el("div", { class: "node head" },
    el("div", { class: "label", text: "module" }), el("div", { text: "dtype" }), el("div", { text: "scheme" }),
    el("div", { class: "num", text: "params" }), el("div", { class: "num", text: "bytes" }), el("div", { text: "plan" }));
  tree.append(header);
  treeFills.clear();
  for (const c of root.children) tree.append(renderNode(c, 0, true));
  const first = tree.querySelector(".node[data-path]");
  if (first) first.tabIndex = 0;  /* the tree's one tab stop (treeKeys moves it) */
  if (!tree.dataset.keys) { tree.dataset.keys = "1"; tree.addEventListener("keydown", treeKeys); }
}

/* Keyboard in the module tree (the WAI-ARIA tree pattern): one tab stop that moves with the
** focus (roving tabindex). Up/Down: the previous/next visible row; Right: open a closed row, or
** go to the first child of an open one; Left: close an open row, or go to the parent; Home/End:
** the first/last visible row; Enter: a leaf opens its heatmap, a subtree opens or closes. */
function treeRows() {
  return [...document.querySelectorAll("#tree .node[data-path]")].filter((r) => r.offsetParent !== null);
}
function focusRow(row) {
  if (!row) return;
  for (const r of document.querySelectorAll("#tree .node[data-path][tabindex='0']")) r.tabIndex = -1;
  row.tabIndex = 0;
  row.focus();
  row.scrollIntoView({ block: "nearest" });
}
function treeKeys(ev) {
  const row = ev.target.closest && ev.target.closest("#tree .node[data-path]");
  if (!row || ev.target !== row) return;  /* keys in a row's plan <select> are the select's */
  const exp = row.getAttribute("aria-expanded"), wrap = row.parentElement;
  let to = null;
  if (ev.key === "ArrowDown" || ev.key === "ArrowUp" || ev.key === "Home" || ev.key === "End") {
    const rows = treeRows(), i = rows.indexOf(row);
    to = ev.key === "Home" ? rows[0] : ev.key === "End" ? rows[rows.length - 1]
       : rows[Math.max(0, Math.min(rows.length - 1, i + (ev.key === "ArrowDown" ? 1 : -1)))];
  } else if (ev.key === "ArrowRight") {
    if (exp === "false") row.flip();
    else if (exp === "true") to = wrap.querySelector(".children > .subtree > .node");
  } else if (ev.key === "ArrowLeft") {
    if (exp === "true") row.flip();
    else { const up = wrap.parentElement.closest(".subtree"); to = up && up.querySelector(".node"); }
  } else if (ev.key === "Enter" || ev.key === " ") {
    row.activate();
  } else return;
  ev.preventDefault();
  if (to) focusRow(to);
}

/* A closed subtree's rows are made when it first opens (a checkpoint of 10k+ tensors would
** otherwise build every row, each with its plan <select>, before the page shows): path -> the
** function that fills that subtree's children. Expand all and search fill what they open. */
const treeFills = new Map();
function fillAncestors(path) {
  const parts = path.split(".");
  for (let i = 1; i < parts.length; i++) { const f = treeFills.get(parts.slice(0, i).join(".")); if (f) f(); }
}

function allNumeric(node) {
  return node.children.length > 0 && node.children.every((c) => /^\d+$/.test(c.name));
}

/* Opens with the top levels and the first block of any numbered list (layers.0) expanded. */
function initiallyOpen(node, depth, firstOfList) {
  if (!node.children.length) return false;
  return depth < 2 || firstOfList;
}

function renderNode(node, depth, firstOfList) {
  const leaf = node.children.length === 0;
  const open = initiallyOpen(node, depth, firstOfList);
  const wrap = el("div", { class: "subtree", "data-path": node.path });
  const toggle = el("span", { class: "toggle", text: leaf ? "" : (open ? "\u25be" : "\u25b8") });
  const name = el("span", { class: "name", text: node.name });
  const planSel = el("select", { class: "plan", "data-path": node.path, title: "scheme for this module in the recipe" });
  for (const k of Object.keys(PLAN_SCHEMES)) planSel.append(el("option", { value: k, text: PLAN_LABELS[k] }));
  planSel.value = state.plan.get(node.path) || "";
  planSel.addEventListener("change", () => {
    if (planSel.value) state.plan.set(node.path, planSel.value); else state.plan.delete(node.path);
  });
  const row = el("div", {
    class: "node" + (node.boundary ? " boundary" : "") + (leaf ? " leaf" : ""),
    role: "treeitem", "data-path": node.path, ...(node.boundary ? { "data-boundary": "1" } : {}),  /* only where drawn */
    "aria-expanded": leaf ? "" : String(open),
    title: node.boundary ? "boundary: dtype or scheme differs from the module above" : "",
  },
    el("div", { class: "label" }, toggle, name),
    el("div", {}, badge(node.dtype, /^(I|U)[48]|^F8/.test(node.dtype))),
    el("div", {}, badge(node.scheme, node.scheme !== "dense" && node.scheme !== "mixed", node.description)),
    el("div", { class: "num", text: fmtCount(node.n_params) }), el("div", { class: "num", text: fmtBytes(node.bytes) }),
    el("div", {}, planSel));
  row.style.paddingLeft = (8 + depth * 16) + "px";  /* CSSOM, not a style attribute: CSP allows it */
  wrap.append(row);
  if (!leaf) {
    const kids = el("div", { class: "children", role: "group" });
    kids.hidden = !open;
    const numbered = allNumeric(node);
    const fill = () => {
      if (!treeFills.has(node.path)) return;
      treeFills.delete(node.path);
      node.children.forEach((c, i) => kids.append(renderNode(c, depth + 1, numbered && i === 0)));
    };
    treeFills.set(node.path, fill);
    if (open) fill();
    wrap.append(kids);
    const flip = () => {
      fill();
      kids.hidden = !kids.hidden;
      toggle.textContent = kids.hidden ? "\u25b8" : "\u25be";
      row.setAttribute("aria-expanded", String(!kids.hidden));
    };
    toggle.addEventListener("click", flip);
    name.addEventListener("click", flip);
    row.flip = row.activate = flip;
  } else {
    name.addEventListener("click", () => openHeatmap(node.tensor));
    row.activate = () => openHeatmap(node.tensor);
  }
  row.tabIndex = -1;
  row.addEventListener("click", (ev) => { if (ev.target.tagName !== "SELECT") focusRow(row); });
  return wrap;
}

function isQuantized(name) {
  const t = state.tensors.get(name);
  return !!(t && t.quantization);
}

function setAll(open) {
  if (open) while (treeFills.size) for (const f of [...treeFills.values()]) f();
  for (const kids of document.querySelectorAll("#tree .children")) {
    kids.hidden = !open;
    const row = kids.previousElementSibling;
    row.setAttribute("aria-expanded", String(open));
    row.querySelector(".toggle").textContent = open ? "\u25be" : "\u25b8";
  }
}

function search(q) {
  q = q.trim().toLowerCase();
  let rows = document.querySelectorAll("#tree .node[data-path]");
  for (const r of rows) r.classList.remove("match");
  if (!q) return;
  // rows not made yet (closed subtrees): make the ones on the way to each match
  if (treeFills.size) {
    const walk = (n) => { if (n.path && n.path.toLowerCase().includes(q)) fillAncestors(n.path); n.children.forEach(walk); };
    walk(state.arch.root);
    rows = document.querySelectorAll("#tree .node[data-path]");
  }
  let first = null;
  for (const r of rows) {
    if (!r.getAttribute("data-path").toLowerCase().includes(q)) continue;
    r.classList.add("match");
    first = first || r;
    /* open every ancestor so the match is visible */
    for (let p = r.parentElement; p && p.id !== "tree"; p = p.parentElement) {
      if (p.classList.contains("children") && p.hidden) {
        p.hidden = false;
        const prow = p.previousElementSibling;
        prow.setAttribute("aria-expanded", "true");
        prow.querySelector(".toggle").textContent = "\u25be";
      }
    }
  }
  if (first) first.scrollIntoView({ block: "center" });
}

function reEscape(s) { return s.replace(/[.*+?^${}()|[\]\\]/g, "\\$&"); }

/* The plan as a recipe (docs/recipe.md): excluded modules -> "ignore", others -> "targets". */
function recipe() {
  const r = {};
  const def = $("#plan-default").value;
  if (PLAN_SCHEMES[def]) r.default = Object.assign({ observer: "minmax", convention: "onnx", scale_dtype: "f32" }, PLAN_SCHEMES[def]);
  const ignore = [], targets = [];
  /* deeper paths first: the first matching target wins */
  const entries = [...state.plan.entries()].sort((a, b) => b[0].split(".").length - a[0].split(".").length);
  for (const [path, key] of entries) {
    const pat = "^" + reEscape(path) + "(\\.|$)";
    if (key === "exclude") ignore.push(pat);
    else if (PLAN_SCHEMES[key]) targets.push({ pattern: pat, scheme: PLAN_SCHEMES[key] });
  }
  if (ignore.length) r.ignore = ignore;
  if (targets.length) r.targets = targets;
  return r;
}

function downloadRecipe() {
  const text = JSON.stringify(recipe(), null, 2) + "\n";
  const url = URL.createObjectURL(new Blob([text], { type: "application/json" }));
  const a = el("a", { href: url, download: "recipe.json" });
  document.body.append(a);
  a.click();
  a.remove();
  setTimeout(() => URL.revokeObjectURL(url), 1000);
}

/* ---- Quantization Diff ------------------------------------------------------------------------ */

let qsort = { key: null, dir: 1 };

function renderQdiff() {
  const q = state.qdiff;
  $("#qdiff-summary").textContent = q.tensors.length + " quantized tensors compared against " + q.ref + ", " + q.n_flagged +
    " flagged, median SQNR " + fmtShort(q.median_sqnr_db) + " dB. Click a row for its error heatmap; click a header to sort.";
  const rows = q.tensors.slice();
  if (qsort.key) {
    const k = qsort.key;
    const val = (e) => (typeof e[k] === "number" ? e[k] : typeof e[k] === "string" && /^-?inf$|^nan$/.test(e[k]) ? (e[k] === "-inf" ? -Infinity : Infinity) : e[k]);
    rows.sort((a, b) => { const x = val(a), y = val(b); return (typeof x === "string" && typeof y === "string" ? natCmp(x, y) : x < y ? -1 : x > y ? 1 : 0) * qsort.dir; });
  }
  const tb = $("#qdiff-table tbody");
  tb.textContent = "";
  for (const e of rows) {
    const tr = el("tr", { class: e.flagged ? "flagged" : "", "data-name": e.name },
      el("td", { text: e.name }), el("td", { text: e.label, title: e.description }), el("td", { class: "num", text: fmtShort(e.sqnr_db) }),
      el("td", { class: "num", text: fmtShort(e.rmse_lsb) }), el("td", { class: "num", text: fmtShort(e.max_err_lsb) }),
      el("td", { class: "num", text: (100 * e.clipped_fraction).toFixed(3) + "%" }), el("td", { class: "num", text: String(e.worst_group) }),
      el("td", { text: e.reason || "" }));
    tr.addEventListener("click", () => openHeatmap(e.name, "error"));
    tb.append(tr);
  }
  for (const th of document.querySelectorAll("#qdiff-table th")) {
    th.classList.toggle("sorted-asc", th.dataset.key === qsort.key && qsort.dir > 0);
    th.classList.toggle("sorted-desc", th.dataset.key === qsort.key && qsort.dir < 0);
  }
}

/* ---- wiring --------------------------------------------------------------------------------------- */

function switchView(v) {
  for (const b of document.querySelectorAll(".tab")) b.classList.toggle("active", b.dataset.view === v);
  for (const s of document.querySelectorAll(".view")) s.hidden = s.id !== "view-" + v;
  if (v === "heat") heatmap.show();  /* heatmap.js */
  if (v === "calib" && typeof calibLab !== "undefined") calibLab.show();  /* calib.js */
  if (v === "release" && typeof releasePage !== "undefined") releasePage.show();  /* release.js */
  if (typeof nav !== "undefined") nav.viewChanged(v);  /* nav.js: the URL hash */
}

function wire() {
  for (const b of document.querySelectorAll(".tab")) b.addEventListener("click", () => switchView(b.dataset.view));
  $("#search").addEventListener("input", (e) => search(e.target.value));
  $("#expand-all").addEventListener("click", () => setAll(true));
  $("#collapse-all").addEventListener("click", () => setAll(false));
  $("#download-recipe").addEventListener("click", downloadRecipe);
  const def = $("#plan-default");
  for (const k of Object.keys(PLAN_SCHEMES)) if (k !== "exclude") def.append(el("option", { value: k, text: k ? PLAN_LABELS[k] : "(tensormorph's default)" }));
  heatmap.wire();  /* heatmap.js */
  for (const th of document.querySelectorAll("#qdiff-table th"))
    th.addEventListener("click", () => {
      qsort = { key: th.dataset.key, dir: qsort.key === th.dataset.key ? -qsort.dir : 1 };
      renderQdiff();
    });
}

async function main() {
  wire();
  try {
    state.session = await api("/api/v1/session");
    $("#session").textContent = state.session.path + (state.session.ref ? "  (reference: " + state.session.ref + ")" : "");
    const [inspect, arch] = await Promise.all([api("/api/v1/inspect"), api("/api/v1/arch")]);
    state.inspect = inspect;
    state.arch = arch;
    for (const t of inspect.tensors) if (t.role === "data") state.tensors.set(t.name, t);
    renderTree();
    if (typeof nav !== "undefined") await nav.start();  /* nav.js: tensor list, deep link */
    document.body.setAttribute("data-loaded", "1");
    if (state.session.ref) {
      $("#tab-qdiff").hidden = false;
      state.qdiff = await api("/api/v1/qdiff");
      renderQdiff();
    }
  } catch (e) { showError(e); }
}

/* after every script of the page has run (heatmap.js, scalar.js, nav.js are loaded after this one) */
window.addEventListener("DOMContentLoaded", main);
