// recipe.js: the diagram's plan (module or weight -> scheme key) as a recipe for
// `tensormorph quantize --recipe FILE` (docs/recipe.md), no DOM.
//  - checkpoints (compressed-tensors output): "default", "ignore" (excluded modules) and
//    "targets" (first match wins, so deeper module paths first), patterns anchored on the
//    module path: ^<module>(\.|$).
//  - ONNX: one "default" scheme with "include" (the weights given it) and "exclude" (weights
//    excluded): an ONNX recipe holds one scheme, so two different schemes are an error.
//  - GGUF sources (.gguf output): "file_type" (the default, a llama-quantize file type) and
//    "tensor_types" [{pattern "^<tensor>$", type}] in plan order with "tensor_types_exact" (an
//    override applies even where the file type's rules fell back, as sensitivity plans do).
//  - "ct-rules" (a compressed-tensors plan started from a sensitivity plan): "rules" [{pattern
//    "^<tensor>$", ignore, scheme}] in plan order, then {".*", ignore: true} (the rest dense), or
//    "default" (the rest gets it) when one is chosen.
// planFromSensitivity turns a `tensormorph sensitivity --budget` plan (docs/sensitivity.md) into
// such a plan, so that the download gives the plan's own recipe back.

export const SCHEMES = {
  "exclude": { label: "exclude (keep dense)", scheme: null },
  "int8-channel": { label: "int8 channel", scheme: { type: "int8", granularity: "channel", symmetric: true } },
  "int8-tensor": { label: "int8 tensor", scheme: { type: "int8", granularity: "tensor", symmetric: true } },
  "uint8-tensor": { label: "uint8 tensor asym", scheme: { type: "uint8", granularity: "tensor", symmetric: false }, onnxOnly: true },
  "int4-g128": { label: "int4 group:128", scheme: { type: "int4", granularity: "group:128", symmetric: true } },
  "int4-g32": { label: "int4 group:32", scheme: { type: "int4", granularity: "group:32", symmetric: true } },
  "int4-g128-asym": { label: "int4 group:128 asym", scheme: { type: "int4", granularity: "group:128", symmetric: false }, ctOnly: true },
  "fp8": { label: "fp8 e4m3 channel", scheme: { type: "fp8_e4m3", granularity: "channel", symmetric: true }, ctOnly: true },
};

/* ggml tensor types the GGUF plan editor offers per tensor, and llama-quantize file types for
** the default (docs/gguf-quantize.md). */
export const GGUF_TENSOR_TYPES = ["F32", "F16", "BF16", "Q8_0", "Q6_K", "Q5_K", "Q5_1", "Q5_0", "Q4_K", "Q4_1", "Q4_0", "Q3_K", "Q2_K"];
export const GGUF_FILE_TYPES = ["Q2_K", "Q3_K_S", "Q3_K_M", "Q3_K_L", "Q4_0", "Q4_K_S", "Q4_K_M", "Q5_0", "Q5_K_S", "Q5_K_M", "Q6_K", "Q8_0", "F16", "BF16", "F32"];

export function schemesFor(kind) {
  if (kind === "gguf") return GGUF_TENSOR_TYPES.slice();
  return Object.keys(SCHEMES).filter((k) => (kind === "onnx" ? !SCHEMES[k].ctOnly : !SCHEMES[k].onnxOnly));
}

function reEscape(s) { return s.replace(/[.*+?^${}()|[\]\\]/g, "\\$&"); }

/* plan: Map name -> scheme key (module paths for checkpoints, weight tensor names for ONNX).
** Returns {recipe} or {error}. */
export function buildRecipe(kind, plan, defaultKey) {
  if (kind === "onnx") return onnxRecipe(plan, defaultKey);
  if (kind === "gguf") return ggufRecipe(plan, defaultKey);
  if (kind === "ct-rules") return rulesRecipe(plan, defaultKey);
  const r = {};
  if (defaultKey && SCHEMES[defaultKey] && SCHEMES[defaultKey].scheme)
    r.default = Object.assign({ observer: "minmax", convention: "onnx", scale_dtype: "f32" }, SCHEMES[defaultKey].scheme);
  const ignore = [], targets = [];
  const entries = [...plan.entries()].sort((a, b) => b[0].split(".").length - a[0].split(".").length || (a[0] < b[0] ? -1 : 1));
  for (const [path, key] of entries) {
    const pat = "^" + reEscape(path) + "(\\.|$)";
    if (key === "exclude") ignore.push(pat);
    else if (SCHEMES[key] && SCHEMES[key].scheme) targets.push({ pattern: pat, scheme: Object.assign({}, SCHEMES[key].scheme) });
  }
  if (ignore.length) r.ignore = ignore;
  if (targets.length) r.targets = targets;
  return { recipe: r };
}

