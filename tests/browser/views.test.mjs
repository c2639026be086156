// views.test.mjs: the Heatmap, Scalar Inspector, navigation, Calibration Lab and Release views in
// a real Chromium (Playwright, playwright-core + Debian's chromium) on real models of ../shared:
// the safetensors int4 output `tensormorph quantize` makes from stories260K, GGUF (stories260K
// Q4_K_M, synth256 Q4_K_M with Q4_K and Q6_K tensors), ONNX (PaddleOCR cls quantized int8 QDQ by
// `tensormorph quantize`; PaddleOCR rec for the 10k-style list; silero VAD), PyTorch per-channel
// qint8. Checks:
//   - the inspector-vs-CLI table: for each layout a deep link #view=heatmap&tensor=T&index=I,J
//     opens the element, and every data-field cell (code, scale, zero_point, value, source_value,
//     error_lsb, formula and its terms) holds the number `tensormorph scalar --json` prints;
//   - the heatmap opens at Fit (whole zoom, fills the plot along one side, a thin matrix stretched
//     to at most 4:1), a colour bar with numbers and a unit, row/column ticks, hover readout;
//   - keyboard: + / - / 0 zoom and fit, arrows pan, shift+arrows move the selection, the tensor
//     list filters, counts, goes down with arrows and opens with Enter; natural order; the list is
//     virtualised (fewer rows in the DOM than tensors);
//   - deep links survive a reload; a bad tensor name shows the API's 404 message and no picture;
//   - dark mode from prefers-color-scheme and the toggle; at 900 px every tab is on screen;
//   - the Calibration Lab's side by side of all observers = `calibrate --observer all --json`;
//   - an empty Release page says what to do and shows no empty table;
//   - axe-core (npm, pinned by scripts/setup.sh --test): no serious or critical violation on the
//     heatmap, qdiff, calibration and release views.
// Screenshots at 1440x900 and 900 px wide go to $TM_BUILD/browser-screenshots/views-*.png.
// Exit 77 (skipped) with a reason when chromium, playwright-core or axe-core is missing, unless
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
const shared = process.env.TM_SHARED || path.resolve(src, "../shared");
const M = (p) => path.join(shared, "models", p);

function skip(reason, requiredBy) {
  if (process.env[requiredBy] === "1") { console.error("FAIL: " + reason + " (" + requiredBy + "=1)"); process.exit(1); }
  console.log("SKIP: " + reason);
  process.exit(77);
}
if (!fs.existsSync(M("safetensors/stories260K-f32"))) skip("../shared not found", "TM_REQUIRE_SHARED");
if (!fs.existsSync(chromium)) skip("chromium not found at " + chromium + " (apt-get install chromium)", "TM_REQUIRE_BROWSER");
const bases = [process.env.TM_NODE_MODULES, path.join(src, "runner", "node_modules"), path.join(here, "node_modules"), path.join(build, "node_modules")].filter(Boolean);
function findModule(name, file) {
  for (const b of bases) {
    try {
      const req = createRequire(path.join(b, "noop.js"));
      const p = req.resolve(file ? name + "/" + file : name, { paths: [b] });
      return { req, p };
    } catch (e) { /* the next place */ }
  }
  return null;
}
const pw = findModule("playwright-core");
if (!pw) skip("playwright-core not installed (scripts/setup.sh --test)", "TM_REQUIRE_BROWSER");
// axe-core: the one pinned by web/package-lock.json (scripts/setup.sh runs npm ci in web/), as arch.test.mjs
const axeWeb = path.join(src, "web", "node_modules", "axe-core", "axe.min.js");
const axe = fs.existsSync(axeWeb) ? { p: axeWeb } : null;
if (!axe) skip("axe-core not installed in web/node_modules (scripts/setup.sh)", "TM_REQUIRE_BROWSER");
const chromiumApi = pw.req(pw.p).chromium;

