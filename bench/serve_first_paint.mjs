// serve_first_paint.mjs: benchmark (not a test) of issue 15's "a 30-shard 140 GB (sparse)
// LLaMA-shaped checkpoint opens with first paint < 2 s; lists of 10k+ tensors are virtualised".
// Writes, in a scratch folder, a sharded safetensors checkpoint whose headers are real and whose
// data are holes (sparse files: ftruncate past the header, nothing written, so 140 GB take a few
// MB of disk), with model.safetensors.index.json and config.json beside it; then, N times, starts
// `tensormorph serve DIR` and loads the page in headless Chromium, timing from the spawn of the
// server: its URL on stdout (listening), the page's first contentful paint, and the page loaded
// (body[data-loaded], set once /api/v1/inspect and /api/v1/arch are drawn). For the list it
// counts the Heatmap view's rows in the DOM against the tensors in the checkpoint.
//   node bench/serve_first_paint.mjs [build/tensormorph] [N] [shape]
// shape: llama70b (default; LLaMA-2-70B: 80 layers, hidden 8192, GQA 8 KV heads, FFN 28672,
// vocab 32000, BF16, 723 tensors, 30 shards, 138 GB) or moe (the same with 48 experts of FFN 3584
// per layer, Mixtral's names: 11,763 tensors, 30 shards, 590 GB). Scratch: TM_SCRATCH, else the
// system's temporary folder (removed at the end). Needs chromium and playwright-core
// (runner/node_modules or TM_NODE_MODULES).
import { spawn } from "node:child_process";
import { createRequire } from "node:module";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";

const src = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "..");
const bin = process.argv[2] || path.join(src, "build", "tensormorph");
const N = Number(process.argv[3] || 5);
const shape = process.argv[4] || "llama70b";
let chromiumApi;
for (const b of [process.env.TM_NODE_MODULES, path.join(src, "runner", "node_modules")].filter(Boolean)) {
  try { const req = createRequire(path.join(b, "noop.js")); chromiumApi = req(req.resolve("playwright-core", { paths: [b] })).chromium; break; } catch (e) { /* next */ }
}
if (!chromiumApi) { console.error("needs playwright-core (TM_NODE_MODULES or runner/node_modules)"); process.exit(2); }

/* LLaMA-2-70B's tensors (names and shapes of the Hugging Face checkpoint); moe: each layer's MLP
** replaced by `experts` experts of a smaller FFN plus a router (Mixtral's names), to pass 10k. */
function tensors(kind) {
  const H = 8192, L = 80, V = 32000, KV = 1024;
  const FF = kind === "moe" ? 3584 : 28672, experts = kind === "moe" ? 48 : 0;
  const t = [["model.embed_tokens.weight", [V, H]]];
  for (let l = 0; l < L; l++) {
    const p = "model.layers." + l + ".";
    t.push([p + "input_layernorm.weight", [H]], [p + "post_attention_layernorm.weight", [H]],
      [p + "self_attn.q_proj.weight", [H, H]], [p + "self_attn.k_proj.weight", [KV, H]],
      [p + "self_attn.v_proj.weight", [KV, H]], [p + "self_attn.o_proj.weight", [H, H]]);
    if (!experts) t.push([p + "mlp.gate_proj.weight", [FF, H]], [p + "mlp.up_proj.weight", [FF, H]], [p + "mlp.down_proj.weight", [H, FF]]);
    else {
      t.push([p + "block_sparse_moe.gate.weight", [experts, H]]);
      for (let e = 0; e < experts; e++) {
        const q = p + "block_sparse_moe.experts." + e + ".";
        t.push([q + "w1.weight", [FF, H]], [q + "w3.weight", [FF, H]], [q + "w2.weight", [H, FF]]);
      }
    }
  }
  t.push(["model.norm.weight", [H]], ["lm_head.weight", [V, H]]);
  return { list: t, config: { architectures: [experts ? "MixtralForCausalLM" : "LlamaForCausalLM"], model_type: experts ? "mixtral" : "llama",
    hidden_size: H, intermediate_size: FF, num_hidden_layers: L, num_attention_heads: 64, num_key_value_heads: 8, vocab_size: V,
    rms_norm_eps: 1e-5, torch_dtype: "bfloat16", ...(experts ? { num_local_experts: experts, num_experts_per_tok: 2 } : {}) } };
}

