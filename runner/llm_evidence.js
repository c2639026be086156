#!/usr/bin/env node
/*
 * llm_evidence.js: the Node.js runner behind `tensormorph evidence` for GGUF language models
 * (docs/evidence.md "LLM evidence"). One process per model, as runner/evidence.js.
 *
 *   node llm_evidence.js JOB.json
 *
 * Runs ONE GGUF model on llama.cpp's CPU backend through the npm package node-llama-cpp
 * (pinned to 3.21.1, prebuilt @node-llama-cpp/linux-x64; loaded with
 * getLlama({gpu: false, build: "never"}): never a source build or a download) under the
 * protocol of llama.cpp's `llama-perplexity --kl-divergence`, and writes what it measured; every
 * statistic (KLD, top-1, PPL, percentiles) is computed by tensormorph in C.
 *
 * JOB.json (written by src/job/evidence_llm_run.c):
 *   {"node_modules": DIR holding node-llama-cpp, "model": PATH, "threads": T, "ctx": N,
 *    "chunks": K (0: every full chunk), "gen": G, "warmup": W, "probs": true|false,
 *    "out_dir": DIR, "texts": [{"name": NAME, "file": PATH}, ...]; optional "direct": false;
 *    optional "logits": true with "probs": false (bench/llm_evidence_speed.sh only: the scored
 *    positions' logits computed by llama.cpp as with "probs", no distribution read or written)}
 * Protocol per text: tokenized once with BOS first (model.tokenize(text) after the BOS token,
 * as llama-perplexity's common_tokenize(add_special=true); both only when the vocabulary adds
 * BOS, model.tokens.shouldPrependBosToken); chunk c is tokens [c*N, (c+1)*N) with its first
 * token overwritten by BOS; each chunk is evaluated on a cleared sequence in one
 * batch of N (contextSize N, batchSize N, flashAttention false); positions N/2 .. N-2 ask for
 * the whole next-token distribution (generateNext.probabilities, temperature 0: the softmax of
 * the logits as llama.cpp's sampler computes it, in float). With node-llama-cpp 3.21.1 the
 * scored chunk is evaluated through the same addon calls controlledEvaluate makes (initBatch,
 * addToBatch, decodeBatch, sampleToken(..., probabilities) per scored position), without its
 * per-position JavaScript (bit-identical rows; half the CPU of the probabilities); "direct":
 * false, or any other version, uses controlledEvaluate itself.
 * OUT_DIR/probs.bin (when "probs"): for each text, chunk and scored position in that order,
 * vocab_size little-endian float32 probabilities indexed by token id (N/2-1 rows per chunk).
 * Latency: W untimed evaluations of the first chunk, then, for each chunk, its first N/2 tokens
 * are evaluated as one prompt (timed: prompt_tokens_per_s = tokens / seconds over all chunks)
 * followed by G greedy decode steps each timed with performance.now() (decode_ms); needs
 * G <= N/2. Without G the prompt rate is taken from the scored evaluation.
 * OUT_DIR/result.json:
 *   {"runtime_version": "3.21.1", "node": "v20...", "vocab_size": V, "bos": id,
 *    "vocab": [tokenizer.ggml.tokens], "pieces": [text of each id, detokenized after a token],
 *    "texts": [{"name", "n_tokens", "tokens": [ids, BOS first]}],
 *    "nan_positions": count of scored rows holding a NaN,
 *    "prompt_tokens_per_s": x, "decode_ms": [...], "peak_rss_bytes": maxRSS KiB * 1024}
 * Progress: lines "progress DONE TOTAL" on stdout (chunks evaluated).
 * Errors: one line on stderr "llm_evidence.js: <what>: <reason>", exit status 3 when the model
 * or a text is refused (llama.cpp's message kept; a text shorter than two chunks), 4 on I/O, 5
 * when node-llama-cpp cannot be loaded, 2 for a malformed job.
 */
'use strict';
const fs = require('fs');
const path = require('path');
const { performance } = require('perf_hooks');
const { pathToFileURL } = require('url');

function die(code, msg) {
  process.stderr.write('llm_evidence.js: ' + String(msg).replace(/\s*\n\s*/g, ' | ') + '\n');
  process.exit(code);
}

function readJob(file) {
  let job;
  try { job = JSON.parse(fs.readFileSync(file, 'utf8')); } catch (e) { die(2, file + ': ' + e.message); }
  for (const k of ['node_modules', 'model', 'out_dir'])
    if (typeof job[k] !== 'string') die(2, file + ': "' + k + '" must be a string');
  for (const k of ['threads', 'ctx', 'chunks', 'gen', 'warmup'])
    if (!Number.isInteger(job[k]) || job[k] < 0) die(2, file + ': "' + k + '" must be an integer >= 0');
  if (job.ctx < 4 || job.ctx % 2) die(2, file + ': "ctx" must be even and >= 4');
  if (job.gen > job.ctx / 2) die(2, file + ': "gen" must be <= ctx/2');
  if (!Array.isArray(job.texts) || job.texts.length < 1) die(2, file + ': "texts" must be a non-empty array');
  return job;
}

