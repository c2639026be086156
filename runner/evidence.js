#!/usr/bin/env node
/*
 * evidence.js: the Node.js runner behind `tensormorph evidence` (docs/evidence.md).
 *
 *   node evidence.js JOB.json
 *
 * Runs ONE ONNX model on ONNX Runtime's CPU execution provider (npm package onnxruntime-node)
 * under the protocol the C side froze in JOB.json, and writes what it measured; all numerics
 * (percentiles, drift, operator counts) are computed by tensormorph in C.
 *
 * JOB.json (written by src/job/evidence.c):
 *   {"node_modules": DIR holding onnxruntime-node, "model": PATH, "threads": T, "warmup": W,
 *    "runs": R, "out_dir": DIR, "samples": [{"id": "s0", "inputs": {"<input name>": "x.npy"}}]}
 * Session options: intraOpNumThreads T, interOpNumThreads 1, graphOptimizationLevel 'all',
 * executionProviders ['cpu'] (logSeverityLevel 4). Per sample: W untimed runs, then R runs each timed with
 * performance.now() around session.run; the outputs of the last run are written as
 * OUT_DIR/<sample index>_<output index>.npy (NumPy format 1.0, little-endian, C order).
 * OUT_DIR/result.json:
 *   {"runtime_version": "1.30.0", "node": "v20...", "output_names": [...],
 *    "samples": [{"latency_ms": [R numbers], "outputs": {"<output name>": "0_0.npy"}}],
 *    "peak_rss_bytes": process.resourceUsage().maxRSS (KiB) * 1024}
 * Describe mode, JOB.json {"node_modules": DIR, "describe": [MODEL, ...], "out_file": PATH}:
 * load each model with the same session options and write to PATH
 *   {"runtime_version": "1.30.0", "node": "v20...",
 *    "models": [{"model": MODEL, "inputs": [input names], "outputs": [output names]}]}
 * (the feeds ONNX Runtime requires; tensormorph reads their types and shapes itself).
 * Input .npy files must be NumPy format 1.0-3.0, little-endian (or byte-order-free), C order:
 * the C side writes them so.
 * Progress: lines "progress DONE TOTAL" on stdout (TOTAL = samples * (W + R)).
 * Errors: one line on stderr "evidence.js: <what>: <reason>", exit status 3 when the model or
 * an input is refused (ONNX Runtime's message kept), 4 on I/O, 5 when onnxruntime-node cannot
 * be loaded, 2 for a malformed job.
 */
'use strict';
const fs = require('fs');
const path = require('path');
const { performance } = require('perf_hooks');

function die(code, msg) {
  process.stderr.write('evidence.js: ' + String(msg).replace(/\s*\n\s*/g, ' | ') + '\n');
  process.exit(code);
}

/* dtype string of a .npy header <-> ONNX Runtime tensor type and typed array */
const NPY_TYPES = {
  '<f4': ['float32', Float32Array], '<f8': ['float64', Float64Array],
  '<f2': ['float16', Uint16Array], '|i1': ['int8', Int8Array], '|u1': ['uint8', Uint8Array],
  '<i2': ['int16', Int16Array], '<u2': ['uint16', Uint16Array], '<i4': ['int32', Int32Array],
  '<u4': ['uint32', Uint32Array], '<i8': ['int64', BigInt64Array],
  '<u8': ['uint64', BigUint64Array], '|b1': ['bool', Uint8Array],
};
const ORT_TO_DESCR = {};
for (const [descr, [t]] of Object.entries(NPY_TYPES)) ORT_TO_DESCR[t] = descr;
/* byte-order-free aliases NumPy also writes */
NPY_TYPES['<i1'] = NPY_TYPES['|i1'];
NPY_TYPES['<u1'] = NPY_TYPES['|u1'];
NPY_TYPES['<b1'] = NPY_TYPES['|b1'];

