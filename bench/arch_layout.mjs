// arch_layout.mjs: benchmark (not a test) of the Architecture diagram in Chromium: for the
// PP-OCRv4 recognizer (765 ONNX nodes, ../shared) the time from page load to the drawn diagram,
// then N relayouts (model = folding /api/v1/graph, layout = dagre + column fold, draw = the SVG),
// then two 2,000-node cases through the same layout and draw, each with dagre's ordering and with
// layout.js's fastOrder, interleaved: 4 copies of the recognizer side by side (1,768 nodes) and a
// generated 2,000-node chain with skip edges. Page JavaScript runs on one thread (one core). Prints the median of each.
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
  // 4 copies of the recognizer side by side, and a generated 2,000-node chain (2,827 edges: each
  // op feeds the next, 30% also one 2-13 ops on, 20% one 2-3 on; a fixed seed), each laid out
  // with dagre's ordering and with fastOrder, interleaved, then drawn
  const bigCase = (which, order) => page.evaluate(([which, order]) => {
    const v = window.tmArch.view, d = (window.tmArch.rec = window.tmArch.rec || v.d), D = { kind: d.kind, nodes: [], edges: [], clusters: [] };
    if (which === "copies") {
      for (let c = 0; c < 4; c++) {
        for (const n of d.nodes) D.nodes.push(Object.assign({}, n, { id: c + ":" + n.id, name: c + ":" + n.name }));
        for (const e of d.edges) D.edges.push(Object.assign({}, e, { from: c + ":" + e.from, to: c + ":" + e.to }));
      }
    } else {
      let seed = 7;
      const rnd = () => ((seed = (seed * 1103515245 + 12345) % 2147483648) / 2147483648);
      const N = 2000;
      for (let i = 0; i < N; i++) D.nodes.push({ id: "n" + i, name: "op" + i, title: "Conv_" + i, sub: "[1, 64, 32, 32]", kind: "op", badges: [] });
      for (let i = 0; i < N; i++) {
        if (i + 1 < N) D.edges.push({ from: "n" + i, to: "n" + (i + 1) });
        if (rnd() < 0.3) { const j = i + 2 + Math.floor(rnd() * 12); if (j < N) D.edges.push({ from: "n" + i, to: "n" + j }); }
        if (rnd() < 0.2) { const j = i + 1 + Math.floor(rnd() * 3); if (j < N && j !== i + 1) D.edges.push({ from: "n" + i, to: "n" + j }); }
      }
    }
    const t0 = performance.now();
    v.d = D;
    const sz = v.size();
    try { v.L = window.tmArch.layoutDiagram(D, { aspect: sz.w / sz.h, order }); } catch (e) { return { nodes: D.nodes.length, edges: D.edges.length, error: String(e) }; }
    const t1 = performance.now();
    v.render();
    const t2 = performance.now();
    const drawn = document.querySelectorAll(".arch-svg [data-node]").length;
    return { nodes: D.nodes.length, edges: D.edges.length, layout_ms: t1 - t0, draw_ms: t2 - t1, drawn };
  }, [which, order]);
  const big = {};
  for (let i = 0; i < N; i++) for (const which of ["copies", "chain"]) for (const order of ["dagre", "fast"]) {
    const r = await bigCase(which, order);
    (big[which + " " + order] = big[which + " " + order] || []).push(r);
    console.log(which + " " + order + ": " + (r.error ? "failed: " + r.error : r.layout_ms.toFixed(0) + "+" + r.draw_ms.toFixed(0) + " ms (layout+draw)"));
  }
  console.log("PP-OCRv4 rec: " + first.nodes + " diagram nodes, " + first.edges + " edges (765 ONNX nodes)");
  console.log("  page load -> diagram drawn: median " + med(loads) + " ms over " + N);
  console.log("  model " + med(runs.map((r) => r.model_ms)).toFixed(0) + " ms, layout " + med(runs.map((r) => r.layout_ms)).toFixed(0) +
    " ms, draw " + med(runs.map((r) => r.draw_ms)).toFixed(0) + " ms (median of " + N + ")");
  for (const [k, rs] of Object.entries(big)) {
    const ok = rs.filter((r) => !r.error);
    console.log(k + ": " + rs[0].nodes + " nodes, " + rs[0].edges + " edges: " + (ok.length ? "layout " + med(ok.map((r) => r.layout_ms)).toFixed(0) +
      " ms, draw " + med(ok.map((r) => r.draw_ms)).toFixed(0) + " ms (median of " + ok.length + ")" : "") + (ok.length < rs.length ? " " + (rs.length - ok.length) + " failed: " + rs.find((r) => r.error).error : ""));
  }
} finally {
  await ctx.close();
  server.kill("SIGTERM");
  fs.rmSync(dir, { recursive: true, force: true });
}