let failures = 0;
function check(cond, what) {
  if (cond) console.log("ok   " + what);
  else { failures++; console.log("FAIL " + what); }
}
const tmp = fs.mkdtempSync(path.join(os.tmpdir(), "tm_views_"));
const servers = [];
process.on("exit", () => {
  for (const s of servers) { try { s.kill("SIGTERM"); } catch (e) { /* gone */ } }
  fs.rmSync(tmp, { recursive: true, force: true });
});
const shots = path.join(build, "browser-screenshots");
fs.mkdirSync(shots, { recursive: true });
const tm = (...args) => execFileSync(bin, args, { encoding: "utf8", stdio: ["ignore", "pipe", "inherit"] });
const tmJson = (...args) => JSON.parse(tm(...args));

async function serve(model, ref) {
  const s = spawn(bin, ["serve", model, ...(ref ? ["--ref", ref] : []), "--port", "0", "-q"], { stdio: ["ignore", "pipe", "inherit"] });
  servers.push(s);
  return new Promise((resolve, reject) => {
    let buf = "";
    const t = setTimeout(() => reject(new Error("serve printed no URL")), 20000);
    s.stdout.on("data", (d) => { buf += d; const m = buf.match(/^(http:\/\/127\.0\.0\.1:\d+\/)\n/); if (m) { clearTimeout(t); resolve(m[1]); } });
    s.on("exit", (c) => reject(new Error("serve exited with " + c)));
  });
}

// the models: quantize's outputs first
const st = M("safetensors/stories260K-f32"), q4 = path.join(tmp, "q4");
tm("quantize", st, "-o", q4, "--type", "int4", "--granularity", "group:32", "--asymmetric", "-q");
const cls = M("onnx/npm/paddleocr/ch_ppocr_mobile_v2.0_cls_infer.onnx"), clsq = path.join(tmp, "cls-int8.onnx");
tm("quantize", cls, "-o", clsq, "-q");
const firstQuant = (p, pred) => tmJson("inspect", p, "--json").tensors.find((t) => t.quantization && (!pred || pred(t)));

const userDir = fs.mkdtempSync(path.join(tmp, "profile_"));
const ctx = await chromiumApi.launchPersistentContext(userDir, {
  executablePath: chromium, headless: true, viewport: { width: 1440, height: 900 }, bypassCSP: true,
  args: ["--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking", "--disable-component-update", "--disable-sync"],
});
const consoleErrors = [];
async function newPage(viewport) {
  const page = await ctx.newPage();
  if (viewport) await page.setViewportSize(viewport);
  page.on("console", (m) => { if (m.type() === "error" && !/status of 404/.test(m.text())) consoleErrors.push(m.text()); });
  page.on("pageerror", (e) => consoleErrors.push(String(e)));
  return page;
}
async function load(page, url) {
  await page.goto(url);
  await page.waitForSelector("body[data-loaded='1']", { timeout: 20000 });
}
const ready = (page, extra) => page.waitForSelector("#heatmap[data-ready='1']" + (extra || ""), { timeout: 20000 });
const geo = (page) => page.$eval("#heatmap", (c) => {
  const d = c.dataset;
  return { ox: +d.ox, oy: +d.oy, z: +d.z, zy: +d.zy, s: +d.step, rows: +d.rows, cols: +d.cols, w: c.width, h: c.height };
});
// the geometry after a key: the canvas may redraw on the next frame, so wait (bounded) for it to change
async function geoAfter(page, prev) {
  try {
    await page.waitForFunction((p) => { const d = document.querySelector("#heatmap").dataset; return +d.ox !== p.ox || +d.oy !== p.oy || +d.z !== p.z; },
      prev, { timeout: 5000 });
  } catch (e) { /* unchanged: the check below says so */ }
  return geo(page);
}
async function axeCheck(page, view) {
  await page.addScriptTag({ path: axe.p });
  const res = await page.evaluate(async (v) => {
    const r = await window.axe.run(document.querySelector("[data-view='" + v + "']") || document, { resultTypes: ["violations"] });
    return r.violations.filter((x) => x.impact === "serious" || x.impact === "critical").map((x) => x.id + " (" + x.impact + "): " + x.nodes.slice(0, 2).map((n) => n.target.join(" ")).join(", "));
  }, view);
  check(res.length === 0, "axe-core: no serious/critical violation on the " + view + " view" + (res.length ? ": " + res.join("; ") : ""));
}

