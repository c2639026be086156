// load_probs.mjs NODE_MODULES MODEL.gguf: llama.cpp (node-llama-cpp, CPU, no build or download)
// loads MODEL (the first file of a gguf-split set finds the others itself) and prints, as one
// JSON line, the model's tensor count and the next-token probabilities after a fixed prompt:
// tests/cli/gguf_split.sh compares them between a single GGUF and its split files.
import path from 'node:path';
import { pathToFileURL } from 'node:url';
const [nm, model] = process.argv.slice(2);
const lib = await import(pathToFileURL(path.join(nm, 'node-llama-cpp', 'dist', 'index.js')).href);
const llama = await lib.getLlama({ gpu: false, build: 'never', logLevel: 'error', progressLogs: false });
const m = await llama.loadModel({ modelPath: model, gpuLayers: 0 });
const ctx = await m.createContext({ contextSize: 64, batchSize: 64, threads: 1, flashAttention: false, sequences: 1 });
const seq = ctx.getSequence();
const toks = m.tokenize('Once upon a time, there was a little', false);
const input = toks.map((t, i) => (i === toks.length - 1 ? [t, { generateNext: { probabilities: true } }] : t));
const res = await seq.controlledEvaluate(input);
const pr = res[toks.length - 1].next.probabilities;
const top = [...pr.entries()].sort((a, b) => b[1] - a[1]).slice(0, 8);
console.log(JSON.stringify({ n_tokens: toks.length, top }));
process.exit(0);
