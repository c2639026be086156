// view.js: the Architecture Editor's diagram: one SVG <g data-node> per node (all drawn at the
// first fit), zoom (wheel, +/-), pan (drag), fit, a minimap for large graphs, search that dims
// what does not match, counts the matches and jumps between them, selection (click, shift-click,
// a name pattern), a scheme set on the selection and the recipe download. Test hooks: the view
// root carries data-view="architecture", each node data-node, each drawn boundary data-boundary.
// Sensitivity (serve --sensitivity FILE, or a JSON loaded on the page): each module coloured by
// its unit's measured KLD (legend with the numbers), its rank and the plan's precision, and
// "Start from this plan" loads the plan into the editor. Keyboard: the nodes are one roving tab
// stop; arrows move along the graph (Down successor, Up predecessor, Left/Right siblings),
// Enter/Space select (Shift adds), Escape clears the selection.
import { onnxDiagram, blockDiagram } from "./model.js";
import { layoutDiagram } from "./layout.js";
import { SCHEMES, GGUF_FILE_TYPES, schemesFor, buildRecipe, planFromSensitivity, schemeObject } from "./recipe.js";
import { normalizeSensitivity, sensScale, fmtNum } from "./sens.js";

const SVG = "http://www.w3.org/2000/svg";
const MINIMAP_FROM = 40;      // nodes: a minimap from this many on
const MINIMAP_W = 200, MINIMAP_H = 150, MINIMAP_GAP = 10 + 8;   // its box, its CSS offset plus a margin
const LABEL_MIN_PX = 9;       // labels drawn at this many screen px or more, else hidden
const NAME_PX = 10;           // the "names" level of detail: titles at this many screen px

function h(tag, attrs, ...kids) {
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
function s(tag, attrs) {
  const e = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k === "text") e.textContent = v;
    else e.setAttribute(k, v);
  }
  return e;
}
async function getJSON(path) {
  const r = await fetch(path, { headers: { Accept: "application/json" } });
  const j = await r.json();
  if (!r.ok) throw new Error(j.error || "HTTP " + r.status);
  return j;
}

export class ArchView {
  constructor(section) {
    this.section = section;
    this.expanded = new Set();     // ONNX subgraph owners / checkpoint layer stacks shown open
    this.selected = new Set();     // node names
    this.plan = new Map();         // module path or weight name -> scheme key
    this.view = { k: 1, tx: 0, ty: 0 };
    this.matches = [];
    this.matchAt = -1;
    this.sens = null;              // normalizeSensitivity(...) of the result shown, or null
    this.focusName = null;         // the node holding the roving tab stop
  }

  async load() {
    this.build();
    try {
      const g = await getJSON("/api/v1/graph");
      if (g.n_nodes > 0) { this.kind = "onnx"; this.graph = g; }
      else { this.kind = "blocks"; this.inspect = await getJSON("/api/v1/inspect"); }
      this.form = this.kind === "onnx" ? "onnx" : this.inspect.format === "gguf" ? "gguf" : "ct";
      this.indexTensors();
      this.fillSchemes();
      this.sensBar.hidden = this.kind === "onnx";
      if (this.kind !== "onnx") {
        // serve --sensitivity FILE: the result rides on /api/v1/arch
        try {
          const a = await getJSON("/api/v1/arch");
          if (a.sensitivity) this.setSensitivity(a.sensitivity, "serve --sensitivity", false);
        } catch (e) { this.sensError = "the sensitivity result could not be read: " + (e && e.message ? e.message : e); }
      }
      this.relayout(true);
      if (this.sensError) { this.status.textContent = this.sensError; this.status.classList.add("arch-error"); }
      this.root.setAttribute("data-ready", "1");
    } catch (e) {
      this.status.textContent = "The diagram could not be built: " + (e && e.message ? e.message : e);
      this.status.classList.add("arch-error");
    }
  }

