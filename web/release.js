/* release.js: the Release page of the Tensormorph web UI. Loaded after app.js and uses its
** helpers ($, api, el, showError). Shows the release gate's verdict for the inputs serve was
** started with (serve --manifest M --evidence E --policy P [--target T] [--canary F]
** [--rollback PATH]): GET /api/v1/release returns exactly `tensormorph gate --json`'s document
** (docs/gate.md), so the page shows the same verdict, every check with pass/fail, its reason
** and the evidence values it used. app.js's switchView calls releasePage.show() when the tab
** opens; "Run again" re-reads the files. LLM evidence (the document's "llm") adds, per slice, a
** KLD histogram (bars per decade bin) with the slice's mean/p99 KLD, same top-1 and PPL ratio,
** and the table of the worst positions (context, next token, both models' top tokens). */
"use strict";

const releasePage = (() => {
  const COLORS = { pass: "#1a7f37", fail: "#b42318", not_run: "#8a6d00", skipped: "#667085" };
  let built = false, seq = 0;

  function build() {
    if (built) return;
    built = true;
    const sec = viewSection("view-release");
    const bar = el("div", { class: "toolbar" },
      el("button", { id: "release-rerun", title: "read the manifest, evidence and policy again and re-run every check" }, "Run again"),
      el("span", { id: "release-status", class: "muted" }));
    const verdict = el("div", { id: "release-verdict", "data-verdict": "" });
    verdict.style.fontSize = "20px";
    verdict.style.fontWeight = "700";
    verdict.style.margin = "8px 0";
    const inputs = el("p", { id: "release-inputs", class: "hint" });
    const tbl = el("table", { id: "release-checks" },
      el("thead", {}, el("tr", {}, ...["status", "check", "reason", "evidence"].map((h) => el("th", { text: h })))),
      el("tbody"));
    tbl.style.borderCollapse = "collapse";
    tbl.style.background = "#fff";
    tbl.style.fontSize = "13px";
    tbl.style.width = "100%";
    const reasons = el("ol", { id: "release-reasons" });
    const llm = el("div", { id: "release-llm" });
    const reasonsHead = el("h3", { id: "release-reasons-head", text: "Reasons" });
    sec.append(bar, verdict, inputs, tbl, reasonsHead, reasons, llm);
    $("main").insertBefore(sec, $("#error"));
    $("#release-rerun").addEventListener("click", run);
  }

  function cell(text) {
    const td = el("td", { text });
    td.style.borderTop = "1px solid #e4e7ec";
    td.style.padding = "4px 8px";
    td.style.verticalAlign = "top";
    return td;
  }

  function evidenceCell(ev) {
    const td = cell("");
    const keys = ev && typeof ev === "object" ? Object.keys(ev) : [];
    if (!keys.length) return td;
    const pre = el("pre", { class: "release-evidence", text: JSON.stringify(ev, null, 1) });
    pre.style.margin = "0";
    pre.style.maxHeight = "160px";
    pre.style.overflow = "auto";
    pre.style.fontSize = "11px";
    const det = el("details", {}, el("summary", { text: keys.slice(0, 4).join(", ") + (keys.length > 4 ? ", ..." : "") }), pre);
    td.append(det);
    return td;
  }

  function render(d) {
    const v = $("#release-verdict");
    const tb = $("#release-checks tbody");
    tb.textContent = "";
    $("#release-reasons").textContent = "";
    /* nothing to gate: say what to do, no empty table or headings over nothing */
    $("#release-checks").hidden = !d.configured;
    $("#release-reasons-head").hidden = !d.configured || !d.reasons.length;
    if (!d.configured) {
      v.dataset.verdict = "none";
      v.textContent = "No release inputs";
      v.style.color = "#667085";
      $("#release-inputs").textContent = "To see a release verdict here: " + (d.hint || "start serve with --manifest M --evidence E --policy P") +
        " (the evidence comes from tensormorph evidence; docs/gate.md).";
      return;
    }
    v.dataset.verdict = d.verdict;
    v.textContent = d.verdict + " \u2014 " + d.n_failed + " of " + d.n_checks + " checks failed" +
      (d.exit_code === 3 ? " (an input could not be parsed)" : "") + (d.target ? " \u2014 target " + d.target : "");
    v.style.color = d.verdict === "PASS" ? COLORS.pass : COLORS.fail;
    const inp = d.inputs || {};
    $("#release-inputs").textContent = "manifest " + inp.manifest + " \u00b7 evidence " + inp.evidence + " \u00b7 policy " + inp.policy +
      (inp.rollback ? " \u00b7 rollback " + inp.rollback : "") + (inp.canary != null ? " \u00b7 canary " + inp.canary : "");
    for (const c of d.checks) {
      const st = cell(c.status.toUpperCase().replace("_", " "));
      st.style.color = COLORS[c.status] || "#000";
      st.style.fontWeight = "600";
      st.dataset.field = "status";
      const name = cell(c.name);
      name.dataset.field = "name";
      const reason = cell(c.reason);
      reason.dataset.field = "reason";
      const tr = el("tr", { "data-check": c.name, "data-status": c.status }, st, name, reason, evidenceCell(c.evidence));
      if (c.status === "fail") tr.style.background = "#fff1f0";
      tb.append(tr);
    }
    for (const r of d.reasons) $("#release-reasons").append(el("li", { text: r }));
    renderLlm(d.llm);
  }

  const fmt = (x, n) => (x == null ? "null" : Number(x).toPrecision(n || 4));

  /* per slice: a bar per KLD bin (height ~ count), then the worst positions */
  function renderLlm(llm) {
    const box = $("#release-llm");
    box.textContent = "";
    if (!llm) return;
    box.append(el("h3", { text: "LLM evidence: KL divergence per slice" }));
    const hist = llm.histogram || {};
    for (const name of Object.keys(llm.slices || {})) {
      const s = llm.slices[name], h = hist[name];
      const fig = el("div", { class: "llm-slice", "data-slice": name });
      fig.append(el("div", { text: name + ": mean KLD " + fmt(s.kld && s.kld.mean) + ", p99 " + fmt(s.kld && s.kld.p99) +
        ", same top-1 " + (s.same_top1 == null ? "null" : (100 * s.same_top1).toFixed(2) + "%") + ", PPL ratio " + fmt(s.ppl_ratio, 5) +
        ", " + s.scored_tokens + " tokens" + (s.nan_positions ? ", " + s.nan_positions + " NaN positions" : "") }));
      if (h && h.counts) {
        const max = Math.max(1, ...h.counts);
        const bars = el("div", { class: "llm-hist" });
        bars.style.display = "flex";
        bars.style.alignItems = "flex-end";
        bars.style.height = "80px";
        bars.style.gap = "2px";
        h.counts.forEach((c, i) => {
          const lo = h.edges[i], hi = h.edges[i + 1];
          const b = el("div", { class: "llm-bar", title: "KLD " + (i + 1 < h.edges.length ? "[" + lo + ", " + hi + ")" : ">= " + lo) + ": " + c, "data-count": String(c) });
          b.style.width = "28px";
          b.style.height = Math.round(76 * c / max) + 2 + "px";
          b.style.background = "#3b82f6";
          bars.append(b);
        });
        fig.append(bars, el("div", { class: "hint", text: "bins: " + h.edges.map((e) => e === 0 ? "0" : e.toExponential(0)).join(" | ") + " and above" }));
      }
      box.append(fig);
    }
    const w = llm.worst || [];
    if (!w.length) return;
    box.append(el("h3", { text: "Worst positions" }));
    const tops = (t) => (t || []).map((x) => JSON.stringify(x.text) + " " + x.p.toFixed(3)).join(", ");
    const tbl = el("table", { id: "release-worst" },
      el("thead", {}, el("tr", {}, ...["KLD", "slice", "position", "context", "next", "baseline top", "candidate top"].map((h) => el("th", { text: h })))),
      el("tbody", {}, ...w.map((x) => el("tr", { "data-position": String(x.position) }, cell(fmt(x.kld)), cell(x.slice), cell(String(x.position)),
        cell(x.context), cell(JSON.stringify(x.next || "")), cell(tops(x.base_top)), cell(tops(x.cand_top))))));
    tbl.style.borderCollapse = "collapse";
    tbl.style.background = "#fff";
    tbl.style.fontSize = "12px";
    box.append(tbl);
  }

  async function run() {
    const my = ++seq;
    $("#release-status").textContent = "running the gate\u2026";
    try {
      const d = await api("/api/v1/release");
      if (my !== seq) return;
      render(d);
      $("#release-status").textContent = "";
      $("#release-verdict").dataset.ready = "1";
    } catch (e) {
      $("#release-status").textContent = e.message;
      showError(e);
    }
  }

  async function show() {
    build();
    await run();
  }

  build();
  return { show, run };
})();
