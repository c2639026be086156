/* app.js: the Tensormorph web UI. Plain ES2017, no dependencies; every number comes from the
** JSON API of `tensormorph serve` (docs/API.md). Views: Architecture (module tree, boundaries,
** plan editing -> recipe), Heatmap (tiles at power-of-two zoom, pan/zoom canvas, legend, hover),
** Scalar Inspector, Quantization Diff. */
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

function showError(e) {
  const el = $("#error");
  el.textContent = String(e && e.message ? e.message : e);
  el.hidden = false;
  setTimeout(() => { el.hidden = true; }, 6000);
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
  for (const c of root.children) tree.append(renderNode(c, 0, true));
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
    node.children.forEach((c, i) => kids.append(renderNode(c, depth + 1, numbered && i === 0)));
    wrap.append(kids);
    const flip = () => {
      kids.hidden = !kids.hidden;
      toggle.textContent = kids.hidden ? "\u25b8" : "\u25be";
      row.setAttribute("aria-expanded", String(!kids.hidden));
    };
    toggle.addEventListener("click", flip);
    name.addEventListener("click", flip);
  } else {
    name.addEventListener("click", () => openHeatmap(node.tensor));
  }
  return wrap;
}

function isQuantized(name) {
  const t = state.tensors.get(name);
  return !!(t && t.quantization);
}

function setAll(open) {
  for (const kids of document.querySelectorAll("#tree .children")) {
    kids.hidden = !open;
    const row = kids.previousElementSibling;
    row.setAttribute("aria-expanded", String(open));
    row.querySelector(".toggle").textContent = open ? "\u25be" : "\u25b8";
  }
}