  /* ---- DOM ---------------------------------------------------------------------------------- */
  build() {
    const sec = this.section;
    sec.setAttribute("data-view", "architecture");
    const tab = document.getElementById("tab-arch");
    if (tab && !tab.hasAttribute("data-tab")) tab.setAttribute("data-tab", "architecture");
    this.tableParts = [...sec.children];
    this.modeDiagram = h("button", { class: "arch-mode active", type: "button", "aria-pressed": "true", "data-mode": "diagram", text: "Diagram" });
    this.modeTable = h("button", { class: "arch-mode", type: "button", "aria-pressed": "false", "data-mode": "table", text: "Table" });
    this.modeDiagram.addEventListener("click", () => this.setMode("diagram"));
    this.modeTable.addEventListener("click", () => this.setMode("table"));
    const modes = h("div", { class: "arch-modes", role: "group", "aria-label": "Architecture as" }, this.modeDiagram, this.modeTable);
    this.search = h("input", { type: "search", class: "arch-search", "data-input": "arch-search", "aria-label": "search nodes (a name or an op type; /regex/)", placeholder: "search (name, op, /re/)", autocomplete: "off" });
    this.count = h("span", { class: "arch-count", "aria-live": "polite", "data-count": "" });
    const prev = h("button", { type: "button", title: "previous match (Shift+Enter)", "aria-label": "previous match", text: "\u2191" });
    const next = h("button", { type: "button", title: "next match (Enter)", "aria-label": "next match", text: "\u2193" });
    this.search.addEventListener("input", () => this.runSearch());
    this.search.addEventListener("keydown", (ev) => { if (ev.key === "Enter") { ev.preventDefault(); this.jump(ev.shiftKey ? -1 : 1); } });
    prev.addEventListener("click", () => this.jump(-1));
    next.addEventListener("click", () => this.jump(1));
    const zin = h("button", { type: "button", "aria-label": "zoom in", title: "zoom in", text: "+" });
    const zout = h("button", { type: "button", "aria-label": "zoom out", title: "zoom out", text: "\u2212" });
    const fit = h("button", { type: "button", class: "arch-fit", text: "Fit" });
    zin.addEventListener("click", () => this.zoomBy(1.25));
    zout.addEventListener("click", () => this.zoomBy(0.8));
    fit.addEventListener("click", () => this.fit());
    this.stackBtn = h("button", { type: "button", class: "arch-stack-toggle", text: "Expand all" });
    this.stackBtn.addEventListener("click", () => this.toggleAllStacks());
    this.pattern = h("input", { type: "text", class: "arch-pattern", "aria-label": "select nodes whose name matches this regular expression", placeholder: "select by name (regex)", autocomplete: "off", size: "16" });
    const selBtn = h("button", { type: "button", class: "arch-select", text: "Select" });
    selBtn.addEventListener("click", () => this.selectPattern(this.pattern.value));
    this.pattern.addEventListener("keydown", (ev) => { if (ev.key === "Enter") this.selectPattern(this.pattern.value); });
    this.scheme = h("select", { class: "arch-scheme", "aria-label": "scheme for the selected nodes" });
    const setBtn = h("button", { type: "button", class: "arch-set", text: "Set scheme" });
    setBtn.addEventListener("click", () => this.setScheme(this.scheme.value));
    const clearBtn = h("button", { type: "button", class: "arch-clear", text: "Clear plan" });
    clearBtn.addEventListener("click", () => {
      this.plan.clear();
      if (this.form === "ct-rules") { this.form = "ct"; this.fillSchemes(); delete this.root.dataset.planFrom; }
      this.paintPlan();
    });
    this.defScheme = h("select", { class: "arch-default", "aria-label": "default scheme of the recipe" });
    const dl = h("button", { type: "button", class: "arch-download", title: "the plan as a recipe for tensormorph quantize --recipe FILE", text: "Download recipe" });
    dl.addEventListener("click", () => this.download());
    this.status = h("span", { class: "arch-status", role: "status" });
    const bar = h("div", { class: "toolbar arch-toolbar" }, modes, this.search, this.count, prev, next,
      h("span", { class: "arch-sep" }), zout, zin, fit, this.stackBtn, h("span", { class: "arch-sep" }),
      this.pattern, selBtn, this.scheme, setBtn, clearBtn, h("label", {}, "default ", this.defScheme), dl);
    this.svg = s("svg", { class: "arch-svg", role: "group", "aria-label": "architecture diagram: Tab reaches the nodes, arrows move along the graph, Enter selects, Shift+Enter adds, Escape clears", tabindex: "0" });
    this.vp = s("g", { class: "arch-viewport" });
    this.svg.append(this.vp);
    this.mini = s("svg", { class: "arch-minimap", width: MINIMAP_W, height: MINIMAP_H, role: "img", "aria-label": "minimap: click to move the view" });
    this.info = h("aside", { class: "arch-info", "aria-label": "selected node" });
    this.canvas = h("div", { class: "arch-canvas" }, this.svg, this.mini);
    // sensitivity: a result loaded from a file, its legend, "start from this plan"
    this.sensFile = h("input", { type: "file", class: "arch-sens-file", accept: ".json,application/json", "data-input": "sensitivity" });
    this.sensFile.addEventListener("change", () => this.loadSensFile());
    this.startBtn = h("button", { type: "button", class: "arch-start-plan", title: "load the sensitivity plan's precisions into the plan editor (Download recipe then gives that recipe)", text: "Start from this plan" });
    this.startBtn.hidden = true;
    this.startBtn.addEventListener("click", () => this.startFromPlan());
    this.legend = h("div", { class: "arch-legend", "data-legend": "", role: "group", "aria-label": "sensitivity colour scale" });
    this.legend.hidden = true;
    this.sensBar = h("span", { class: "arch-sens" }, h("label", { class: "arch-sens-load" }, "sensitivity result (tensormorph sensitivity --json) ", this.sensFile), this.startBtn);
    this.canvas.append(this.legend);   // over the canvas' top left corner, as the minimap is over its bottom right
    this.root = h("div", { class: "arch-diagram" }, bar, h("div", { class: "arch-line" }, this.status, this.sensBar), h("div", { class: "arch-body" }, this.canvas, this.info));
    sec.prepend(this.root);
    for (const p of this.tableParts) p.hidden = true;
    this.wirePanZoom();
  }

  setMode(m) {
    const d = m === "diagram";
    this.root.querySelector(".arch-body").hidden = !d;
    for (const el of this.root.querySelectorAll(".arch-toolbar > :not(.arch-modes), .arch-line")) el.hidden = !d;
    this.sensBar.hidden = !d || this.kind === "onnx";
    for (const p of this.tableParts) p.hidden = d;
    this.modeDiagram.classList.toggle("active", d);
    this.modeTable.classList.toggle("active", !d);
    this.modeDiagram.setAttribute("aria-pressed", String(d));
    this.modeTable.setAttribute("aria-pressed", String(!d));
    if (d) this.fit();
  }

  fillSchemes() {
    this.scheme.textContent = "";
    this.defScheme.textContent = "";
    if (this.form === "gguf") {
      // GGUF: a ggml type per tensor, a llama-quantize file type as the default
      this.defScheme.append(h("option", { value: "", text: "(choose a file type)" }));
      for (const k of schemesFor("gguf")) this.scheme.append(h("option", { value: k, text: k }));
      for (const k of GGUF_FILE_TYPES) this.defScheme.append(h("option", { value: k, text: k }));
      return;
    }
    this.defScheme.append(h("option", { value: "", text: this.form === "ct-rules" ? "(the rest kept dense)" : "(tensormorph's)" }));
    for (const k of schemesFor(this.kind === "onnx" ? "onnx" : "ct")) {
      this.scheme.append(h("option", { value: k, text: SCHEMES[k].label }));
      if (k !== "exclude") this.defScheme.append(h("option", { value: k, text: SCHEMES[k].label }));
    }
  }

  /* ---- model -> layout -> SVG ---------------------------------------------------------------- */
  relayout(first) {
    const hadFocus = !!(document.activeElement && document.activeElement.classList && document.activeElement.classList.contains("arch-node") && this.svg.contains(document.activeElement));
    const t0 = performance.now();
    this.d = this.kind === "onnx" ? onnxDiagram(this.graph, { expanded: this.expanded }) : blockDiagram(this.inspect, { expanded: this.expanded });
    const t1 = performance.now();
    const sz = this.size();
    this.L = layoutDiagram(this.d, { aspect: Math.max(0.5, sz.w / Math.max(1, sz.h)) });
    const t2 = performance.now();
    this.render();
    const t3 = performance.now();
    this.timing = { model_ms: t1 - t0, layout_ms: t2 - t1, draw_ms: t3 - t2, nodes: this.d.nodes.length, edges: this.d.edges.length };
    this.root.dataset.layoutMs = (t2 - t1).toFixed(1);
    this.root.dataset.drawMs = (t3 - t2).toFixed(1);
    const nb = this.d.edges.filter((e) => e.boundary).length;
    const stacks = this.d.clusters.filter((c) => c.stack);
    this.stackBtn.hidden = this.kind === "onnx" ? !this.d.nodes.some((n) => n.collapsible) : !stacks.length;
    this.stackBtn.textContent = this.anyCollapsed() ? (this.kind === "onnx" ? "Expand subgraphs" : "Expand layers") : (this.kind === "onnx" ? "Collapse subgraphs" : "Stack layers");
    this.status.textContent = (this.kind === "onnx" ? "ONNX graph: " : "Blocks in model order: ") + this.d.nodes.length + " nodes, " + this.d.edges.length +
      " edges, " + nb + " quantization boundar" + (nb === 1 ? "y" : "ies") + " (red bars: the dtype or scheme changes along the flow). " +
      "Click selects, Shift+click adds, double-click opens a tensor's heatmap." + (this.kind === "onnx" ? " Constants and initializers are folded into their consumer, DequantizeLinear into its weight's badge." : "");
    if (first) this.fit(); else this.apply();
    this.runSearch();
    this.paintSelection();
    this.paintPlan();
    this.paintSens();
    const fn = this.focusName && this.byName.get(this.focusName);
    if (hadFocus && fn) this.focusNode(fn, false);
  }