try {
  // ---- the inspector-vs-CLI table: one deep link per layout
  const table = [];
  const st4 = firstQuant(q4, (t) => /q_proj/.test(t.name));
  table.push({ what: "safetensors int4 group:32 asym (quantize)", model: q4, ref: st, tensor: st4.name, index: "5,37", sym: "(q \u2212 zero_point) \u00b7 scale" });
  table.push({ what: "GGUF Q5_0 (stories260K Q4_K_M)", model: M("gguf/stories260K-Q4_K_M.gguf"), ref: M("gguf/stories260K-F32.gguf"), tensor: "blk.0.attn_q.weight", index: "52,25", sym: "d \u00b7 (q \u2212 z)" });
  table.push({ what: "GGUF Q4_K", model: M("gguf/imatrix/synth256-Q4_K_M.gguf"), tensor: "token_embd.weight", index: "7,200", sym: "d \u00b7 sc \u00b7 q \u2212 dmin \u00b7 m" });
  table.push({ what: "GGUF Q6_K", model: M("gguf/imatrix/synth256-Q4_K_M.gguf"), tensor: "output.weight", index: "3,100", sym: "d \u00b7 sc \u00b7 (q \u2212 z)" });
  table.push({ what: "GGUF IQ2_XXS", model: M("gguf/imatrix/synth256-IQ2_XXS-imx.gguf"), tensor: "blk.0.attn_q.weight", index: "2,9", sym: "grid[k][j] \u00b7 sign" });
  const clsT = firstQuant(clsq, (t) => t.shape.length === 4);
  table.push({ what: "ONNX int8 QDQ (PaddleOCR cls, quantize)", model: clsq, ref: cls, tensor: clsT.name, index: clsT.shape.map((d) => Math.min(1, d - 1)).join(","), sym: "(q \u2212 zero_point) \u00b7 scale" });
  const pt = M("torch/stories260K_qint8_per_channel.pt"), ptT = firstQuant(pt, (t) => t.shape.length === 2);
  table.push({ what: "PyTorch qint8 per channel", model: pt, tensor: ptT.name, index: "1,2", sym: "(q \u2212 zero_point) \u00b7 scale" });
  let page = await newPage();
  const urls = new Map();
  for (const row of table) {
    const key = row.model + "|" + (row.ref || "");
    if (!urls.has(key)) urls.set(key, await serve(row.model, row.ref));
    await page.goto(urls.get(key) + "#view=heatmap&tensor=" + encodeURIComponent(row.tensor) + "&index=" + row.index);
    await page.waitForSelector("body[data-loaded='1']", { timeout: 20000 });
    // rows of one model share a URL, so goto is a hash change in the same document: the page is
    // already loaded and the previous row's inspector is still there; wait for this row's element
    await page.waitForFunction((w) => {
      const f = (k) => { const td = document.querySelector("#inspector[data-flat] td[data-field='" + k + "']"); return td && td.textContent; };
      return f("tensor") === w.tensor && f("index") === "[" + w.index.split(",").join(", ") + "]" && f("value") !== null;
    }, { tensor: row.tensor, index: row.index }, { timeout: 20000 }).catch(() => { /* the comparison below says what is shown */ });
    const want = tmJson("scalar", row.model, row.tensor, row.index, "--json", ...(row.ref ? ["--ref", row.ref] : []));
    const cells = await page.$$eval("#inspector td[data-field]", (tds) => Object.fromEntries(tds.map((t) => [t.dataset.field, t.dataset.full !== undefined ? t.dataset.full : t.textContent])));
    const bad = [];
    const same = (f, w) => { if (!(parseFloat(cells[f]) === w)) bad.push(f + " " + cells[f] + " != " + w); };
    if (cells.index !== "[" + want.index.join(", ") + "]") bad.push("index " + cells.index);
    for (const f of ["code", "scale", "zero_point", "value"]) same(f, want[f]);
    if (want.ref_value !== null) { same("source_value", want.ref_value); same("error_lsb", want.error_lsb); }
    if (cells.formula !== want.formula.symbolic || !cells.formula.includes(row.sym)) bad.push("formula '" + cells.formula + "'");
    for (const [k, v] of Object.entries(want.formula.terms)) same("term:" + k, v);
    if (cells.formula_numeric !== want.formula.numeric) bad.push("numbers " + cells.formula_numeric);
    check(bad.length === 0, "inspector = scalar --json for " + row.what + " " + row.tensor + "[" + row.index + "] (" +
          want.formula.symbolic + ")" + (bad.length ? ": " + bad.join("; ") : ""));
  }
  await page.screenshot({ path: path.join(shots, "views-inspector-onnx.png") });

  // ---- Q5_0: the inspector's error in LSB is the error heatmap's at that element
  {
    const url = urls.get(M("gguf/stories260K-Q4_K_M.gguf") + "|" + M("gguf/stories260K-F32.gguf"));
    const t = await (await fetch(url + "api/v1/tile?name=blk.0.attn_q.weight&mode=error&step=1&x=0&y=0&w=64&h=64")).json();
    const b = Buffer.from(t.max, "base64");
    const mx = new Float32Array(b.buffer, b.byteOffset, b.length / 4);
    const want = tmJson("scalar", M("gguf/stories260K-Q4_K_M.gguf"), "blk.0.attn_q.weight", "52,25", "--ref", M("gguf/stories260K-F32.gguf"), "--json");
    check(Math.abs(mx[52 * 64 + 25] - Math.abs(want.error_lsb)) < 1e-6, "Q5_0: tile error " + mx[52 * 64 + 25] + " LSB = scalar's |error_lsb| " + want.error_lsb);
  }

  // ---- heatmap of the int4 output with --ref: Fit, colour bar, ticks, hover, keyboard, deep-link reload
  const url = urls.get(q4 + "|" + st);
  await page.goto(url + "#view=heatmap&tensor=" + encodeURIComponent(st4.name) + "&mode=groups");
  await page.reload();
  await page.waitForSelector("body[data-loaded='1']");
  await ready(page, "[data-mode='groups']");
  let g = await geo(page);
  const plotW = g.w - 60, plotH = g.h - 26;
  check(Number.isInteger(g.z) && g.z === g.zy && g.s === 1, "Fit: a whole zoom, square pixels for a " + g.rows + "x" + g.cols + " tensor (z=" + g.z + ")");
  check(g.cols * g.z > 0.9 * plotW || g.rows * g.zy > 0.9 * plotH, "Fit fills the view along one side (" + g.cols * g.z + "x" + g.rows * g.zy + " in " + plotW + "x" + plotH + ")");
  check(g.rows * g.zy <= plotH + 1 && g.cols * g.z <= plotW + 1, "Fit shows the whole matrix");
  const lg = await page.$eval("#legend-bar", (c) => ({ lo: c.dataset.lo, hi: c.dataset.hi }));
  check(/unit id/.test(await page.textContent("#legend-label")) && Number(lg.hi) > Number(lg.lo), "groups colour bar with numbers (" + lg.lo + " .. " + lg.hi + ") and its unit");
  await page.screenshot({ path: path.join(shots, "views-heatmap-groups.png") });
  for (const mode of ["value", "abs", "error"]) {
    await page.selectOption("#mode", mode);
    await ready(page, "[data-mode='" + mode + "']");
    const l = await page.textContent("#legend-label");
    const d = await page.$eval("#legend-bar", (c) => ({ lo: +c.dataset.lo, hi: +c.dataset.hi }));
    check(/unit: /.test(l) && d.hi > d.lo, mode + " colour bar: " + d.lo + " .. " + d.hi + ", \"" + l.slice(0, 60) + "...\"");
  }
  const tickPx = await page.$eval("#heatmap", (c) => {
    const d = c.getContext("2d").getImageData(0, 30, 50, 200).data;
    let n = 0;
    for (let i = 0; i < d.length; i += 4) if (d[i + 3] > 0 && d[i] < 120) n++;
    return n;
  });
  check(tickPx > 20, "row ticks drawn left of the plot (" + tickPx + " dark pixels)");
  const box = await page.locator("#heatmap").boundingBox();
  g = await geo(page);
  await page.mouse.move(box.x + g.ox + 4.5 * g.z, box.y + g.oy + 3.5 * g.zy);
  check(/^\[3,4\].*(value|error)/.test((await page.textContent("#hover")).trim()), "hover readout: " + (await page.textContent("#hover")).trim());
  // keyboard on the canvas
  await page.focus("#heatmap");
  await page.keyboard.press("+");
  let g2 = await geoAfter(page, g);
  check(g2.z > g.z && Number.isInteger(g2.z), "+ zooms in by a whole step (" + g.z + " -> " + g2.z + ")");
  await page.keyboard.press("ArrowRight");
  const g3 = await geoAfter(page, g2);
  check(g3.ox === g2.ox - 64, "ArrowRight pans (" + g2.ox + " -> " + g3.ox + ")");
  await page.keyboard.press("0");
  g2 = await geoAfter(page, g3);
  check(g2.z === g.z && g2.ox === g.ox, "0 fits again");
  g = await geo(page);
  const box2 = await page.locator("#heatmap").boundingBox(), sc = box2.width / g.w;
  await page.mouse.click(box2.x + (g.ox + 10.5 * g.z) * sc, box2.y + (g.oy + 6.5 * g.zy) * sc);
  await page.waitForSelector("#inspector[data-flat='" + (6 * g.cols + 10) + "']");
  await page.keyboard.press("Shift+ArrowDown");
  await page.waitForSelector("#inspector[data-flat='" + (7 * g.cols + 10) + "']", { timeout: 10000 });
  check(true, "shift+ArrowDown moves the selection one row down and the inspector follows");
  const hash = await page.evaluate(() => location.hash);
  check(/view=heatmap/.test(hash) && hash.includes("index=7%2C10") && /mode=error/.test(hash), "the URL hash holds the view: " + hash);
  await page.reload();
  await page.waitForSelector("body[data-loaded='1']");
  await page.waitForSelector("#inspector[data-flat='" + (7 * g.cols + 10) + "']", { timeout: 20000 });
  await ready(page, "[data-mode='error'][data-tensor='" + st4.name + "']");
  check(true, "a reload comes back to the same tensor, mode and element");
  // copy gives the full precision
  const full = await page.getAttribute("#inspector [data-field='value']", "data-full");
  const shown = (await page.textContent("#inspector [data-field='value']")).trim();
  check(shown.replace(/^-|e.*$|\./g, "").replace(/^0+/, "").length <= 6 && parseFloat(full) === tmJson("scalar", q4, st4.name, "7,10", "--json").value,
        "six digits shown (" + shown + "), full precision kept for hover/copy (" + full + ")");
  // the tensor list: filter, count, arrows, Enter
  const total = Number((await page.textContent("#tensor-count")).split(" ")[0]);
  await page.fill("#tensor", "layers.1.");
  const cnt = (await page.textContent("#tensor-count")).trim();
  const m = cnt.match(/^(\d+) of (\d+)/);
  check(m && +m[1] > 1 && +m[1] < +m[2] && +m[2] === total, "the tensor filter counts: " + cnt);
  await page.focus("#tensor-rows");
  await page.keyboard.press("ArrowDown");
  const second = await page.getAttribute("#tensor-rows .trow.active", "data-name");
  await page.keyboard.press("Enter");
  await ready(page, "[data-tensor='" + second + "']");
  check(/layers\.1\./.test(second), "arrows + Enter in the list open " + second);
  // a bad name: the API's 404 message, no picture
  await page.fill("#tensor", "no.such.tensor");
  await page.press("#tensor", "Enter");
  await page.waitForSelector("#heat-error:not([hidden])", { timeout: 10000 });
  const apiMsg = await page.evaluate(async () => (await (await fetch("/api/v1/tensor?name=no.such.tensor")).json()).error);
  const shownErr = await page.textContent("#heat-error");
  check(apiMsg && shownErr.includes(apiMsg), "a bad tensor name shows the API's message: " + shownErr);
  check((await page.getAttribute("#heatmap", "data-tensor")) === null && (await page.locator("#inspector [data-field]").count()) === 0, "and no previous picture or inspector");
  await page.screenshot({ path: path.join(shots, "views-bad-name.png") });
  await axeCheck(page, "heatmap");
  await page.click("[data-tab='qdiff']");
  await page.waitForSelector("#qdiff-table tbody tr");
  await axeCheck(page, "qdiff");

  // ---- Calibration Lab: all observers side by side = calibrate --observer all
  await page.click("[data-tab='calibration']");
  await page.waitForSelector("#calib-hist[data-ready='1']", { timeout: 20000 });
  await page.selectOption("#calib-tensor", st4.name);
  await page.waitForFunction((t) => document.querySelector("#calib-status").textContent.startsWith(t + ":"), st4.name, { timeout: 20000 });
  await page.click("#calib-all-run");
  await page.waitForSelector("#calib-all[data-ready='1']", { timeout: 30000 });
  const allCli = tmJson("calibrate", q4 + ":" + st4.name, "-g", "tensor", "--observer", "all", "--probe", "0.1", "--probe", "-0.25", "--json").observers;
  const rowsAll = await page.$$eval("#calib-all tbody tr", (trs) => trs.map((tr) => ({ o: tr.dataset.observer,
    scale: +tr.querySelector("[data-field='scale']").dataset.full, sqnr: +tr.querySelector("[data-field='sqnr_db']").dataset.full })));
  check(rowsAll.length === allCli.length && rowsAll.every((r, i) => r.o === allCli[i].observer && r.scale === allCli[i].scale && r.sqnr === allCli[i].sqnr_db),
        "all observers side by side = calibrate --observer all (" + rowsAll.map((r) => r.o).join(", ") + ")");
  await page.screenshot({ path: path.join(shots, "views-calibration-all.png"), fullPage: true });
  await axeCheck(page, "calibration");

  // ---- Release without inputs: what to do, no empty table
  await page.click("[data-tab='release']");
  await page.waitForSelector("#release-verdict[data-ready='1']");
  check(await page.isHidden("#release-checks") && await page.isHidden("#release-reasons-head") && /--manifest/.test(await page.textContent("#release-inputs")),
        "an empty Release page says how to get a verdict and shows no empty table or heading");
  await axeCheck(page, "release");
  await page.close();

  // ---- natural order and a virtualised list (PaddleOCR rec: conv2d_2 before conv2d_10)
  {
    const rec = M("onnx/npm/paddleocr/ch_PP-OCRv4_rec_infer.onnx");
    const p2 = await newPage();
    await load(p2, await serve(rec) + "#view=heatmap&tensor=conv2d_180.w_0");
    await ready(p2);
    const gg = await geo(p2);
    check(gg.rows === 480 && gg.cols === 480 && gg.z === gg.zy, "a [480, 480, 1, 1] conv is a 480 x 480 matrix with square pixels");
    const order = await p2.evaluate(() => nav.names());  /* the list's order (its DOM holds only the rows on screen) */
    const nums = order.map((n) => n.match(/^batch_norm2d_(\d+)\.w_0$/)).filter(Boolean).map((m) => +m[1]);
    /* a pair plain string order would swap (e.g. 15 and 142) must be in number order */
    const swapped = nums.some((a, i) => nums.slice(i + 1).some((b) => String(a) > String(b)));
    check(nums.length > 5 && swapped && nums.every((n, i) => i === 0 || nums[i - 1] < n),
          "natural order: batch_norm2d_N.w_0 by N (" + nums.slice(0, 6).join(", ") + ", ...)");
    const total2 = Number((await p2.textContent("#tensor-count")).split(" ")[0]);
    const inDom = await p2.locator("#tensor-rows .trow").count();
    check(total2 > 200 && inDom < 80, "the tensor list is virtualised: " + inDom + " rows in the page for " + total2 + " tensors");
    // a thin matrix at Fit is stretched to at most 4:1
    await p2.fill("#tensor", "conv2d_117.w_0");
    await p2.press("#tensor", "Enter");
    await ready(p2, "[data-tensor='conv2d_117.w_0']");
    const gt = await geo(p2);
    check(gt.cols * gt.z <= 4 * gt.rows * gt.zy + gt.zy, "a 120 x 480 matrix is drawn at most 4:1 (" + gt.cols * gt.z + "x" + gt.rows * gt.zy + ")");
    await p2.screenshot({ path: path.join(shots, "views-heatmap-rec-1440.png") });
    await p2.setViewportSize({ width: 900, height: 900 });
    await p2.waitForTimeout(300);
    const tabs = await p2.$$eval(".tab:not([hidden])", (ts) => ts.map((t) => { const r = t.getBoundingClientRect(); return { n: t.textContent, right: r.right, vis: r.width > 0 }; }));
    check(tabs.every((t) => t.vis && t.right <= 900), "at 900 px every tab is on screen: " + tabs.map((t) => t.n + "@" + Math.round(t.right)).join(" "));
    await p2.screenshot({ path: path.join(shots, "views-heatmap-rec-900.png") });
    await p2.close();
  }
  // ---- silero VAD (ONNX with subgraph initializers): a heatmap of a conv weight
  {
    const sil = M("onnx/npm/silero_vad/silero_vad_v5.onnx");
    const t = tmJson("inspect", sil, "--json").tensors.find((x) => /encoder\.0\.reparam_conv\.weight/.test(x.name));
    const p3 = await newPage();
    await load(p3, await serve(sil) + "#view=heatmap&tensor=" + encodeURIComponent(t.name));
    await ready(p3);
    const gs = await geo(p3);
    check(gs.rows === t.shape[0] && gs.cols === t.shape[1] * t.shape[2], "silero conv " + JSON.stringify(t.shape) + " is [out, in*k] = " + gs.rows + "x" + gs.cols);
    await p3.screenshot({ path: path.join(shots, "views-heatmap-silero.png") });
    await p3.close();
  }
  // ---- dark mode: prefers-color-scheme, then the toggle
  {
    const p4 = await newPage({ width: 1440, height: 900 });
    await p4.emulateMedia({ colorScheme: "dark" });
    await load(p4, urls.get(M("gguf/imatrix/synth256-Q4_K_M.gguf") + "|") + "#view=heatmap&tensor=token_embd.weight&mode=groups&index=7,200");
    await ready(p4);
    await p4.waitForSelector("#inspector[data-flat]");
    const bg = await p4.evaluate(() => getComputedStyle(document.body).backgroundColor);
    check((await p4.getAttribute("html", "data-theme")) === "dark" && /rgb\((\d|[1-3]\d),/.test(bg), "prefers-color-scheme: dark gives the dark theme (" + bg + ")");
    await p4.screenshot({ path: path.join(shots, "views-dark.png") });
    await axeCheck(p4, "heatmap");
    await p4.click("#theme-toggle");
    check((await p4.getAttribute("html", "data-theme")) === "light", "the toggle switches to light");
    await p4.click("#theme-toggle");
    await p4.close();
  }
  check(consoleErrors.length === 0, "no console errors" + (consoleErrors.length ? ": " + [...new Set(consoleErrors)].slice(0, 3).join("; ").slice(0, 600) : ""));
} catch (e) {
  failures++;
  console.log("FAIL " + (e && e.stack ? e.stack : e));
} finally {
  await ctx.close();
}
console.log(failures ? failures + " check(s) failed" : "all checks passed; screenshots in " + shots);
process.exit(failures ? 1 : 0);