/* Read a .npy (NumPy format spec, versions 1.0-3.0) into an ORT tensor. */
function readNpy(ort, file) {
  let buf;
  try { buf = fs.readFileSync(file); } catch (e) { die(4, file + ': ' + e.message); }
  if (buf.length < 10 || buf[0] !== 0x93 || buf.toString('latin1', 1, 6) !== 'NUMPY')
    die(3, file + ': not a .npy file (bad magic)');
  const major = buf[6];
  let hlen, hstart;
  if (major === 1) { hlen = buf.readUInt16LE(8); hstart = 10; }
  else if (major === 2 || major === 3) {
    if (buf.length < 12) die(3, file + ': truncated header');
    hlen = buf.readUInt32LE(8); hstart = 12;
  } else die(3, file + ': unsupported .npy version ' + major);
  if (hstart + hlen > buf.length) die(3, file + ': header length ' + hlen + ' runs past the end of the file');
  const header = buf.toString(major === 3 ? 'utf8' : 'latin1', hstart, hstart + hlen);
  const descr = /'descr'\s*:\s*'([^']*)'/.exec(header);
  const fortran = /'fortran_order'\s*:\s*(True|False)/.exec(header);
  const shape = /'shape'\s*:\s*\(([^)]*)\)/.exec(header);
  if (!descr || !fortran || !shape) die(3, file + ': header is not a NumPy header dict: ' + header.trim());
  if (fortran[1] === 'True') die(3, file + ': fortran_order True is not supported here (tensormorph writes C order)');
  const t = NPY_TYPES[descr[1]];
  if (!t) die(3, file + ': dtype ' + descr[1] + ' is not supported by the runner');
  const dims = shape[1].split(',').map((s) => s.trim()).filter((s) => s.length).map(Number);
  if (dims.some((d) => !Number.isInteger(d) || d < 0)) die(3, file + ': bad shape (' + shape[1] + ')');
  const n = dims.reduce((a, b) => a * b, 1);
  const start = hstart + hlen;
  const nbytes = n * t[1].BYTES_PER_ELEMENT;
  if (start + nbytes > buf.length)
    die(3, file + ': data needs ' + nbytes + ' bytes at byte ' + start + ', the file has ' + (buf.length - start));
  const ab = buf.buffer.slice(buf.byteOffset + start, buf.byteOffset + start + nbytes);
  return new ort.Tensor(t[0], new t[1](ab), dims);
}

/* Write an ORT output tensor as .npy version 1.0, C order, little-endian. */
function writeNpy(file, tensor) {
  const descr = ORT_TO_DESCR[tensor.type];
  if (!descr) die(3, 'output of type ' + tensor.type + ' cannot be compared (numeric outputs only)');
  const dims = tensor.dims;
  const shape = dims.length === 0 ? '()' : dims.length === 1 ? '(' + dims[0] + ',)' : '(' + dims.join(', ') + ')';
  let h = "{'descr': '" + descr + "', 'fortran_order': False, 'shape': " + shape + ', }';
  const total = 10 + h.length + 1;
  h += ' '.repeat((64 - (total % 64)) % 64) + '\n';
  const head = Buffer.alloc(10);
  head[0] = 0x93; head.write('NUMPY', 1, 'latin1'); head[6] = 1; head[7] = 0;
  head.writeUInt16LE(h.length, 8);
  const d = tensor.data;
  const body = Buffer.from(d.buffer, d.byteOffset, d.byteLength);
  try { fs.writeFileSync(file, Buffer.concat([head, Buffer.from(h, 'latin1'), body])); }
  catch (e) { die(4, file + ': ' + e.message); }
}

function loadOrt(nodeModules) {
  try {
    const dir = path.join(nodeModules, 'onnxruntime-node');
    return { ort: require(dir), version: require(path.join(dir, 'package.json')).version };
  } catch (e) {
    return die(5, 'cannot load onnxruntime-node from ' + nodeModules + ': ' + e.message.split('\n')[0]);
  }
}