  anyCollapsed() {
    if (this.kind === "onnx") return this.d.nodes.some((n) => n.collapsible && !n.expanded);
    return this.d.clusters.some((c) => c.stacked);
  }

  toggleAllStacks() {
    const open = this.anyCollapsed();
    if (this.kind === "onnx") { for (const n of this.d.nodes) if (n.collapsible) { if (open) this.expanded.add(n.index); else this.expanded.delete(n.index); } }
    else { for (const c of this.d.clusters) if (c.stack) { if (open) this.expanded.add(c.stack); else this.expanded.delete(c.stack); } }
    this.relayout(true);
  }

  render() {
    const vp = this.vp, d = this.d, L = this.L;
    vp.textContent = "";
    this.nodeEls = new Map();
    // the median node box (diagram units), for the level of detail; the new titles start as drawn
    const med = (a) => a.sort((x, y) => x - y)[a.length >> 1] || 0, rs = d.nodes.map((n) => L.nodes.get(n.id)).filter(Boolean);
    this.boxPx = { w: med(rs.map((r) => r.w)), h: med(rs.map((r) => r.h)) };
    this.namedAt = undefined;
    delete this.root.dataset.lod;
    const gc = s("g", { class: "arch-clusters" }), ge = s("g", { class: "arch-edges" }), gb = s("g", { class: "arch-boundaries" }), gn = s("g", { class: "arch-nodes" });
    for (const c of d.clusters) {
      const r = L.clusters.get(c.id);
      if (!r) continue;
      const g = s("g", { class: "arch-cluster" + (c.stacked ? " stacked" : ""), "data-cluster": c.id });
      g.append(s("rect", { x: r.x, y: r.y, width: r.w, height: r.h, rx: 8 }));
      if (c.stacked) { g.append(s("rect", { class: "stack-shadow", x: r.x + 5, y: r.y + 5, width: r.w, height: r.h, rx: 8 })); g.firstChild.before(g.lastChild); }
      const label = s("text", { x: r.x + 10, y: r.y + 16, class: "cluster-label" + (c.stack ? " toggle" : ""), text: (c.stack ? (c.stacked ? "\u25b8 " : "\u25be ") : "") + c.label });
      if (c.stack) {
        label.setAttribute("data-stack", c.stack);
        label.addEventListener("click", (ev) => { ev.stopPropagation(); if (this.expanded.has(c.stack)) this.expanded.delete(c.stack); else this.expanded.add(c.stack); this.relayout(false); });
      }
      g.append(label);
      gc.append(g);
    }
    d.edges.forEach((e, i) => {
      const segs = L.edges[i].segments.filter((sg) => sg.length);
      if (!segs.length) return;
      const dstr = segs.map((sg) => "M" + sg.map((p) => p.x.toFixed(1) + "," + p.y.toFixed(1)).join("L")).join("");
      const pts = segs[segs.length - 1];   // the piece that enters the target: badges and bars go there
      const p = s("path", { d: dstr, class: "arch-edge" + (e.boundary ? " boundary" : "") + (e.badge ? " qact" : "") });
      ge.append(p);
      if (e.badge || e.boundary) {
        const m = pts[Math.floor((pts.length - 1) / 2)], m2 = pts[Math.floor((pts.length - 1) / 2) + 1] || m;
        const cx = (m.x + m2.x) / 2, cy = (m.y + m2.y) / 2;
        if (e.boundary) {
          const dx = m2.x - m.x, dy = m2.y - m.y, len = Math.hypot(dx, dy) || 1, nx = -dy / len * 14, ny = dx / len * 14;
          const b = s("g", { class: "arch-boundary", "data-boundary": e.from + ">" + e.to });
          b.append(s("title", { text: e.title || "boundary" }));
          b.append(s("line", { x1: (cx - nx).toFixed(1), y1: (cy - ny).toFixed(1), x2: (cx + nx).toFixed(1), y2: (cy + ny).toFixed(1) }));
          gb.append(b);
        }
        if (e.badge) {
          const w = 10 + e.badge.text.length * 6.2;
          const b = s("g", { class: "arch-edge-badge", transform: "translate(" + (cx + 6).toFixed(1) + "," + (cy - 8).toFixed(1) + ")" });
          b.append(s("title", { text: e.badge.title }));
          b.append(s("rect", { width: w.toFixed(1), height: 15, rx: 7 }));
          b.append(s("text", { x: 5, y: 11, text: e.badge.text }));
          gb.append(b);
        }
      }
    });
    for (const n of d.nodes) {
      const r = L.nodes.get(n.id);
      const g = s("g", { class: "arch-node kind-" + n.kind + (n.quantized ? " q" : ""), "data-node": n.name, "data-id": n.id, "data-column": r.column || 0, transform: "translate(" + r.x.toFixed(1) + "," + r.y.toFixed(1) + ")",
        tabindex: "-1", role: "button", "aria-pressed": "false" });   // its name: the <title> child
      g.baseTitle = n.name + (n.key ? "\n" + n.key : "") + (n.modules && n.modules.length > 1 ? "\n" + n.modules.length + " modules: " + n.modules[0] + " \u2026 " + n.modules[n.modules.length - 1] : "");
      g.append(s("title", { text: g.baseTitle }));
      // the focus ring (two-tone: it reads on a light and on a dark canvas), shown on :focus-visible
      g.append(s("rect", { class: "ring-halo", x: -5, y: -5, width: r.w + 10, height: r.h + 10, rx: 9 }), s("rect", { class: "ring", x: -5, y: -5, width: r.w + 10, height: r.h + 10, rx: 9 }));
      g.append(s("rect", { class: "box", width: r.w, height: r.h, rx: n.kind === "op" || n.kind === "module" ? 5 : 14 }));
      g.append(s("text", { class: "title", x: 8, y: 16, text: n.title, "data-w": r.w.toFixed(1), "data-h": r.h.toFixed(1) }));
      if (n.sub) {
        const t = s("text", { class: "sub" + (n.collapsible ? " toggle" : ""), x: 8, y: 30, text: n.sub });
        if (n.collapsible) {
          t.setAttribute("data-toggle", n.id);
          t.addEventListener("click", (ev) => { ev.stopPropagation(); if (this.expanded.has(n.index)) this.expanded.delete(n.index); else this.expanded.add(n.index); this.relayout(false); });
        }
        g.append(t);
      }
      let bx = 8;
      for (const b of n.badges.slice(0, 2)) {
        const w = 8 + b.text.length * 6.2;
        const bg = s("g", { class: "badge" + (b.quantized ? " q" : ""), transform: "translate(" + bx + "," + (r.h - 19) + ")" });
        bg.append(s("rect", { width: w.toFixed(1), height: 15, rx: 7 }));
        bg.append(s("text", { x: 4, y: 11, text: b.text }));
        g.append(bg);
        bx += w + 4;
      }
      // the plan's scheme: bottom right, beside the badges (top right would run into the title)
      const plan = s("text", { class: "plan", x: r.w - 6, y: n.badges.length ? r.h - 7 : 16, "text-anchor": "end" });
      g.append(plan);
      this.nodeEls.set(n.id, g);
      gn.append(g);
    }
    vp.append(gc, ge, gb, gn);
    this.byName = new Map(d.nodes.map((n) => [n.name, n]));
    this.byId = new Map(d.nodes.map((n) => [n.id, n]));
    // graph neighbours for the arrow keys
    this.succ = new Map(); this.pred = new Map();
    for (const e of d.edges) {
      if (!this.byId.has(e.from) || !this.byId.has(e.to)) continue;
      if (!this.succ.has(e.from)) this.succ.set(e.from, []);
      if (!this.pred.has(e.to)) this.pred.set(e.to, []);
      this.succ.get(e.from).push(e.to); this.pred.get(e.to).push(e.from);
    }
    const tab = (this.focusName && this.byName.get(this.focusName)) || d.nodes[0];
    if (tab) { this.nodeEls.get(tab.id).setAttribute("tabindex", "0"); this.focusName = tab.name; }
    this.drawMinimap();
  }

