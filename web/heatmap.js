/* heatmap.js: the Heatmap view of the Tensormorph web UI (loaded after app.js; uses its $, api,
** el, showError, fmt6, fmtShort, state, isQuantized, switchView). A tensor is viewed as a
** rows x cols matrix (GET /api/v1/tensor: an N-D weight as [dim 0, the rest], conv [out,
** in*kh*kw]) drawn from 256x256 tiles (GET /api/v1/tile) at a power-of-two step of elements per
** tile pixel, each tile pixel z x z screen pixels with z a whole number (integer zoom steps).
** It opens at Fit: the largest whole zoom at which the matrix fits the view, keeping the aspect
** ratio, except that a matrix more than 4:1 is stretched across its short side by a whole factor
** (so a 120 x 6625 error map is not a thin line) and a tiny tensor is scaled up to fill the view.
** Around the plot: row and column ticks in element indices; below it a colour bar with numbers
** and units for every mode; a hover readout; unit boundaries (channel / group / block) drawn as
** grid lines in the groups mode. Keyboard on the canvas: arrows pan, + and - zoom, 0 fits,
** shift+arrows move the selected element (the Scalar Inspector follows), Enter inspects the
** element at the centre. The view's geometry is in the canvas's data-* attributes for tests. */
"use strict";

