// ui.test.mjs: the web UI in a real Chromium (Playwright, playwright-core + Debian's chromium).
// Quantizes a ../shared/models checkpoint with tensormorph (int4 group:32: projections quantized,
// embeddings and norms dense, side by side), serves it with --ref, then: expands the tree and finds
// a boundary line, opens a heatmap, switches to quantization shading and checks the colours across
// a group boundary, clicks a cell and checks every Scalar Inspector number against
// `tensormorph scalar --json`, sorts the Quantization Diff and opens an error heatmap from it, and
// downloads a recipe from the plan editor that `tensormorph quantize --recipe` accepts.
// Screenshots of each view go to $TM_BUILD/browser-screenshots/.
//
// Exit 77 (skipped) with a reason when chromium or playwright-core is missing, unless
// TM_REQUIRE_BROWSER=1; "SKIP: ../shared not found" unless TM_REQUIRE_SHARED=1.
import { spawn, spawnSync, execFileSync } from "node:child_process";
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
  if (process.env[requiredBy] === "1") {
    console.error("FAIL: " + reason + " (" + requiredBy + "=1)");
    process.exit(1);
  }
  console.log("SKIP: " + reason);
  process.exit(77);
}

const shared = process.env.TM_SHARED || path.resolve(src, "../shared");
const model = path.join(shared, "models/safetensors/stories260K-f32");
if (!fs.existsSync(model)) skip("../shared not found", "TM_REQUIRE_SHARED");
if (!fs.existsSync(chromium)) skip("chromium not found at " + chromium + " (apt-get install chromium)", "TM_REQUIRE_BROWSER");
let chromiumApi;
{
  // playwright-core from tests/browser/node_modules, the build dir's node_modules or NODE_PATH-like TM_NODE_MODULES
  const bases = [process.env.TM_NODE_MODULES, path.join(here, "..", "..", "runner", "node_modules"), path.join(here, "node_modules"), path.join(build, "node_modules")].filter(Boolean);
  for (const b of bases) {
    try {
      const req = createRequire(path.join(b, "noop.js"));
      chromiumApi = req(req.resolve("playwright-core", { paths: [b] })).chromium;
      break;
    } catch (e) { /* try the next place */ }
  }
  if (!chromiumApi) skip("playwright-core not installed (npm install --ignore-scripts playwright-core in tests/browser or the build dir)", "TM_REQUIRE_BROWSER");
}

let failures = 0;
function check(cond, what) {
  if (cond) console.log("ok   " + what);
  else { failures++; console.log("FAIL " + what); }
}

const tmp = fs.mkdtempSync(path.join(os.tmpdir(), "tm_ui_"));
let server = null, userDir = null;
process.on("exit", () => {  // also when a step throws: no server or scratch left behind
  if (server) { try { server.kill("SIGTERM"); } catch (e) { /* already gone */ } }
  fs.rmSync(tmp, { recursive: true, force: true });
  if (userDir) fs.rmSync(userDir, { recursive: true, force: true });
});
const shots = path.join(build, "browser-screenshots");
fs.mkdirSync(shots, { recursive: true });
const quant = path.join(tmp, "q4");
const tm = (...args) => execFileSync(bin, args, { encoding: "utf8", stdio: ["ignore", "pipe", "inherit"] });
// int4 group:32 everywhere, but one tensor with a clipping observer (percentile:90): the
// Quantization Diff must flag it, so the page has a flagged row to highlight
const damaged = "model.layers.2.self_attn.o_proj.weight";
const recipeIn = path.join(tmp, "recipe-in.json");
fs.writeFileSync(recipeIn, JSON.stringify({
  default: { type: "int4", granularity: "group:32" },
  targets: [{ pattern: "^" + damaged.replace(/\./g, "\\.") + "$", scheme: { type: "int4", granularity: "group:32", observer: "percentile:90" } }],
}));
tm("quantize", model, "-o", quant, "--recipe", recipeIn, "-q");