  /* ---- pan / zoom / fit / minimap ----------------------------------------------------------- */
  size() { const r = this.svg.getBoundingClientRect(); return { w: r.width || 800, h: r.height || 600 }; }
  apply() {
    const v = this.view;
    this.vp.setAttribute("transform", "translate(" + v.tx.toFixed(2) + "," + v.ty.toFixed(2) + ") scale(" + v.k.toFixed(5) + ")");
    this.root.dataset.zoom = v.k.toPrecision(8);
    // level of detail: every label while the smallest (10 px badges, arch.css) is drawn at
    // LABEL_MIN_PX or more; below that "names": only each node's title, at NAME_PX on screen
    // whatever the zoom, cut to its box with an ellipsis (the whole name in the tooltip); "boxes"
    // (no text) once a median box is too small on screen to hold a name. Boxes, colours, edges
    // and tooltips stay at every level; zooming in brings the labels back.
    const lod = 10 * v.k >= LABEL_MIN_PX ? "labels" : this.boxPx && this.boxPx.h * v.k >= NAME_PX * 1.6 && this.boxPx.w * v.k >= NAME_PX * 4 ? "names" : "boxes";
    if (this.root.dataset.lod !== lod) {
      this.root.dataset.lod = lod;
      this.vp.classList.toggle("lod-boxes", lod === "boxes");
      this.vp.classList.toggle("lod-names", lod === "names");
      if (lod !== "names") this.nameTitles(0);
    }
    if (lod === "names") this.nameTitles(v.k);
    this.drawMiniView();
  }
  /* The "names" level of detail at zoom k: each node's title at NAME_PX screen px (NAME_PX / k
  ** in the diagram's units), centred in its box's height and cut to its width; k = 0 restores
  ** the titles as drawn. Runs only when the font or the cut changes. */
  nameTitles(k) {
    if (this.namedAt === k) return;
    this.namedAt = k;
    const fs = k ? NAME_PX / k : 0;
    this.vp.style.setProperty("--name-fs", fs ? fs.toFixed(3) + "px" : "");
    for (const t of this.vp.querySelectorAll(".arch-node text.title")) {
      const full = t.dataset.full || (t.dataset.full = t.textContent);
      if (!k) { if (t.textContent !== full) t.textContent = full; t.setAttribute("y", "16"); continue; }
      const bw = +t.dataset.w, bh = +t.dataset.h;
      const fit = Math.max(1, Math.floor((bw - 12) / (fs * 0.62)));   // characters: ~0.62 em each (600 weight, system-ui)
      const txt = full.length <= fit ? full : full.slice(0, Math.max(1, fit - 1)) + "\u2026";
      if (t.textContent !== txt) t.textContent = txt;
      t.setAttribute("y", (bh / 2 + fs * 0.35).toFixed(2));
    }
  }
  /* The boxes drawn over the diagram (view px, the SVG's top left at 0,0): the minimap (bottom
  ** right) and the sensitivity legend (top left), each while shown. */
  overlays() {
    const out = [], r0 = this.svg.getBoundingClientRect();
    for (const el of [this.mini, this.legend]) {
      if (!el || el.hidden || el.style.display === "none") continue;
      const r = el.getBoundingClientRect();
      if (r.width > 0 && r.height > 0) out.push({ x0: r.left - r0.left, y0: r.top - r0.top, x1: r.right - r0.left, y1: r.bottom - r0.top });
    }
    return out;
  }
  /* The whole diagram in the view, clear of the overlays: the largest scale over the regions that
  ** avoid each overlay by one of its sides (left of / above the bottom-right minimap; right of /
  ** below the top-left legend), the diagram centred in the chosen region; the full view when the
  ** centred diagram misses every overlay there. */
  fit() {
    if (!this.L) return;
    this.moved = false;
    const { w, h } = this.size(), W = this.L.width, H = this.L.height, G = 8;   // px clear of an overlay
    const kIn = (ww, hh) => Math.max(1e-4, Math.min((ww - 20) / W, (hh - 20) / H, 1.5));
    const place = (R) => {
      const k = kIn(R.x1 - R.x0, R.y1 - R.y0);
      const tx = R.x0 + Math.max(10, (R.x1 - R.x0 - W * k) / 2), ty = R.y0 + Math.max(10, (R.y1 - R.y0 - H * k) / 2);
      return { k, tx, ty };
    };
    const hits = (v, o) => v.tx < o.x1 && v.tx + W * v.k > o.x0 && v.ty < o.y1 && v.ty + H * v.k > o.y0;
    const ov = this.overlays();
    let best = place({ x0: 0, y0: 0, x1: w, y1: h });
    if (ov.some((o) => hits(best, o))) {
      // each overlay is cut off by one side: the one nearer the view's centre of its two inner edges
      let regions = [{ x0: 0, y0: 0, x1: w, y1: h }];
      for (const o of ov) {
        const next = [];
        for (const R of regions) {
          if (o.x0 > w / 2) next.push({ ...R, x1: Math.min(R.x1, o.x0 - G) }); else next.push({ ...R, x0: Math.max(R.x0, o.x1 + G) });
          if (o.y0 > h / 2) next.push({ ...R, y1: Math.min(R.y1, o.y0 - G) }); else next.push({ ...R, y0: Math.max(R.y0, o.y1 + G) });
        }
        regions = next.filter((R) => R.x1 - R.x0 > 40 && R.y1 - R.y0 > 40);
      }
      let bk = -1;
      for (const R of regions) { const v = place(R); if (v.k > bk && !ov.some((o) => hits(v, o))) { bk = v.k; best = v; } }
    }
    this.view = best;
    this.apply();
  }
  zoomBy(f, cx, cy) {
    const { w, h } = this.size();
    if (cx === undefined) { cx = w / 2; cy = h / 2; }
    const v = this.view, k = Math.max(0.005, Math.min(8, v.k * f));
    v.tx = cx - (cx - v.tx) * (k / v.k);
    v.ty = cy - (cy - v.ty) * (k / v.k);
    v.k = k;
    this.apply();
  }
  centerOn(x, y, k) {
    const { w, h } = this.size();
    if (k) this.view.k = k;
    this.view.tx = w / 2 - x * this.view.k;
    this.view.ty = h / 2 - y * this.view.k;
    this.apply();
  }
  wirePanZoom() {
    const svg = this.svg;
    svg.addEventListener("wheel", (ev) => {
      ev.preventDefault();
      const r = svg.getBoundingClientRect();
      this.zoomBy(ev.deltaY < 0 ? 1.15 : 1 / 1.15, ev.clientX - r.left, ev.clientY - r.top);
    }, { passive: false });
    let drag = null;
    svg.addEventListener("mousedown", (ev) => { drag = { x: ev.clientX, y: ev.clientY, tx: this.view.tx, ty: this.view.ty, moved: false }; });
    window.addEventListener("mousemove", (ev) => {
      if (!drag) return;
      const dx = ev.clientX - drag.x, dy = ev.clientY - drag.y;
      if (Math.abs(dx) + Math.abs(dy) > 3) drag.moved = true;
      if (drag.moved) { this.view.tx = drag.tx + dx; this.view.ty = drag.ty + dy; this.apply(); }
    });
    window.addEventListener("mouseup", (ev) => {
      const dd = drag;
      drag = null;
      if (!dd || dd.moved) return;
      const g = ev.target.closest && ev.target.closest(".arch-node");
      if (g && svg.contains(g)) { const n = this.byId.get(g.dataset.id); this.clickNode(n, ev.shiftKey); if (n) this.focusNode(n, false); }
      else if (svg.contains(ev.target) && !ev.shiftKey) { this.selected.clear(); this.paintSelection(); }
    });
    svg.addEventListener("dblclick", (ev) => {
      const g = ev.target.closest && ev.target.closest(".arch-node");
      const n = g && this.byId.get(g.dataset.id);
      const t = n && (n.tensor || (n.weights && n.weights[0] && n.weights[0].name));
      if (t && typeof window.openHeatmap === "function") window.openHeatmap(t);
    });
    svg.addEventListener("keydown", (ev) => {
      const g = ev.target !== svg && ev.target.closest && ev.target.closest(".arch-node");
      if (g && svg.contains(g) && this.nodeKey(ev, this.byId.get(g.dataset.id))) { ev.preventDefault(); return; }
      if (ev.key === "Escape") { this.selected.clear(); this.paintSelection(); return; }
      const step = 60, m = { ArrowLeft: [step, 0], ArrowRight: [-step, 0], ArrowUp: [0, step], ArrowDown: [0, -step] }[ev.key];
      if (m && !g) { ev.preventDefault(); this.view.tx += m[0]; this.view.ty += m[1]; this.apply(); }
      else if (ev.key === "+" || ev.key === "=") this.zoomBy(1.25);
      else if (ev.key === "-") this.zoomBy(0.8);
      else if (ev.key === "0" || ev.key === "f") this.fit();
    });
    const miniGo = (ev) => {
      if (!this.L || !this.mini.dataset.scale) return;
      const r = this.mini.getBoundingClientRect(), sc = +this.mini.dataset.scale;
      this.centerOn((ev.clientX - r.left - +this.mini.dataset.ox) / sc, (ev.clientY - r.top - +this.mini.dataset.oy) / sc);
    };
    let miniDrag = false;
    this.mini.addEventListener("mousedown", (ev) => { ev.stopPropagation(); miniDrag = true; miniGo(ev); });
    this.mini.addEventListener("mousemove", (ev) => { if (miniDrag) miniGo(ev); });
    window.addEventListener("mouseup", () => { miniDrag = false; });
    window.addEventListener("resize", () => this.apply());
    // drawn while hidden (another view opened first) or resized before the user moved it: fit again
    if (typeof ResizeObserver === "function")
      new ResizeObserver(() => { if (!this.moved && this.L && svg.clientWidth > 0) this.fit(); }).observe(svg);
    for (const ev of ["wheel", "mousedown", "keydown"]) svg.addEventListener(ev, () => { this.moved = true; });
  }
  drawMinimap() {
    const m = this.mini, L = this.L;
    m.textContent = "";
    const show = this.d.nodes.length >= MINIMAP_FROM;
    m.style.display = show ? "" : "none";
    if (!show) { delete m.dataset.scale; return; }
    const sc = Math.min((MINIMAP_W - 8) / L.width, (MINIMAP_H - 8) / L.height);
    const ox = (MINIMAP_W - L.width * sc) / 2, oy = (MINIMAP_H - L.height * sc) / 2;
    m.dataset.scale = sc; m.dataset.ox = ox; m.dataset.oy = oy;
    let dq = "", dd = "";
    for (const n of this.d.nodes) {
      const r = L.nodes.get(n.id);
      const part = "M" + (ox + r.x * sc).toFixed(1) + "," + (oy + r.y * sc).toFixed(1) + "h" + Math.max(1, r.w * sc).toFixed(1) + "v" + Math.max(1, r.h * sc).toFixed(1) + "h" + (-Math.max(1, r.w * sc)).toFixed(1) + "z";
      if (n.quantized) dq += part; else dd += part;
    }
    m.append(s("rect", { class: "mini-bg", width: MINIMAP_W, height: MINIMAP_H }));
    m.append(s("path", { class: "mini-dense", d: dd || "M0,0" }), s("path", { class: "mini-q", d: dq || "M0,0" }));
    this.miniView = s("rect", { class: "mini-view" });
    m.append(this.miniView);
    this.drawMiniView();
  }
  drawMiniView() {
    if (!this.miniView || !this.mini.dataset.scale) return;
    const sc = +this.mini.dataset.scale, ox = +this.mini.dataset.ox, oy = +this.mini.dataset.oy, v = this.view, { w, h } = this.size();
    this.miniView.setAttribute("x", (ox + (-v.tx / v.k) * sc).toFixed(1));
    this.miniView.setAttribute("y", (oy + (-v.ty / v.k) * sc).toFixed(1));
    this.miniView.setAttribute("width", Math.max(2, (w / v.k) * sc).toFixed(1));
    this.miniView.setAttribute("height", Math.max(2, (h / v.k) * sc).toFixed(1));
  }