async function openSession(ort, model, threads) {
  /* logSeverityLevel 4 (fatal only): ONNX Runtime's own log lines would bury the one-line
   * error below; its exceptions carry the same message */
  const options = {
    intraOpNumThreads: threads, interOpNumThreads: 1, graphOptimizationLevel: 'all',
    executionProviders: ['cpu'], logSeverityLevel: 4,
  };
  try { return await ort.InferenceSession.create(model, options); }
  catch (e) { return die(3, model + ': ONNX Runtime cannot load the model: ' + e.message); }
}

async function describe(job) {
  if (!Array.isArray(job.describe) || job.describe.some((m) => typeof m !== 'string') || typeof job.out_file !== 'string')
    die(2, process.argv[2] + ': "describe" must be an array of model paths and "out_file" a string');
  const { ort, version } = loadOrt(job.node_modules);
  const models = [];
  for (const model of job.describe) {
    const session = await openSession(ort, model, 1);
    models.push({ model, inputs: session.inputNames, outputs: session.outputNames });
  }
  try { fs.writeFileSync(job.out_file, JSON.stringify({ runtime_version: version, node: process.version, models })); }
  catch (e) { die(4, job.out_file + ': ' + e.message); }
}

async function main() {
  if (process.argv.length !== 3) die(2, 'usage: node evidence.js JOB.json');
  let job;
  try { job = JSON.parse(fs.readFileSync(process.argv[2], 'utf8')); }
  catch (e) { die(2, process.argv[2] + ': ' + e.message); }
  if (typeof job.node_modules !== 'string') die(2, process.argv[2] + ': "node_modules" must be a string');
  if (job.describe !== undefined) return describe(job);
  for (const k of ['node_modules', 'model', 'out_dir'])
    if (typeof job[k] !== 'string') die(2, process.argv[2] + ': "' + k + '" must be a string');
  for (const k of ['threads', 'warmup', 'runs'])
    if (!Number.isInteger(job[k]) || job[k] < (k === 'warmup' ? 0 : 1)) die(2, process.argv[2] + ': bad "' + k + '"');
  if (!Array.isArray(job.samples) || job.samples.length < 1) die(2, process.argv[2] + ': "samples" must be a non-empty array');

  const { ort, version } = loadOrt(job.node_modules);
  const session = await openSession(ort, job.model, job.threads);

  const total = job.samples.length * (job.warmup + job.runs);
  let done = 0;
  const samples = [];
  for (let si = 0; si < job.samples.length; si++) {
    const s = job.samples[si];
    const feeds = {};
    for (const name of session.inputNames) {
      if (!s.inputs || typeof s.inputs[name] !== 'string')
        die(3, job.model + ': sample "' + s.id + '" has no tensor for model input "' + name + '"');
      feeds[name] = readNpy(ort, s.inputs[name]);
    }
    const lat = [];
    let out;
    for (let r = 0; r < job.warmup + job.runs; r++) {
      const t0 = performance.now();
      try { out = await session.run(feeds); }
      catch (e) { die(3, job.model + ': sample "' + s.id + '": ONNX Runtime run failed: ' + e.message); }
      const t1 = performance.now();
      if (r >= job.warmup) lat.push(t1 - t0);
      done++;
      process.stdout.write('progress ' + done + ' ' + total + '\n');
    }
    const files = {};
    session.outputNames.forEach((name, oi) => {
      const f = si + '_' + oi + '.npy';
      writeNpy(path.join(job.out_dir, f), out[name]);
      files[name] = f;
    });
    samples.push({ latency_ms: lat, outputs: files });
  }
  const result = {
    runtime_version: version, node: process.version, output_names: session.outputNames, samples,
    peak_rss_bytes: process.resourceUsage().maxRSS * 1024,
  };
  try { fs.writeFileSync(path.join(job.out_dir, 'result.json'), JSON.stringify(result)); }
  catch (e) { die(4, job.out_dir + '/result.json: ' + e.message); }
}

main().catch((e) => die(5, 'unexpected: ' + (e && e.stack ? e.stack : e)));
