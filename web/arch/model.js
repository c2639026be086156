// model.js: what the Architecture diagram draws, built from the API's documents, with no DOM.
//  - onnxDiagram(graph): the dataflow graph of /api/v1/graph (api_graph.c) with constants and
//    initializers folded into their consumer, each DequantizeLinear of a weight folded into a
//    badge on that weight, each QuantizeLinear -> DequantizeLinear pair on an activation folded
//    into a badge on its edge, subgraphs collapsed into the node that holds them.
//  - blockDiagram(inspect): a transformer checkpoint (/api/v1/inspect) as blocks in model order:
//    embedding -> layers (norm, q/k/v/o, norm, gate/up/down) -> final norm -> head, runs of
//    identical layers stacked into one expandable stack.
// Both return {kind, nodes, edges, clusters}: a node {id, name (its data-node), title, sub,
// scheme, quantized, badges, modules (the checkpoint modules it stands for), weights (ONNX weight
// tensors)}, an edge {from, to, badge, boundary}, a cluster {id, label, nodes}. An edge is a
// boundary when the precision key of its two ends differs: a node's key is its weight's scheme
// (the tensor's tm_qtensor_label, or "dense <dtype>"), plus the element type of a quantized
// activation it reads; a node without a weight takes the key of its first input.

const MATMUL_LIKE = new Set(["Conv", "ConvTranspose", "MatMul", "Gemm", "Gather", "LSTM", "GRU", "RNN",
  "Attention", "MatMulNBits", "QLinearConv", "QLinearMatMul", "QGemm", "MatMulInteger", "ConvInteger",
  "DynamicQuantizeMatMul", "MatMulIntegerToFloat", "QAttention", "Einsum"]);

function denseKey(dtype) { return "dense " + dtype; }