  /* ---- search ------------------------------------------------------------------------------ */
  matcher(q) {
    q = q.trim();
    if (!q) return null;
    const re = /^\/(.+)\/$/.exec(q);
    if (re) { try { const r = new RegExp(re[1], "i"); return (t) => r.test(t); } catch (e) { return () => false; } }
    const lq = q.toLowerCase();
    return (t) => t.toLowerCase().includes(lq);
  }
  nodeText(n) { return [n.name, n.title, ...(n.modules || []), ...(n.weights || []).map((w) => w.name), n.key || ""].join("\n"); }
  runSearch() {
    if (!this.d) return;
    const f = this.matcher(this.search.value);
    // a match hidden in a stack or a collapsed subgraph: open it
    if (f && this.kind === "blocks") {
      const all = blockDiagram(this.inspect, { expanded: new Set(this.d.clusters.filter((c) => c.stack).map((c) => c.stack).concat([...this.expanded])) });
      let grew = false;
      for (const n of all.nodes) if (f(n.name) && !this.byName.has(n.name)) {
        const c = all.clusters.find((cc) => cc.id === n.cluster);
        if (c && c.stack && !this.expanded.has(c.stack)) { this.expanded.add(c.stack); grew = true; }
      }
      if (grew) { this.relayout(false); return; }
    }
    this.matches = [];
    for (const n of this.d.nodes) {
      const el = this.nodeEls.get(n.id), hit = f ? f(this.nodeText(n)) : false;
      el.classList.toggle("match", hit);
      el.classList.toggle("dim", !!f && !hit);
      if (hit) { this.matches.push(n); el.setAttribute("data-match", "1"); } else el.removeAttribute("data-match");
    }
    this.vp.classList.toggle("filtering", !!f);
    this.matchAt = -1;
    this.count.textContent = f ? this.matches.length + " of " + this.d.nodes.length + " nodes" : "";
    this.count.setAttribute("data-count", f ? String(this.matches.length) : "");
  }
  jump(dir) {
    if (!this.matches.length) return;
    this.matchAt = (this.matchAt + dir + this.matches.length) % this.matches.length;
    const n = this.matches[this.matchAt], r = this.L.nodes.get(n.id);
    for (const el of this.vp.querySelectorAll(".arch-node.current")) el.classList.remove("current");
    this.nodeEls.get(n.id).classList.add("current");
    this.centerOn(r.x + r.w / 2, r.y + r.h / 2, Math.max(this.view.k, 1));
    this.count.textContent = (this.matchAt + 1) + " / " + this.matches.length + " of " + this.d.nodes.length + " nodes";
    this.showInfo(n);
  }

