// arch.test.mjs: the Architecture diagram (web/arch/, bundled into /arch.js) in a real Chromium
// (playwright-core + Debian's chromium) at 1440x900, on real models from ../shared, each served
// by `tensormorph serve`:
//  - the int8 QDQ model `tensormorph quantize` makes from PaddleOCR cls: one data-node per node
//    left after folding (node count from `tensormorph graph --json`: all nodes - Constant - the
//    DequantizeLinear of each weight, + graph inputs + outputs), each DequantizeLinear a badge,
//    the boundaries exactly where the flow's precision changes (graph input -> first Conv, and
//    the Conv channel:0 weights -> the MatMul channel:1 weight);
//  - PaddleOCR cls (float: no boundary) and PP-OCRv4 rec (765 nodes: every node drawn at the
//    first fit, a minimap, search counts the Conv nodes and jumps), Silero VAD (its If
//    subgraphs collapse into their node and expand);
//  - transformer checkpoints: the int4 safetensors output of quantize (block diagram in model
//    order, five identical layers stacked, expandable, boundaries where dense norms meet int4
//    projections; selection by pattern, shift-click, a scheme, the recipe downloaded and
//    accepted by `tensormorph quantize --recipe`), GGUF Q4_K_M and a PyTorch .pt state dict;
//  - sensitivity (issue 14): a real `tensormorph sensitivity --budget` run on stories260K-F32.gguf
//    (ctx 64, 2 chunks: 23 s on 2 cores, 55 s at load 6-11; skipped visibly without node-llama-cpp unless
//    TM_REQUIRE_LLAMA=1), served with --sensitivity: every module of a unit carries its rank,
//    KLD and planned type from the JSON, the colours' luminance falls in KLD order, the legend
//    gives the KLD range; "Start from this plan" then Download recipe gives the plan's recipe
//    (OUT.gguf.recipe.json, its comment aside), which `quantize --recipe` turns into the plan's
//    artifact byte for byte; the same JSON loaded from the page's file input colours the same;
//    the compressed-tensors form (stories260K safetensors, int4 channel -> int8 channel): the
//    plan's rules downloaded as they are, and `quantize --recipe` gives its model.safetensors;
//  - keyboard (issue 15): Tab reaches the roving node, real arrow presses move to the successor,
//    a sibling and back, Enter selects, Shift+Enter adds, Escape clears, the focus ring is
//    drawn, also in the dark theme;
//  - axe-core (web/node_modules, pinned): no serious or critical violation in the view.
// Screenshots: $TM_BUILD/browser-screenshots/arch-*.png. Layout and draw times are printed
// (the benchmark is bench/arch_layout.mjs, figures in docs/PERFORMANCE.md), never asserted.
// Exit 77 (skipped) with a reason when chromium or playwright-core is missing, unless
// TM_REQUIRE_BROWSER=1; "SKIP: ../shared not found" unless TM_REQUIRE_SHARED=1.
import { spawn, execFileSync } from "node:child_process";
import { createRequire } from "node:module";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";

const here = path.dirname(fileURLToPath(import.meta.url));
const src = process.env.TM_SRC || path.resolve(here, "../..");
const build = process.env.TM_BUILD || path.join(src, "build");
const bin = process.env.TM_BIN || path.join(build, "tensormorph");
const chromium = process.env.TM_CHROMIUM || "/usr/bin/chromium";

function skip(reason, requiredBy) {
  if (process.env[requiredBy] === "1") { console.error("FAIL: " + reason + " (" + requiredBy + "=1)"); process.exit(1); }
  console.log("SKIP: " + reason);
  process.exit(77);
}
const shared = process.env.TM_SHARED || path.resolve(src, "../shared");
const M = (p) => path.join(shared, "models", p);
if (!fs.existsSync(M("onnx/npm/paddleocr/ch_ppocr_mobile_v2.0_cls_infer.onnx"))) skip("../shared not found", "TM_REQUIRE_SHARED");
if (!fs.existsSync(chromium)) skip("chromium not found at " + chromium + " (apt-get install chromium)", "TM_REQUIRE_BROWSER");
let chromiumApi;
for (const b of [process.env.TM_NODE_MODULES, path.join(src, "runner", "node_modules"), path.join(here, "node_modules")].filter(Boolean)) {
  try { const req = createRequire(path.join(b, "noop.js")); chromiumApi = req(req.resolve("playwright-core", { paths: [b] })).chromium; break; } catch (e) { /* next */ }
}
if (!chromiumApi) skip("playwright-core not installed (scripts/setup.sh --test)", "TM_REQUIRE_BROWSER");
const axePath = path.join(src, "web", "node_modules", "axe-core", "axe.min.js");
if (!fs.existsSync(axePath)) skip("axe-core not installed in web/node_modules (scripts/setup.sh)", "TM_REQUIRE_BROWSER");
const axeSource = fs.readFileSync(axePath, "utf8");

let failures = 0;
function check(cond, what) {
  if (cond) console.log("ok   " + what);
  else { failures++; console.log("FAIL " + what); }
}
const tmp = fs.mkdtempSync(path.join(os.tmpdir(), "tm_arch_"));
const servers = [];
let userDir = null;
process.on("exit", () => {
  for (const s of servers) { try { s.kill("SIGTERM"); } catch (e) { /* gone */ } }
  fs.rmSync(tmp, { recursive: true, force: true });
  if (userDir) fs.rmSync(userDir, { recursive: true, force: true });
});
const shots = path.join(build, "browser-screenshots");
fs.mkdirSync(shots, { recursive: true });
const tm = (...args) => execFileSync(bin, args, { encoding: "utf8", stdio: ["ignore", "pipe", "inherit"], maxBuffer: 1 << 28 });

function serve(file, extra) {
  const p = spawn(bin, ["serve", file, "--port", "0", "-q", ...(extra || [])], { stdio: ["ignore", "pipe", "inherit"] });
  servers.push(p);
  return new Promise((resolve, reject) => {
    let buf = "";
    const t = setTimeout(() => reject(new Error("serve printed no URL")), 20000);
    p.stdout.on("data", (d) => { buf += d; const m = buf.match(/^(http:\/\/127\.0\.0\.1:\d+\/)\n/); if (m) { clearTimeout(t); resolve({ url: m[1], proc: p }); } });
    p.on("exit", (c) => reject(new Error("serve exited with " + c)));
  });
}

userDir = fs.mkdtempSync(path.join(os.tmpdir(), "tm_arch_profile_"));
const ctx = await chromiumApi.launchPersistentContext(userDir, {
  executablePath: chromium, headless: true, viewport: { width: 1440, height: 900 }, acceptDownloads: true,
  args: ["--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking", "--disable-component-update", "--disable-sync", "--disable-quic"],
});
const consoleErrors = [], external = [];

