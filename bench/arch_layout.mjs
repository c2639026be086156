// arch_layout.mjs: benchmark (not a test) of the Architecture diagram in Chromium: for the
// PP-OCRv4 recognizer (765 ONNX nodes, ../shared) the time from page load to the drawn diagram,
// then N relayouts (model = folding /api/v1/graph, layout = dagre + column fold, draw = the SVG),
// and a 4x copy of the recognizer's diagram side by side (~1,770 nodes) through the same
// layout and draw. Page JavaScript runs on one thread (one core). Prints the median of each.
//   node bench/arch_layout.mjs [build/tensormorph] [N]
// Needs chromium, playwright-core (runner/node_modules or TM_NODE_MODULES) and ../shared.
import { spawn } from "node:child_process";
import { createRequire } from "node:module";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";

const src = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "..");
const bin = process.argv[2] || path.join(src, "build", "tensormorph");
const N = Number(process.argv[3] || 5);
const shared = process.env.TM_SHARED || path.resolve(src, "../shared");
const model = path.join(shared, "models/onnx/npm/paddleocr/ch_PP-OCRv4_rec_infer.onnx");
let chromiumApi;
for (const b of [process.env.TM_NODE_MODULES, path.join(src, "runner", "node_modules")].filter(Boolean)) {
  try { const req = createRequire(path.join(b, "noop.js")); chromiumApi = req(req.resolve("playwright-core", { paths: [b] })).chromium; break; } catch (e) { /* next */ }
}
if (!chromiumApi || !fs.existsSync(model)) { console.error("needs playwright-core and " + model); process.exit(2); }

const server = spawn(bin, ["serve", model, "--port", "0", "-q"], { stdio: ["ignore", "pipe", "inherit"] });
const url = await new Promise((resolve) => { let b = ""; server.stdout.on("data", (d) => { b += d; const m = b.match(/^(http:\S+)\n/); if (m) resolve(m[1]); }); });
const dir = fs.mkdtempSync(path.join(os.tmpdir(), "tm_bench_arch_"));
const ctx = await chromiumApi.launchPersistentContext(dir, { executablePath: process.env.TM_CHROMIUM || "/usr/bin/chromium", headless: true,
  viewport: { width: 1440, height: 900 }, args: ["--no-sandbox", "--disable-gpu"] });
const med = (a) => { const s = [...a].sort((x, y) => x - y); return s[Math.floor(s.length / 2)]; };
try {
  const page = ctx.pages()[0] || await ctx.newPage();
  const loads = [];
  for (let i = 0; i < N; i++) {
    const t0 = Date.now();
    await page.goto(url);
    await page.waitForSelector(".arch-diagram[data-ready='1']", { timeout: 120000 });
    loads.push(Date.now() - t0);
  }
  const first = await page.evaluate(() => window.tmArch.view.timing);
  console.log("page load -> diagram drawn: " + loads.join(", ") + " ms");
  const runs = [];
  for (let i = 0; i < N; i++) runs.push(await page.evaluate(() => { window.tmArch.view.relayout(true); return window.tmArch.view.timing; }));
  console.log("relayouts: " + runs.map((r) => r.layout_ms.toFixed(0) + "+" + r.draw_ms.toFixed(0)).join(", ") + " ms (layout+draw)");
  const big = [];
  for (let i = 0; i < N; i++) big.push(await page.evaluate(() => {
    const v = window.tmArch.view, d = v.d, copies = 4, D = { kind: d.kind, nodes: [], edges: [], clusters: [] };
    for (let c = 0; c < copies; c++) {
      for (const n of d.nodes) D.nodes.push(Object.assign({}, n, { id: c + ":" + n.id, name: c + ":" + n.name }));
      for (const e of d.edges) D.edges.push(Object.assign({}, e, { from: c + ":" + e.from, to: c + ":" + e.to }));
    }
    const t0 = performance.now();
    v.d = D;
    const sz = v.size();
    v.L = window.tmArch.layoutDiagram(D, { aspect: sz.w / sz.h });
    const t1 = performance.now();
    v.render();
    const t2 = performance.now();
    const drawn = document.querySelectorAll(".arch-svg [data-node]").length;
    return { nodes: D.nodes.length, edges: D.edges.length, layout_ms: t1 - t0, draw_ms: t2 - t1, drawn };
  }));
  console.log("4x copy: " + big.map((r) => r.layout_ms.toFixed(0) + "+" + r.draw_ms.toFixed(0)).join(", ") + " ms (layout+draw)");
  console.log("PP-OCRv4 rec: " + first.nodes + " diagram nodes, " + first.edges + " edges (765 ONNX nodes)");
  console.log("  page load -> diagram drawn: median " + med(loads) + " ms over " + N);
  console.log("  model " + med(runs.map((r) => r.model_ms)).toFixed(0) + " ms, layout " + med(runs.map((r) => r.layout_ms)).toFixed(0) +
    " ms, draw " + med(runs.map((r) => r.draw_ms)).toFixed(0) + " ms (median of " + N + ")");
  console.log("4x copy: " + big[0].nodes + " nodes, " + big[0].edges + " edges, " + big[0].drawn + " drawn: layout " +
    med(big.map((r) => r.layout_ms)).toFixed(0) + " ms, draw " + med(big.map((r) => r.draw_ms)).toFixed(0) + " ms (median of " + N + ")");
} finally {
  await ctx.close();
  server.kill("SIGTERM");
  fs.rmSync(dir, { recursive: true, force: true });
}