  /* ---- selection, plan, recipe --------------------------------------------------------------- */
  clickNode(n, add) {
    if (!n) return;
    if (add) { if (this.selected.has(n.name)) this.selected.delete(n.name); else this.selected.add(n.name); }
    else { this.selected.clear(); this.selected.add(n.name); }
    this.paintSelection();
    this.showInfo(n);
  }
  selectPattern(p) {
    let re;
    try { re = new RegExp(p); } catch (e) { this.status.textContent = "not a regular expression: " + e.message; return; }
    this.selected.clear();
    for (const n of this.d.nodes) if (n.kind !== "input" && n.kind !== "output" && (re.test(n.name) || (n.modules || []).some((m) => re.test(m)))) this.selected.add(n.name);
    this.paintSelection();
  }
  paintSelection() {
    if (!this.d) return;
    for (const n of this.d.nodes) {
      const el = this.nodeEls.get(n.id), on = this.selected.has(n.name);
      el.classList.toggle("selected", on);
      el.setAttribute("aria-pressed", String(on));
      if (on) el.setAttribute("data-selected", "1"); else el.removeAttribute("data-selected");
    }
    this.root.dataset.selected = String(this.selected.size);
  }
  /* What a node's plan entry names: its modules (checkpoints) or its weights (ONNX). */
  planKeys(n) {
    if (this.kind === "onnx") return (n.weights || []).filter((w) => w.n_elems >= 16).map((w) => w.name);
    if (this.form === "gguf") return this.tensorsOf(n);
    if (this.form === "ct-rules") return this.tensorsOf(n).filter((t) => (this.tensorNdim.get(t) || 0) >= 2);
    return n.modules || [];
  }
  schemeLabel(k) {
    if (k && typeof k === "object") return k.ignore ? "dense" : k.scheme ? k.scheme.type + " " + k.scheme.granularity : "?";
    return this.form === "gguf" ? k : k === "exclude" ? "dense" : SCHEMES[k] ? SCHEMES[k].label : k;
  }
  setScheme(key) {
    let n = 0;
    for (const name of this.selected) {
      const nd = this.byName.get(name);
      if (!nd) continue;
      for (const k of this.planKeys(nd)) { this.plan.set(k, this.form === "ct-rules" ? (key === "exclude" ? { ignore: true } : { ignore: false, scheme: schemeObject(key) }) : key); n++; }
    }
    this.status.textContent = "plan: " + this.schemeLabel(key) + " on " + n + (this.kind === "onnx" || this.form === "gguf" ? " tensor" : " module") + (n === 1 ? "" : "s") + " (" + this.plan.size + " in the plan)";
    this.paintPlan();
  }
  paintPlan() {
    if (!this.d) return;
    for (const n of this.d.nodes) {
      const el = this.nodeEls.get(n.id), keys = this.planKeys(n).map((k) => this.plan.get(k)).filter(Boolean);
      const t = el.querySelector("text.plan");
      const k = keys.length ? keys[0] : null;
      t.textContent = k ? "\u2192 " + this.schemeLabel(k) + (new Set(keys.map((x) => this.schemeLabel(x))).size > 1 ? " \u2026" : "") : "";
      if (k) el.setAttribute("data-plan", typeof k === "object" ? this.schemeLabel(k) : k); else el.removeAttribute("data-plan");
    }
  }
  recipe() { return buildRecipe(this.form, this.plan, this.defScheme.value); }
  download() {
    const r = this.recipe();
    if (r.error) { this.status.textContent = r.error; return; }
    const text = JSON.stringify(r.recipe, null, 2) + "\n";
    const url = URL.createObjectURL(new Blob([text], { type: "application/json" }));
    const a = h("a", { href: url, download: "recipe.json" });
    document.body.append(a);
    a.click();
    a.remove();
    setTimeout(() => URL.revokeObjectURL(url), 1000);
  }
  showInfo(n) {
    const box = this.info;
    box.textContent = "";
    box.append(h("h2", { text: n.title }), h("p", { class: "arch-info-name", text: n.name }));
    const rows = [["precision", n.key || "-"]];
    if (n.modules && n.modules.length > 1) rows.push(["stands for", n.modules.length + " modules (" + n.modules[0] + " \u2026)"]);
    for (const w of n.weights || []) rows.push(["weight", w.name + ": " + w.scheme]);
    if (n.tensor) rows.push(["tensor", n.tensor]);
    const u = this.sens && this.unitOf(n);
    if (u) {
      rows.push(["sensitivity", "rank " + (u.rank === null ? "-" : u.rank) + " of " + this.sens.units.length + " (" + this.sens.unit + " " + u.name + ")"]);
      rows.push(["KLD only it", fmtNum(u.kld_mean_only) + " nats/token (mean; only this unit " + (this.sens.scheme || "quantized") + ")"]);
      rows.push(["KLD all but", fmtNum(u.kld_mean_all_but) + " nats/token (every other unit quantized)"]);
      if (u.weight_sqnr_db !== null) rows.push(["weight SQNR", fmtNum(u.weight_sqnr_db) + " dB"]);
      if (u.scheme) rows.push(["plan", String(typeof u.scheme === "string" ? u.scheme : JSON.stringify(u.scheme))]);
    }
    const tb = h("tbody");
    for (const [k, v] of rows) tb.append(h("tr", {}, h("th", { scope: "row", text: k }), h("td", { text: v })));
    box.append(h("table", {}, tb));
  }

