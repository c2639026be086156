// recipe.js: the diagram's plan (module or weight -> scheme key) as a recipe for
// `tensormorph quantize --recipe FILE` (docs/recipe.md), no DOM.
//  - checkpoints (compressed-tensors output): "default", "ignore" (excluded modules) and
//    "targets" (first match wins, so deeper module paths first), patterns anchored on the
//    module path: ^<module>(\.|$).
//  - ONNX: one "default" scheme with "include" (the weights given it) and "exclude" (weights
//    excluded): an ONNX recipe holds one scheme, so two different schemes are an error.

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

export function schemesFor(kind) {
  return Object.keys(SCHEMES).filter((k) => (kind === "onnx" ? !SCHEMES[k].ctOnly : !SCHEMES[k].onnxOnly));
}

function reEscape(s) { return s.replace(/[.*+?^${}()|[\]\\]/g, "\\$&"); }

/* plan: Map name -> scheme key (module paths for checkpoints, weight tensor names for ONNX).
** Returns {recipe} or {error}. */
export function buildRecipe(kind, plan, defaultKey) {
  if (kind === "onnx") return onnxRecipe(plan, defaultKey);
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