function onnxRecipe(plan, defaultKey) {
  const r = {};
  const include = [], exclude = [], keys = new Set();
  for (const [name, key] of [...plan.entries()].sort((a, b) => (a[0] < b[0] ? -1 : 1))) {
    if (key === "exclude") exclude.push(reEscape(name));
    else if (SCHEMES[key] && SCHEMES[key].scheme) { include.push(reEscape(name)); keys.add(key); }
  }
  if (keys.size > 1) return { error: "an ONNX recipe holds one scheme: the plan has " + [...keys].join(", ") };
  const key = keys.size ? [...keys][0] : defaultKey;
  if (key && SCHEMES[key] && SCHEMES[key].scheme) r.default = Object.assign({}, SCHEMES[key].scheme);
  if (include.length) r.include = ["^(" + include.join("|") + ")$"];
  if (exclude.length) r.exclude = ["^(" + exclude.join("|") + ")$"];
  return { recipe: r };
}

/* GGUF: plan = Map tensor name -> ggml type, in the order the entries were made. */
function ggufRecipe(plan, fileType) {
  if (!fileType) return { error: "a GGUF recipe needs a file type: choose the default (Q4_K_M, ...)" };
  const r = { format: "gguf", file_type: fileType };
  const tt = [...plan.entries()].map(([name, type]) => ({ pattern: "^" + reEscape(name) + "$", type }));
  if (tt.length) { r.tensor_types = tt; r.tensor_types_exact = true; }
  return { recipe: r };
}

/* "^blk\.0\.attn_q\.weight$" -> "blk.0.attn_q.weight"; null when the pattern is not one exact
** name (then the editor cannot hold it per tensor). */
function exactName(pat) {
  const m = /^\^((?:[^\\.*+?^${}()|[\]]|\\.)*)\$$/.exec(pat || "");
  return m ? m[1].replace(/\\(.)/g, "$1") : null;
}

/* The scheme object of an editor key, with the fields the recipe defaults name (recipe.md). */
export function schemeObject(key) {
  return SCHEMES[key] && SCHEMES[key].scheme ? Object.assign({}, SCHEMES[key].scheme, { observer: "minmax", convention: "onnx", scale_dtype: "f32" }) : null;
}

/* compressed-tensors rules: plan = Map tensor name -> {ignore, scheme}. */
function rulesRecipe(plan, defaultKey) {
  const r = { format: "compressed-tensors" };
  const def = defaultKey ? schemeObject(defaultKey) : null;
  if (def) r.default = def;
  r.rules = [...plan.entries()].map(([name, e]) => (e.ignore ? { pattern: "^" + reEscape(name) + "$", ignore: true } : { pattern: "^" + reEscape(name) + "$", ignore: false, scheme: e.scheme }));
  if (!def) r.rules.push({ pattern: ".*", ignore: true });
  return { recipe: r };
}

function ctRulesPlan(plan) {
  if (!Array.isArray(plan.rules)) return { error: "the plan has neither file_type nor rules" };
  const m = new Map(), rules = plan.rules.slice();
  const last = rules[rules.length - 1];
  if (!last || last.pattern !== ".*" || last.ignore !== true) return { error: "the plan's rules do not end with the rest kept dense (\".*\" ignored)" };
  rules.pop();
  for (const r of rules) {
    const name = exactName(r.pattern);
    if (name === null) return { error: "the plan's rule " + r.pattern + " is not one tensor's exact name" };
    m.set(name, r.ignore ? { ignore: true } : { ignore: false, scheme: r.scheme });
  }
  return { kind: "ct-rules", plan: m, defaultKey: "" };
}

/* A sensitivity plan (the "plan" object of a tensormorph.sensitivity/1 document, or of serve's
** /api/v1/arch "sensitivity") as the editor's plan. Returns {kind, plan, defaultKey} or {error}.
** GGUF: file_type + exact per-tensor tensor_types, one entry per tensor. compressed-tensors: its
** exact per-tensor rules with their scheme objects as written, then the rest dense ("ct-rules"). */
export function planFromSensitivity(form, plan) {
  if (!plan || typeof plan !== "object") return { error: "the sensitivity result has no plan (run it with --budget)" };
  if (form !== "gguf" && !plan.file_type) return ctRulesPlan(plan);
  if (!plan.file_type) return { error: "the plan has no file_type" };
  const m = new Map();
  for (const t of plan.tensor_types || []) {
    const name = exactName(t.pattern);
    if (name === null) return { error: "the plan's tensor_types entry " + t.pattern + " is not one tensor's exact name" };
    m.set(name, t.type);
  }
  if (plan.tensor_types && plan.tensor_types.length && plan.tensor_types_exact === false) return { error: "the plan's tensor_types are not exact" };
  return { kind: "gguf", plan: m, defaultKey: plan.file_type };
}