  /* ---- keyboard: one roving tab stop over the nodes -------------------------------------------- */
  focusNode(n, reveal) {
    const el = this.nodeEls && this.nodeEls.get(n.id);
    if (!el) return;
    for (const e of this.vp.querySelectorAll(".arch-node[tabindex='0']")) if (e !== el) e.setAttribute("tabindex", "-1");
    el.setAttribute("tabindex", "0");
    this.focusName = n.name;
    el.focus({ preventScroll: true });
    if (reveal) {
      const b = el.getBoundingClientRect(), v = this.svg.getBoundingClientRect();
      if (b.left < v.left || b.right > v.right || b.top < v.top || b.bottom > v.bottom) {
        const r = this.L.nodes.get(n.id);
        this.centerOn(r.x + r.w / 2, r.y + r.h / 2);
      }
      this.showInfo(n);
    }
  }
  /* The node an arrow key moves to: Down the nearest successor, Up the nearest predecessor
  ** (nearest in x), Left/Right the nearest sibling on that side (another successor of a
  ** predecessor or predecessor of a successor), else the nearest node on that side in the same
  ** row. null at the end of the graph. */
  neighbour(n, key) {
    const L = this.L, c = (id) => { const r = L.nodes.get(id); return [r.x + r.w / 2, r.y + r.h / 2, r.h]; };
    const [x, y, hh] = c(n.id);
    const near = (ids) => {
      let best = null, bd = Infinity;
      for (const id of ids) { const [a, b] = c(id), dd = Math.abs(a - x) + 0.001 * Math.abs(b - y); if (dd < bd) { bd = dd; best = id; } }
      return best;
    };
    let id = null;
    if (key === "ArrowDown") id = near(this.succ.get(n.id) || []);
    else if (key === "ArrowUp") id = near(this.pred.get(n.id) || []);
    else {
      const side = key === "ArrowLeft" ? -1 : 1, onSide = (i) => i !== n.id && (c(i)[0] - x) * side > 0.5;
      const sib = new Set();
      for (const p of this.pred.get(n.id) || []) for (const q of this.succ.get(p) || []) sib.add(q);
      for (const q of this.succ.get(n.id) || []) for (const p of this.pred.get(q) || []) sib.add(p);
      id = near([...sib].filter(onSide));
      if (id === null) id = near(this.d.nodes.map((m) => m.id).filter((i) => onSide(i) && Math.abs(c(i)[1] - y) < hh / 2));
    }
    return id === null ? null : this.byId.get(id);
  }
  /* A key on a focused node; true when handled. */
  nodeKey(ev, n) {
    if (!n) return false;
    if (ev.key.startsWith("Arrow")) { const t = this.neighbour(n, ev.key); if (t) this.focusNode(t, true); return true; }
    if (ev.key === "Enter" || ev.key === " ") { this.clickNode(n, ev.shiftKey); return true; }
    if (ev.key === "Escape") { this.selected.clear(); this.paintSelection(); return true; }
    if (ev.key === "Home" || ev.key === "End") { const t = this.d.nodes[ev.key === "Home" ? 0 : this.d.nodes.length - 1]; if (t) this.focusNode(t, true); return true; }
    return false;
  }

