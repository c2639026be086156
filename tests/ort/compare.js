#!/usr/bin/env node
// compare.js: run an ONNX model and its quantized form in ONNX Runtime (onnxruntime-node) on
// the same deterministic input and print one JSON document: per output the max |a - b|, the
// relative L2 ||a - b|| / ||a||, and for outputs whose last dim is a class axis the fraction
// of rows whose argmax agrees.
//
//   node compare.js ORIG.onnx QUANT.onnx [--input NAME:TYPE:DIMS[:VALUE]]... [--max-rel-l2 T]
//                   [--max-rel OUTPUT:T]... [--max-abs OUTPUT:T]... [--argmax OUTPUT]...
//
// --input  float32 or int64; DIMS comma separated ("1,3,48,192", "" for a scalar); VALUE fills
//          the tensor with a constant, otherwise float inputs get deterministic broadband values
//          (fill() below). Without --input, dims come from the model's input
//          metadata with symbolic dims set to 1.
// --max-rel-l2 T   exit 1 when some output's relative L2 exceeds T (or is not finite)
// --max-rel OUTPUT:T, --max-abs OUTPUT:T   the same for one output (relative L2, max |a - b|)
// --argmax OUTPUT  exit 1 unless every row's argmax of OUTPUT agrees
// onnxruntime-node comes from $TM_NODE_MODULES, else <source dir>/runner/node_modules (the
// source dir is two levels above this script). Exit 77 when it cannot be loaded.
'use strict';
const path = require('path');

function loadOrt() {
  const dirs = [];
  if (process.env.TM_NODE_MODULES) dirs.push(process.env.TM_NODE_MODULES);
  dirs.push(path.join(__dirname, '..', '..', 'runner', 'node_modules'));
  for (const d of dirs) {
    try {
      return require(path.join(d, 'onnxruntime-node'));
    } catch (e) { /* next */ }
  }
  console.error('SKIP: onnxruntime-node not found in ' + dirs.join(' or '));
  process.exit(77);
}

function parseArgs(argv) {
  const a = { files: [], inputs: [], maxRelL2: null, argmax: [], perRel: {}, perAbs: {} };
  for (let i = 0; i < argv.length; i++) {
    if (argv[i] === '--input') a.inputs.push(argv[++i]);
    else if (argv[i] === '--max-rel-l2') a.maxRelL2 = Number(argv[++i]);
    else if (argv[i] === '--argmax') a.argmax.push(argv[++i]);
    else if (argv[i] === '--max-rel' || argv[i] === '--max-abs') {
      const v = argv[i + 1], k = v.lastIndexOf(':');
      (argv[i] === '--max-rel' ? a.perRel : a.perAbs)[v.slice(0, k)] = Number(v.slice(k + 1));
      i++;
    }
    else a.files.push(argv[i]);
  }
  if (a.files.length !== 2) {
    console.error('usage: compare.js ORIG.onnx QUANT.onnx [--input NAME:TYPE:DIMS[:VALUE]]... [--max-rel-l2 T] [--argmax OUT]');
    process.exit(2);
  }
  return a;
}

// broadband: a fixed 32-bit LCG (Numerical Recipes constants) in [-0.5, 0.5) plus a slow tone,
// so every frequency bin and every channel sees signal
function fill(n) {
  const v = new Float32Array(n);
  let x = 12345;
  for (let i = 0; i < n; i++) {
    x = (Math.imul(x, 1664525) + 1013904223) >>> 0;
    v[i] = 0.6 * (x / 4294967296 - 0.5) + 0.2 * Math.sin(0.013 * i);
  }
  return v;
}

