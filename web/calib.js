/* calib.js: the Calibration Lab page of the Tensormorph web UI. Loaded after app.js and uses its
** helpers ($, api, el, showError, fmtNum, fmtShort). Picks a tensor of the served checkpoint (or
** the samples given with serve --samples), asks GET /api/v1/calibrate (docs/API.md) for one
** observer's range, scale, zero point, clipped tails, SQNR and probe values (the `tensormorph calibrate --json` numbers, shown unrounded),
** and draws the values' histogram with the chosen range and the representable range marked and
** the clipped tails shaded. app.js's switchView calls calibLab.show() when the tab opens. */
"use strict";

const calibLab = (() => {
  const OBSERVERS = ["minmax", "ema_minmax", "histogram", "percentile", "percentile:99.99", "percentile:99.9",
                     "percentile:99", "mse", "entropy"];
  const ALL = ["minmax", "ema_minmax", "histogram", "percentile", "mse", "entropy"];   /* calibrate --observer all */
  const ALL_FIELDS = ["observer", "range_min", "range_max", "scale", "zero_point", "clipped_fraction", "sqnr_db"];
  const FIELDS = ["observer", "range_min", "range_max", "scale", "zero_point", "rounding_bound",
                  "clipped_fraction", "clipped_mean_excess", "clipped_max_excess", "sqnr_db"];
  let built = false, loaded = false, seq = 0, last = null;

  function select(id, options, label) {
    const s = el("select", { id });
    for (const o of options) s.append(el("option", { value: o, text: o }));
    return el("label", {}, label + " ", s);
  }

  function build() {
    if (built) return;
    built = true;
    const sec = viewSection("view-calib");
    const bar = el("div", { class: "toolbar" },
      el("label", {}, "Tensor ", el("select", { id: "calib-tensor" })),
      select("calib-observer", OBSERVERS, "Observer"),
      select("calib-convention", ["onnx", "torch"], "Convention"),
      select("calib-type", ["int8", "uint8", "int4", "uint4"], "Type"),
      el("label", {}, el("input", { id: "calib-symmetric", type: "checkbox", checked: "" }), " symmetric"),
      el("label", { title: "real values to follow through quantization, comma-separated" }, "Probes ",
        el("input", { id: "calib-probes", value: "0.1, -0.25", size: "24", autocomplete: "off" })),
      el("button", { id: "calib-all-run", type: "button", title: "every observer with these options, side by side (tensormorph calibrate ... --observer all)" }, "Compare all observers"),
      el("span", { id: "calib-status", class: "muted" }));
    const hint = el("p", { class: "hint", text: "Histogram of the tensor's values (dequantized for a quantized tensor). " +
      "Dashed blue: the range the observer chose; solid: the representable range [(qmin-zp)*scale, (qmax-zp)*scale]; " +
      "red: clipped tails (beyond it by more than scale/2). The numbers are those of tensormorph calibrate --json." });
    const cv = el("canvas", { id: "calib-hist", width: "900", height: "300" });
    cv.style.width = "100%";
    cv.style.maxWidth = "900px";
    cv.style.height = "300px";
    cv.style.background = "#fff";
    cv.style.border = "1px solid #dde";
    cv.style.display = "block";
    const tbl = el("table", { id: "calib-table" }, el("tbody"));
    const ptbl = el("table", { id: "calib-probe-table" },
      el("thead", {}, el("tr", {}, ...["real", "code", "dequantized", "error"].map((h) => el("th", { text: h })))),
      el("tbody"));
    for (const t of [tbl, ptbl]) { t.style.borderCollapse = "collapse"; t.style.background = "#fff"; t.style.marginTop = "8px"; t.style.fontSize = "13px"; }
    const all = el("table", { id: "calib-all" }, el("thead", {}, el("tr", {}, ...ALL_FIELDS.map((h) => el("th", { text: h })))), el("tbody"));
    all.style.borderCollapse = "collapse"; all.style.background = "#fff"; all.style.marginTop = "8px"; all.style.fontSize = "13px";
    const allBox = el("div", { id: "calib-all-box" }, el("h3", { text: "All observers, side by side" }),
      el("p", { class: "hint", id: "calib-all-hint", text: "Press \u201cCompare all observers\u201d to run minmax, ema_minmax, histogram, percentile, mse and entropy with the options above (tensormorph calibrate TENSOR --observer all)." }), all);
    sec.append(bar, hint, cv, el("h3", { text: "Observer" }), tbl, el("h3", { text: "Probes" }), ptbl, allBox);
    $("main").insertBefore(sec, $("#error"));
    for (const id of ["#calib-tensor", "#calib-observer", "#calib-convention", "#calib-type", "#calib-symmetric", "#calib-probes"])
      $(id).addEventListener("change", run);
    $("#calib-all-run").addEventListener("click", runAll);
  }

  async function loadTensors() {
    if (loaded) return;
    const ins = await api("/api/v1/inspect");
    const sel = $("#calib-tensor");
    for (const t of ins.tensors) {
      if (t.role !== "data") continue;
      if (!t.quantization && !/^(F|BF)/.test(t.dtype)) continue;   /* float or quantized only */
      sel.append(el("option", { value: t.name, text: t.name + (t.quantization ? " (" + t.quantization.label + ")" : ""), title: t.quantization ? t.quantization.description : "" }));
    }
    /* serve --samples: offered first, and chosen */
    const sm = await api("/api/v1/calibrate?samples=list");
    if (sm.samples.length) {
      const o = el("option", { value: "", "data-samples": "1", text: "samples: " + sm.samples.join(" ") });
      sel.prepend(o);
      o.selected = true;
    }
    loaded = true;
  }

  /* every observer of `calibrate --observer all`, one request each, one row each */
  async function runAll() {
    const my = ++seq, tb = $("#calib-all tbody");
    tb.textContent = "";
    $("#calib-all").dataset.ready = "0";
    $("#calib-status").textContent = "calibrating with every observer...";
    try {
      const docs = [];
      for (const o of ALL) docs.push(await api(query(o)));
      if (my !== seq) return;
      for (const d of docs) {
        const o = d.observers[0];
        tb.append(el("tr", { "data-observer": o.observer }, ...ALL_FIELDS.map((f) => f === "observer" ? el("td", { "data-field": f, text: o.observer })
          : numCell(o[f], { "data-field": f }))));
      }
      const best = docs.reduce((a, d) => (d.observers[0].sqnr_db > a.observers[0].sqnr_db ? d : a));
      $("#calib-all-hint").textContent = "Highest SQNR: " + best.observers[0].observer + " (" + fmt6(best.observers[0].sqnr_db) + " dB).";
      $("#calib-all").dataset.ready = "1";
      $("#calib-status").textContent = "";
    } catch (e) {
      if (my === seq) { $("#calib-status").textContent = e.message; showError(e); }
    }
  }

  function query(observer) {
    const probes = $("#calib-probes").value.split(",").map((s) => s.trim()).filter((s) => s.length);
    const sel = $("#calib-tensor"), opt = sel.selectedOptions[0];
    const p = new URLSearchParams({
      observer: observer || $("#calib-observer").value,
      convention: $("#calib-convention").value, type: $("#calib-type").value,
      symmetric: $("#calib-symmetric").checked ? "1" : "0", hist_bins: "120",
      granularity: "tensor", // the lab draws one histogram: per tensor (the API's default for a weight is channel:0)
    });
    if (opt && opt.dataset.samples) p.set("samples", "1");
    else p.set("tensor", sel.value);
    if (probes.length) p.set("probe", probes.join(","));
    return "/api/v1/calibrate?" + p.toString();
  }

  async function run() {
    const my = ++seq;
    const cv = $("#calib-hist");
    cv.dataset.ready = "0";
    $("#calib-status").textContent = "calibrating...";
    try {
      const d = await api(query());
      if (my !== seq) return;                       /* a newer request is on its way */
      last = d;
      render(d);
      $("#calib-status").textContent = (d.tensor || d.samples.join(" ")) + ": " + d.n_samples + " values, codes [" + d.qmin + ", " + d.qmax + "]";
    } catch (e) {
      if (my === seq) { $("#calib-status").textContent = e.message; showError(e); }
    }
  }

  function render(d) {
    const o = d.observers[0];
    const tb = $("#calib-table tbody");
    tb.textContent = "";
    for (const f of FIELDS) {
      const td = typeof o[f] === "number" ? numCell(o[f], { "data-field": f }) : el("td", { "data-field": f, text: fmtNum(o[f]) });
      td.style.padding = "2px 8px";
      tb.append(el("tr", {}, el("td", { text: f }), td));
    }
    const pb = $("#calib-probe-table tbody");
    pb.textContent = "";
    o.probes.forEach((p, i) => {
      pb.append(el("tr", { "data-probe": String(i) }, ...["real", "code", "dequantized", "error"].map((k) => {
        const td = typeof p[k] === "number" ? numCell(p[k], { "data-field": k }) : el("td", { "data-field": k, text: fmtNum(p[k]) });
        td.style.padding = "2px 8px";
        return td;
      })));
    });
    draw(d);
    const cv = $("#calib-hist");
    cv.dataset.observer = o.observer;
    cv.dataset.scale = String(o.scale);
    cv.dataset.ready = "1";
  }

  function draw(d) {
    const cv = $("#calib-hist");
    const w = Math.max(300, Math.floor(cv.clientWidth || cv.width));
    if (cv.width !== w) cv.width = w;
    const ctx = cv.getContext("2d"), H = cv.height, pad = 20;
    ctx.fillStyle = "#fff";
    ctx.fillRect(0, 0, cv.width, H);
    const o = d.observers[0], h = d.histogram, s = o.scale, zp = o.zero_point;
    const repLo = (d.qmin - zp) * s, repHi = (d.qmax - zp) * s;        /* dequantized end codes */
    const clipLo = repLo - s / 2, clipHi = repHi + s / 2;              /* beyond: clipped */
    const e0 = h.edges[0], e1 = h.edges[h.edges.length - 1];
    let lo = Math.min(e0, repLo, o.range_min), hi = Math.max(e1, repHi, o.range_max);
    const m = (hi - lo) * 0.03 || 1;
    lo -= m; hi += m;
    const X = (v) => pad + (v - lo) / (hi - lo) * (cv.width - 2 * pad);
    const top = 10, base = H - pad;
    cv.dataset.xmin = String(Math.round(X(e0)));   /* canvas x of the smallest sample (tests) */
    /* clipped tails */
    ctx.fillStyle = "rgba(208, 48, 48, 0.18)";
    if (clipLo > lo) ctx.fillRect(X(lo), top, X(clipLo) - X(lo), base - top);
    if (clipHi < hi) ctx.fillRect(X(clipHi), top, X(hi) - X(clipHi), base - top);
    /* bars: sqrt scale so that thin tails stay visible */
    const peak = Math.max(1, ...h.counts);
    for (let k = 0; k < h.counts.length; k++) {
      const c = h.counts[k];
      if (!c) continue;
      const a = h.edges[k], b = h.edges[k + 1];
      const outside = b <= clipLo || a >= clipHi;
      ctx.fillStyle = outside ? "#d03030" : "#4a6fa5";
      const y = base - Math.max(1, Math.sqrt(c / peak) * (base - top));
      ctx.fillRect(X(a), y, Math.max(1, X(b) - X(a) - 0.5), base - y);
    }
    /* axis and marks */
    ctx.strokeStyle = "#889";
    ctx.lineWidth = 1;
    ctx.beginPath(); ctx.moveTo(pad, base + 0.5); ctx.lineTo(cv.width - pad, base + 0.5); ctx.stroke();
    const vline = (v, colour, dash) => {
      ctx.strokeStyle = colour; ctx.lineWidth = 2; ctx.setLineDash(dash);
      ctx.beginPath(); ctx.moveTo(X(v), top); ctx.lineTo(X(v), base); ctx.stroke(); ctx.setLineDash([]);
    };
    vline(repLo, "#1d2330", []);
    vline(repHi, "#1d2330", []);
    vline(o.range_min, "#1a55b0", [5, 4]);
    vline(o.range_max, "#1a55b0", [5, 4]);
    ctx.fillStyle = "#1d2330";
    ctx.font = "12px system-ui, sans-serif";
    ctx.textAlign = "left";
    ctx.fillText(fmtShort(lo), pad, H - 4);
    ctx.textAlign = "right";
    ctx.fillText(fmtShort(hi), cv.width - pad, H - 4);
    ctx.textAlign = "center";
    ctx.fillText("0", X(0), H - 4);
  }

  async function show() {
    build();
    try {
      await loadTensors();
      if (!last && $("#calib-tensor").options.length) await run();
      else if (last) draw(last);
    } catch (e) { showError(e); }
  }

  build();
  return { show, run };
})();