function search(q) {
  q = q.trim().toLowerCase();
  const rows = document.querySelectorAll("#tree .node[data-path]");
  for (const r of rows) r.classList.remove("match");
  if (!q) return;
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

/* ---- Heatmap ------------------------------------------------------------------------------------ */

/* level L >= 0: step 1, each element 2^L screen pixels; L < 0: step 2^-L, one pixel each. */
function stepOf(L) { return L >= 0 ? 1 : 2 ** -L; }
function zoomOf(L) { return L >= 0 ? 2 ** L : 1; }

function heatGeometry() {
  const h = state.heat, s = stepOf(h.level), z = zoomOf(h.level);
  const zy = h.meta.rows === 1 ? Math.max(z, 24) : z;   /* a strip gets some height */
  return { s, z, zy, pw: Math.ceil(h.meta.cols / s), ph: Math.ceil(h.meta.rows / s) };
}

function metaMode(mode) { return mode === "error" ? "error" : "value"; }

async function openHeatmap(name, mode) {
  switchView("heat");
  $("#tensor").value = name;
  if (mode) $("#mode").value = mode;
  mode = $("#mode").value;
  if ((mode === "groups" || mode === "error") && !isQuantized(name)) { mode = "value"; $("#mode").value = mode; }
  if (mode === "error" && !state.session.ref) { mode = "value"; $("#mode").value = mode; }
  try {
    const keep = state.heat && state.heat.name === name;
    const split = keep && state.heat.split !== undefined ? state.heat.split : undefined;
    const meta = await api("/api/v1/tensor?name=" + encodeURIComponent(name) + "&mode=" + metaMode(mode) +
                           (split !== undefined ? "&split=" + split : ""));
    if (!keep) clearInspector();
    state.heat = keep ? Object.assign(state.heat, { mode, meta }) : { name, mode, meta, level: 0, ox: 0, oy: 0, split: meta.split };
    updateSplit();
    state.tiles.clear();
    if (!keep || state.heat.fitNext) { fit(); state.heat.fitNext = false; }
    updateModeOptions();
    drawLegend();
    draw();
  } catch (e) { showError(e); }
}

/* N-D tensors: choose how many leading dims form the rows. */
function updateSplit() {
  const h = state.heat, sel = $("#split"), nd = h.meta.shape.length;
  $("#split-label").hidden = nd <= 2;
  sel.textContent = "";
  for (let k = 0; k <= nd; k++) sel.append(el("option", { value: String(k), text: k + " [" + h.meta.shape.slice(0, k).join("\u00d7") + "]" }));
  sel.value = String(h.meta.split);
}

function updateModeOptions() {
  const q = isQuantized(state.heat.name);
  for (const o of $("#mode").options) {
    if (o.value === "groups") o.disabled = !q;
    if (o.value === "error") o.disabled = !q || !state.session.ref;
  }
}

function fit() {
  const h = state.heat, cv = $("#heatmap");
  const W = cv.width, H = cv.height;
  const sc = Math.min(W / h.meta.cols, h.meta.rows === 1 ? Infinity : H / h.meta.rows);
  h.level = sc >= 1 ? Math.min(5, Math.floor(Math.log2(sc))) : -Math.ceil(Math.log2(1 / sc));
  const g = heatGeometry();
  h.ox = Math.round((W - g.pw * g.z) / 2);
  h.oy = Math.round((H - g.ph * g.zy) / 2);
}

function zoomAt(delta, ax, ay) {
  const h = state.heat;
  if (!h) return;
  const g0 = heatGeometry();
  const nl = Math.max(-40, Math.min(6, h.level + delta));
  if (nl === h.level) return;
  const ex = ((ax - h.ox) / g0.z) * g0.s, ey = ((ay - h.oy) / g0.zy) * g0.s;  /* element under the anchor */
  h.level = nl;
  const g = heatGeometry();
  h.ox = Math.round(ax - (ex / g.s) * g.z);
  h.oy = Math.round(ay - (ey / g.s) * g.zy);
  draw();
}

function valueRange() {
  const m = state.heat.meta;
  const lo = typeof m.min === "number" ? m.min : 0, hi = typeof m.max === "number" ? m.max : 0;
  return { lo, hi, amax: Math.max(Math.abs(lo), Math.abs(hi)) };
}

function colourTile(t) {
  const h = state.heat, img = new ImageData(t.w, t.h), d = img.data, rg = valueRange();
  for (let k = 0; k < t.w * t.h; k++) {
    let c;
    if (h.mode === "groups") c = groupColour(t.groups[k]);
    else if (h.mode === "value") c = diverging(rg.amax > 0 ? t.mean[k] / rg.amax : (Number.isNaN(t.mean[k]) ? NaN : 0));
    else if (h.mode === "abs") c = sequential(rg.amax > 0 ? t.absmax[k] / rg.amax : (Number.isNaN(t.absmax[k]) ? NaN : 0));
    else c = sequential(rg.hi > 0 ? t.max[k] / rg.hi : (Number.isNaN(t.max[k]) ? NaN : 0));
    const outside = h.mode === "groups" ? t.groups[k] < 0 : Number.isNaN(t.min[k]);
    d[4 * k] = c[0]; d[4 * k + 1] = c[1]; d[4 * k + 2] = c[2]; d[4 * k + 3] = outside ? 0 : 255;
  }
  const off = document.createElement("canvas");
  off.width = t.w; off.height = t.h;
  off.getContext("2d").putImageData(img, 0, 0);
  t.canvas = off;
}

function tileKey(s, tx, ty) { const h = state.heat; return h.name + "|" + h.mode + "|" + h.meta.split + "|" + s + "|" + tx + "|" + ty; }

async function fetchTile(s, tx, ty) {
  const h = state.heat, key = tileKey(s, tx, ty);
  if (state.pending.has(key)) return;
  state.pending.add(key);
  try {
    const j = await api("/api/v1/tile?name=" + encodeURIComponent(h.name) + "&mode=" + h.mode + "&split=" + h.meta.split + "&step=" + s +
                        "&x=" + tx * TILE + "&y=" + ty * TILE + "&w=" + TILE + "&h=" + TILE);
    const t = { w: j.w, h: j.h, s, tx, ty };
    if (j.encoding === "i32le-base64") t.groups = new Int32Array(b64bytes(j.groups));
    else for (const k of ["min", "max", "mean", "absmax"]) t[k] = new Float32Array(b64bytes(j[k]));
    if (h !== state.heat || h.name !== j.name || h.mode !== j.mode) return;  /* a stale answer */
    colourTile(t);
    state.tiles.set(key, t);
    while (state.tiles.size > MAX_TILES) state.tiles.delete(state.tiles.keys().next().value);
    draw();
  } catch (e) { showError(e); } finally { state.pending.delete(key); }
}

let drawQueued = false;
function draw() {
  if (drawQueued) return;
  drawQueued = true;
  requestAnimationFrame(() => { drawQueued = false; drawNow(); });
}

function drawNow() {
  const cv = $("#heatmap"), ctx = cv.getContext("2d"), h = state.heat;
  ctx.clearRect(0, 0, cv.width, cv.height);
  if (!h) return;
  const g = heatGeometry(), span = TILE * g.z, spany = TILE * g.zy;
  ctx.imageSmoothingEnabled = false;
  const tx0 = Math.max(0, Math.floor(-h.ox / span)), ty0 = Math.max(0, Math.floor(-h.oy / spany));
  const tx1 = Math.min(Math.ceil(g.pw / TILE) - 1, Math.floor((cv.width - h.ox) / span));
  const ty1 = Math.min(Math.ceil(g.ph / TILE) - 1, Math.floor((cv.height - h.oy) / spany));
  let loaded = 0, wanted = 0;
  for (let ty = ty0; ty <= ty1; ty++)
    for (let tx = tx0; tx <= tx1; tx++) {
      wanted++;
      const t = state.tiles.get(tileKey(g.s, tx, ty));
      if (!t) { fetchTile(g.s, tx, ty); continue; }
      loaded++;
      const x = h.ox + tx * span, y = h.oy + ty * spany;
      ctx.drawImage(t.canvas, x, y, t.w * g.z, t.h * g.zy);
      if (h.mode === "groups" && g.z >= 4) drawGroupLines(ctx, t, x, y, g);
    }
  /* the selected element */
  if (state.selected) {
    const sx = h.ox + Math.floor(state.selected.c / g.s) * g.z, sy = h.oy + Math.floor(state.selected.r / g.s) * g.zy;
    ctx.strokeStyle = "#00e0ff"; ctx.lineWidth = 2;
    ctx.strokeRect(sx - 1, sy - 1, g.z + 2, g.zy + 2);
  }
  $("#heat-status").textContent = h.meta.rows + " \u00d7 " + h.meta.cols + " (" + h.meta.dtype + ", " + (h.meta.label || "dense") + "), " +
    (g.s > 1 ? g.s + "\u00d7" + g.s + " elements per pixel" : g.z + " px per element") +
    (h.meta.pyramid_step ? ", pyramid from step " + h.meta.pyramid_step : "") + (loaded < wanted ? ", loading\u2026" : "");
  /* the view's geometry, for tools and tests: element (r, c) sits at ox + floor(c/step)*z, ... */
  Object.assign(cv.dataset, { ox: h.ox, oy: h.oy, z: g.z, zy: g.zy, step: g.s, tensor: h.name, mode: h.mode });
  cv.setAttribute("data-ready", loaded === wanted ? "1" : "0");
}

/* Quantization-unit boundaries: a dark line between neighbouring pixels of different units. */
function drawGroupLines(ctx, t, x0, y0, g) {
  ctx.fillStyle = "rgba(20,20,30,0.85)";
  for (let y = 0; y < t.h; y++)
    for (let x = 0; x < t.w; x++) {
      const id = t.groups[y * t.w + x];
      if (id < 0) continue;
      if (x + 1 < t.w && t.groups[y * t.w + x + 1] !== id && t.groups[y * t.w + x + 1] >= 0)
        ctx.fillRect(x0 + (x + 1) * g.z - 1, y0 + y * g.zy, 1, g.zy);
      if (y + 1 < t.h && t.groups[(y + 1) * t.w + x] !== id && t.groups[(y + 1) * t.w + x] >= 0 && g.zy >= 4)
        ctx.fillRect(x0 + x * g.z, y0 + (y + 1) * g.zy - 1, g.z, 1);
    }
}

function drawLegend() {
  const cv = $("#legend-bar"), ctx = cv.getContext("2d"), h = state.heat;
  const img = ctx.createImageData(cv.width, cv.height), rg = valueRange();
  for (let x = 0; x < cv.width; x++) {
    const f = x / (cv.width - 1);
    const c = h.mode === "value" ? diverging(2 * f - 1) : h.mode === "groups" ? groupColour(Math.floor(f * 8)) : sequential(f);
    for (let y = 0; y < cv.height; y++) {
      const o = 4 * (y * cv.width + x);
      img.data[o] = c[0]; img.data[o + 1] = c[1]; img.data[o + 2] = c[2]; img.data[o + 3] = 255;
    }
  }
  ctx.putImageData(img, 0, 0);
  const labels = {
    value: [fmtShort(-rg.amax), "mean value (white = 0)", fmtShort(rg.amax)],
    abs: ["0", "largest |value| per pixel", fmtShort(rg.amax)],
    error: ["0", "largest |ref \u2212 dequantized| in LSB per pixel", fmtShort(rg.hi)],
    groups: ["", "one colour per channel / group / block; lines at boundaries", ""],
  }[h.mode];
  $("#legend-lo").textContent = labels[0];
  $("#legend-label").textContent = labels[1];
  $("#legend-hi").textContent = labels[2];
}

/* The element (row, col of the 2-D view) under a canvas point, and the pixel's tile data. */
function pick(ev) {
  const h = state.heat;
  if (!h) return null;
  const cv = $("#heatmap"), rect = cv.getBoundingClientRect();
  const mx = (ev.clientX - rect.left) * (cv.width / rect.width), my = (ev.clientY - rect.top) * (cv.height / rect.height);
  const g = heatGeometry();
  const px = Math.floor((mx - h.ox) / g.z), py = Math.floor((my - h.oy) / g.zy);
  if (px < 0 || py < 0 || px >= g.pw || py >= g.ph) return null;
  const r = py * g.s, c = px * g.s;
  if (r >= h.meta.rows || c >= h.meta.cols) return null;
  const t = state.tiles.get(tileKey(g.s, Math.floor(px / TILE), Math.floor(py / TILE)));
  const k = t ? (py % TILE) * t.w + (px % TILE) : -1;
  return { r, c, s: g.s, t, k };
}

/* 2-D view (row, col) -> coordinates in the tensor's own shape. */
function coordsOf(r, c) {
  const shape = state.heat.meta.shape;
  let flat = r * state.heat.meta.cols + c;
  const out = new Array(shape.length).fill(0);
  for (let d = shape.length - 1; d >= 0; d--) { out[d] = flat % shape[d]; flat = Math.floor(flat / shape[d]); }
  return shape.length ? out : [0];
}

function hover(ev) {
  const p = pick(ev);
  const out = $("#hover");
  if (!p) { out.textContent = "\u00a0"; return; }
  const idx = coordsOf(p.r, p.c).join(",");
  let text = p.s > 1 ? "[" + idx + "] + " + p.s + "\u00d7" + p.s + " block" : "[" + idx + "]";
  if (p.t && p.k >= 0) {
    if (p.t.groups) text += "  unit " + p.t.groups[p.k];
    else if (p.s === 1) text += state.heat.mode === "error" ? "  error " + fmtShort(p.t.max[p.k]) + " LSB" : "  value " + fmtNum(p.t.mean[p.k]);
    else text += "  mean " + fmtShort(p.t.mean[p.k]) + "  min " + fmtShort(p.t.min[p.k]) + "  max " + fmtShort(p.t.max[p.k]);
  }
  out.textContent = text;
}

async function inspectAt(r, c) {
  const h = state.heat, idx = coordsOf(r, c);
  state.selected = { r, c };
  draw();
  try {
    const d = await api("/api/v1/scalar?name=" + encodeURIComponent(h.name) + "&index=" + idx.join(","));
    renderInspector(d);
  } catch (e) { showError(e); }
}

/* Another tensor: nothing selected, nothing inspected. */
function clearInspector() {
  state.selected = null;
  $("#inspector-table tbody").textContent = "";
  $("#inspector-hint").textContent = "Click an element of the heatmap.";
  $("#inspector").removeAttribute("data-flat");
  $("#hover").textContent = "\u00a0";
}

function renderInspector(d) {
  const rows = [
    ["tensor", d.tensor, "tensor"], ["index", "[" + d.index.join(", ") + "]", "index"], ["flat index", d.flat_index, "flat_index"],
    ["dtype", d.dtype, "dtype"],
  ];
  if (d.quantized) rows.push(["scheme", d.label, "label"]);
  if (d.quantized) {
    const hex = "0x" + BigInt.asUintN(64, BigInt(d.stored)).toString(16).padStart(d.stored_bits / 4, "0");
    rows.push(["code q", d.code, "code"], ["container word", hex + " (" + d.stored_bits + "-bit)", "stored"],
              ["scale", fmtNum(d.scale), "scale"], ["zero point", d.zero_point, "zero_point"], ["group", d.group, "group"]);
  }
  rows.push(["value", fmtNum(d.value), "value"]);
  if (d.ref_value !== null) {
    rows.push(["source value", fmtNum(d.ref_value), "ref_value"], ["error", fmtNum(d.error), "error"]);
    if (d.error_lsb !== null) rows.push(["error (LSB)", fmtNum(d.error_lsb), "error_lsb"]);
  }
  const tb = $("#inspector-table tbody");
  tb.textContent = "";
  for (const [k, v, f] of rows) tb.append(el("tr", {}, el("td", { text: k }), el("td", { "data-field": f, text: String(v) })));
  $("#inspector-hint").textContent = d.quantized ? "value = (q \u2212 zero point) \u00d7 scale" : "not quantized: the stored value";
  $("#inspector").setAttribute("data-flat", String(d.flat_index));
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
    rows.sort((a, b) => { const x = val(a), y = val(b); return (x < y ? -1 : x > y ? 1 : 0) * qsort.dir; });
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
  if (v === "heat") { resizeCanvas(); draw(); }
  if (v === "calib" && typeof calibLab !== "undefined") calibLab.show();  /* calib.js */
  if (v === "release" && typeof releasePage !== "undefined") releasePage.show();  /* release.js */
}

function resizeCanvas() {
  const cv = $("#heatmap"), w = Math.max(200, Math.floor(cv.clientWidth));
  if (cv.width !== w) cv.width = w;
}

function wire() {
  for (const b of document.querySelectorAll(".tab")) b.addEventListener("click", () => switchView(b.dataset.view));
  $("#search").addEventListener("input", (e) => search(e.target.value));
  $("#expand-all").addEventListener("click", () => setAll(true));
  $("#collapse-all").addEventListener("click", () => setAll(false));
  $("#download-recipe").addEventListener("click", downloadRecipe);
  const def = $("#plan-default");
  for (const k of Object.keys(PLAN_SCHEMES)) if (k !== "exclude") def.append(el("option", { value: k, text: k ? PLAN_LABELS[k] : "(tensormorph's default)" }));
  $("#tensor").addEventListener("change", (e) => { if (state.tensors.has(e.target.value)) openHeatmap(e.target.value); });
  $("#mode").addEventListener("change", () => { if (state.heat) openHeatmap(state.heat.name, $("#mode").value); });
  $("#split").addEventListener("change", () => {
    if (!state.heat) return;
    state.heat.split = Number($("#split").value);
    state.heat.fitNext = true;
    openHeatmap(state.heat.name, $("#mode").value);
  });
  const cv = $("#heatmap");
  $("#zoom-in").addEventListener("click", () => zoomAt(1, cv.width / 2, cv.height / 2));
  $("#zoom-out").addEventListener("click", () => zoomAt(-1, cv.width / 2, cv.height / 2));
  $("#zoom-fit").addEventListener("click", () => { if (state.heat) { fit(); draw(); } });
  cv.addEventListener("wheel", (ev) => {
    ev.preventDefault();
    const rect = cv.getBoundingClientRect();
    zoomAt(ev.deltaY < 0 ? 1 : -1, (ev.clientX - rect.left) * (cv.width / rect.width), (ev.clientY - rect.top) * (cv.height / rect.height));
  }, { passive: false });
  let drag = null;
  cv.addEventListener("mousedown", (ev) => { if (state.heat) drag = { x: ev.clientX, y: ev.clientY, ox: state.heat.ox, oy: state.heat.oy, moved: false }; });
  window.addEventListener("mousemove", (ev) => {
    if (drag) {
      const dx = ev.clientX - drag.x, dy = ev.clientY - drag.y;
      if (Math.abs(dx) + Math.abs(dy) > 3) drag.moved = true;
      if (drag.moved) { state.heat.ox = drag.ox + dx; state.heat.oy = drag.oy + dy; draw(); }
    }
  });
  window.addEventListener("mouseup", (ev) => {
    const d = drag;
    drag = null;
    if (d && !d.moved && ev.target === cv) { const p = pick(ev); if (p) inspectAt(p.r, p.c); }
  });
  cv.addEventListener("mousemove", hover);
  window.addEventListener("resize", () => { resizeCanvas(); draw(); });
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
    const dl = $("#tensor-names");
    for (const t of inspect.tensors) {
      if (t.role !== "data") continue;
      state.tensors.set(t.name, t);
      dl.append(el("option", { value: t.name }));
    }
    renderTree();
    document.body.setAttribute("data-loaded", "1");
    if (state.session.ref) {
      $("#tab-qdiff").hidden = false;
      state.qdiff = await api("/api/v1/qdiff");
      renderQdiff();
    }
  } catch (e) { showError(e); }
}

main();
