/* scalar.js: the Scalar Inspector of the Tensormorph web UI (loaded after app.js; uses its $,
** el, fmt6, fmtNum, numCell). Shows GET /api/v1/scalar's document, the numbers of
** `tensormorph scalar --json`, for the element selected in the heatmap: index, code, container
** word, scale, zero point, group, the formula that produced the value for the tensor's layout
** (K-quants d·sc·q − dmin·m, Q*_1 d·q + m, IQ codebook entry and sign bit, affine (q − zp)·scale,
** ...) with each of its terms, the value and, with --ref, the source value and the error (also
** in LSB). Every cell carries data-field (tests rely on these names); numbers show six
** significant digits, their full value on hover (title) and in what is copied (data-full). */
"use strict";

const scalar = (() => {
  function hint(text) { $("#inspector-hint").textContent = text; }

  function clear() {
    state.selected = null;
    $("#inspector-table tbody").textContent = "";
    hint("Click an element of the heatmap (or move to it with shift+arrows).");
    $("#inspector").removeAttribute("data-flat");
    $("#hover").textContent = "\u00a0";
  }

  function fail(e) {
    $("#inspector-table tbody").textContent = "";
    $("#inspector").removeAttribute("data-flat");
    hint(String(e && e.message ? e.message : e));
    showError(e);
  }

  function row(label, cell, field) {
    cell.setAttribute("data-field", field);
    return el("tr", {}, el("th", { scope: "row", text: label }), cell);
  }
  function text(v) { return el("td", { text: String(v) }); }

  function render(d) {
    const rows = [
      row("tensor", text(d.tensor), "tensor"),
      row("index", text("[" + d.index.join(", ") + "]"), "index"),
      row("flat index", text(d.flat_index), "flat_index"),
      row("dtype", text(d.dtype), "dtype"),
    ];
    if (d.quantized) {
      rows.push(row("scheme", el("td", { text: d.label, title: d.description || "" }), "label"));
      const hex = "0x" + BigInt.asUintN(64, BigInt(d.stored)).toString(16).padStart(d.stored_bits / 4, "0");
      rows.push(row("code q", numCell(d.code), "code"), row("container word", text(hex + " (" + d.stored_bits + "-bit)"), "stored"),
                row("scale", numCell(d.scale), "scale"), row("zero point", numCell(d.zero_point), "zero_point"),
                row("group", numCell(d.group), "group"));
      if (d.ggml) {
        const twoLevels = d.formula && ["sc", "s", "dmin"].some((k) => k in d.formula.terms);  /* super-block types */
        rows.push(row("block", text(d.ggml.type + " block " + d.ggml.block + (twoLevels ? ", sub-block " + d.ggml.sub_block : "")), "block"));
      }
      if (d.formula) {
        const f = d.formula;
        rows.push(row("formula", el("td", { class: "formula", text: f.symbolic, title: f.note }), "formula"));
        for (const [k, v] of Object.entries(f.terms)) rows.push(row("\u2003" + k, numCell(v), "term:" + k));
        rows.push(row("numbers", el("td", { class: "formula", text: "= " + f.numeric, "data-full": f.numeric }), "formula_numeric"));
        rows.push(row("where", el("td", { class: "muted", text: f.note }), "formula_note"));
      }
    }
    rows.push(row("value", numCell(d.value), "value"));
    if (d.ref_value !== null && d.ref_value !== undefined) {
      rows.push(row("source value", numCell(d.ref_value), "source_value"), row("error", numCell(d.error), "error"));
      if (d.error_lsb !== null) rows.push(row("error (LSB)", numCell(d.error_lsb), "error_lsb"));
    } else if (d.note) rows.push(row("source", el("td", { class: "muted", text: d.note }), "note"));
    const tb = $("#inspector-table tbody");
    tb.textContent = "";
    tb.append(...rows);
    hint(d.quantized ? "The formula is the one that produced the value; hover a number for its full precision." : "Not quantized: the stored value.");
    $("#inspector").setAttribute("data-flat", String(d.flat_index));
  }

  /* Copy: full-precision numbers (data-full) of the selected cells, one "field<TAB>value" a line. */
  document.addEventListener("copy", (ev) => {
    const sel = window.getSelection();
    if (!sel || sel.isCollapsed) return;
    const cells = [...document.querySelectorAll("#inspector td[data-field]")].filter((td) => sel.containsNode(td, true));
    if (!cells.length) return;
    const lines = cells.map((td) => (cells.length > 1 ? td.dataset.field + "\t" : "") + (td.dataset.full !== undefined ? td.dataset.full : td.textContent));
    ev.clipboardData.setData("text/plain", lines.join("\n"));
    ev.preventDefault();
  });

  return { render, clear, fail };
})();