async function main() {
  if (process.argv.length !== 3) die(2, 'usage: node llm_evidence.js JOB.json');
  const job = readJob(process.argv[2]);
  const pkgDir = path.join(job.node_modules, 'node-llama-cpp');
  let lib, version;
  try {
    version = JSON.parse(fs.readFileSync(path.join(pkgDir, 'package.json'), 'utf8')).version;
    lib = await import(pathToFileURL(path.join(pkgDir, 'dist', 'index.js')).href);
  } catch (e) { die(5, 'cannot load node-llama-cpp from ' + pkgDir + ': ' + e.message); }
  let llama;
  try {
    llama = await lib.getLlama({ gpu: false, build: 'never', logLevel: 'error', progressLogs: false });
  } catch (e) { die(5, 'node-llama-cpp has no usable prebuilt CPU binary: ' + e.message); }
  let model;
  try {
    model = await llama.loadModel({ modelPath: job.model, gpuLayers: 0 });
  } catch (e) { die(3, job.model + ': llama.cpp cannot load the model: ' + e.message); }
  const N = job.ctx, first = N / 2;
  const bos = model.tokens.bos;
  if (bos == null) die(3, job.model + ': the model has no BOS token (llama-perplexity needs one)');
  /* llama-perplexity: common_tokenize(add_special) prepends BOS, and each chunk's first token is
   * BOS, only when the vocabulary says to add it (tokenizer.ggml.add_bos_token) */
  const addBos = model.tokens.shouldPrependBosToken;
  const meta = model.fileInfo && model.fileInfo.metadata && model.fileInfo.metadata.tokenizer &&
    model.fileInfo.metadata.tokenizer.ggml;
  const vocab = meta && Array.isArray(meta.tokens) ? meta.tokens.map(String) : null;
  if (!vocab) die(3, job.model + ': no tokenizer.ggml.tokens array');
  const V = vocab.length;
  /* each token's text as it reads after another token (a leading space kept: SPM tokenizers
   * drop it at the start of a text) */
  const after = model.tokenize('a', false).slice(-1);
  const pieces = [];
  for (let i = 0; i < V; i++) pieces.push(model.detokenize([i], false, after));

  const texts = [];
  for (const t of job.texts) {
    let s;
    try { s = fs.readFileSync(t.file, 'utf8'); } catch (e) { die(4, t.file + ': ' + e.message); }
    const toks = addBos ? [bos, ...model.tokenize(s, false)] : model.tokenize(s, false);
    const full = Math.floor(toks.length / N);
    if (full < 2)
      die(3, t.file + ': text too short: ' + toks.length + ' tokens (with BOS), two chunks of ctx ' + N + ' need ' + 2 * N);
    const n = job.chunks > 0 ? Math.min(job.chunks, full) : full;
    texts.push({ name: t.name, tokens: toks, chunks: n });
  }
  let context;
  try {
    context = await model.createContext({ contextSize: N, batchSize: N, threads: job.threads || 1,
      flashAttention: false, sequences: 1 });
  } catch (e) { die(3, job.model + ': llama.cpp cannot create a context of ' + N + ': ' + e.message); }
  const seq = context.getSequence();
  let fd = null;
  if (job.probs) {
    try { fd = fs.openSync(path.join(job.out_dir, 'probs.bin'), 'w'); } catch (e) { die(4, e.message); }
  }
  const total = texts.reduce((a, t) => a + t.chunks, 0);
  let done = 0, nan = 0, evalMs = 0, evalTok = 0;
  /* one chunk's rows, written with one call */
  const rows = new Float32Array((N - 1 - first) * V);
  const rowsBuf = Buffer.from(rows.buffer);
  const chunkOf = (t, c) => { const a = t.tokens.slice(c * N, (c + 1) * N); if (addBos) a[0] = bos; return a; };
  for (let w = 0; w < job.warmup; w++) {
    await seq.clearHistory();
    await seq.controlledEvaluate(chunkOf(texts[0], 0));
  }
  /* The scored evaluation straight on node-llama-cpp 3.21.1's addon (the calls controlledEvaluate
   * makes, without its per-position JS: the sampler config resolved and applied once, not per
   * position; no Map of each distribution; the flat [id, p, id, p, ...] array read as it comes).
   * Same native calls, same batch (N tokens, outputs at positions first..N-2), same greedy
   * sampler and softmax, so the same float32 rows. Only for the pinned version, whose internals
   * these are (context._ctx, sequence._sequenceId, LlamaSampler._sampler); any other version, or
   * "direct": false in the job, takes controlledEvaluate. */
  const direct = (job.probs || job.logits === true) && job.direct !== false && version === '3.21.1' && context._ctx &&
    typeof context._ctx.sampleToken === 'function' && typeof context._ctx.addToBatch === 'function' &&
    Number.isInteger(seq._sequenceId) && typeof seq._resolveSamplerConfig === 'function';
  let sampler = null;
  const outIdx = Uint32Array.from({ length: N - 1 - first }, (_, k) => first + k);
  async function scoredDirect(chunk) {
    const ctx = context._ctx, id = seq._sequenceId;
    ctx.initBatch(N);
    const bl = ctx.addToBatch(id, 0, Uint32Array.from(chunk), outIdx);
    await ctx.decodeBatch();
    for (let k = 0; k < bl.length && job.probs; k++) {
      const r = await ctx.sampleToken(bl[k], sampler._sampler, true, false);
      const pr = r && r[1], o = k * V;
      let bad = !pr;
      if (pr) for (let j = 1; j < pr.length; j += 2) {
        const t = pr[j - 1], v = pr[j];
        if (t >= 0 && t < V) rows[o + t] = v;
        if (!(v === v)) bad = true;
      }
      if (bad) { rows.fill(NaN, o, o + V); nan++; }
    }
    if (!ctx.removeTokenCellsFromSequence(id, 0, N)) throw new Error('llama.cpp cannot clear the sequence after a chunk');
  }
  if (direct) {
    const { LlamaSampler } = await import(pathToFileURL(path.join(pkgDir, 'dist', 'evaluator', 'LlamaContext', 'LlamaSampler.js')).href);
    sampler = new LlamaSampler(model);
    sampler.applyConfig(seq._resolveSamplerConfig({}));
  }
  const decodeMs = [];
  let promptMs = 0, promptTok = 0;
  for (const t of texts) {
    for (let c = 0; c < t.chunks; c++) {
      const chunk = chunkOf(t, c);
      await seq.clearHistory();
      const t0 = performance.now();
      if (direct) {
        if (job.probs) rows.fill(0);
        try { await scoredDirect(chunk); } catch (e) { die(3, job.model + ': evaluation failed: ' + e.message); }
        evalMs += performance.now() - t0;
        if (job.probs) fs.writeSync(fd, rowsBuf);
      } else {
        const input = chunk.map((tok, i) =>
          (job.probs && i >= first && i <= N - 2) ? [tok, { generateNext: { probabilities: true } }] : tok);
        let res;
        try { res = await seq.controlledEvaluate(input); } catch (e) { die(3, job.model + ': evaluation failed: ' + e.message); }
        evalMs += performance.now() - t0;
        if (job.probs) {
          rows.fill(0);
          for (let i = first; i <= N - 2; i++) {
            const pr = res[i] && res[i].next && res[i].next.probabilities;
            const o = (i - first) * V;
            let bad = !pr;
            if (pr) for (const [k, v] of pr) { if (k >= 0 && k < V) rows[o + k] = v; if (!(v === v)) bad = true; }
            if (bad) { rows.fill(NaN, o, o + V); nan++; }
          }
          fs.writeSync(fd, rowsBuf);
        }
      }
      evalTok += N;
      if (job.gen > 0) {
        await seq.clearHistory();
        const t1 = performance.now();
        const pre = await seq.controlledEvaluate(chunk.slice(0, first - 1).concat([[chunk[first - 1], { generateNext: { token: true } }]]));
        promptMs += performance.now() - t1;
        promptTok += first;
        let next = pre[first - 1] && pre[first - 1].next ? pre[first - 1].next.token : null;
        for (let g = 0; g < job.gen; g++) {
          if (next == null) next = bos;
          const t2 = performance.now();
          const r = await seq.controlledEvaluate([[next, { generateNext: { token: true } }]]);
          decodeMs.push(performance.now() - t2);
          next = r[0] && r[0].next ? r[0].next.token : null;
        }
      }
      done++;
      process.stdout.write('progress ' + done + ' ' + total + '\n');
    }
  }
  if (fd !== null) fs.closeSync(fd);
  const result = {
    runtime_version: version, node: process.version, vocab_size: V, bos,
    vocab, pieces,
    texts: texts.map(t => ({ name: t.name, n_tokens: t.tokens.length, chunks: t.chunks, tokens: t.tokens })),
    nan_positions: nan,
    prompt_tokens_per_s: job.gen > 0 ? promptTok / (promptMs / 1000) : evalTok / (evalMs / 1000),
    decode_ms: decodeMs,
    peak_rss_bytes: process.resourceUsage().maxRSS * 1024,
  };
  try { fs.writeFileSync(path.join(job.out_dir, 'result.json'), JSON.stringify(result)); } catch (e) { die(4, e.message); }
  if (sampler) sampler.dispose();
  await context.dispose();
  await model.dispose();
  process.exit(0);
}

main().catch(e => die(3, e && e.stack ? e.stack : e));