/* Open the page of `file`, wait for the diagram; returns {page, stop}. */
async function open(file, extra) {
  const { url, proc } = await serve(file, extra);
  const page = await ctx.newPage();
  page.on("console", (m) => { if (m.type() === "error") consoleErrors.push(path.basename(file) + ": " + m.text()); });
  page.on("pageerror", (e) => consoleErrors.push(path.basename(file) + ": " + String(e)));
  page.on("request", (r) => { if (!r.url().startsWith(url) && !r.url().startsWith("blob:") && !r.url().startsWith("data:")) external.push(r.url()); });
  await page.goto(url);
  await page.waitForSelector("[data-view='architecture'] .arch-diagram[data-ready='1']", { timeout: 60000 });
  return { page, stop: async () => { await page.close(); proc.kill("SIGTERM"); } };
}
const nodeCount = (page) => page.locator("[data-view='architecture'] .arch-svg [data-node]").count();
const boundaryCount = (page) => page.locator("[data-view='architecture'] .arch-svg [data-boundary]").count();
const timing = (page) => page.evaluate(() => window.tmArch.view.timing);
/* Every node inside the SVG's drawn area at the first fit (the whole graph on screen). */
const allInView = (page) => page.evaluate(() => {
  const svg = document.querySelector(".arch-svg").getBoundingClientRect();
  let out = 0;
  for (const g of document.querySelectorAll(".arch-svg [data-node]")) {
    const r = g.getBoundingClientRect();
    if (r.left < svg.left - 1 || r.right > svg.right + 1 || r.top < svg.top - 1 || r.bottom > svg.bottom + 1) out++;
  }
  return out;
});
async function axeCheck(page, what) {
  await page.evaluate(axeSource);
  const res = await page.evaluate(async () => {
    const r = await window.axe.run(document.querySelector("[data-view='architecture']"), { resultTypes: ["violations"] });
    return r.violations.filter((v) => v.impact === "serious" || v.impact === "critical").map((v) => v.id + " (" + v.impact + ", " + v.nodes.length + "): " + v.nodes.slice(0, 2).map((n) => n.target.join(" ")).join("; "));
  });
  check(res.length === 0, "axe-core: no serious or critical violation in the " + what + " view" + (res.length ? ": " + res.join(" | ") : ""));
}
/* The diagram's expected size from `tensormorph graph --json`: nodes minus Constant nodes and
** the DequantizeLinear of each weight, plus the graph inputs and outputs (main graph). */
function expectedOnnx(file) {
  const g = JSON.parse(tm("graph", file, "--json"));
  const main = g.nodes.filter((n) => n.graph === "");
  const produced = new Set(g.nodes.flatMap((n) => n.outputs.map((o) => o.name)));
  const consumed = new Set(g.nodes.flatMap((n) => n.inputs.filter(Boolean).map((i) => i.name)));
  const constOut = new Set(g.nodes.filter((n) => n.op_type === "Constant").flatMap((n) => n.outputs.map((o) => o.name)));
  const weightDq = main.filter((n) => n.op_type === "DequantizeLinear" && n.inputs[0] && n.inputs[0].tensor);
  const inputs = new Set();
  for (const n of g.nodes) for (const i of n.inputs) if (i && i.name && !produced.has(i.name) && !i.tensor && !constOut.has(i.name)) inputs.add(i.name);
  const outputs = main.flatMap((n) => n.outputs.map((o) => o.name)).filter((o) => !consumed.has(o));
  const shown = main.filter((n) => n.op_type !== "Constant" && !weightDq.includes(n));
  return { g, shown, weightDq, inputs: [...inputs], outputs, n: shown.length + inputs.size + outputs.length };
}