  /* ---- sensitivity ------------------------------------------------------------------------------ */
  /* tensor names of each module (checkpoints): "<module>.<leaf>" */
  indexTensors() {
    this.modTensors = new Map();
    this.tensorNdim = new Map();
    if (!this.inspect) return;
    for (const t of this.inspect.tensors) {
      this.tensorNdim.set(t.name, (t.shape || []).length);
      if (t.role && t.role !== "data") continue;
      const i = t.name.lastIndexOf("."), m = i > 0 ? t.name.slice(0, i) : t.name;
      if (!this.modTensors.has(m)) this.modTensors.set(m, []);
      this.modTensors.get(m).push(t.name);
    }
  }
  tensorsOf(n) {
    if (this.kind === "onnx") return (n.weights || []).map((w) => w.name);
    const out = [];
    for (const m of n.modules || []) for (const t of this.modTensors.get(m) || [m]) out.push(t);
    return out;
  }
  /* The unit a node belongs to (the most sensitive one when it stands for several). */
  unitOf(n) {
    if (!this.sens) return null;
    let best = null;
    for (const t of this.tensorsOf(n)) {
      const u = this.sensByTensor.get(t);
      if (u && (!best || (u.kld_mean_only || 0) > (best.kld_mean_only || 0))) best = u;
    }
    return best;
  }
  setSensitivity(raw, source, redraw) {
    let sv;
    const fail = (msg) => { this.sensError = "sensitivity result (" + source + "): " + msg; this.status.textContent = this.sensError; this.status.classList.add("arch-error"); return false; };
    try { sv = normalizeSensitivity(raw); } catch (e) { return fail(e.message); }
    this.sensByTensor = new Map();
    for (const u of sv.units) for (const t of u.tensors) this.sensByTensor.set(t, u);
    const known = this.inspect ? this.inspect.tensors.filter((t) => this.sensByTensor.has(t.name)).length : 0;
    if (!known) { this.sensByTensor = this.sens ? new Map(this.sens.units.flatMap((u) => u.tensors.map((t) => [t, u]))) : null; return fail("none of its " + sv.units.length + " units' tensors is in this model"); }
    this.status.classList.remove("arch-error");
    this.sensError = null;
    this.sens = sv;
    this.sens.source = source;
    this.scale = sensScale(sv.units);
    // every layer on its own: each has its own measurement
    for (const c of blockDiagram(this.inspect, { expanded: new Set() }).clusters) if (c.stack) this.expanded.add(c.stack);
    this.drawLegend();
    this.startBtn.hidden = !sv.plan;
    if (redraw) this.relayout(true);
    return true;
  }
  async loadSensFile() {
    const f = this.sensFile.files && this.sensFile.files[0];
    if (!f) return;
    let doc;
    try { doc = JSON.parse(await f.text()); } catch (e) { this.status.textContent = f.name + ": not JSON (" + e.message + ")"; this.status.classList.add("arch-error"); return; }
    if (this.setSensitivity(doc, f.name, true)) this.status.textContent = "sensitivity result " + f.name + ": " + this.sens.units.length + " units coloured";
  }
  drawLegend() {
    const sv = this.sens, sc = this.scale, lg = this.legend;
    lg.textContent = "";
    lg.hidden = false;
    const bar = h("span", { class: "arch-legend-bar", "aria-hidden": "true" });
    bar.style.backgroundImage = sc.gradient;
    const ticks = h("span", { class: "arch-legend-ticks" });
    for (const v of sc.ticks) ticks.append(h("span", { class: "arch-legend-tick", "data-value": String(v), text: fmtNum(v) }));
    const ranked = sv.units.filter((u) => u.rank !== null).sort((a, b) => a.rank - b.rank);
    lg.title = "sensitivity (" + (sv.source || "") + "), " + sv.units.length + " units by rank: " + ranked.map((u) => "#" + u.rank + " " + u.name + " " + fmtNum(u.kld_mean_only)).join(", ") +
      (sv.spearman !== null ? "\nSpearman weight error vs KLD: " + fmtNum(sv.spearman) : "") + "\nthe number on a node: its unit's rank (1 = the most sensitive); grey: not a unit (source precision)";
    lg.append(h("span", { class: "arch-legend-title", text: "KLD mean, nats/token, only this " + (sv.unit || "unit") + " " + (sv.scheme || "quantized") + (sc.log ? " (log)" : "") }),
      h("span", { class: "arch-legend-scale" }, bar, ticks));
    const p = sv.plan;
    lg.append(h("span", { class: "arch-legend-plan", "data-plan-met": String(p ? p.met : null),
      text: (p ? "plan " + (p.bytes ? p.bytes + " B, " : "") + "KLD " + fmtNum(p.kld_mean) + (p.budget && typeof p.budget.kld_mean === "number" ? " (budget " + fmtNum(p.budget.kld_mean) + ", " + (p.met ? "met" : "NOT met") + ")" : "") + "; " : "") +
        "#1 " + (ranked[0] ? ranked[0].name : "-") + "; grey: not a unit" }));
  }
  paintSens() {
    if (!this.d) return;
    for (const c of this.d.clusters) {
      const lab = this.vp.querySelector("[data-cluster='" + c.id + "'] .cluster-label");
      if (!lab) continue;
      if (lab.baseText === undefined) lab.baseText = lab.textContent;
      const us = this.sens ? [...new Set(this.d.nodes.filter((n) => n.cluster === c.id).map((n) => this.unitOf(n)).filter(Boolean))] : [];
      const u = us.length === 1 ? us[0] : null;
      lab.textContent = lab.baseText + (u ? "   #" + u.rank + "  KLD " + fmtNum(u.kld_mean_only) + (u.scheme ? "  plan " + (typeof u.scheme === "string" ? u.scheme : "mixed") : "") : "");
    }
    for (const n of this.d.nodes) {
      const el = this.nodeEls.get(n.id), box = el.querySelector("rect.box"), u = this.unitOf(n);
      for (const m of el.querySelectorAll(".sens-rank")) m.remove();
      el.classList.toggle("sens", !!u);
      el.classList.toggle("sens-none", !!this.sens && !u);
      el.classList.remove("sens-dark");
      box.style.removeProperty("fill");
      const title = el.querySelector("title");
      for (const k of ["sensUnit", "sensRank", "sensKld", "sensScheme", "sensColor"]) delete el.dataset[k];
      if (!u) { title.textContent = el.baseTitle + (this.sens ? "\nsensitivity: not a unit (source precision)" : ""); continue; }
      const kld = u.kld_mean_only;
      if (kld !== null) {
        box.style.setProperty("fill", this.scale.css(kld));
        el.dataset.sensColor = this.scale.css(kld);
        if (this.scale.dark(kld)) el.classList.add("sens-dark");
      }
      el.dataset.sensUnit = u.name;
      el.dataset.sensRank = u.rank === null ? "" : String(u.rank);
      el.dataset.sensKld = kld === null ? "" : String(kld);
      if (u.scheme) el.dataset.sensScheme = typeof u.scheme === "string" ? u.scheme : JSON.stringify(u.scheme);
      const mk = s("g", { class: "sens-rank", transform: "translate(-4,-4)" });
      mk.append(s("circle", { r: 9 }), s("text", { "text-anchor": "middle", y: 3.5, text: u.rank === null ? "?" : String(u.rank) }));
      el.append(mk);
      title.textContent = el.baseTitle + "\nsensitivity rank " + u.rank + " of " + this.sens.units.length + " (" + u.name + "): KLD " + fmtNum(kld) +
        " nats/token with only it quantized, " + fmtNum(u.kld_mean_all_but) + " with all but it" + (u.scheme ? "\nplan: " + el.dataset.sensScheme : "");
    }
  }
  startFromPlan() {
    const sv = this.sens;
    if (!sv) return;
    const r = planFromSensitivity(sv.form, sv.plan);
    if (r.error) { this.status.textContent = r.error; this.status.classList.add("arch-error"); return; }
    if (r.kind === "ct-rules" && this.form === "ct") { this.form = "ct-rules"; this.fillSchemes(); }
    if (r.kind !== this.form) { this.status.textContent = "the plan is a " + r.kind + " plan; this model's recipe form is " + this.form + " (serve the plan's source)"; this.status.classList.add("arch-error"); return; }
    this.status.classList.remove("arch-error");
    this.plan = r.plan;
    if (![...this.defScheme.options].some((o) => o.value === r.defaultKey)) this.defScheme.append(h("option", { value: r.defaultKey, text: r.defaultKey }));
    this.defScheme.value = r.defaultKey;
    this.paintPlan();
    this.status.textContent = "plan: started from the sensitivity plan (" + (sv.source || "") + "): " + (r.kind === "gguf" ? "file type " + r.defaultKey + ", " : "") + r.plan.size + (r.kind === "gguf" ? " tensor type" : " tensor rule") + (r.plan.size === 1 ? "" : "s") + (r.kind === "ct-rules" ? ", the rest dense" : "") +
      (sv.plan.recipe ? "; the recipe it wrote: " + sv.plan.recipe : "") + ". Edit it, then Download recipe.";
    this.root.dataset.planFrom = "sensitivity";
  }
}
