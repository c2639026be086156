// layout.js: places a diagram (model.js) with dagre's layered layout (@dagrejs/dagre, bundled at
// build time): top to bottom, inputs first; clusters (expanded subgraphs, decoder layers) are
// dagre compound nodes. Sizes come from the text each node shows (a fixed character width, so
// the layout does not wait on fonts). Returns {nodes: Map id -> {x, y, w, h} (top-left corner),
// edges: [{points}], clusters: Map id -> {x, y, w, h}, width, height, ms}.
import { Graph, layout as dagreLayout } from "@dagrejs/dagre";

export const CHAR_W = 7;      // px per character of the 12px UI font, rounded up
export const NODE_H = 46;

export function nodeSize(n) {
  const chars = Math.max(n.title.length + 2, (n.sub || "").length, ...n.badges.map((b) => b.text.length + 3), 10);
  return { w: Math.min(320, 16 + chars * CHAR_W), h: n.badges.length ? NODE_H + 4 : NODE_H - 8 };
}

export function layoutDiagram(d, opts) {
  const t0 = performance.now();
  const g = new Graph({ compound: d.clusters.length > 0, multigraph: false });
  g.setGraph({ rankdir: "TB", nodesep: 18, ranksep: 34, edgesep: 8, marginx: 20, marginy: 20 });
  g.setDefaultEdgeLabel(() => ({}));
  for (const c of d.clusters) g.setNode(c.id, { label: c.label, paddingTop: 26 });
  for (const n of d.nodes) {
    const s = nodeSize(n);
    g.setNode(n.id, { width: s.w, height: s.h });
    if (n.cluster) g.setParent(n.id, n.cluster);
  }
  for (const e of d.edges) if (g.hasNode(e.from) && g.hasNode(e.to)) g.setEdge(e.from, e.to, {});
  dagreLayout(g);
  const nodes = new Map(), clusters = new Map();
  for (const n of d.nodes) {
    const v = g.node(n.id);
    nodes.set(n.id, { x: v.x - v.width / 2, y: v.y - v.height / 2, w: v.width, h: v.height });
  }
  for (const c of d.clusters) {
    const v = g.node(c.id);
    if (v && v.width) clusters.set(c.id, { x: v.x - v.width / 2, y: v.y - v.height / 2 - 14, w: v.width, h: v.height + 14 });
  }
  const edges = d.edges.map((e) => {
    const v = g.hasEdge(e.from, e.to) ? g.edge(e.from, e.to) : null;
    return { points: v && v.points ? v.points : [] };
  });
  const gr = g.graph();
  const L = { nodes, edges, clusters, width: gr.width || 100, height: gr.height || 100, columns: 1 };
  for (const e of edges) e.segments = [e.points];
  if (opts && opts.aspect) fold(L, opts.aspect);
  L.ms = performance.now() - t0;
  return L;
}

const COLUMN_GAP = 60;

/* A deep, narrow layout (a chain of 200 convolutions) would fit the view as a thin line: cut it
** between rows into columns, left to right, so that its aspect ratio comes near the view's
** (aspect = view width / height). Cuts fall only in the gaps between rows of nodes and clusters;
** an edge crossing a cut is drawn as two pieces, leaving its column at the bottom and entering
** the next at the top. */
function fold(L, aspect) {
  const W = L.width, H = L.height;
  const c = Math.min(16, Math.max(1, Math.round(Math.sqrt((H * aspect) / W))));
  if (c < 2) return;
  const spans = [];
  for (const r of L.nodes.values()) spans.push([r.y, r.y + r.h]);
  for (const r of L.clusters.values()) spans.push([r.y, r.y + r.h]);
  spans.sort((a, b) => a[0] - b[0]);
  const gaps = [];                 // [from, to] free of any node or cluster
  let end = -Infinity;
  for (const [a, b] of spans) { if (a > end && end > -Infinity) gaps.push([end, a]); end = Math.max(end, b); }
  const cuts = [];
  for (let k = 1; k < c; k++) {
    const want = (k * H) / c, after = cuts.length ? cuts[cuts.length - 1] : -Infinity;
    let best = null;
    for (const [a, b] of gaps) {
      const m = (a + b) / 2;
      if (m <= after) continue;
      if (!best || Math.abs(m - want) < Math.abs(best - want)) best = m;
    }
    if (best !== null) cuts.push(best);
  }
  if (!cuts.length) return;
  const bandOf = (y) => { let b = 0; while (b < cuts.length && y >= cuts[b]) b++; return b; };
  const top = (b) => (b === 0 ? 0 : cuts[b - 1]);
  const map = (x, y, b) => ({ x: x + b * (W + COLUMN_GAP), y: y - top(b) + (b ? 10 : 0) });
  for (const r of L.nodes.values()) { const b = bandOf(r.y), p = map(r.x, r.y, b); r.x = p.x; r.y = p.y; r.column = b; }
  for (const r of L.clusters.values()) { const b = bandOf(r.y), p = map(r.x, r.y, b); r.x = p.x; r.y = p.y; }
  let height = 0;
  for (let b = 0; b <= cuts.length; b++) height = Math.max(height, (b < cuts.length ? cuts[b] : H) - top(b) + (b ? 10 : 0));
  for (const e of L.edges) {
    const segs = [];
    let cur = [], cb = -1;
    for (const p of e.points) {
      const b = bandOf(p.y);
      if (cb >= 0 && b !== cb) {       // leave column cb at its bottom, enter column b at its top
        const last = cur[cur.length - 1];
        cur.push({ x: last.x, y: Math.min(height, last.y + 14) });
        segs.push(cur);
        const q = map(p.x, p.y, b);
        cur = [{ x: q.x, y: Math.max(0, (b ? 10 : 0) - 4) }];
      }
      cur.push(map(p.x, p.y, b));
      cb = b;
    }
    if (cur.length) segs.push(cur);
    e.segments = segs;
    e.points = segs.flat();
  }
  L.width = (cuts.length + 1) * W + cuts.length * COLUMN_GAP;
  L.height = height;
  L.columns = cuts.length + 1;
}