try {
  // ---- the int8 QDQ model quantize makes from PaddleOCR cls
  {
    const cls = M("onnx/npm/paddleocr/ch_ppocr_mobile_v2.0_cls_infer.onnx");
    const q8 = path.join(tmp, "cls-int8.onnx");
    tm("quantize", cls, "-o", q8, "-q");
    const want = expectedOnnx(q8);
    const { page, stop } = await open(q8);
    const n = await nodeCount(page);
    check(want.weightDq.length === 54 && n === want.n, "cls int8 QDQ: " + n + " data-node = " + want.shown.length + " nodes left after folding " +
      want.g.nodes.filter((x) => x.op_type === "Constant").length + " Constant and " + want.weightDq.length + " DequantizeLinear + " + want.inputs.length + " input + " + want.outputs.length + " output");
    const dqLabels = want.weightDq.map((d) => d.inputs[0].quantization.label);
    const qb = await page.$$eval(".arch-node .badge.q text", (t) => t.map((x) => x.textContent));
    check(qb.length === want.weightDq.length && qb.every((t) => dqLabels.includes(t)), "each DequantizeLinear is a badge on its weight (" + qb.length + ", e.g. " + qb[0] + ")");
    // boundaries: where the graph input meets the first int8 Conv, and where the weights' scheme
    // changes from channel:0 (Conv) to channel:1 (the classifier's MatMul)
    const labels = [...new Set(dqLabels)];
    const odd = want.weightDq.filter((d) => d.inputs[0].quantization.label !== dqLabels[0]);
    const consumerOf = (v) => want.g.nodes.filter((x) => x.inputs.some((i) => i && i.name === v)).map((x) => x.name);
    const expectTargets = [...consumerOf(want.inputs[0]), ...odd.flatMap((d) => consumerOf(d.outputs[0].name))].sort();
    const got = await page.$$eval(".arch-svg [data-boundary]", (b) => b.map((x) => x.getAttribute("data-boundary")));
    const idToName = await page.$$eval("[data-node]", (g) => Object.fromEntries(g.map((x) => [x.dataset.id, x.dataset.node])));
    const targets = got.map((b) => idToName[b.split(">")[1]]).sort();
    check(labels.length === 2 && got.length === 2 && JSON.stringify(targets) === JSON.stringify(expectTargets),
      "cls int8 QDQ: " + got.length + " data-boundary, into " + targets.join(", ") + " (" + labels.join(" / ") + ")");
    check((await allInView(page)) === 0, "every node is drawn inside the view at the first fit");
    await page.screenshot({ path: path.join(shots, "arch-onnx-cls-int8.png") });
    await axeCheck(page, "ONNX diagram");
    // zoom in and out around the centre, fit comes back
    const z0 = +(await page.getAttribute(".arch-diagram", "data-zoom"));
    await page.click("[aria-label='zoom in']");
    const z1 = +(await page.getAttribute(".arch-diagram", "data-zoom"));
    await page.click(".arch-fit");
    const z2 = +(await page.getAttribute(".arch-diagram", "data-zoom"));
    check(Math.abs(z1 / z0 - 1.25) < 1e-6 && Math.abs(z2 / z0 - 1) < 1e-6, "zoom in x1.25 (" + z0 + " -> " + z1 + "), Fit returns to " + z2);
    // ONNX recipe: exclude the classifier's MatMul weight, give the rest int8 tensor
    await page.fill(".arch-pattern", "^p2o\\.MatMul");
    await page.click(".arch-select");
    await page.selectOption(".arch-scheme", "exclude");
    await page.click(".arch-set");
    check((await page.locator("[data-node][data-plan='exclude']").count()) === 1, "the plan marks the excluded MatMul");
    await page.selectOption(".arch-default", "int8-tensor");
    const [dl] = await Promise.all([page.waitForEvent("download"), page.click(".arch-download")]);
    const rp = path.join(tmp, "onnx-recipe.json");
    await dl.saveAs(rp);
    const rec = JSON.parse(fs.readFileSync(rp, "utf8"));
    const mmWeight = odd[0].inputs[0].tensor;
    check(rec.default && rec.default.type === "int8" && rec.default.granularity === "tensor" && rec.exclude && rec.exclude.length === 1 &&
      new RegExp(rec.exclude[0]).test(mmWeight), "ONNX recipe: default int8 tensor, exclude " + rec.exclude);
    await stop();
    // the same recipe on the float model: quantize accepts it and keeps the classifier dense
    const { page: pf, stop: stopf } = await open(cls);
    const wf = expectedOnnx(cls);
    check((await nodeCount(pf)) === wf.n && (await boundaryCount(pf)) === 0, "cls float: " + wf.n + " data-node, no boundary");
    await pf.screenshot({ path: path.join(shots, "arch-onnx-cls.png") });
    await pf.fill(".arch-pattern", "^p2o\\.MatMul");
    await pf.click(".arch-select");
    await pf.selectOption(".arch-scheme", "exclude");
    await pf.click(".arch-set");
    await pf.selectOption(".arch-default", "int8-tensor");
    const [dl2] = await Promise.all([pf.waitForEvent("download"), pf.click(".arch-download")]);
    const rp2 = path.join(tmp, "onnx-recipe-float.json");
    await dl2.saveAs(rp2);
    const out2 = path.join(tmp, "cls-recipe.onnx");
    tm("quantize", cls, "-o", out2, "--recipe", rp2, "-q");
    const g2 = JSON.parse(tm("graph", out2, "--json"));
    const dq2 = g2.nodes.filter((x) => x.op_type === "DequantizeLinear");
    check(dq2.length === 53 && dq2.every((d) => /tensor/.test(d.inputs[0].quantization.label)), "quantize --recipe (the page's): 53 weights int8 per tensor, the excluded MatMul weight dense (" + dq2[0].inputs[0].quantization.label + ")");
    // keyboard on the ONNX graph: Tab reaches the first node, each ArrowDown follows an edge of the diagram
    await pf.focus(".arch-svg");
    await pf.keyboard.press("Tab");
    const path4 = [await pf.evaluate(() => document.activeElement.dataset.node || null)];
    for (let i = 0; i < 4; i++) { await pf.keyboard.press("ArrowDown"); path4.push(await pf.evaluate(() => document.activeElement.dataset.node || null)); }
    const followsEdges = await pf.evaluate((names) => {
      const v = window.tmArch.view, id = (n) => (v.byName.get(n) || {}).id;
      return names[0] === v.d.nodes[0].name && names.every((n, i) => i === 0 || v.d.edges.some((e) => e.from === id(names[i - 1]) && e.to === id(n)));
    }, path4);
    check(followsEdges, "ONNX keyboard: Tab then ArrowDown x4 walks the dataflow " + path4.map((n) => (n || "").split(" ")[0]).join(" > "));
    await stopf();
  }
  // ---- PP-OCRv4 rec: 765 nodes, minimap, search
  {
    const rec = M("onnx/npm/paddleocr/ch_PP-OCRv4_rec_infer.onnx");
    const want = expectedOnnx(rec);
    const { page, stop } = await open(rec);
    const n = await nodeCount(page);
    check(n === want.n, "PP-OCRv4 rec: " + n + " data-node (" + want.g.n_nodes + " ONNX nodes, " + want.g.nodes.filter((x) => x.op_type === "Constant").length + " Constant folded)");
    check((await allInView(page)) === 0, "PP-OCRv4 rec: all " + n + " nodes inside the view at the first fit");
    check(await page.isVisible(".arch-minimap"), "a minimap for the large graph");
    // at Fit the minimap covers no node, and the labels are readable (>= 9 px on screen) or not drawn
    const fitLook = async () => page.evaluate(() => {
      const m = document.querySelector(".arch-minimap").getBoundingClientRect();
      let under = 0, shown = 0, minPx = Infinity;
      for (const g of document.querySelectorAll(".arch-svg [data-node]")) {
        const r = g.querySelector("rect.box").getBoundingClientRect();
        if (r.right > m.left && r.left < m.right && r.bottom > m.top && r.top < m.bottom) under++;
        for (const t of g.querySelectorAll("text")) {
          if (!t.textContent || getComputedStyle(t).display === "none") continue;
          const b = t.getBoundingClientRect();
          if (b.height === 0) continue;
          shown++;
          minPx = Math.min(minPx, parseFloat(getComputedStyle(t).fontSize) * +document.querySelector(".arch-diagram").dataset.zoom);
        }
      }
      return { under, shown, minPx, lod: document.querySelector(".arch-diagram").dataset.lod, zoom: +document.querySelector(".arch-diagram").dataset.zoom };
    });
    const f0 = await fitLook();
    check(f0.under === 0, "PP-OCRv4 rec at Fit: the minimap covers no node (" + f0.under + " under it)");
    check(f0.shown === 0 ? f0.lod === "boxes" : f0.minPx >= 9, "PP-OCRv4 rec at Fit (zoom " + f0.zoom.toFixed(3) + "): labels " +
      (f0.shown ? "drawn at >= 9 px (smallest " + f0.minPx.toFixed(1) + " px)" : "hidden (level of detail '" + f0.lod + "')"));
    // 2,000-node layouts (layout.js fastOrder, from 600 nodes on): 4 copies of this graph and a
    // 2,000-deep chain with skip edges (dagre's own ordering overflows the stack on it): every node
    // placed, none overlapping another, every edge routed
    const bigLayouts = await page.evaluate(() => {
      const d = window.tmArch.view.d, out = [];
      const copies = { nodes: [], edges: [], clusters: [] };
      for (let c = 0; c < 4; c++) {
        for (const n of d.nodes) copies.nodes.push(Object.assign({}, n, { id: c + ":" + n.id }));
        for (const e of d.edges) copies.edges.push(Object.assign({}, e, { from: c + ":" + e.from, to: c + ":" + e.to }));
      }
      const chain = { nodes: [], edges: [], clusters: [] };
      for (let i = 0; i < 2000; i++) chain.nodes.push({ id: "n" + i, name: "op" + i, title: "Add_" + i, sub: "", kind: "op", badges: [] });
      for (let i = 0; i + 1 < 2000; i++) { chain.edges.push({ from: "n" + i, to: "n" + (i + 1) }); if (i % 3 === 0 && i + 5 < 2000) chain.edges.push({ from: "n" + i, to: "n" + (i + 5) }); }
      for (const [what, D] of [["4 x PP-OCRv4 rec", copies], ["2,000-op chain", chain]]) {
        let L;
        try { L = window.tmArch.layoutDiagram(D, { aspect: 1.6 }); } catch (e) { out.push({ what, error: String(e) }); continue; }
        const rs = D.nodes.map((n) => L.nodes.get(n.id)).filter((r) => r && isFinite(r.x) && isFinite(r.y));
        rs.sort((a, b) => a.x - b.x);
        let overlaps = 0;
        for (let i = 0; i < rs.length; i++)
          for (let j = i + 1; j < rs.length && rs[j].x < rs[i].x + rs[i].w; j++)
            if (rs[j].y < rs[i].y + rs[i].h && rs[i].y < rs[j].y + rs[j].h) overlaps++;
        out.push({ what, n: D.nodes.length, placed: rs.length, overlaps, routed: L.edges.filter((e) => e.points.length >= 2).length, edges: D.edges.length, order: L.order, ms: L.ms });
      }
      return out;
    });
    for (const b of bigLayouts)
      check(!b.error && b.order === "fast" && b.placed === b.n && b.overlaps === 0 && b.routed === b.edges,
        b.what + ": " + (b.error || b.placed + " of " + b.n + " nodes placed, " + b.overlaps + " overlapping, " + b.routed + " of " + b.edges + " edges routed, ordering " + b.order +
        " (" + b.ms.toFixed(0) + " ms, not timed)"));
    // a mixture of experts: each expert's w1 and w3 feed its own w2 only
    const moe = await page.evaluate(() => {
      const t = [];
      const add = (name, shape) => t.push({ name, role: "data", dtype: "BF16", shape });
      for (let l = 0; l < 2; l++) {
        const p = "model.layers." + l + ".";
        add(p + "input_layernorm.weight", [64]); add(p + "self_attn.q_proj.weight", [64, 64]); add(p + "self_attn.o_proj.weight", [64, 64]);
        add(p + "post_attention_layernorm.weight", [64]);
        for (let e = 0; e < 4; e++) for (const w of ["w1", "w2", "w3"]) add(p + "block_sparse_moe.experts." + e + "." + w + ".weight", w === "w2" ? [64, 32] : [32, 64]);
      }
      const d = window.tmArch.blockDiagram({ tensors: t }, { expanded: new Set(["s0"]) });
      const into = d.edges.filter((e) => /\.w2$/.test(e.to));
      const expert = (id) => /experts\.(\d+)\./.exec(id)[1];
      return { n: into.length, wrong: into.filter((e) => !/experts\.\d+\.w[13]$/.test(e.from) || expert(e.from) !== expert(e.to)).length };
    });
    check(moe.n === 2 * 4 * 2 && moe.wrong === 0, "MoE block diagram: " + moe.n + " edges into the experts' w2 (2 layers x 4 experts x w1, w3), " + moe.wrong + " from another expert");
    await page.evaluate(() => window.tmArch.view.centerOn(200, 200, 1));
    const f1 = await fitLook();
    check(f1.lod === "labels" && f1.shown > 0 && f1.minPx >= 9, "zoomed to 1: labels back (" + f1.shown + " drawn, smallest " + f1.minPx.toFixed(1) + " px)");
    await page.click(".arch-fit");
    check((await fitLook()).under === 0, "Fit again: the minimap still covers no node");
    const t = await timing(page);
    console.log("info PP-OCRv4 rec: layout " + t.layout_ms.toFixed(0) + " ms, draw " + t.draw_ms.toFixed(0) + " ms (" + t.nodes + " nodes, " + t.edges + " edges; not a timed test)");
    await page.screenshot({ path: path.join(shots, "arch-onnx-rec.png") });
    const convs = want.shown.filter((x) => x.op_type === "Conv").length;
    await page.fill(".arch-search", "conv");
    const cnt = +(await page.getAttribute(".arch-count", "data-count"));
    check(cnt === convs && (await page.locator("[data-node][data-match]").count()) === convs, "search 'conv' filters to the " + convs + " Conv nodes (count " + cnt + ")");
    check((await page.locator(".arch-node.dim").count()) === n - convs, "the other " + (n - convs) + " nodes are dimmed");
    await page.press(".arch-search", "Enter");
    const cur = await page.locator(".arch-node.current").getAttribute("data-node");
    const zoom = +(await page.getAttribute(".arch-diagram", "data-zoom"));
    check(!!cur && zoom >= 1 && (await page.textContent(".arch-count")).startsWith("1 / " + convs), "Enter jumps to the first match (" + cur + ") at zoom " + zoom);
    await page.screenshot({ path: path.join(shots, "arch-onnx-rec-search.png") });
    await stop();
  }
  // ---- Silero VAD: its If subgraphs collapse into the If node and expand
  {
    const sil = M("onnx/npm/silero_vad/silero_vad_v5.onnx");
    const want = expectedOnnx(sil);
    const { page, stop } = await open(sil);
    const n0 = await nodeCount(page);
    check(n0 === want.n, "Silero VAD collapsed: " + n0 + " data-node (the main graph's " + want.shown.length + " nodes + inputs/outputs)");
    const ifNode = page.locator("[data-node='If_0'] [data-toggle]");
    check((await ifNode.count()) === 1, "the If node offers its subgraphs");
    await ifNode.click();
    await page.waitForFunction((k) => document.querySelectorAll("[data-view='architecture'] [data-node]").length > k, n0, { timeout: 30000 });
    const n1 = await nodeCount(page);
    const inner = want.g.nodes.filter((x) => x.graph !== "" && x.op_type !== "Constant" && !(x.op_type === "DequantizeLinear" && x.inputs[0] && x.inputs[0].tensor)).length;
    check(n1 === n0 + inner, "expanded: " + n1 + " data-node (+" + inner + " subgraph nodes)");
    await page.screenshot({ path: path.join(shots, "arch-onnx-silero.png") });
    await stop();
  }
  // ---- transformer: the int4 output of quantize from stories260K (safetensors)
  {
    const st = M("safetensors/stories260K-f32");
    const q4 = path.join(tmp, "q4");
    tm("quantize", st, "-o", q4, "--type", "int4", "--granularity", "group:32", "-q");
    const ins = JSON.parse(tm("inspect", q4, "--json"));
    const label = new Map(ins.tensors.filter((t) => t.role === "data").map((t) => [t.name.replace(/\.weight$/, ""), t.quantization ? t.quantization.label : "dense " + t.dtype]));
    const { page, stop } = await open(q4);
    const stacked = await page.locator(".arch-cluster.stacked").count();
    const n0 = await nodeCount(page);
    check(stacked === 1 && n0 === 2 + 9, "five identical layers stacked into one (" + n0 + " data-node: embedding, norm, and one layer's 9 modules)");
    check((await page.textContent(".arch-cluster.stacked .cluster-label")).includes("\u00d75"), "the stack says x5");
    await page.screenshot({ path: path.join(shots, "arch-blocks-stacked.png") });
    check(!(await page.isVisible("#tree")) && !(await page.isVisible("#expand-all")), "the table and its toolbar are hidden behind the diagram");
    await page.click(".arch-mode[data-mode='table']");
    check((await page.isVisible("#tree")) && !(await page.isVisible(".arch-svg")), "Table shows the module table instead of the diagram");
    {
      // keyboard in the module tree: one tab stop, arrows along the visible rows, Left/Right close/open, Enter opens a leaf
      const act = () => page.evaluate(() => { const a = document.activeElement; return a && a.dataset ? a.dataset.path || null : null; });
      const vis = () => page.$$eval("#tree .node[data-path]", (rs) => rs.filter((r) => r.offsetParent !== null).map((r) => r.dataset.path));
      const stops = await page.$$eval("#tree .node[data-path]", (rs) => rs.filter((r) => r.tabIndex === 0).length);
      await page.focus("#tree .node[data-path][tabindex='0']");
      let rows = await vis();
      check(stops === 1 && (await act()) === rows[0], "the module tree has one tab stop, on its first row (" + rows[0] + ")");
      await page.keyboard.press("ArrowDown");
      await page.keyboard.press("ArrowDown");
      check((await act()) === rows[2], "ArrowDown twice moves to the third visible row (" + (await act()) + ")");
      await page.keyboard.press("End");
      check((await act()) === rows[rows.length - 1], "End: the last visible row (" + (await act()) + ")");
      await page.keyboard.press("Home");
      const top = await act();
      await page.keyboard.press("ArrowLeft");
      const closed = await page.getAttribute("#tree .node[data-path='" + top + "']", "aria-expanded");
      const fewer = (await vis()).length;
      await page.keyboard.press("ArrowRight");
      check(closed === "false" && fewer < rows.length && (await vis()).length === rows.length &&
            (await page.getAttribute("#tree .node[data-path='" + top + "']", "aria-expanded")) === "true",
            "ArrowLeft closes " + top + " (" + rows.length + " -> " + fewer + " rows), ArrowRight opens it again");
      await page.keyboard.press("ArrowRight");
      const child = await act();
      check(child !== top && child.startsWith(top + "."), "ArrowRight on an open row goes to its first child (" + child + ")");
      const childOpen = await page.getAttribute("#tree .node[data-path='" + child + "']", "aria-expanded");
      await page.keyboard.press("ArrowLeft");
      const childAfter = await page.getAttribute("#tree .node[data-path='" + child + "']", "aria-expanded");
      if (childOpen === "true") await page.keyboard.press("ArrowLeft");
      check((childOpen !== "true" || childAfter === "false") && (await act()) === top,
            "ArrowLeft closes an open row (" + child + ": " + childOpen + " -> " + childAfter + "), then goes to the parent (" + (await act()) + ")");
      const leaf = await page.$$eval("#tree .node.leaf[data-path]", (rs) => rs.filter((r) => r.offsetParent !== null)[0].dataset.path);
      const tabStops = await page.$$eval("#tree .node[data-path]", (rs) => rs.filter((r) => r.tabIndex === 0).map((r) => r.dataset.path));
      check(tabStops.length === 1 && tabStops[0] === top, "the tab stop moved with the focus (" + tabStops.join(",") + ")");
      await page.focus("#tree .node.leaf[data-path='" + leaf + "']");
      await page.keyboard.press("Enter");
      await page.waitForFunction(() => /view=heatmap/.test(location.hash), null, { timeout: 10000 }).catch(() => {});
      check(/view=heatmap/.test(await page.evaluate(() => location.hash)) && decodeURIComponent(await page.evaluate(() => location.hash)).includes(leaf),
            "Enter on a leaf row opens its heatmap (" + decodeURIComponent(await page.evaluate(() => location.hash)) + ")");
      await page.click("[data-tab='architecture']");
      await page.waitForSelector("[data-view='architecture']", { state: "visible", timeout: 10000 });
    }
    await page.click(".arch-mode[data-mode='diagram']");
    await page.click(".arch-stack-toggle");
    await page.waitForFunction(() => document.querySelectorAll("[data-view='architecture'] [data-node]").length === 47, null, { timeout: 20000 });
    check(true, "Expand layers: 47 data-node (embedding + 5 x 9 + norm)");
    // model order, top to bottom
    const order = ["model.embed_tokens", ...[0, 4].flatMap((l) => ["input_layernorm", "self_attn.q_proj", "self_attn.o_proj", "post_attention_layernorm", "mlp.gate_proj", "mlp.down_proj"].map((m) => "model.layers." + l + "." + m)), "model.norm"];
    // reading order: a long diagram is folded into columns (data-column), each top to bottom
    const ys = await page.evaluate((names) => names.map((n) => { const e = document.querySelector("[data-node='" + n + "']"); return e ? [+e.dataset.column, e.getBoundingClientRect().top] : null; }), order);
    check(ys.every((y, i) => y !== null && (i === 0 || y[0] > ys[i - 1][0] || (y[0] === ys[i - 1][0] && y[1] > ys[i - 1][1]))), "block diagram in model order: " + order.map((o) => o.replace("model.layers.", "L")).join(" > "));
    const qy = await page.evaluate(() => ["q_proj", "k_proj", "v_proj"].map((m) => document.querySelector("[data-node='model.layers.2.self_attn." + m + "']").getBoundingClientRect().top));
    check(qy[0] === qy[1] && qy[1] === qy[2], "q, k, v side by side");
    // boundaries: the edges of the block chain (embedding -> norm -> q,k,v -> o -> norm -> gate,up
    // -> down -> next layer ... -> final norm) whose two modules have different inspect labels
    const L = (l, m) => "model.layers." + l + "." + m;
    const chainEdges = [];
    for (let l = 0; l < 5; l++) {
      const qkv = ["self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj"].map((m) => L(l, m)), gu = ["mlp.gate_proj", "mlp.up_proj"].map((m) => L(l, m));
      chainEdges.push([l ? L(l - 1, "mlp.down_proj") : "model.embed_tokens", L(l, "input_layernorm")]);
      for (const q of qkv) chainEdges.push([L(l, "input_layernorm"), q], [q, L(l, "self_attn.o_proj")]);
      chainEdges.push([L(l, "self_attn.o_proj"), L(l, "post_attention_layernorm")]);
      for (const g of gu) chainEdges.push([L(l, "post_attention_layernorm"), g], [g, L(l, "mlp.down_proj")]);
    }
    chainEdges.push([L(4, "mlp.down_proj"), "model.norm"]);
    const wantB = chainEdges.filter(([a, b]) => label.get(a) !== label.get(b)).map((e) => e.join(">")).sort();
    const bnd = await page.$$eval(".arch-svg [data-boundary]", (b) => b.map((x) => x.getAttribute("data-boundary").split(">").map((s) => s.replace(/^m:/, ""))));
    check(JSON.stringify(bnd.map((e) => e.join(">")).sort()) === JSON.stringify(wantB) && wantB.length === 40,
      bnd.length + " boundaries, exactly the block edges whose inspect labels differ (down_proj [64, 172] stays dense: 172 is no multiple of 32)");
    await page.screenshot({ path: path.join(shots, "arch-blocks-expanded.png") });
    await axeCheck(page, "block diagram");
    // search: filters, counts, jumps
    await page.fill(".arch-search", "down_proj");
    check((await page.getAttribute(".arch-count", "data-count")) === "5", "search 'down_proj': 5 matches");
    await page.fill(".arch-search", "");
    // editing: a pattern, then shift-click; a scheme each; the recipe
    await page.fill(".arch-pattern", "mlp\\.down_proj$");
    await page.click(".arch-select");
    check((await page.getAttribute(".arch-diagram", "data-selected")) === "5", "pattern selects the 5 down_proj modules");
    await page.selectOption(".arch-scheme", "exclude");
    await page.click(".arch-set");
    await page.click("[data-node='model.layers.0.self_attn.q_proj']");
    await page.click("[data-node='model.layers.1.self_attn.q_proj']", { modifiers: ["Shift"] });
    check((await page.getAttribute(".arch-diagram", "data-selected")) === "2", "click then shift-click: 2 selected");
    await page.selectOption(".arch-scheme", "int8-channel");
    await page.click(".arch-set");
    await page.selectOption(".arch-default", "int4-g32");
    const [dl] = await Promise.all([page.waitForEvent("download"), page.click(".arch-download")]);
    const rp = path.join(tmp, "recipe.json");
    await dl.saveAs(rp);
    const r = JSON.parse(fs.readFileSync(rp, "utf8"));
    check(r.default.type === "int4" && r.default.granularity === "group:32" && r.ignore.length === 5 && r.ignore.includes("^model\\.layers\\.3\\.mlp\\.down_proj(\\.|$)") &&
      r.targets.length === 2 && r.targets.every((t) => t.scheme.type === "int8" && t.scheme.granularity === "channel"), "recipe: default int4 group:32, 5 ignored, 2 int8 targets");
    const qr = JSON.parse(tm("quantize", st, "-o", path.join(tmp, "q_recipe"), "--recipe", rp, "--json", "-q"));
    const dec = (nm) => qr.manifest.tensors.find((t) => t.name === nm);
    check(dec("model.layers.3.mlp.down_proj.weight").decision === "kept" && dec("model.layers.1.self_attn.q_proj.weight").decision === "quantized",
      "tensormorph quantize --recipe accepts it: down_proj kept, q_proj quantized");
    const ql = JSON.parse(tm("inspect", path.join(tmp, "q_recipe"), "--json")).tensors;
    const lab = (nm) => (ql.find((t) => t.name === nm).quantization || {}).label;
    check(/^I8 channel/.test(lab("model.layers.1.self_attn.q_proj.weight")) && /^I4 group:32/.test(lab("model.layers.2.self_attn.q_proj.weight")),
      "q_proj of layers 0-1 int8 channel, the rest int4 group:32 (" + lab("model.layers.1.self_attn.q_proj.weight") + ")");
    await stop();
  }
  // ---- GGUF Q4_K_M and a PyTorch state dict: blocks in model order
  for (const [file, first, last, what] of [["gguf/stories260K-Q4_K_M.gguf", "token_embd", "output_norm", "GGUF Q4_K_M"],
                                          ["torch/stories260K_state_dict.pt", "model.embed_tokens", "model.norm", "PyTorch .pt"]]) {
    const f = M(file);
    const ins = JSON.parse(tm("inspect", f, "--json"));
    const mods = new Set(ins.tensors.filter((t) => !t.role || t.role === "data").map((t) => t.name.replace(/\.(weight|bias)$/, "")));
    const { page, stop } = await open(f);
    if (await page.locator(".arch-stack-toggle:visible").count()) {
      const txt = await page.textContent(".arch-stack-toggle");
      if (/Expand/.test(txt)) await page.click(".arch-stack-toggle");
    }
    await page.waitForFunction((k) => document.querySelectorAll("[data-view='architecture'] [data-node]").length === k, mods.size, { timeout: 20000 }).catch(() => {});
    const n = await nodeCount(page);
    check(n === mods.size, what + ": one data-node per module (" + n + " of " + mods.size + ")");
    const names = await page.$$eval(".arch-svg [data-node]", (g) => g.map((x) => [x.dataset.node, +x.dataset.column * 1e6 + x.getBoundingClientRect().top]));
    const top = names.reduce((a, b) => (b[1] < a[1] ? b : a)), bottom = names.reduce((a, b) => (b[1] > a[1] ? b : a));
    check(top[0] === first && bottom[0] === last, what + ": " + top[0] + " on top, " + bottom[0] + " at the bottom");
    if (what.startsWith("GGUF")) {
      const nb = await boundaryCount(page);
      check(nb > 0, "GGUF Q4_K_M: " + nb + " boundaries where the ggml types change (Q4_K / Q6_K / F32 norms)");
      await page.screenshot({ path: path.join(shots, "arch-blocks-gguf.png") });
    }
    await stop();
  }
  // ---- sensitivity on the diagram, start from the plan; keyboard navigation (GGUF F32)
  {
    const gsrc = M("gguf/stories260K-F32.gguf"), text = M("text/stories260K-eval.txt");
    const nm = [process.env.TM_NODE_MODULES, path.join(src, "runner", "node_modules")].filter(Boolean)
      .find((b) => fs.existsSync(path.join(b, "node-llama-cpp", "package.json")));
    let sensPath = null, out = null;
    if (!nm) {
      if (process.env.TM_REQUIRE_LLAMA === "1") check(false, "node-llama-cpp not found (TM_NODE_MODULES) and TM_REQUIRE_LLAMA=1");
      else console.log("SKIP the sensitivity checks: node-llama-cpp not installed (set TM_NODE_MODULES)");
    } else {
      fs.mkdirSync(path.join(tmp, "sens"));
      out = path.join(tmp, "sens", "plan.gguf");
      const t0 = Date.now();
      execFileSync(bin, ["sensitivity", gsrc, "--text", text, "--ctx", "64", "--chunks", "2", "-t", "Q2_K", "--ladder", "Q2_K,Q4_K_M", "--budget", "0.03", "-o", out, "--jobs", "2"],
        { stdio: ["ignore", "ignore", "inherit"], env: Object.assign({}, process.env, { TM_NODE_MODULES: nm }) });
      sensPath = out + ".sensitivity.json";
      console.log("     sensitivity run: " + ((Date.now() - t0) / 1000).toFixed(1) + " s");
    }
    const S = sensPath ? JSON.parse(fs.readFileSync(sensPath, "utf8")) : null;
    const { page, stop } = await open(gsrc, S ? ["--sensitivity", sensPath] : []);
    /* per node: its sensitivity data and the computed fill of its box */
    const nodeSens = () => page.$$eval(".arch-svg [data-node]", (g) => g.map((x) => ({ node: x.dataset.node, unit: x.dataset.sensUnit || null, rank: x.dataset.sensRank || null,
      kld: x.dataset.sensKld || null, scheme: x.dataset.sensScheme || null, fill: getComputedStyle(x.querySelector("rect.box")).fill, title: x.querySelector("title").textContent })));
    const lum = (css) => { const c = css.match(/\d+(\.\d+)?/g).slice(0, 3).map(Number).map((v) => { v /= 255; return v <= 0.03928 ? v / 12.92 : Math.pow((v + 0.055) / 1.055, 2.4); }); return 0.2126 * c[0] + 0.7152 * c[1] + 0.0722 * c[2]; };
    if (S) {
      const ins = JSON.parse(tm("inspect", gsrc, "--json"));
      const mods = new Set(ins.tensors.filter((t) => !t.role || t.role === "data").map((t) => t.name.replace(/\.weight$/, "")));
      await page.waitForFunction((k) => document.querySelectorAll("[data-view='architecture'] [data-node]").length === k, mods.size, { timeout: 20000 }).catch(() => {});
      const ns = await nodeSens();
      check(ns.length === mods.size, "with --sensitivity every layer is drawn on its own (" + ns.length + " of " + mods.size + " modules)");
      const byMod = new Map(ns.map((x) => [x.node, x]));
      let okData = true, nUnit = 0;
      for (const u of S.units) for (const t of u.tensors) {
        const x = byMod.get(t.replace(/\.weight$/, ""));
        nUnit++;
        if (!x || x.unit !== u.name || +x.rank !== u.rank || Number(x.kld) !== u.kld_mean_only || x.scheme !== S.plan.assignments[u.name]) { okData = false; console.log("     " + t + ": " + JSON.stringify(x)); }
      }
      check(okData && ns.filter((x) => x.unit).length === nUnit, "each of the " + nUnit + " modules of the " + S.units.length + " units carries its unit, rank, KLD and planned type from the JSON");
      const r1 = S.units.find((u) => u.rank === 1), n1 = byMod.get(r1.tensors[0].replace(/\.weight$/, ""));
      check(n1.title.includes("rank 1 of " + S.units.length) && n1.scheme === S.plan.assignments[r1.name], "the rank-1 unit " + r1.name + " (KLD " + r1.kld_mean_only.toPrecision(4) + ", plan " + n1.scheme + "): its nodes say so");
      const rankMark = await page.textContent("[data-node='" + n1.node + "'] .sens-rank text");
      check(rankMark === "1", "the rank is drawn on the node (" + rankMark + ")");
      const clusterLab = await page.$$eval(".arch-cluster .cluster-label", (l) => l.map((x) => x.textContent));
      check(clusterLab.some((l) => l.includes("#1 ") && l.includes(r1.name.replace(/^blk\./, "")) && l.includes("plan " + S.plan.assignments[r1.name])), "the layer's label shows #1 and the planned " + S.plan.assignments[r1.name]);
      // colour order = KLD order: the relative luminance of the fill falls as the KLD rises
      const unitLum = S.units.map((u) => ({ k: u.kld_mean_only, l: lum(byMod.get(u.tensors[0].replace(/\.weight$/, "")).fill) })).sort((a, b) => a.k - b.k);
      check(unitLum.every((x, i) => i === 0 || x.k === unitLum[i - 1].k || x.l < unitLum[i - 1].l), "colours in KLD order (luminance " + unitLum.map((x) => x.l.toFixed(3)).join(" > ") + ")");
      const grey = ns.filter((x) => !x.unit).map((x) => x.node);
      check(grey.includes("token_embd") && grey.includes("output_norm") && grey.every((g) => !S.units.some((u) => u.tensors.includes(g + ".weight"))), "modules outside the units stay grey (" + grey.length + ": token_embd, norms, ...)");
      const ticks = await page.$$eval(".arch-legend-tick", (t) => t.map((x) => +x.dataset.value));
      const klds = S.units.map((u) => u.kld_mean_only);
      check((await page.isVisible(".arch-legend")) && ticks[0] === Math.min(...klds) && ticks[ticks.length - 1] === Math.max(...klds) &&
        /KLD mean, nats\/token/.test(await page.textContent(".arch-legend-title")), "legend: KLD " + ticks.map((t) => t.toPrecision(3)).join(" .. ") + " nats/token");
      // at Fit: the legend (top left) and the minimap (bottom right) cover no node, and the nodes
      // show their names (the "names" level of detail or all labels), each drawn inside its box
      // at >= 9 px on screen, cut with an ellipsis where it is longer
      await page.click(".arch-fit");
      const look = await page.evaluate(() => {
        const boxes = [".arch-legend", ".arch-minimap"].map((q) => document.querySelector(q)).filter((e) => e && getComputedStyle(e).display !== "none" && !e.hidden).map((e) => e.getBoundingClientRect());
        const zoom = +document.querySelector(".arch-diagram").dataset.zoom, out = { covered: [], outside: [], names: 0, cut: 0, minPx: Infinity, lod: document.querySelector(".arch-diagram").dataset.lod, overlays: boxes.length };
        for (const g of document.querySelectorAll(".arch-svg [data-node]")) {
          const r = g.querySelector("rect.box").getBoundingClientRect();
          if (boxes.some((m) => r.right > m.left && r.left < m.right && r.bottom > m.top && r.top < m.bottom)) out.covered.push(g.dataset.node);
          const t = g.querySelector("text.title");
          if (!t || getComputedStyle(t).display === "none") continue;
          const b = t.getBoundingClientRect();
          out.names++;
          if (t.textContent.endsWith("\u2026")) out.cut++;
          out.minPx = Math.min(out.minPx, parseFloat(getComputedStyle(t).fontSize) * zoom);
          if (b.left < r.left - 0.5 || b.right > r.right + 0.5 || b.top < r.top - 0.5 || b.bottom > r.bottom + 0.5) out.outside.push(g.dataset.node + " '" + t.textContent + "'");
        }
        return out;
      });
      check(look.overlays === 2 && look.covered.length === 0, "sensitivity diagram at Fit: the legend and the minimap cover no node (" + look.overlays + " overlays; covered: " + (look.covered.join(", ") || "none") + ")");
      check(look.names === ns.length && look.minPx >= 9 && look.outside.length === 0 && (look.lod === "names" || look.lod === "labels"),
        "sensitivity diagram at Fit (level of detail '" + look.lod + "'): all " + look.names + " names drawn at >= 9 px (smallest " + look.minPx.toFixed(1) + " px), " + look.cut + " cut with an ellipsis, none outside its box" + (look.outside.length ? " (outside: " + look.outside.slice(0, 4).join(", ") + ")" : ""));
      await page.screenshot({ path: path.join(shots, "arch-sensitivity.png") });
      await axeCheck(page, "sensitivity-coloured");
      // start from this plan: the download is the plan's recipe
      await page.click(".arch-start-plan");
      check((await page.getAttribute(".arch-diagram", "data-plan-from")) === "sensitivity" && (await page.inputValue(".arch-default")) === S.plan.file_type, "Start from this plan: default " + S.plan.file_type);
      const [dl] = await Promise.all([page.waitForEvent("download"), page.click(".arch-download")]);
      const rp = path.join(tmp, "sens", "from-plan.recipe.json");
      await dl.saveAs(rp);
      const got = JSON.parse(fs.readFileSync(rp, "utf8")), want = JSON.parse(fs.readFileSync(out + ".recipe.json", "utf8"));
      delete want.comment;
      check(JSON.stringify(got) === JSON.stringify(want), "the downloaded recipe equals the plan's " + path.basename(out) + ".recipe.json (" + (want.tensor_types || []).length + " tensor types)");
      const rebuilt = path.join(tmp, "sens", "rebuilt.gguf");
      tm("quantize", gsrc, "-o", rebuilt, "--recipe", rp, "-q");
      check(Buffer.compare(fs.readFileSync(rebuilt), fs.readFileSync(out)) === 0, "quantize --recipe (the downloaded one) rebuilds the plan's artifact byte for byte");
    }
    // ---- keyboard: a roving tab stop, arrows along the graph, Enter / Shift+Enter / Escape
    const active = () => page.evaluate(() => { const a = document.activeElement; return a && a.dataset ? a.dataset.node || null : null; });
    const center = (nmd) => page.evaluate((n) => { const r = document.querySelector("[data-node='" + n + "']").getBoundingClientRect(); return [r.left + r.width / 2, r.top + r.height / 2]; }, nmd);
    await page.focus(".arch-svg");
    await page.keyboard.press("Tab");
    check((await active()) === "token_embd", "Tab from the canvas reaches the diagram's tab stop: the first node (" + (await active()) + ")");
    check((await page.locator(".arch-svg [data-node][tabindex='0']").count()) === 1, "one roving tab stop (tabindex 0) among the nodes");
    await page.keyboard.press("ArrowDown");
    check((await active()) === "blk.0.attn_norm", "ArrowDown: the successor blk.0.attn_norm");
    await page.keyboard.press("ArrowDown");
    const a1 = await active();
    check(["blk.0.attn_q", "blk.0.attn_k", "blk.0.attn_v"].includes(a1), "ArrowDown again: one of q/k/v (" + a1 + ")");
    await page.keyboard.press("ArrowRight");
    const a2 = await active();
    if (a2 === a1) await page.keyboard.press("ArrowLeft");
    const a3 = await active();
    check(a3 !== a1 && ["blk.0.attn_q", "blk.0.attn_k", "blk.0.attn_v"].includes(a3) && ((await center(a3))[0] - (await center(a1))[0]) * (a2 === a1 ? -1 : 1) > 0, "ArrowRight/Left: a sibling on that side (" + a1 + " -> " + a3 + ")");
    const ring = await page.evaluate(() => { const r = document.activeElement.querySelector(".ring"); return getComputedStyle(r).stroke; });
    check(ring !== "none" && ring !== "", "the focused node shows its focus ring (" + ring + ")");
    await page.keyboard.press("ArrowUp");
    check((await active()) === "blk.0.attn_norm", "ArrowUp: back to the predecessor");
    await page.keyboard.press("Enter");
    check((await page.getAttribute(".arch-diagram", "data-selected")) === "1" && (await page.getAttribute("[data-node='blk.0.attn_norm']", "aria-pressed")) === "true", "Enter selects the focused node (aria-pressed)");
    await page.keyboard.press("ArrowDown");
    await page.keyboard.press("Shift+Enter");
    check((await page.getAttribute(".arch-diagram", "data-selected")) === "2", "Shift+Enter adds the next one: 2 selected");
    await page.keyboard.press("Escape");
    check((await page.getAttribute(".arch-diagram", "data-selected")) === "0" && (await active()) !== null, "Escape clears the selection, the focus stays on the node");
    await page.evaluate(() => document.documentElement.setAttribute("data-theme", "dark"));
    const ringDark = await page.evaluate(() => getComputedStyle(document.activeElement.querySelector(".ring")).stroke);
    check(ringDark !== "none" && ringDark !== ring, "dark theme: the focus ring in its dark colour (" + ringDark + ")");
    await page.screenshot({ path: path.join(shots, "arch-keyboard-dark.png") });
    await axeCheck(page, "dark, keyboard-focused");
    await stop();
    if (S) {
      // the same result loaded on the page (no --sensitivity), and a file that is not one
      const { page: p2, stop: stop2 } = await open(gsrc);
      await p2.setInputFiles(".arch-sens-file", out + ".recipe.json");
      await p2.waitForSelector(".arch-status.arch-error", { timeout: 10000 }).catch(() => {});
      check(/no units/.test(await p2.textContent(".arch-status")), "a JSON that is not a sensitivity result: its error shown (" + (await p2.textContent(".arch-status")) + ")");
      await p2.setInputFiles(".arch-sens-file", sensPath);
      await p2.waitForSelector("[data-sens-unit]", { timeout: 10000 }).catch(() => {});
      const n2 = await p2.$$eval("[data-sens-unit]", (g) => g.map((x) => x.dataset.node + "=" + x.dataset.sensRank + ":" + x.dataset.sensKld));
      const want2 = S.units.flatMap((u) => u.tensors.map((t) => t.replace(/\.weight$/, "") + "=" + u.rank + ":" + String(u.kld_mean_only)));
      check(JSON.stringify(n2.sort()) === JSON.stringify(want2.sort()) && (await p2.isVisible(".arch-start-plan")), "loaded from the file input: the same " + n2.length + " modules coloured, Start from this plan offered");
      await stop2();
    }
  }
  // ---- sensitivity, compressed-tensors form: int4 channel -> int8 channel on the safetensors
  {
    const st = M("safetensors/stories260K-f32"), text = M("text/stories260K-eval.txt");
    const nm = [process.env.TM_NODE_MODULES, path.join(src, "runner", "node_modules")].filter(Boolean)
      .find((b) => fs.existsSync(path.join(b, "node-llama-cpp", "package.json")));
    if (nm) {
      fs.mkdirSync(path.join(tmp, "ctsens"));
      const out = path.join(tmp, "ctsens", "plan");
      const t0 = Date.now();
      execFileSync(bin, ["sensitivity", st, "--vocab-from", M("gguf/stories260K-F32.gguf"), "--text", text, "--ctx", "64", "--chunks", "2", "-t", "int4", "-g", "channel", "--budget", "0.045", "-o", out, "--jobs", "2"],
        { stdio: ["ignore", "ignore", "inherit"], env: Object.assign({}, process.env, { TM_NODE_MODULES: nm }) });
      console.log("     sensitivity run (compressed-tensors form): " + ((Date.now() - t0) / 1000).toFixed(1) + " s");
      const S = JSON.parse(fs.readFileSync(out + ".sensitivity.json", "utf8"));
      const { page, stop } = await open(st, ["--sensitivity", out + ".sensitivity.json"]);
      await page.waitForSelector("[data-sens-unit]", { timeout: 20000 }).catch(() => {});
      const n = await page.$$eval("[data-sens-unit]", (g) => g.map((x) => x.dataset.node + "=" + x.dataset.sensUnit + ":" + x.dataset.sensScheme));
      const want = S.units.flatMap((u) => u.tensors.map((t) => t.replace(/\.weight$/, "") + "=" + u.name + ":" + S.plan.assignments[u.name]));
      check(JSON.stringify(n.sort()) === JSON.stringify(want.sort()), "compressed-tensors form: the " + want.length + " modules of the " + S.units.length + " layers carry their unit and planned scheme (" + S.plan.assignments[S.units[0].name] + ", ...)");
      await page.click(".arch-start-plan");
      const [dl] = await Promise.all([page.waitForEvent("download"), page.click(".arch-download")]);
      const rp = path.join(tmp, "ctsens", "from-plan.recipe.json");
      await dl.saveAs(rp);
      const got = JSON.parse(fs.readFileSync(rp, "utf8")), wantR = JSON.parse(fs.readFileSync(out + ".recipe.json", "utf8"));
      check(JSON.stringify(got.rules) === JSON.stringify(wantR.rules), "Start from this plan, Download recipe: the plan's " + wantR.rules.length + " rules (the rest dense)");
      const re = path.join(tmp, "ctsens", "re");
      tm("quantize", st, "-o", re, "--recipe", rp, "-q");
      check(Buffer.compare(fs.readFileSync(path.join(re, "model.safetensors")), fs.readFileSync(path.join(out, "model.safetensors"))) === 0, "quantize --recipe (the downloaded one) gives the plan's model.safetensors byte for byte");
      await stop();
    }
  }
  check(external.length === 0, "the page loads nothing from the network" + (external.length ? ": " + external.slice(0, 3).join(", ") : ""));
  check(consoleErrors.length === 0, "no console errors (CSP included)" + (consoleErrors.length ? ": " + [...new Set(consoleErrors)].slice(0, 3).join("; ").slice(0, 600) : ""));
} catch (e) {
  failures++;
  console.log("FAIL " + (e && e.stack ? e.stack : e));
} finally {
  await ctx.close();
}
console.log(failures ? failures + " check(s) failed" : "all checks passed; screenshots in " + shots);
process.exit(failures ? 1 : 0);