function makeFeeds(ort, session, specs) {
  const feeds = {};
  if (specs.length) {
    for (const s of specs) {
      const [name, type, dimsStr, value] = s.split(':');
      const dims = dimsStr === '' ? [] : dimsStr.split(',').map(Number);
      const n = dims.reduce((x, y) => x * y, 1);
      if (type === 'int64') {
        const v = new BigInt64Array(n).fill(BigInt(value === undefined ? 0 : value));
        feeds[name] = new ort.Tensor('int64', v, dims);
      } else {
        const v = value === undefined ? fill(n) : new Float32Array(n).fill(Number(value));
        feeds[name] = new ort.Tensor('float32', v, dims);
      }
    }
    return feeds;
  }
  for (const m of session.inputMetadata) {
    const dims = m.shape.map((d) => (typeof d === 'number' && d > 0 ? d : 1));
    const n = dims.reduce((x, y) => x * y, 1);
    feeds[m.name] = new ort.Tensor('float32', fill(n), dims);
  }
  return feeds;
}

function stats(a, b, dims) {
  let maxAbs = 0, se = 0, sa = 0, finite = true;
  for (let i = 0; i < a.length; i++) {
    const x = Number(a[i]), y = Number(b[i]);
    if (!Number.isFinite(x) || !Number.isFinite(y)) finite = false;
    const d = Math.abs(x - y);
    if (d > maxAbs) maxAbs = d;
    se += d * d;
    sa += x * x;
  }
  const rel = sa > 0 ? Math.sqrt(se / sa) : Math.sqrt(se);
  const o = { dims, n: a.length, max_abs_diff: maxAbs, rel_l2: finite ? rel : null, finite };
  const last = dims.length ? dims[dims.length - 1] : 0;
  if (last > 1 && a.length % last === 0) {
    const rows = a.length / last;
    let agree = 0;
    for (let r = 0; r < rows; r++) {
      let ia = 0, ib = 0;
      for (let k = 1; k < last; k++) {
        if (a[r * last + k] > a[r * last + ia]) ia = k;
        if (b[r * last + k] > b[r * last + ib]) ib = k;
      }
      if (ia === ib) agree++;
    }
    o.rows = rows;
    o.argmax_agree = agree / rows;
  }
  return o;
}

async function main() {
  const args = parseArgs(process.argv.slice(2));
  const ort = loadOrt();
  const opts = { graphOptimizationLevel: 'disabled', intraOpNumThreads: 1 };
  const s0 = await ort.InferenceSession.create(args.files[0], opts);
  const s1 = await ort.InferenceSession.create(args.files[1], opts);
  const feeds = makeFeeds(ort, s0, args.inputs);
  const r0 = await s0.run(feeds);
  const r1 = await s1.run(feeds);
  const doc = { schema: 'tensormorph.ort-compare/1', original: args.files[0], quantized: args.files[1],
                ort_version: ort.env && ort.env.versions ? ort.env.versions.common : null, outputs: {} };
  let ok = true;
  const why = [];
  for (const name of s0.outputNames) {
    if (!r1[name]) { ok = false; why.push(name + ': missing from the quantized model'); continue; }
    const st = stats(r0[name].data, r1[name].data, r0[name].dims.map(Number));
    doc.outputs[name] = st;
    if (args.maxRelL2 !== null && !(st.rel_l2 !== null && st.rel_l2 <= args.maxRelL2)) {
      ok = false;
      why.push(`${name}: relative L2 ${st.rel_l2} above ${args.maxRelL2}`);
    }
    if (name in args.perRel && !(st.rel_l2 !== null && st.rel_l2 <= args.perRel[name])) {
      ok = false;
      why.push(`${name}: relative L2 ${st.rel_l2} above ${args.perRel[name]}`);
    }
    if (name in args.perAbs && !(st.finite && st.max_abs_diff <= args.perAbs[name])) {
      ok = false;
      why.push(`${name}: max |a - b| ${st.max_abs_diff} above ${args.perAbs[name]}`);
    }
  }
  for (const name of args.argmax) {
    const st = doc.outputs[name];
    if (!st || st.argmax_agree !== 1) { ok = false; why.push(`${name}: argmax agrees on ${st ? st.argmax_agree : '?'} of rows`); }
  }
  doc.ok = ok;
  doc.failures = why;
  console.log(JSON.stringify(doc, null, 1));
  process.exit(ok ? 0 : 1);
}

main().catch((e) => {
  console.error('compare.js: ' + (e && e.message ? e.message : e));
  process.exit(1);
});
