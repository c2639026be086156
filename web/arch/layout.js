// layout.js: places a diagram (model.js) with dagre's layered layout (@dagrejs/dagre, bundled at
// build time): top to bottom, inputs first; clusters (expanded subgraphs, decoder layers) are
// dagre compound nodes. Sizes come from the text each node shows (a fixed character width, so
// the layout does not wait on fonts). Returns {nodes: Map id -> {x, y, w, h} (top-left corner),
// edges: [{points}], clusters: Map id -> {x, y, w, h}, width, height, ms, order: "dagre" or
// "fast", the ordering used (fastOrder below from FAST_FROM nodes on)}.
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
  // dagre's crossing minimisation (sweeps until four bring no gain, each building a graph per
  // rank) is most of the time on big graphs: above FAST_FROM nodes, without clusters, the
  // ordering is fastOrder's (same barycentre heuristic, plain arrays, a fixed number of sweeps)
  // (opts.order "dagre" or "fast" forces one, for the benchmark; clusters always take dagre's)
  const fast = d.clusters.length === 0 && (opts && opts.order ? opts.order === "fast" : d.nodes.length >= FAST_FROM);
  dagreLayout(g, fast ? { customOrder: fastOrder } : {});
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
  L.order = fast ? "fast" : "dagre";
  return L;
}

export const FAST_FROM = 600;   // diagram nodes: fastOrder from this many on
const SWEEPS = 8;               // down and up passes, alternating

/* The order of the nodes within each rank (dagre's "order" phase, as its customOrder option takes
** it) for a graph without clusters: lg is dagre's layered graph, every node ranked and every edge
** between adjacent ranks (long edges are chains of dummy nodes by then). A depth-first initial
** order from the sources, then SWEEPS barycentre passes (Sugiyama, Tagawa & Toda 1981: a node's
** place is the weighted mean of its neighbours' places in the rank above on a down pass, below on
** an up pass; nodes without neighbours there keep theirs), keeping the order with the fewest
** crossings, counted between each pair of ranks with an accumulator tree (Barth, Juenger & Mutzel
** 2002, O(E log V)). Sets lg.node(v).order. */
export function fastOrder(lg) {
  const ids = lg.nodes(), n = ids.length, at = new Map(ids.map((v, i) => [v, i]));
  const rank = new Int32Array(n), pos = new Float64Array(n);
  let maxRank = 0;
  ids.forEach((v, i) => { rank[i] = lg.node(v).rank | 0; if (rank[i] > maxRank) maxRank = rank[i]; });
  const up = Array.from({ length: n }, () => []), down = Array.from({ length: n }, () => []);   // [neighbour, weight]
  for (const e of lg.edges()) {
    const a = at.get(e.v), b = at.get(e.w), w = (lg.edge(e) && lg.edge(e).weight) || 1;
    if (rank[a] < rank[b]) { down[a].push([b, w]); up[b].push([a, w]); }
    else if (rank[a] > rank[b]) { down[b].push([a, w]); up[a].push([b, w]); }
  }
  const layers = Array.from({ length: maxRank + 1 }, () => []);
  const seen = new Uint8Array(n);
  const starts = [...ids.keys()].sort((a, b) => rank[a] - rank[b] || a - b);
  for (const s0 of starts) {                  // depth first, iteratively: each node once
    if (seen[s0]) continue;
    const stack = [s0];
    while (stack.length) {
      const v = stack.pop();
      if (seen[v]) continue;
      seen[v] = 1;
      layers[rank[v]].push(v);
      for (let k = down[v].length - 1; k >= 0; k--) if (!seen[down[v][k][0]]) stack.push(down[v][k][0]);
    }
  }
  const place = () => { for (const l of layers) l.forEach((v, i) => { pos[v] = i; }); };
  place();
  const crossings = () => {
    let c = 0;
    for (let r = 0; r < maxRank; r++) {
      const south = layers[r + 1].length;
      if (!south) continue;
      let size = 1;
      while (size < south) size <<= 1;
      const tree = new Float64Array(2 * size);
      const ends = [];
      for (const v of layers[r]) {
        const ws = down[v].map(([u, w]) => [pos[u], w]).sort((a, b) => a[0] - b[0]);
        for (const x of ws) ends.push(x);
      }
      for (const [p, w] of ends) {
        let i = p + size;
        tree[i] += w;
        let sum = 0;
        while (i > 1) { if (i % 2 === 0) sum += tree[i + 1]; i >>= 1; tree[i] += w; }
        c += w * sum;
      }
    }
    return c;
  };
  let best = layers.map((l) => l.slice()), bestC = crossings();
  for (let it = 0; it < SWEEPS && bestC > 0; it++) {
    const goingDown = it % 2 === 0, adj = goingDown ? up : down;
    for (let k = 1; k <= maxRank; k++) {
      const r = goingDown ? k : maxRank - k, l = layers[r];
      const bary = new Map();
      for (const v of l) {
        let sw = 0, sp = 0;
        for (const [u, w] of adj[v]) { sw += w; sp += w * pos[u]; }
        bary.set(v, sw ? sp / sw : pos[v]);
      }
      l.sort((a, b) => bary.get(a) - bary.get(b) || pos[a] - pos[b]);
      l.forEach((v, i) => { pos[v] = i; });
    }
    const c = crossings();
    if (c < bestC) { bestC = c; best = layers.map((l) => l.slice()); }
  }
  best.forEach((l) => l.forEach((v, i) => { lg.node(ids[v]).order = i; }));
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