const heatmap = (() => {
  const TILE = 256, MAX_TILES = 256;
  const ML = 56, MT = 22;                     /* margins for the row / column ticks */
  const ZS = [1, 2, 3, 4, 5, 6, 8, 10, 12, 16, 20, 24, 32, 40, 48, 64, 96, 128];
  const tiles = new Map(), pending = new Set();
  let groupIds = { lo: Infinity, hi: -Infinity };

  /* level i < 0: step 2^-i elements per tile pixel at zoom 1; i >= 0: step 1, zoom ZS[i] */
  function levelGeom(i) { return i < 0 ? { s: 2 ** -i, z: 1 } : { s: 1, z: ZS[Math.min(i, ZS.length - 1)] }; }
  function geom() {
    const h = state.heat, g = levelGeom(h.level);
    return { s: g.s, zx: g.z * h.rx, zy: g.z * h.ry, pw: Math.ceil(h.meta.cols / g.s), ph: Math.ceil(h.meta.rows / g.s) };
  }
  function plotBox() { const cv = $("#heatmap"); return { x: ML, y: MT, w: cv.width - ML - 4, h: cv.height - MT - 4 }; }
  function css(name, dflt) { return getComputedStyle(document.documentElement).getPropertyValue(name).trim() || dflt; }

  function metaMode(mode) { return mode === "error" ? "error" : "value"; }

  function setError(msg) {
    const e = $("#heat-error");
    if (msg) { e.textContent = msg; e.hidden = false; } else { e.textContent = ""; e.hidden = true; }
  }

  /* Open tensor `name` (mode: value abs groups error; opts.index: [i, j, ...] to select). A
  ** request that fails leaves no picture behind: the view says the API's message. */
  async function open(name, mode, opts) {
    opts = opts || {};
    if ($("#view-heat").hidden) switchView("heat");
    $("#tensor").value = name;
    if (mode) $("#mode").value = mode;
    mode = $("#mode").value;
    if ((mode === "groups" || mode === "error") && state.tensors.has(name) && !isQuantized(name)) { mode = "value"; $("#mode").value = mode; }
    if (mode === "error" && !state.session.ref) { mode = "value"; $("#mode").value = mode; }
    const keep = state.heat && state.heat.name === name;
    const split = keep && opts.split === undefined ? state.heat.split : opts.split;
    let meta;
    try {
      meta = await api("/api/v1/tensor?name=" + encodeURIComponent(name) + "&mode=" + metaMode(mode) +
                       (split !== undefined ? "&split=" + split : ""));
    } catch (e) {
      state.heat = null;
      tiles.clear();
      scalar.clear();
      $("#heat-status").textContent = "";
      $("#legend-label").textContent = "";
      clearCanvas($("#legend-bar"));
      setError(name + ": " + e.message);
      showError(e);
      drawNow();
      if (typeof nav !== "undefined") nav.update();
      return false;
    }
    setError("");
    if (!keep) scalar.clear();
    const refit = !keep || opts.split !== undefined || state.heat.atFit;
    state.heat = keep ? Object.assign(state.heat, { mode, meta, split: meta.split })
                      : { name, mode, meta, level: 0, rx: 1, ry: 1, ox: ML, oy: MT, split: meta.split };
    groupIds = { lo: Infinity, hi: -Infinity };
    updateSplit();
    tiles.clear();
    resizeCanvas();
    if (refit) fit();
    updateModeOptions();
    drawLegend();
    draw();
    if (opts.index) {
      const rc = rcOf(opts.index);
      if (rc) { centreOn(rc.r, rc.c); await inspectAt(rc.r, rc.c); }
    }
    if (typeof nav !== "undefined") nav.update();
    return true;
  }

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

  /* Fit: the largest whole zoom that shows the whole matrix, aspect kept; past 4:1 the short
  ** side is stretched by a whole factor; centred. */
  function fit() {
    const h = state.heat, b = plotBox(), rows = Math.max(1, h.meta.rows), cols = Math.max(1, h.meta.cols);
    const z0 = Math.min(b.w / cols, b.h / rows);
    let level;
    if (z0 >= 1) {
      level = 0;
      while (level + 1 < ZS.length && ZS[level + 1] <= z0) level++;
    } else {
      let s = 1;
      while (Math.ceil(cols / s) > b.w || Math.ceil(rows / s) > b.h) s *= 2;
      level = -Math.log2(s);
    }
    h.level = level;
    h.rx = 1; h.ry = 1;
    let g = geom();
    let pw = g.pw * g.zx, ph = g.ph * g.zy;
    if (pw > 4 * ph) h.ry = Math.max(1, Math.min(Math.floor(b.h / ph), Math.ceil(pw / (4 * ph))));
    else if (ph > 4 * pw) h.rx = Math.max(1, Math.min(Math.floor(b.w / pw), Math.ceil(ph / (4 * pw))));
    g = geom();
    pw = g.pw * g.zx; ph = g.ph * g.zy;
    h.ox = Math.round(b.x + (b.w - pw) / 2);
    h.oy = Math.round(b.y + (b.h - ph) / 2);
    h.atFit = true;   /* until a zoom or pan: a resized window fits again */
  }

  function zoomAt(delta, ax, ay) {
    const h = state.heat;
    if (!h) return;
    const g0 = geom();
    const nl = Math.max(-40, Math.min(ZS.length - 1, h.level + delta));
    if (nl === h.level) return;
    h.atFit = false;
    const ex = ((ax - h.ox) / g0.zx) * g0.s, ey = ((ay - h.oy) / g0.zy) * g0.s;   /* element under the anchor */
    h.level = nl;
    const g = geom();
    h.ox = Math.round(ax - (ex / g.s) * g.zx);
    h.oy = Math.round(ay - (ey / g.s) * g.zy);
    draw();
    if (typeof nav !== "undefined") nav.update();
  }
  function zoomCentre(delta) { const b = plotBox(); zoomAt(delta, b.x + b.w / 2, b.y + b.h / 2); }

  function pan(dx, dy) { const h = state.heat; if (!h) return; h.atFit = false; h.ox += dx; h.oy += dy; draw(); }

  /* Put element (r, c) in the middle of the view when it is outside it. */
  function centreOn(r, c) {
    const h = state.heat, g = geom(), b = plotBox();
    const x = h.ox + Math.floor(c / g.s) * g.zx, y = h.oy + Math.floor(r / g.s) * g.zy;
    if (x < b.x || x + g.zx > b.x + b.w) h.ox += Math.round(b.x + b.w / 2 - x);
    if (y < b.y || y + g.zy > b.y + b.h) h.oy += Math.round(b.y + b.h / 2 - y);
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
    if (pending.has(key)) return;
    pending.add(key);
    try {
      const j = await api("/api/v1/tile?name=" + encodeURIComponent(h.name) + "&mode=" + h.mode + "&split=" + h.meta.split + "&step=" + s +
                          "&x=" + tx * TILE + "&y=" + ty * TILE + "&w=" + TILE + "&h=" + TILE);
      const t = { w: j.w, h: j.h, s, tx, ty };
      if (j.encoding === "i32le-base64") {
        t.groups = new Int32Array(b64bytes(j.groups));
        for (const id of t.groups) if (id >= 0) { if (id < groupIds.lo) groupIds.lo = id; if (id > groupIds.hi) groupIds.hi = id; }
      } else for (const k of ["min", "max", "mean", "absmax"]) t[k] = new Float32Array(b64bytes(j[k]));
      if (h !== state.heat || h.name !== j.name || h.mode !== j.mode) return;  /* a stale answer */
      colourTile(t);
      tiles.set(key, t);
      while (tiles.size > MAX_TILES) tiles.delete(tiles.keys().next().value);
      if (h.mode === "groups") drawLegend();
      draw();
    } catch (e) {
      if (h === state.heat) { setError(h.name + ": " + e.message); showError(e); }
    } finally { pending.delete(key); }
  }

  let queued = false;
  function draw() {
    if (queued) return;
    queued = true;
    requestAnimationFrame(() => { queued = false; drawNow(); });
  }

  function clearCanvas(cv) { cv.getContext("2d").clearRect(0, 0, cv.width, cv.height); }

  function drawNow() {
    const cv = $("#heatmap"), ctx = cv.getContext("2d"), h = state.heat;
    ctx.clearRect(0, 0, cv.width, cv.height);
    if (!h) {
      for (const k of ["tensor", "mode"]) delete cv.dataset[k];
      cv.setAttribute("data-ready", "0");
      return;
    }
    const g = geom(), spanx = TILE * g.zx, spany = TILE * g.zy;
    ctx.imageSmoothingEnabled = false;
    const tx0 = Math.max(0, Math.floor(-h.ox / spanx)), ty0 = Math.max(0, Math.floor(-h.oy / spany));
    const tx1 = Math.min(Math.ceil(g.pw / TILE) - 1, Math.floor((cv.width - h.ox) / spanx));
    const ty1 = Math.min(Math.ceil(g.ph / TILE) - 1, Math.floor((cv.height - h.oy) / spany));
    let loaded = 0, wanted = 0;
    for (let ty = ty0; ty <= ty1; ty++)
      for (let tx = tx0; tx <= tx1; tx++) {
        wanted++;
        const t = tiles.get(tileKey(g.s, tx, ty));
        if (!t) { fetchTile(g.s, tx, ty); continue; }
        loaded++;
        const x = h.ox + tx * spanx, y = h.oy + ty * spany;
        ctx.drawImage(t.canvas, x, y, t.w * g.zx, t.h * g.zy);
        if (h.mode === "groups" && (g.zx >= 4 || g.zy >= 4)) drawGroupLines(ctx, t, x, y, g);
      }
    if (state.selected) {
      const sx = h.ox + Math.floor(state.selected.c / g.s) * g.zx, sy = h.oy + Math.floor(state.selected.r / g.s) * g.zy;
      ctx.strokeStyle = "#00e0ff"; ctx.lineWidth = 2;
      ctx.strokeRect(sx - 1, sy - 1, g.zx + 2, g.zy + 2);
    }
    drawTicks(ctx, cv, g);
    $("#heat-status").textContent = h.meta.rows + " \u00d7 " + h.meta.cols + " (" + h.meta.dtype + ", " + (h.meta.label || "dense") + "), " +
      (g.s > 1 ? g.s + "\u00d7" + g.s + " elements per pixel" : g.zx + (g.zy !== g.zx ? "\u00d7" + g.zy : "") + " px per element") +
      (h.meta.pyramid_step ? ", pyramid from step " + h.meta.pyramid_step : "") + (loaded < wanted ? ", loading\u2026" : "");
    /* the geometry, for tools and tests: element (r, c) sits at ox + floor(c/step)*z, oy + floor(r/step)*zy */
    Object.assign(cv.dataset, { ox: h.ox, oy: h.oy, z: g.zx, zy: g.zy, step: g.s, tensor: h.name, mode: h.mode, rows: h.meta.rows, cols: h.meta.cols });
    cv.setAttribute("data-ready", loaded === wanted ? "1" : "0");
  }

  /* 1, 2 or 5 x 10^k elements between ticks, at least minPx apart */
  function niceStep(n, pxPerElem, minPx) {
    for (let s = 1; ; s *= 10)
      for (const m of [1, 2, 5]) if (s * m * pxPerElem >= minPx || s * m >= n) return s * m;
  }

  function drawTicks(ctx, cv, g) {
    const h = state.heat, bg = css("--panel", "#f6f7f9"), fg = css("--fg", "#1d2330");
    ctx.fillStyle = bg;
    ctx.fillRect(0, 0, cv.width, MT);
    ctx.fillRect(0, 0, ML, cv.height);
    ctx.fillStyle = fg; ctx.strokeStyle = fg; ctx.lineWidth = 1;
    ctx.font = "11px system-ui, sans-serif";
    const ppr = g.zy / g.s, ppc = g.zx / g.s;
    const rs = niceStep(h.meta.rows, ppr, 18), cs = niceStep(h.meta.cols, ppc, 14 + 7 * String(h.meta.cols).length);
    ctx.textAlign = "right"; ctx.textBaseline = "middle";
    const r0 = Math.max(0, Math.ceil(((MT - h.oy) / ppr) / rs) * rs);
    for (let r = r0; r < h.meta.rows; r += rs) {
      const y = h.oy + r * ppr;
      if (y > cv.height) break;
      ctx.fillRect(ML - 5, Math.floor(y), 4, 1);
      ctx.fillText(String(r), ML - 7, y + Math.min(ppr, 12) / 2);
    }
    ctx.textAlign = "center"; ctx.textBaseline = "alphabetic";
    const c0 = Math.max(0, Math.ceil(((ML - h.ox) / ppc) / cs) * cs);
    for (let c = c0; c < h.meta.cols; c += cs) {
      const x = h.ox + c * ppc;
      if (x > cv.width) break;
      ctx.fillRect(Math.floor(x), MT - 5, 1, 4);
      ctx.fillText(String(c), x + Math.min(ppc, 12) / 2, MT - 8);
    }
    ctx.textAlign = "left";
    ctx.fillStyle = css("--muted", "#778");
    ctx.fillText("row \\ col", 2, 12);
  }

  /* unit boundaries: a dark line between neighbouring pixels of different units */
  function drawGroupLines(ctx, t, x0, y0, g) {
    ctx.fillStyle = "rgba(20,20,30,0.85)";
    for (let y = 0; y < t.h; y++)
      for (let x = 0; x < t.w; x++) {
        const id = t.groups[y * t.w + x];
        if (id < 0) continue;
        if (g.zx >= 4 && x + 1 < t.w && t.groups[y * t.w + x + 1] !== id && t.groups[y * t.w + x + 1] >= 0)
          ctx.fillRect(x0 + (x + 1) * g.zx - 1, y0 + y * g.zy, 1, g.zy);
        if (g.zy >= 4 && y + 1 < t.h && t.groups[(y + 1) * t.w + x] !== id && t.groups[(y + 1) * t.w + x] >= 0)
          ctx.fillRect(x0 + x * g.zx, y0 + (y + 1) * g.zy - 1, g.zx, 1);
      }
  }

  /* The colour bar: gradient, five numbers under it, the unit in the label. */
  function drawLegend() {
    const cv = $("#legend-bar"), ctx = cv.getContext("2d"), h = state.heat;
    const w = Math.max(200, Math.min(600, Math.floor(cv.clientWidth || 600)));
    if (cv.width !== w) cv.width = w;
    ctx.clearRect(0, 0, cv.width, cv.height);
    if (!h) return;
    const rg = valueRange(), x0 = 8, x1 = cv.width - 8, bh = 14;
    let lo, hi, unit;
    if (h.mode === "value") { lo = -rg.amax; hi = rg.amax; unit = "mean value per pixel (white = 0); unit: the tensor's values" + (h.meta.quantized ? ", dequantized" : ""); }
    else if (h.mode === "abs") { lo = 0; hi = rg.amax; unit = "largest |value| per pixel; unit: the tensor's values"; }
    else if (h.mode === "error") { lo = 0; hi = rg.hi; unit = "largest |ref \u2212 dequantized| per pixel; unit: LSB (the element's scale)"; }
    else { lo = isFinite(groupIds.lo) ? groupIds.lo : 0; hi = isFinite(groupIds.hi) ? groupIds.hi : 0; unit = "quantization unit id (channel / group / block) of each pixel; lines at unit boundaries"; }
    for (let x = x0; x <= x1; x++) {
      const f = (x - x0) / (x1 - x0);
      const c = h.mode === "value" ? diverging(2 * f - 1) : h.mode === "groups" ? groupColour(Math.round(lo + f * (hi - lo))) : sequential(f);
      ctx.fillStyle = "rgb(" + c.join(",") + ")";
      ctx.fillRect(x, 2, 1, bh);
    }
    const fg = css("--fg", "#1d2330");
    ctx.strokeStyle = fg; ctx.fillStyle = fg; ctx.font = "11px system-ui, sans-serif"; ctx.textAlign = "center";
    for (let k = 0; k <= 4; k++) {
      const x = x0 + (x1 - x0) * k / 4, v = lo + (hi - lo) * k / 4;
      ctx.fillRect(Math.round(x), 2 + bh, 1, 4);
      ctx.textAlign = k === 0 ? "left" : k === 4 ? "right" : "center";
      ctx.fillText(h.mode === "groups" ? String(Math.round(v)) : fmtShort(v), x, 2 + bh + 16);
    }
    Object.assign(cv.dataset, { lo: String(lo), hi: String(hi) });
    $("#legend-label").textContent = unit + " \u2014 from " + fmt6(lo) + " to " + fmt6(hi) + (h.mode === "error" ? " LSB" : "");
  }

  /* The element (row, col of the matrix) under a canvas point, and its pixel's tile data. */
  function pickXY(mx, my) {
    const h = state.heat;
    if (!h || mx < ML || my < MT) return null;
    const g = geom();
    const px = Math.floor((mx - h.ox) / g.zx), py = Math.floor((my - h.oy) / g.zy);
    if (px < 0 || py < 0 || px >= g.pw || py >= g.ph) return null;
    const r = py * g.s, c = px * g.s;
    if (r >= h.meta.rows || c >= h.meta.cols) return null;
    const t = tiles.get(tileKey(g.s, Math.floor(px / TILE), Math.floor(py / TILE)));
    const k = t ? (py % TILE) * t.w + (px % TILE) : -1;
    return { r, c, s: g.s, t, k };
  }
  function pick(ev) {
    const cv = $("#heatmap"), rect = cv.getBoundingClientRect();
    return pickXY((ev.clientX - rect.left) * (cv.width / rect.width), (ev.clientY - rect.top) * (cv.height / rect.height));
  }

  /* matrix (row, col) <-> coordinates in the tensor's own shape */
  function coordsOf(r, c) {
    const shape = state.heat.meta.shape;
    let flat = r * state.heat.meta.cols + c;
    const out = new Array(shape.length).fill(0);
    for (let d = shape.length - 1; d >= 0; d--) { out[d] = flat % shape[d]; flat = Math.floor(flat / shape[d]); }
    return shape.length ? out : [0];
  }
  function rcOf(idx) {
    const m = state.heat.meta, shape = m.shape;
    if (!shape.length) return { r: 0, c: 0 };
    if (idx.length !== shape.length || idx.some((v, d) => !(v >= 0 && v < shape[d]))) return null;
    let flat = 0;
    for (let d = 0; d < shape.length; d++) flat = flat * shape[d] + idx[d];
    return { r: Math.floor(flat / m.cols), c: flat % m.cols };
  }

  function hover(ev) {
    const p = pick(ev), out = $("#hover");
    if (!p) { out.textContent = "\u00a0"; return; }
    const idx = coordsOf(p.r, p.c).join(",");
    let text = p.s > 1 ? "[" + idx + "] + " + p.s + "\u00d7" + p.s + " block" : "[" + idx + "]";
    text += "  (row " + p.r + ", col " + p.c + ")";
    if (p.t && p.k >= 0) {
      if (p.t.groups) text += "  unit " + p.t.groups[p.k];
      else if (p.s === 1) text += state.heat.mode === "error" ? "  error " + fmt6(p.t.max[p.k]) + " LSB" : "  value " + fmt6(p.t.mean[p.k]);
      else text += "  mean " + fmt6(p.t.mean[p.k]) + "  min " + fmt6(p.t.min[p.k]) + "  max " + fmt6(p.t.max[p.k]);
    }
    out.textContent = text;
  }

  async function inspectAt(r, c) {
    const h = state.heat;
    if (!h) return;
    const idx = coordsOf(r, c);
    state.selected = { r, c };
    draw();
    try {
      const d = await api("/api/v1/scalar?name=" + encodeURIComponent(h.name) + "&index=" + idx.join(","));
      if (h !== state.heat) return;
      scalar.render(d);
    } catch (e) { scalar.fail(e); }
    if (typeof nav !== "undefined") nav.update();
  }

  function moveSelection(dr, dc) {
    const h = state.heat;
    if (!h) return;
    const s = state.selected || { r: 0, c: 0 };
    const r = Math.max(0, Math.min(h.meta.rows - 1, s.r + dr)), c = Math.max(0, Math.min(h.meta.cols - 1, s.c + dc));
    centreOn(r, c);
    inspectAt(r, c);
  }

  function resizeCanvas() {
    const cv = $("#heatmap"), w = Math.max(240, Math.floor(cv.clientWidth));
    const top = cv.getBoundingClientRect().top;
    const hgt = Math.max(280, Math.floor(window.innerHeight - Math.max(0, top) - 110));
    cv.style.height = hgt + "px";
    if (cv.width !== w) cv.width = w;
    if (cv.height !== hgt) cv.height = hgt;
  }

  function onKey(ev) {
    if (!state.heat || ev.altKey || ev.ctrlKey || ev.metaKey) return;
    const step = 64, k = ev.key;
    const arrows = { ArrowLeft: [0, -1], ArrowRight: [0, 1], ArrowUp: [-1, 0], ArrowDown: [1, 0] };
    if (arrows[k]) {
      const [dr, dc] = arrows[k];
      if (ev.shiftKey) moveSelection(dr, dc);
      else pan(-dc * step, -dr * step);
    } else if (k === "+" || k === "=") zoomCentre(1);
    else if (k === "-" || k === "_") zoomCentre(-1);
    else if (k === "0" || k === "f") { fit(); draw(); }
    else if (k === "Enter") { const b = plotBox(); const p = pickXY(b.x + b.w / 2, b.y + b.h / 2); if (p) inspectAt(p.r, p.c); }
    else return;
    ev.preventDefault();
  }

  function wire() {
    $("#mode").addEventListener("change", () => { if (state.heat) open(state.heat.name, $("#mode").value); });
    $("#split").addEventListener("change", () => { if (state.heat) open(state.heat.name, $("#mode").value, { split: Number($("#split").value) }); });
    const cv = $("#heatmap");
    $("#zoom-in").addEventListener("click", () => zoomCentre(1));
    $("#zoom-out").addEventListener("click", () => zoomCentre(-1));
    $("#zoom-fit").addEventListener("click", () => { if (state.heat) { fit(); draw(); } });
    cv.addEventListener("wheel", (ev) => {
      ev.preventDefault();
      const rect = cv.getBoundingClientRect();
      zoomAt(ev.deltaY < 0 ? 1 : -1, (ev.clientX - rect.left) * (cv.width / rect.width), (ev.clientY - rect.top) * (cv.height / rect.height));
    }, { passive: false });
    let drag = null;
    cv.addEventListener("mousedown", (ev) => { if (state.heat) drag = { x: ev.clientX, y: ev.clientY, ox: state.heat.ox, oy: state.heat.oy, moved: false }; });
    window.addEventListener("mousemove", (ev) => {
      if (!drag || !state.heat) return;
      const dx = ev.clientX - drag.x, dy = ev.clientY - drag.y;
      if (Math.abs(dx) + Math.abs(dy) > 3) drag.moved = true;
      if (drag.moved) { state.heat.atFit = false; state.heat.ox = drag.ox + dx; state.heat.oy = drag.oy + dy; draw(); }
    });
    window.addEventListener("mouseup", (ev) => {
      const d = drag;
      drag = null;
      if (d && !d.moved && ev.target === cv) { const p = pick(ev); if (p) inspectAt(p.r, p.c); }
    });
    cv.addEventListener("mousemove", hover);
    cv.addEventListener("keydown", onKey);
    window.addEventListener("resize", () => {
      if ($("#view-heat").hidden) return;
      resizeCanvas();
      if (state.heat && state.heat.atFit) fit();
      drawLegend();
      draw();
    });
  }

  function show() { resizeCanvas(); if (state.heat) { if (state.heat.atFit) fit(); drawLegend(); } draw(); }

  return { open, wire, show, draw, fit, inspectAt, coordsOf };
})();

/* app.js's callers (tree, qdiff) open a tensor through here */
function openHeatmap(name, mode) { return heatmap.open(name, mode); }
