// sens.js: a `tensormorph sensitivity` result (docs/sensitivity.md) for the Architecture
// diagram, no DOM: normalizeSensitivity reads the document (tensormorph.sensitivity/1, as the
// command writes it) or serve's /api/v1/arch "sensitivity" field (docs/API.md) into one shape;
// sensScale is the colour scale of the measured KLD.

/* Returns {units: [{name, rank, kld_mean_only, kld_mean_all_but, weight_sqnr_db, tensors,
** scheme}], plan (the plan object without its steps, or null), form, unit, scheme, spearman};
** throws an Error naming what is wrong. */
export function normalizeSensitivity(raw) {
  if (!raw || typeof raw !== "object" || Array.isArray(raw)) throw new Error("not a JSON object");
  if (raw.schema !== undefined && raw.schema !== "tensormorph.sensitivity/1")
    throw new Error("schema is " + JSON.stringify(raw.schema) + ", not tensormorph.sensitivity/1");
  if (raw.probe) throw new Error("a --probe " + raw.probe.i + "/" + raw.probe.n + " part: combine the parts with `tensormorph sensitivity merge` first");
  if (!Array.isArray(raw.units) || !raw.units.length) throw new Error("no units");
  const plan = raw.plan && typeof raw.plan === "object" ? Object.assign({}, raw.plan) : null;
  if (plan) delete plan.steps;
  const as = (plan && plan.assignments) || {};
  const units = raw.units.map((u, i) => {
    if (!u || typeof u.name !== "string") throw new Error("units[" + i + "] has no name");
    if (!Array.isArray(u.tensors)) throw new Error("unit " + u.name + " has no tensors");
    return {
      name: u.name, rank: Number.isInteger(u.rank) ? u.rank : null,
      kld_mean_only: typeof u.kld_mean_only === "number" ? u.kld_mean_only : null,
      kld_mean_all_but: typeof u.kld_mean_all_but === "number" ? u.kld_mean_all_but : null,
      weight_sqnr_db: typeof u.weight_sqnr_db === "number" ? u.weight_sqnr_db : null,
      tensors: u.tensors.filter((t) => typeof t === "string"),
      scheme: u.scheme !== undefined && u.scheme !== null ? u.scheme : (as[u.name] !== undefined ? as[u.name] : null),
    };
  });
  return { units, plan, form: raw.form || null, unit: raw.unit || null, scheme: raw.scheme || null,
    spearman: typeof raw.spearman_weight_vs_kld === "number" ? raw.spearman_weight_vs_kld : null };
}

/* Sequential colour ramp, light (least sensitive) to dark (most): relative luminance falls
** strictly along it, so the order of the colours is the order of the KLDs, in either theme.
** Stops chosen by hand (yellow - orange - red - purple). */
const STOPS = [[255, 247, 188], [254, 196, 79], [236, 112, 20], [189, 34, 56], [84, 13, 84]];

function mix(t) {
  const x = Math.max(0, Math.min(1, t)) * (STOPS.length - 1), i = Math.min(STOPS.length - 2, Math.floor(x)), f = x - i;
  return STOPS[i].map((c, k) => Math.round(c + (STOPS[i + 1][k] - c) * f));
}
/* WCAG relative luminance of an sRGB triple. */
export function luminance(rgb) {
  const l = rgb.map((c) => { c /= 255; return c <= 0.03928 ? c / 12.92 : Math.pow((c + 0.055) / 1.055, 2.4); });
  return 0.2126 * l[0] + 0.7152 * l[1] + 0.0722 * l[2];
}

/* The scale over the units' kld_mean_only: log when every value is > 0 and they span a factor of
** 10 or more, else linear. Returns {lo, hi, log, t(v), rgb(v), css(v), dark(v) (white text
** reads better), gradient (CSS), ticks [v]}. */
export function sensScale(units) {
  const v = units.map((u) => u.kld_mean_only).filter((x) => typeof x === "number" && isFinite(x));
  const lo = v.length ? Math.min(...v) : 0, hi = v.length ? Math.max(...v) : 1;
  const log = lo > 0 && hi / lo >= 10;
  const t = (x) => {
    if (!(hi > lo)) return 0.5;
    return log ? (Math.log(x) - Math.log(lo)) / (Math.log(hi) - Math.log(lo)) : (x - lo) / (hi - lo);
  };
  const rgb = (x) => mix(t(x));
  const css = (x) => "rgb(" + rgb(x).join(",") + ")";
  const ticks = hi > lo ? [lo, log ? Math.sqrt(lo * hi) : (lo + hi) / 2, hi] : [lo];
  const gradient = "linear-gradient(to right, " + STOPS.map((c, i) => "rgb(" + c.join(",") + ") " + Math.round((100 * i) / (STOPS.length - 1)) + "%").join(", ") + ")";
  return { lo, hi, log, t, rgb, css, dark: (x) => luminance(rgb(x)) < 0.18, gradient, ticks };   // dark: white text (black above 0.18: >= 4.5:1 either way)
}

/* Three significant digits (the legend, the node), e.g. 0.0105, 3.49e-5. */
export function fmtNum(x) {
  if (typeof x !== "number" || !isFinite(x)) return "-";
  if (x === 0) return "0";
  const a = Math.abs(x);
  return a >= 1e-3 && a < 1e4 ? String(Number(x.toPrecision(3))) : x.toExponential(2);
}