// serve with --ref on a free port; the URL is the first line on stdout
server = spawn(bin, ["serve", quant, "--ref", model, "--port", "0", "-q"], { stdio: ["ignore", "pipe", "inherit"] });
const url = await new Promise((resolve, reject) => {
  let buf = "";
  const t = setTimeout(() => reject(new Error("serve printed no URL")), 15000);
  server.stdout.on("data", (d) => {
    buf += d;
    const m = buf.match(/^(http:\/\/127\.0\.0\.1:\d+\/)\n/);
    if (m) { clearTimeout(t); resolve(m[1]); }
  });
  server.on("exit", (c) => reject(new Error("serve exited with " + c)));
});

// a fresh profile every run (Playwright passes it as --user-data-dir)
userDir = fs.mkdtempSync(path.join(os.tmpdir(), "tm_ui_profile_"));
const ctx = await chromiumApi.launchPersistentContext(userDir, {
  executablePath: chromium, headless: true, viewport: { width: 1400, height: 950 }, acceptDownloads: true,
  args: ["--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking",
         "--disable-component-update", "--disable-sync", "--disable-quic"],
});
try {
  const page = ctx.pages()[0] || await ctx.newPage();
  const consoleErrors = [];
  page.on("console", (m) => { if (m.type() === "error") consoleErrors.push(m.text()); });
  page.on("pageerror", (e) => consoleErrors.push(String(e)));
  await page.goto(url);
  await page.waitForSelector("body[data-loaded='1']", { timeout: 15000 });
  // the Architecture view opens on its diagram (web/arch/, tests/browser/arch.test.mjs); the table
  // checked here is one click away
  await page.click(".arch-mode[data-mode='table']");

  // ---- Architecture: opens with the first block expanded, a boundary line is drawn
  const attn = page.locator(".node[data-path='model.layers.0.self_attn']");
  check(await attn.isVisible(), "first block's self_attn is visible without a click");
  check(!(await page.locator(".node[data-path='model.layers.1.self_attn']").isVisible()), "the second block starts collapsed");
  await page.screenshot({ path: path.join(shots, "architecture.png"), fullPage: true });
  await page.click("#expand-all");
  check(await page.locator(".node[data-path='model.layers.1.self_attn']").isVisible(), "expand all opens every block");
  const boundaries = page.locator(".node.boundary");
  const nb = await boundaries.count();
  check(nb > 0, "boundary rows exist (" + nb + ")");
  const b0 = page.locator(".node.boundary[data-path='model.layers.0.self_attn']");
  check(await b0.isVisible(), "a boundary on model.layers.0.self_attn (dense norm -> int4 attention)");
  const line = await b0.evaluate((e) => { const s = getComputedStyle(e); return { w: s.borderTopWidth, c: s.borderTopColor }; });
  check(parseFloat(line.w) >= 2 && /rgb\(208, 48, 48\)/.test(line.c), "the boundary is a visible line (" + line.w + " " + line.c + ")");
  const badges = await b0.locator(".badge").allTextContents();
  check(badges.includes("I4") && badges.includes("I4 group:32 sym scale:F32"), "dtype and scheme badges: " + badges.join(" | "));
  await page.screenshot({ path: path.join(shots, "architecture-expanded.png"), fullPage: true });
  await page.fill("#search", "layers.1.mlp.down");
  check(await page.locator(".node.match[data-path='model.layers.1.mlp.down_proj']").isVisible(), "search finds and shows a module");
  await page.fill("#search", "");
  await page.click("#collapse-all");
  check(!(await attn.isVisible()), "collapse all hides the blocks");
  await page.click("#expand-all");

  // ---- plan editing -> recipe that tensormorph accepts
  await page.selectOption(".plan[data-path='model.layers.1.mlp']", "exclude");
  await page.selectOption(".plan[data-path='model.layers.0.self_attn']", "int8-channel");
  await page.selectOption("#plan-default", "int4-g32");
  const [dl] = await Promise.all([page.waitForEvent("download"), page.click("#download-recipe")]);
  const recipePath = path.join(tmp, "recipe.json");
  await dl.saveAs(recipePath);
  const recipe = JSON.parse(fs.readFileSync(recipePath, "utf8"));
  check(recipe.ignore && recipe.ignore.includes("^model\\.layers\\.1\\.mlp(\\.|$)"), "recipe ignores the excluded module");
  check(recipe.targets && recipe.targets[0].scheme.type === "int8", "recipe targets the module given int8");
  const qr = JSON.parse(tm("quantize", model, "-o", path.join(tmp, "q_recipe"), "--recipe", recipePath, "--json", "-q"));
  const rt = qr.manifest.tensors;
  const dec = (n) => rt.find((t) => t.name === n);
  check(dec("model.layers.1.mlp.up_proj.weight").decision === "kept", "tensormorph quantize --recipe keeps the excluded module");
  check(dec("model.layers.0.self_attn.q_proj.weight").decision === "quantized", "and quantizes the targeted one");

  // ---- Heatmap: open from the tree
  const tname = "model.layers.0.self_attn.q_proj.weight";
  await page.click(".node[data-path='" + tname + "'] .name");
  await page.waitForSelector("#heatmap[data-ready='1'][data-tensor='" + tname + "'][data-mode='value']", { timeout: 15000 });
  check(await page.isVisible("#view-heat"), "clicking a tensor opens its heatmap");
  const legend = await page.textContent("#legend-label");
  check(/white = 0/.test(legend), "value legend: " + legend);
  await page.screenshot({ path: path.join(shots, "heatmap-value.png") });

  // ---- quantization shading: colours differ across a group boundary, not inside a group
  await page.selectOption("#mode", "groups");
  await page.waitForSelector("#heatmap[data-ready='1'][data-mode='groups']", { timeout: 15000 });
  const geo = await page.$eval("#heatmap", (c) => ({ ox: +c.dataset.ox, oy: +c.dataset.oy, z: +c.dataset.z, zy: +c.dataset.zy, s: +c.dataset.step }));
  check(geo.s === 1 && geo.z >= 4, "a 64x64 tensor fits at several pixels per element (z=" + geo.z + ")");
  const at = (r, c) => ({ x: geo.ox + Math.floor(c / geo.s) * geo.z + geo.z / 2, y: geo.oy + Math.floor(r / geo.s) * geo.zy + geo.zy / 2 });
  const pixel = (p) => page.$eval("#heatmap", (c, p) => Array.from(c.getContext("2d").getImageData(Math.floor(p.x), Math.floor(p.y), 1, 1).data), p);
  const [g0, g1, g31, g32] = [await pixel(at(2, 0)), await pixel(at(2, 1)), await pixel(at(2, 30)), await pixel(at(2, 33))];
  check(g0.join() === g1.join(), "one colour inside a group");
  check(g31.join() !== g32.join(), "distinct colours across the group boundary at column 32");
  await page.screenshot({ path: path.join(shots, "heatmap-groups.png") });

  // ---- click a cell: the Scalar Inspector shows what `tensormorph scalar --json` says
  const r = 5, c = 37;
  const box = await page.locator("#heatmap").boundingBox();
  const cw = await page.$eval("#heatmap", (cv) => cv.width / cv.getBoundingClientRect().width);
  const p = at(r, c);
  await page.mouse.click(box.x + p.x / cw, box.y + p.y / cw);
  await page.waitForSelector("#inspector[data-flat='" + (r * 64 + c) + "'] [data-field='error_lsb']", { timeout: 10000 });
  const field = async (f) => (await page.textContent("#inspector [data-field='" + f + "']")).trim();
  // numbers show 6 significant digits; the full value is in data-full (hover and copy)
  const full = async (f) => page.getAttribute("#inspector [data-field='" + f + "']", "data-full");
  const want = JSON.parse(tm("scalar", quant, tname, r + "," + c, "--ref", model, "--json"));
  check((await field("index")) === "[" + r + ", " + c + "]", "inspector index [" + r + ", " + c + "]");
  for (const k of ["code", "zero_point", "group"]) check(Number(await field(k)) === want[k], "inspector " + k + " = " + want[k]);
  for (const [k, w] of [["scale", "scale"], ["value", "value"], ["source_value", "ref_value"], ["error", "error"], ["error_lsb", "error_lsb"]]) {
    check(parseFloat(await full(k)) === want[w], "inspector " + k + " = " + want[w] + " (data-full " + (await full(k)) + ")");
    check(Math.abs(parseFloat(await field(k)) - want[w]) <= 5e-6 * Math.abs(want[w]) && (await field(k)).replace(/^-|e.*$|\./g, "").replace(/^0+/, "").length <= 6,
      "inspector " + k + " shows six significant digits: " + (await field(k)));
  }
  const stored = await field("stored");
  check(parseInt(stored.split(" ")[0], 16) === want.stored && stored.includes(want.stored_bits + "-bit"), "inspector container word " + stored);
  await page.screenshot({ path: path.join(shots, "inspector.png") });

  // ---- hover shows index and value
  const ph = at(3, 4);
  await page.mouse.move(box.x + ph.x / cw, box.y + ph.y / cw);
  const hov = await page.textContent("#hover");
  check(/^\[3,4\]/.test(hov.trim()), "hover shows the index: " + hov.trim());

  // ---- zoom out and pan keep working (tiles at a coarser step)
  await page.click("#zoom-out");
  await page.click("#zoom-out");
  await page.waitForSelector("#heatmap[data-ready='1']", { timeout: 10000 });
  const z2 = await page.$eval("#heatmap", (c2) => +c2.dataset.z);
  check(Number.isInteger(z2) && z2 < geo.z && z2 >= 1, "zoom out steps down by whole zooms twice (" + geo.z + " -> " + z2 + ")");

  // ---- Quantization Diff: sortable, flagged highlighted, a click opens the error heatmap
  await page.click("#tab-qdiff");
  const nrows = await page.locator("#qdiff-table tbody tr").count();
  const want_q = JSON.parse(tm("qdiff", model, quant, "--json"));
  check(nrows === want_q.tensors.length, "qdiff rows: " + nrows);
  check(want_q.n_flagged === 1 && want_q.tensors[0].name === damaged, "qdiff flags the damaged tensor");
  check((await page.locator("#qdiff-table tr.flagged").count()) === want_q.n_flagged, "flagged rows highlighted: " + want_q.n_flagged);
  const flaggedRow = page.locator("#qdiff-table tr.flagged");
  check((await flaggedRow.getAttribute("data-name")) === damaged, "the flagged row is " + damaged);
  const bg = await flaggedRow.evaluate((e) => getComputedStyle(e).backgroundColor);
  const plain = await page.locator("#qdiff-table tbody tr:not(.flagged)").first().evaluate((e) => getComputedStyle(e).backgroundColor);
  check(bg !== plain && /rgb\(255, 227, 224\)/.test(bg), "flagged rows have their own background (" + bg + ")");
  check((await page.getAttribute("#qdiff-table tbody tr:first-child", "data-name")) === damaged, "flagged first, as qdiff orders them");
  const reason = await flaggedRow.locator("td:last-child").textContent();
  check(reason === want_q.tensors[0].reason && /RMSE/.test(reason), "the flag reason is shown: " + reason);
  await page.click("#qdiff-table th[data-key='sqnr_db']");
  const sq = (await page.locator("#qdiff-table tbody tr td:nth-child(3)").allTextContents()).map(Number);
  check(sq.every((v, i) => i === 0 || sq[i - 1] <= v), "sorted by SQNR ascending");
  await page.click("#qdiff-table th[data-key='sqnr_db']");
  const sq2 = (await page.locator("#qdiff-table tbody tr td:nth-child(3)").allTextContents()).map(Number);
  check(sq2.every((v, i) => i === 0 || sq2[i - 1] >= v), "second click sorts descending");
  await page.screenshot({ path: path.join(shots, "qdiff.png"), fullPage: true });
  await page.click("#qdiff-table tr.flagged");
  await page.waitForSelector("#heatmap[data-ready='1'][data-mode='error'][data-tensor='" + damaged + "']", { timeout: 15000 });
  check(true, "a qdiff row opens the error heatmap of " + damaged);
  check((await page.locator("#inspector [data-field]").count()) === 0, "another tensor clears the inspector");
  const errHi = parseFloat(await page.getAttribute("#legend-bar", "data-hi"));
  const want_e = want_q.tensors[0].max_err_lsb;
  check(Math.abs(errHi - want_e) <= 1e-3 * want_e, "error legend spans to the tensor's max error, " + errHi + " LSB (qdiff: " + want_e + ")");
  await page.screenshot({ path: path.join(shots, "heatmap-error.png") });

  // ---- Calibration Lab (web/calib.js): switch the observer, the rendered numbers are the API's and
  // `tensormorph calibrate --json`'s; editing a probe recomputes it
  {
    const ct = "model.layers.0.self_attn.q_proj.weight", obs = "percentile:99.9";
    await page.click("#tab-calib");
    await page.waitForSelector("#calib-hist[data-ready='1']", { timeout: 15000 });
    await page.selectOption("#calib-tensor", ct);
    await page.waitForFunction((t) => { const s = document.querySelector("#calib-status").textContent; return s.startsWith(t + ":"); }, ct, { timeout: 15000 });
    // a pixel high above the smallest sample: inside the clipped tail only when the observer clips
    const tailPx = () => page.$eval("#calib-hist", (c) => Array.from(c.getContext("2d").getImageData(+c.dataset.xmin + 2, 15, 1, 1).data));
    const px0 = await tailPx();  // minmax clips nothing
    await page.selectOption("#calib-observer", obs);
    await page.waitForSelector("#calib-hist[data-ready='1'][data-observer='" + obs + "']", { timeout: 15000 });
    const px1 = await tailPx();
    check(px0[0] === px0[1] && px1[0] > px1[1] + 15, "calibration lab: the clipped tail is shaded red only when the observer clips (" + px0.join() + " -> " + px1.join() + ")");
    const cfield = async (f) => (await page.textContent("#calib-table [data-field='" + f + "']")).trim();
    const apiDoc = await page.evaluate(async (q) => (await fetch("/api/v1/calibrate?" + q)).json(),
      "tensor=" + encodeURIComponent(ct) + "&observer=" + encodeURIComponent(obs) + "&probe=0.1,-0.25&granularity=tensor");
    const ao = apiDoc.observers[0];
    const cfull = async (f) => parseFloat(await page.getAttribute("#calib-table [data-field='" + f + "']", "data-full"));
    check((await cfull("scale")) === ao.scale, "calibration lab: rendered scale " + (await cfield("scale")) + " = the API's " + ao.scale);
    const cliObs = (probes) => JSON.parse(tm("calibrate", quant + ":" + ct, "-g", "tensor", "--observer", obs, ...probes.flatMap((p) => ["--probe", p]), "--json")).observers[0];
    const co = cliObs(["0.1", "-0.25"]);
    check(co.scale === ao.scale && co.zero_point === ao.zero_point && Number(await cfield("zero_point")) === co.zero_point,
      "calibration lab: scale and zero point = tensormorph calibrate --json (" + co.scale + ", " + co.zero_point + ")");
    for (const k of ["range_min", "range_max", "clipped_fraction", "clipped_max_excess", "sqnr_db"])
      check((await cfull(k)) === co[k], "calibration lab: " + k + " = " + co[k]);
    check(co.clipped_fraction > 0, "percentile:99.9 clips a tail (" + co.clipped_fraction + ")");
    await page.fill("#calib-probes", "0.3");
    await page.dispatchEvent("#calib-probes", "change");
    await page.waitForFunction(() => {
      const rows = document.querySelectorAll("#calib-probe-table tbody tr");
      return rows.length === 1 && rows[0].querySelector("[data-field='real']").textContent === "0.3";
    }, null, { timeout: 10000 });
    const c3 = cliObs(["0.3"]).probes[0];
    const pf = async (f) => (await page.textContent("#calib-probe-table tr[data-probe='0'] [data-field='" + f + "']")).trim();
    const pfull = async (f) => parseFloat(await page.getAttribute("#calib-probe-table tr[data-probe='0'] [data-field='" + f + "']", "data-full"));
    check(Number(await pf("code")) === c3.code && (await pfull("dequantized")) === c3.dequantized && (await pfull("error")) === c3.error,
      "an edited probe recomputes: 0.3 -> code " + c3.code + " -> " + c3.dequantized);
    await page.screenshot({ path: path.join(shots, "calibration-lab.png"), fullPage: true });
  }
  // ---- Release page (web/release.js): without release inputs it says so; a second server started
  // with --manifest/--evidence/--policy shows the same verdict, checks, reasons and evidence values
  // as `tensormorph gate --json` on the same files (self-contained: its own files and server)
  {
    await page.click("#tab-release");
    await page.waitForSelector("#release-verdict[data-ready='1']", { timeout: 15000 });
    check((await page.getAttribute("#release-verdict", "data-verdict")) === "none", "release page without inputs: no verdict, a hint");
    const rdir = fs.mkdtempSync(path.join(tmp, "release_"));
    const man = JSON.parse(fs.readFileSync(path.join(quant, "tensormorph-manifest.json"), "utf8"));
    const lat = (first, step) => Array.from({ length: 20 }, (_, i) => first + step * ((i * 7) % 20));
    const mdl = (p, sha, first, step, rss) => ({ path: p, sha256: sha, latency_ms: lat(first, step), p50_ms: first + 9 * step,
      p95_ms: 0.001 /* a lie: the gate must recompute */, p99_ms: first + 19 * step, peak_rss_bytes: rss, operators: { MatMul: 24 } });
    const ev = {
      schema: "tensormorph.evidence/1", tool: { name: "tensormorph", version: "0.1.0", commit: "ui-test" },
      runtime: { name: "onnxruntime-node", version: "1.30.0", node: process.version, execution_provider: "cpu" },
      device: { kind: "cpu", name: "ui test cpu", cores: 2, measured: true },
      host: { cpu_model: "ui test cpu", cores: 2, os: "Linux", hostname: "ui" },
      protocol: { inputs: { mode: "random", path: null, count: 2, sha256: "ab".repeat(32), seed: 1 }, input_shapes: { x: [1, 64] },
                  warmup: 2, runs: 10, threads: 1, graph_optimization_level: "all" },
      models: { baseline: mdl("base", man.sources[0].sha256, 2.0, 0.5, 100e6), candidate: mdl("cand", man.output.files[0].sha256, 1.0, 0.25, 60e6) },
      drift: { overall: { logits: { max_abs: 0.02, rel_l2: 0.004, top1_agreement: 1 } }, slices: {} },
      candidate_operators: { MatMul: 24 },
    };
    const pol = { schema: "tensormorph.policy/1", targets: { "ort-cpu": {
      latency_ms: { p95: { max: 6, max_ratio: 1.0 } }, peak_rss_bytes: { max_ratio: 1.0 }, drift: { overall: { max_abs: 0.05 } },
      canary: { min_fraction: 0.05 } } } };
    const evPath = path.join(rdir, "evidence.json"), polPath = path.join(rdir, "policy.json");
    fs.writeFileSync(evPath, JSON.stringify(ev));
    fs.writeFileSync(polPath, JSON.stringify(pol));
    const manPath = path.join(quant, "tensormorph-manifest.json");
    const gargs = ["--manifest", manPath, "--evidence", evPath, "--policy", polPath, "--canary", "0.01", "--rollback", model];
    const g = spawnSync(bin, ["gate", ...gargs, "--json"], { encoding: "utf8" });
    check(g.status === 1, "tensormorph gate exits 1 on FAIL (canary below the policy's minimum), got " + g.status);
    const want = JSON.parse(g.stdout);
    const rserver = spawn(bin, ["serve", quant, "--port", "0", "-q", ...gargs],
                          { stdio: ["ignore", "pipe", "inherit"] });
    process.on("exit", () => { try { rserver.kill("SIGTERM"); } catch (e) { /* gone */ } });
    try {
      const rurl = await new Promise((resolve, reject) => {
        let buf = "";
        const t = setTimeout(() => reject(new Error("release serve printed no URL")), 15000);
        rserver.stdout.on("data", (d) => { buf += d; const m = buf.match(/^(http:\/\/127\.0\.0\.1:\d+\/)\n/); if (m) { clearTimeout(t); resolve(m[1]); } });
        rserver.on("exit", (c) => reject(new Error("release serve exited with " + c)));
      });
      const rpage = await ctx.newPage();
      rpage.on("console", (m) => { if (m.type() === "error") consoleErrors.push(m.text()); });
      rpage.on("pageerror", (e) => consoleErrors.push(String(e)));
      await rpage.goto(rurl);
      await rpage.waitForSelector("body[data-loaded='1']", { timeout: 15000 });
      await rpage.click("#tab-release");
      await rpage.waitForSelector("#release-verdict[data-ready='1'][data-verdict='FAIL']", { timeout: 20000 });
      check(want.verdict === "FAIL" && (await rpage.getAttribute("#release-verdict", "data-verdict")) === want.verdict,
        "release page verdict = tensormorph gate --json's (" + want.verdict + ")");
      const rows = await rpage.$$eval("#release-checks tbody tr", (trs) => trs.map((tr) => ({
        name: tr.dataset.check, status: tr.dataset.status, reason: tr.querySelector("[data-field='reason']").textContent,
        evidence: tr.querySelector("pre") ? JSON.parse(tr.querySelector("pre").textContent) : null })));
      check(rows.length === want.checks.length && rows.every((r, i) => r.name === want.checks[i].name && r.status === want.checks[i].status &&
            r.reason === want.checks[i].reason), "release page lists every check of the gate (" + rows.length + ") with its status and reason");
      const p95 = rows.find((r) => r.name === "latency.p95");
      const wp95 = want.checks.find((c) => c.name === "latency.p95").evidence;
      check(p95 && p95.status === "pass" && p95.evidence.candidate === wp95.candidate && wp95.candidate === 5.5 && p95.evidence.file_candidate === 0.001,
        "latency p95 evidence on the page: recomputed 5.5 ms from the samples, not the file's 0.001");
      const failed = rows.filter((r) => r.status === "fail").map((r) => r.name);
      check(failed.length === 1 && failed[0] === "canary", "the one failed check is the canary: " + failed.join(", "));
      const reasons = await rpage.$$eval("#release-reasons li", (li) => li.map((x) => x.textContent));
      check(reasons.length === want.reasons.length && reasons[0] === want.reasons[0], "release page reasons = the gate's: " + reasons[0]);
      await rpage.screenshot({ path: path.join(shots, "release.png"), fullPage: true });
      await rpage.close();
    } finally {
      rserver.kill("SIGTERM");
    }
  }
  check(consoleErrors.length === 0, "no console errors (CSP violations included)" +
        (consoleErrors.length ? ": " + [...new Set(consoleErrors)].slice(0, 3).join("; ").slice(0, 600) : ""));
} catch (e) {
  failures++;
  console.log("FAIL " + (e && e.stack ? e.stack : e));
} finally {
  await ctx.close();
}
console.log(failures ? failures + " check(s) failed" : "all checks passed; screenshots in " + shots);
process.exit(failures ? 1 : 0);
