// convert_kld.mjs MODULES REF.gguf CAND.gguf: llama.cpp (node-llama-cpp, CPU, no build or
// download) evaluates the same tokens with both models and prints one JSON line: the number of
// positions, the vocabulary size, the largest KL divergence sum p_ref*log(p_ref/p_cand) over the
// whole vocabulary and the largest |p_ref - p_cand| (test_convert.c: a converted checkpoint
// against gguf-py's conversion of the same weights must give 0 for both).
import path from "node:path";
import { pathToFileURL } from "node:url";

const [mods, refPath, candPath] = process.argv.slice(2);
const { getLlama } = await import(pathToFileURL(path.join(mods, "node-llama-cpp/dist/index.js")).href);
const llama = await getLlama({ gpu: false, build: "never", logLevel: "error" });
const text = "Once upon a time, there was a little girl named Lily. She loved to play outside in the park.";

async function dists(modelPath) {
    const model = await llama.loadModel({ modelPath });
    const tokens = [model.tokens.bos, ...model.tokenize(text)];
    const ctx = await model.createContext({ contextSize: 128, batchSize: 128, flashAttention: false, threads: 1 });
    const seq = ctx.getSequence();
    const out = await seq.controlledEvaluate(tokens.map((t) => [t, { generateNext: { probabilities: true } }]));
    const res = out.map((o) => o.next.probabilities);
    const vocab = res[0].size;
    await ctx.dispose();
    await model.dispose();
    return { res, tokens, vocab };
}

const a = await dists(refPath), b = await dists(candPath);
if (a.tokens.join(",") !== b.tokens.join(",")) throw new Error("the two models tokenize the text differently");
let maxKld = 0, maxDp = 0;
for (let i = 0; i < a.res.length; i++) {
    let kld = 0;
    for (const [tok, p] of a.res[i]) {
        const q = b.res[i].get(tok) ?? 0;
        if (p > 0) kld += p * Math.log(p / q);
        maxDp = Math.max(maxDp, Math.abs(p - q));
    }
    maxKld = Math.max(maxKld, kld);
}
console.log(JSON.stringify({ positions: a.res.length, vocab: a.vocab, max_kld: maxKld, max_abs_dp: maxDp }));