/* The owner of a subgraph path "<node name or #index>/<attr>[k]/...": its top-level node index. */
function ownerOf(graphPath, byName) {
  const top = graphPath.split("/")[0];
  if (/^#\d+$/.test(top)) return Number(top.slice(1));
  return byName.has(top) ? byName.get(top) : -1;
}

export function onnxDiagram(g, opts) {
  const expanded = (opts && opts.expanded) || new Set();   // owner node indices shown open
  const V = g.values, N = g.nodes;
  const byName = new Map();
  N.forEach((n, i) => { if (n.name && !byName.has(n.name)) byName.set(n.name, i); });
  const isConstNode = (n) => n.op_type === "Constant";
  const producer = new Map();            // value index -> node index
  N.forEach((n, i) => n.outputs.forEach((v) => { if (v !== null) producer.set(v, i); }));
  const consumers = new Map();           // value index -> [node index]
  N.forEach((n, i) => n.inputs.forEach((v) => {
    if (v === null) return;
    if (!consumers.has(v)) consumers.set(v, []);
    consumers.get(v).push(i);
  }));
  const isConstValue = (vi) => {
    const v = V[vi];
    if (!v) return false;
    const p = producer.get(vi);
    if (p !== undefined) return isConstNode(N[p]) || (N[p].op_type === "DequantizeLinear" && N[p].inputs.length > 0 && isConstValue(N[p].inputs[0]));
    return v.tensor !== null && v.tensor !== undefined;
  };
  // folding: hidden nodes, value aliases (a Q/DQ pair's output is its input), weights
  const hidden = new Set();
  const weightOf = new Map();            // value index (a folded DQ's output) -> weight value index
  const alias = new Map();               // value index -> value index it stands for
  const edgeBadge = new Map();           // value index (the alias target's use) -> badge
  N.forEach((n, i) => {
    if (isConstNode(n)) { hidden.add(i); return; }
    if (n.op_type === "DequantizeLinear" && n.inputs.length && isConstValue(n.inputs[0]) && V[n.inputs[0]] && V[n.inputs[0]].tensor) {
      hidden.add(i);
      if (n.outputs[0] !== null && n.outputs[0] !== undefined) weightOf.set(n.outputs[0], n.inputs[0]);
      return;
    }
    if (n.op_type === "QuantizeLinear" && n.inputs.length && !isConstValue(n.inputs[0])) {
      const q = n.outputs[0], users = consumers.get(q) || [];
      if (users.length && users.every((u) => N[u].op_type === "DequantizeLinear")) {
        hidden.add(i);
        const qv = V[q] || {};
        const badge = { text: (qv.elem_type || "?") + (qv.block_size ? " block:" + qv.block_size : ""), quantized: true,
          title: "QuantizeLinear -> DequantizeLinear (" + (n.name || "#" + i) + "): the activation is quantized to " + (qv.elem_type || "?") };
        for (const u of users) {
          hidden.add(u);
          const o = N[u].outputs[0];
          if (o !== null && o !== undefined) { alias.set(o, n.inputs[0]); edgeBadge.set(o, badge); }
        }
      }
    }
  });
  const resolve = (vi) => { let k = 0; while (alias.has(vi) && k++ < 64) vi = alias.get(vi); return vi; };
  // subgraphs: collapsed into their owner unless expanded
  const ownerIdx = N.map((n) => (n.graph ? ownerOf(n.graph, byName) : -1));
  const shownAs = (i) => {        // the displayed node standing for node i (itself, or its owner)
    let j = i, k = 0;
    while (ownerIdx[j] >= 0 && !expanded.has(topOwner(j)) && k++ < 64) j = topOwner(j);
    return j;
  };
  function topOwner(i) { let j = i, k = 0; while (ownerIdx[j] >= 0 && k++ < 64) j = ownerIdx[j]; return j; }
  const nodes = [], edges = [], clusters = [];
  const nodeId = new Map();              // node index -> diagram id
  const subCount = new Map();
  N.forEach((n, i) => { if (ownerIdx[i] >= 0 && !hidden.has(i)) { const t = topOwner(i); subCount.set(t, (subCount.get(t) || 0) + 1); } });
  const usedNames = new Set();
  const uniq = (s) => { let u = s, k = 2; while (usedNames.has(u)) u = s + "~" + k++; usedNames.add(u); return u; };
  N.forEach((n, i) => {
    if (hidden.has(i) || shownAs(i) !== i) return;
    const weights = [];
    for (const vi of n.inputs) {
      if (vi === null) continue;
      const r = resolve(vi);
      if (weightOf.has(r)) {
        const w = V[weightOf.get(r)];
        weights.push({ name: w.tensor, scheme: w.scheme || denseKey(w.elem_type), dtype: w.dtype || w.elem_type, quantized: true, n_elems: w.n_elems });
      } else if (isConstValue(r) && V[r] && V[r].tensor) {
        const w = V[r];
        const q = !!(w.scheme && w.scheme !== "dense");   // the ONNX element type names the dense key, as for inputs
        weights.push({ name: w.tensor, scheme: q ? w.scheme : denseKey(w.elem_type), dtype: w.elem_type, quantized: q, n_elems: w.n_elems || 0 });
      }
    }
    const id = "n" + i;
    nodeId.set(i, id);
    const q = weights.filter((w) => w.quantized);
    const badges = q.map((w) => ({ text: w.scheme, quantized: true, title: "weight " + w.name + ": " + w.scheme + " (a DequantizeLinear folded in)" }));
    const sub = [];
    if (subCount.has(i)) sub.push((expanded.has(i) ? "\u25be " : "\u25b8 ") + subCount.get(i) + " nodes in subgraphs");
    const big = weights.filter((w) => !w.quantized && w.n_elems >= 16);
    if (!q.length && big.length) sub.push(big.length + " weight" + (big.length > 1 ? "s" : "") + " " + big[0].dtype);
    nodes.push({
      id, name: uniq(n.name || "#" + i + " " + n.op_type), title: n.op_type, sub: sub.join(" \u00b7 "), badges,
      kind: "op", op: n.op_type, index: i, weights, graph: n.graph, collapsible: subCount.has(i), expanded: expanded.has(i),
      cluster: n.graph && expanded.has(topOwner(i)) ? "c" + topOwner(i) : null,
    });
  });
  for (const t of expanded) if (subCount.has(t)) clusters.push({ id: "c" + t, label: (N[t].name || "#" + t) + " subgraphs", owner: "n" + t });
  // graph inputs and outputs
  const inputId = new Map();
  const edgeSet = new Set();
  const addEdge = (from, to, vi) => {
    if (from === to) return;
    const k = from + ">" + to;
    if (edgeSet.has(k)) return;
    edgeSet.add(k);
    edges.push({ from, to, value: V[vi] ? V[vi].name : "", badge: edgeBadge.get(vi) || null });
  };
  N.forEach((n, i) => {
    if (hidden.has(i)) return;
    const to = nodeId.get(shownAs(i));
    if (!to) return;
    for (const raw of n.inputs) {
      if (raw === null) continue;
      const vi = resolve(raw);
      if (weightOf.has(vi) || isConstValue(vi)) continue;
      const p = producer.get(vi);
      let from = null;
      if (p !== undefined && !hidden.has(p)) from = nodeId.get(shownAs(p));
      else if (p === undefined) {
        const v = V[vi];
        if (!v || !v.name) continue;
        if (!inputId.has(vi)) {
          const id = "in" + vi;
          inputId.set(vi, id);
          nodes.push({ id, name: uniq(v.name), title: "input", sub: v.elem_type + (v.shape ? " [" + v.shape.map((d) => (d < 0 ? "?" : d)).join(", ") + "]" : ""),
            badges: [], kind: "input", key: denseKey(v.elem_type), weights: [] });
        }
        from = inputId.get(vi);
      }
      if (from) addEdge(from, to, raw);
    }
  });
  // outputs: main-graph values produced by a shown node that nothing reads
  N.forEach((n, i) => {
    if (hidden.has(i) || n.graph) return;
    for (const vi of n.outputs) {
      if (vi === null || (consumers.get(vi) || []).length) continue;
      const v = V[vi];
      if (!v || !v.name) continue;
      const id = "out" + vi;
      nodes.push({ id, name: uniq(v.name), title: "output", sub: v.elem_type !== "?" ? v.elem_type : "", badges: [], kind: "output", weights: [] });
      addEdge(nodeId.get(shownAs(i)), id, vi);
    }
  });
  assignKeys(nodes, edges, (nd, inKeys, inEdges) => {
    if (nd.kind === "input") return nd.key;
    const q = nd.weights.find((w) => w.quantized);
    let k = null;
    if (q) k = q.scheme;
    else if (MATMUL_LIKE.has(nd.op) && nd.weights.length) k = denseKey(nd.weights[0].dtype);
    else k = inKeys.length ? inKeys[0] : null;   // fed by constants only: no precision of its own
    const act = inEdges.find((e) => e.badge);
    if (act && q && k) k += " \u00b7 act " + act.badge.text;
    else if (act) k = "act " + act.badge.text;
    return k;
  });
  return { kind: "onnx", nodes, edges, clusters };
}

/* Walk nodes in an order where producers come first (Kahn; leftovers in list order), give each
** its key, then mark boundary edges. */
function assignKeys(nodes, edges, keyOf) {
  const byId = new Map(nodes.map((n) => [n.id, n]));
  const ins = new Map(nodes.map((n) => [n.id, []]));
  const outs = new Map(nodes.map((n) => [n.id, []]));
  for (const e of edges) { if (byId.has(e.from) && byId.has(e.to)) { ins.get(e.to).push(e); outs.get(e.from).push(e); } }
  const indeg = new Map(nodes.map((n) => [n.id, ins.get(n.id).length]));
  const queue = nodes.filter((n) => indeg.get(n.id) === 0).map((n) => n.id);
  const order = [], seen = new Set();
  while (queue.length) {
    const id = queue.shift();
    if (seen.has(id)) continue;
    seen.add(id);
    order.push(id);
    for (const e of outs.get(id)) { indeg.set(e.to, indeg.get(e.to) - 1); if (indeg.get(e.to) === 0) queue.push(e.to); }
  }
  for (const n of nodes) if (!seen.has(n.id)) order.push(n.id);
  for (const id of order) {
    const nd = byId.get(id), ie = ins.get(id);
    const inKeys = ie.map((e) => byId.get(e.from).key).filter((k) => k);
    nd.key = keyOf(nd, inKeys, ie);
    nd.quantized = !!nd.key && !/^dense /.test(nd.key);
  }
  for (const e of edges) {
    const a = byId.get(e.from), b = byId.get(e.to);
    e.boundary = !!(a && b && a.key && b.key && b.kind !== "output" && a.key !== b.key);
    if (e.boundary) e.title = "boundary: " + a.key + " \u2192 " + b.key;
  }
}

/* ---- transformer checkpoints ----------------------------------------------------------------- */

const LAYER_RE = /^(.*?\b(?:layers|layer|blk|h|blocks|block)\.)(\d+)\.(.+)$/;
const SUFFIX_RE = /\.(weight|bias|qweight|scales|qzeros|g_idx|weight_packed|weight_scale|weight_zero_point)$/;
/* The rank of a module inside a decoder layer: norm, q, k, v, o, norm, gate, up, down. */
const ROLE = [
  [/(^|\.)(input_layernorm|attn_norm|attention_norm|ln_1|ln1|norm1)$/, 0, "norm"],
  [/(^|[._])(q_proj|attn_q|wq|q)$/, 1, "q"], [/(^|[._])(k_proj|attn_k|wk|k)$/, 2, "k"], [/(^|[._])(v_proj|attn_v|wv|v)$/, 3, "v"],
  [/(^|[._])(qkv_proj|attn_qkv|c_attn|query_key_value)$/, 1, "qkv"],
  [/(^|[._])(o_proj|attn_output|wo|out_proj|c_proj|dense)$/, 4, "o"],
  [/(^|\.)(post_attention_layernorm|ffn_norm|ln_2|ln2|norm2)$/, 5, "norm"],
  [/(^|[._])(gate_proj|ffn_gate|w1)$/, 6, "gate"], [/(^|[._])(up_proj|ffn_up|w3|c_fc|fc1|gate_up_proj)$/, 7, "up"],
  [/(^|[._])(down_proj|ffn_down|w2|fc2)$/, 8, "down"],
];
function roleOf(rest) {
  for (const [re, rank, role] of ROLE) if (re.test(rest)) return { rank, role };
  return { rank: 9, role: "other" };
}
/* Outside the layers: embedding first, then anything else, then the final norm, then the head. */
function outerRank(name) {
  if (/(embed_tokens|tok_embeddings|token_embd|wte|wpe|embeddings?|embed)(\.|$)/.test(name)) return 0;
  if (/(^|\.)(lm_head|output|head)$/.test(name)) return 3;
  if (/(^|\.)(norm|output_norm|ln_f|final_layernorm|final_norm)$/.test(name)) return 2;
  return 1;
}
function natCmp(a, b) { return a.localeCompare(b, "en", { numeric: true }); }

export function blockDiagram(inspect, opts) {
  const expanded = (opts && opts.expanded) || new Set();   // stack ids shown as their layers
  const mods = new Map();     // module name -> {name, tensors: [], dtype, scheme, shape}
  for (const t of inspect.tensors) {
    if (t.role && t.role !== "data") continue;
    const m = SUFFIX_RE.test(t.name) ? t.name.replace(SUFFIX_RE, "") : t.name;
    if (!mods.has(m)) mods.set(m, { name: m, tensors: [] });
    mods.get(m).tensors.push(t);
  }
  const keyOfTensor = (t) => (t.quantization ? t.quantization.label : denseKey(t.dtype));
  for (const m of mods.values()) {
    const w = m.tensors.find((t) => /\.weight$|\.qweight$/.test(t.name)) || m.tensors[0];
    m.key = keyOfTensor(w);
    m.quantized = !!w.quantization;
    m.shape = w.shape;
    m.description = w.quantization ? w.quantization.description : "";
    m.tensor = w.name;
  }
  const layers = new Map();   // index -> [{prefix, rest, mod}]
  const outer = [];
  let prefix = "";
  for (const m of mods.values()) {
    const x = LAYER_RE.exec(m.name);
    if (x) {
      prefix = x[1];
      const i = Number(x[2]);
      if (!layers.has(i)) layers.set(i, []);
      layers.get(i).push({ rest: x[3], mod: m, ...roleOf(x[3]) });
    } else outer.push(m);
  }
  for (const l of layers.values()) l.sort((a, b) => a.rank - b.rank || natCmp(a.rest, b.rest));
  outer.sort((a, b) => outerRank(a.name) - outerRank(b.name) || natCmp(a.name, b.name));
  const idx = [...layers.keys()].sort((a, b) => a - b);
  // stacks: runs of consecutive layers with the same modules, schemes and shapes
  const sig = (i) => layers.get(i).map((e) => e.rest + "|" + e.mod.key + "|" + (e.mod.shape || []).join("x")).join(";");
  const runs = [];
  for (const i of idx) {
    const last = runs[runs.length - 1];
    if (last && sig(last[last.length - 1]) === sig(i) && last[last.length - 1] === i - 1) last.push(i);
    else runs.push([i]);
  }
  const nodes = [], edges = [], clusters = [];
  const block = (m, id, members, cluster) => ({
    id, name: m.name, title: shortName(m.name), sub: m.shape ? "[" + m.shape.join(", ") + "]" : "", kind: "module",
    badges: [{ text: m.key.replace(/^dense /, ""), quantized: m.quantized, title: m.description || m.key }],
    key: m.key, quantized: m.quantized, modules: members, tensor: m.tensor, cluster, weights: [],
  });
  let prev = [];               // ids the next block is fed by
  // a group feeds the next one whole (q, k, v -> o), except where both are per-expert lists of a
  // mixture of experts (experts.N.w1, w3 -> experts.N.w2): each block then only its own parent's,
  // not 48 x 96 edges a layer
  const parent = (id) => id.slice(0, id.lastIndexOf("."));
  const chain = (ids) => {
    const from = new Map();
    for (const p of prev) { const k = parent(p); if (!from.has(k)) from.set(k, []); from.get(k).push(p); }
    const paired = prev.length > 1 && ids.length > 1 && from.size > 1 && ids.every((q) => from.has(parent(q)));
    for (const q of ids) for (const p of paired ? from.get(parent(q)) : prev) edges.push({ from: p, to: q });
    prev = ids;
  };
  for (const m of outer.filter((m) => outerRank(m.name) < 2)) { const n = block(m, "m:" + m.name, [m.name], null); nodes.push(n); chain([n.id]); }
  for (const run of runs) {
    const stacked = run.length > 1 && !expanded.has("s" + run[0]);
    const shown = stacked ? [run[0]] : run;
    for (const li of shown) {
      const cid = stacked ? "s" + run[0] : "l" + li;
      clusters.push({ id: cid, label: stacked ? prefix + run[0] + "\u2013" + run[run.length - 1] + "  \u00d7" + run.length + " identical layers" :
        prefix + li, stack: run.length > 1 ? "s" + run[0] : null, stacked, layers: stacked ? run : [li] });
      const entries = layers.get(li);
      const byRole = (r) => entries.filter((e) => e.role === r).map((e) => {
        const members = stacked ? run.map((k) => (layers.get(k).find((x) => x.rest === e.rest) || {}).mod).filter(Boolean).map((mm) => mm.name) : [e.mod.name];
        const n = block(e.mod, "m:" + e.mod.name, members, cid);
        nodes.push(n);
        return n.id;
      });
      const norms = entries.filter((e) => e.role === "norm");
      const n1 = norms.length ? byRoleOne(norms[0]) : null;
      function byRoleOne(e) {
        const members = stacked ? run.map((k) => (layers.get(k).find((x) => x.rest === e.rest) || {}).mod).filter(Boolean).map((mm) => mm.name) : [e.mod.name];
        const n = block(e.mod, "m:" + e.mod.name, members, cid);
        nodes.push(n);
        return n.id;
      }
      if (n1) chain([n1]);
      const qkv = [...byRole("q"), ...byRole("k"), ...byRole("v"), ...byRole("qkv")];
      if (qkv.length) chain(qkv);
      const o = byRole("o");
      if (o.length) chain(o);
      const n2 = norms.length > 1 ? byRoleOne(norms[1]) : null;
      if (n2) chain([n2]);
      const gu = [...byRole("gate"), ...byRole("up")];
      if (gu.length) chain(gu);
      const down = byRole("down");
      if (down.length) chain(down);
      for (const e of entries.filter((x) => x.role === "other")) {
        const members = stacked ? run.map((k) => (layers.get(k).find((x) => x.rest === e.rest) || {}).mod).filter(Boolean).map((mm) => mm.name) : [e.mod.name];
        const n = block(e.mod, "m:" + e.mod.name, members, cid);
        nodes.push(n);
        chain([n.id]);
      }
    }
  }
  for (const m of outer.filter((m) => outerRank(m.name) >= 2)) { const n = block(m, "m:" + m.name, [m.name], null); nodes.push(n); chain([n.id]); }
  assignKeys(nodes, edges, (nd) => nd.key);
  return { kind: "blocks", nodes, edges, clusters, order: nodes.map((n) => n.name) };
}

function shortName(name) {
  const x = LAYER_RE.exec(name);
  return x ? x[3] : name;
}