/* shards of about equal bytes, tensors in order; each file = 8-byte header length, the JSON
** header (padded with spaces to 8 bytes), then the data, which are left as a hole */
function writeCheckpoint(dir, kind, nShards) {
  const { list, config } = tensors(kind);
  const bytes = list.map(([, s]) => s.reduce((a, b) => a * b, 1) * 2);
  const total = bytes.reduce((a, b) => a + b, 0);
  const shards = [];
  let cur = [], acc = 0;
  list.forEach((t, i) => {
    cur.push(i); acc += bytes[i];
    if (acc >= (total / nShards) * (shards.length + 1) && shards.length < nShards - 1) { shards.push(cur); cur = []; }
  });
  if (cur.length) shards.push(cur);
  const weightMap = {};
  shards.forEach((idx, k) => {
    const file = "model-" + String(k + 1).padStart(5, "0") + "-of-" + String(shards.length).padStart(5, "0") + ".safetensors";
    const hdr = { __metadata__: { format: "pt" } };
    let off = 0;
    for (const i of idx) { hdr[list[i][0]] = { dtype: "BF16", shape: list[i][1], data_offsets: [off, off + bytes[i]] }; off += bytes[i]; weightMap[list[i][0]] = file; }
    let json = JSON.stringify(hdr);
    json += " ".repeat((8 - (json.length % 8)) % 8);
    const head = Buffer.alloc(8 + json.length);
    head.writeBigUInt64LE(BigInt(json.length), 0);
    head.write(json, 8, "utf8");
    const fd = fs.openSync(path.join(dir, file), "w");
    fs.writeSync(fd, head);
    fs.ftruncateSync(fd, head.length + off);   // the data: a hole
    fs.closeSync(fd);
  });
  fs.writeFileSync(path.join(dir, "model.safetensors.index.json"), JSON.stringify({ metadata: { total_size: total }, weight_map: weightMap }, null, 1));
  fs.writeFileSync(path.join(dir, "config.json"), JSON.stringify(config, null, 1));
  return { tensors: list.length, shards: shards.length, bytes: total };
}

const med = (a) => { const s = [...a].sort((x, y) => x - y); return s[Math.floor(s.length / 2)]; };
const scratch = fs.mkdtempSync(path.join(process.env.TM_SCRATCH || os.tmpdir(), "tm_bench_paint_"));
const ckpt = path.join(scratch, "ckpt");
fs.mkdirSync(ckpt);
const info = writeCheckpoint(ckpt, shape, 30);
let disk = 0;
for (const f of fs.readdirSync(ckpt)) disk += fs.statSync(path.join(ckpt, f)).blocks * 512;
console.log(shape + ": " + info.tensors + " tensors, " + info.shards + " shards, " + (info.bytes / 1e9).toFixed(1) + " GB apparent, " +
  (disk / 1e6).toFixed(1) + " MB on disk (" + ckpt + ")");
const ctx = await chromiumApi.launchPersistentContext(path.join(scratch, "profile"), { executablePath: process.env.TM_CHROMIUM || "/usr/bin/chromium",
  headless: true, viewport: { width: 1440, height: 900 }, args: ["--no-sandbox", "--disable-gpu"] });
const rows = [];
try {
  const page = ctx.pages()[0] || await ctx.newPage();
  for (let i = 0; i < N; i++) {
    const t0 = Date.now();   // wall clock: the page's performance.timeOrigin is one too
    const server = spawn(bin, ["serve", ckpt, "--port", "0", "-q"], { stdio: ["ignore", "pipe", "inherit"] });
    try {
      const url = await new Promise((resolve, reject) => {
        let b = "";
        server.stdout.on("data", (d) => { b += d; const m = b.match(/^(http:\S+)\n/); if (m) resolve(m[1]); });
        server.on("exit", (c) => reject(new Error("tensormorph serve exited with " + c)));
      });
      const tListen = Date.now() - t0;
      await page.goto(url);
      await page.waitForSelector("body[data-loaded='1']", { timeout: 120000 });
      const r = await page.evaluate(() => {
        const fcp = performance.getEntriesByName("first-contentful-paint")[0];
        return { origin: performance.timeOrigin, fcp: fcp ? fcp.startTime : NaN, loaded: performance.now() };
      });
      // the Heatmap view's tensor list: rows in the DOM against the tensors it lists
      await page.click("#tab-heat");
      const list = await page.evaluate(() => {
        const box = document.querySelector("#tensor-rows");
        return { dom_rows: box ? box.querySelectorAll(".trow").length : -1 };
      });
      rows.push({ listen: tListen, fcp: r.origin + r.fcp - t0, loaded: r.origin + r.loaded - t0, dom_rows: list.dom_rows });
      console.log("run " + (i + 1) + ": listening " + tListen + " ms, first contentful paint " + rows[i].fcp.toFixed(0) +
        " ms, page loaded " + rows[i].loaded.toFixed(0) + " ms after the spawn; list rows in the DOM: " + list.dom_rows);
    } finally {
      server.kill("SIGTERM");
      await new Promise((r) => { if (server.exitCode !== null) r(); else server.on("exit", r); });
    }
  }
  console.log(shape + " (" + info.tensors + " tensors, " + info.shards + " shards, " + (info.bytes / 1e9).toFixed(0) + " GB sparse), median of " + N +
    ": listening " + med(rows.map((r) => r.listen)) + " ms, first contentful paint " + med(rows.map((r) => r.fcp)).toFixed(0) +
    " ms, page loaded " + med(rows.map((r) => r.loaded)).toFixed(0) + " ms after `tensormorph serve` starts");
} finally {
  await ctx.close();
  if (!process.env.TM_KEEP) fs.rmSync(scratch, { recursive: true, force: true });
}
