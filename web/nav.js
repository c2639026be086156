/* nav.js: navigation of the Tensormorph web UI (loaded last; uses app.js's $, el, api, state,
** switchView, natCmp, showError and heatmap.js). Deep links in the URL hash
**   #view=heatmap&tensor=NAME&index=I,J&mode=groups
** (names URL-encoded; view one of architecture heatmap qdiff calibration release) that survive a
** reload and can be shared; the test hooks (each view's root data-view, each tab data-tab); dark
** mode (prefers-color-scheme, and a toggle remembered in localStorage); the tensor list of the
** Heatmap view: natural order (layer 2 before 10), a filter that counts, virtualised rows so a
** checkpoint of 10k+ tensors stays fast, keyboard (arrows, Home/End, Enter opens) and the
** tensor field (Enter opens the tensor named, or the first match). */
"use strict";

const nav = (() => {
  /* the page's internal view ids and the names of the URL and the test hooks */
  const NAMES = { arch: "architecture", heat: "heatmap", qdiff: "qdiff", calib: "calibration", release: "release" };
  const IDS = Object.fromEntries(Object.entries(NAMES).map(([k, v]) => [v, k]));
  const ROW_H = 22;
  let names = [], shown = [], active = -1, current = "arch", applying = false;

  /* ---- test hooks and tabs ---- */
  function hooks() {
    for (const b of document.querySelectorAll(".tab")) {
      b.setAttribute("data-tab", NAMES[b.dataset.view] || b.dataset.view);
      b.setAttribute("role", "tab");
    }
    for (const s of document.querySelectorAll("section.view")) {
      const id = s.id.replace(/^view-/, "");
      if (NAMES[id] && !s.hasAttribute("data-view")) s.setAttribute("data-view", NAMES[id]);
    }
    const navEl = document.querySelector("header nav");
    if (navEl) navEl.setAttribute("role", "tablist");
  }
  /* views built later (calib.js, release.js build theirs at load) get their hooks too */
  new MutationObserver(hooks).observe(document.querySelector("main"), { childList: true });

  /* ---- dark mode ---- */
  const media = window.matchMedia ? window.matchMedia("(prefers-color-scheme: dark)") : null;
  function theme() {
    const saved = localStorage.getItem("tm-theme");
    return saved === "dark" || saved === "light" ? saved : (media && media.matches ? "dark" : "light");
  }
  function applyTheme() {
    const t = theme();
    document.documentElement.setAttribute("data-theme", t);
    const b = $("#theme-toggle");
    if (b) { b.textContent = t === "dark" ? "Light" : "Dark"; b.setAttribute("aria-pressed", String(t === "dark")); }
    if (state.heat) { heatmap.show(); }
  }
  function themeButton() {
    const b = el("button", { id: "theme-toggle", class: "tab", type: "button", title: "switch between the dark and the light theme (default: the system's)" });
    b.addEventListener("click", () => { localStorage.setItem("tm-theme", theme() === "dark" ? "light" : "dark"); applyTheme(); });
    const header = document.querySelector("header");
    header.append(b);
    if (media && media.addEventListener) media.addEventListener("change", applyTheme);
    applyTheme();
  }

  /* ---- the URL hash ---- */
  function parseHash() {
    const p = new URLSearchParams(location.hash.replace(/^#/, ""));
    return { view: p.get("view"), tensor: p.get("tensor"), index: p.get("index"), mode: p.get("mode") };
  }
  function update() {
    if (applying) return;
    const p = new URLSearchParams();
    p.set("view", NAMES[current] || current);
    if (current === "heat" && state.heat) {
      p.set("tensor", state.heat.name);
      p.set("mode", state.heat.mode);
      if (state.selected) p.set("index", heatmap.coordsOf(state.selected.r, state.selected.c).join(","));
    } else if (current === "heat" && $("#tensor").value) p.set("tensor", $("#tensor").value);
    const h = "#" + p.toString();
    if (location.hash !== h) history.replaceState(null, "", h);
  }
  async function applyHash() {
    const h = parseHash();
    const v = IDS[h.view] || (h.view && NAMES[h.view] ? h.view : null);
    if (!v) return;
    applying = true;
    try {
      switchView(v);
      if (v === "heat" && h.tensor) {
        const idx = h.index ? h.index.split(",").map(Number) : null;
        await heatmap.open(h.tensor, h.mode || undefined, { index: idx && idx.every(Number.isInteger) ? idx : null });
      }
    } finally { applying = false; }
    update();
  }

  /* ---- the tensor list ---- */
  function filter(q) {
    q = q.trim().toLowerCase();
    shown = q ? names.filter((n) => n.toLowerCase().includes(q)) : names;
    $("#tensor-count").textContent = (q ? shown.length + " of " + names.length : names.length) + " tensors";
    active = shown.length ? 0 : -1;
    const box = $("#tensor-rows");
    box.scrollTop = 0;
    box.querySelector(".spacer").style.height = shown.length * ROW_H + "px";
    renderRows();
  }
  function renderRows() {
    const box = $("#tensor-rows"), spacer = box.querySelector(".spacer");
    for (const r of [...box.querySelectorAll(".trow")]) r.remove();
    const first = Math.max(0, Math.floor(box.scrollTop / ROW_H) - 5);
    const last = Math.min(shown.length, first + Math.ceil((box.clientHeight || 400) / ROW_H) + 10);
    const cur = state.heat ? state.heat.name : null;
    for (let i = first; i < last; i++) {
      const n = shown[i], t = state.tensors.get(n);
      const r = el("div", { class: "trow" + (i === active ? " active" : "") + (n === cur ? " current" : ""), role: "option", id: "trow-" + i,
                            "data-name": n, "aria-selected": String(i === active), title: n + (t && t.quantization ? "  \u2014 " + t.quantization.label : "") });
      r.textContent = n;
      r.style.top = i * ROW_H + "px";
      r.addEventListener("click", () => { active = i; openName(n); });
      spacer.append(r);
    }
    if (active >= 0) box.setAttribute("aria-activedescendant", "trow-" + active); else box.removeAttribute("aria-activedescendant");
  }
  function moveActive(d) {
    if (!shown.length) return;
    active = Math.max(0, Math.min(shown.length - 1, active + d));
    const box = $("#tensor-rows"), y = active * ROW_H;
    if (y < box.scrollTop) box.scrollTop = y;
    else if (y + ROW_H > box.scrollTop + box.clientHeight) box.scrollTop = y + ROW_H - box.clientHeight;
    renderRows();
  }
  function openName(n) {
    $("#tensor").value = n;
    heatmap.open(n).then(() => renderRows());
  }
  function listKeys(ev) {
    const k = ev.key;
    if (k === "ArrowDown") moveActive(1);
    else if (k === "ArrowUp") moveActive(-1);
    else if (k === "PageDown") moveActive(10);
    else if (k === "PageUp") moveActive(-10);
    else if (k === "Home" && ev.currentTarget.id === "tensor-rows") moveActive(-shown.length);
    else if (k === "End" && ev.currentTarget.id === "tensor-rows") moveActive(shown.length);
    else if (k === "Enter") {
      const typed = $("#tensor").value;
      /* the field: an exact name opens (even one the list lacks: the API says why it fails) */
      if (ev.currentTarget.id === "tensor" && (state.tensors.has(typed) || !shown.length)) openName(typed);
      else if (active >= 0) openName(shown[active]);
    } else return;
    ev.preventDefault();
  }

  async function start() {
    hooks();
    names = [...state.tensors.keys()].sort(natCmp);
    const input = $("#tensor");
    input.addEventListener("input", () => filter(input.value));
    input.addEventListener("keydown", listKeys);
    $("#tensor-rows").addEventListener("keydown", listKeys);
    $("#tensor-rows").addEventListener("scroll", renderRows);
    filter("");
    window.addEventListener("hashchange", () => { if (!applying) applyHash(); });
    await applyHash();
  }

  /* switchView tells us which view is open (app.js calls nav.viewChanged) */
  function viewChanged(v) {
    current = v;
    $("#error").hidden = true;   /* a message belongs to the view it came from */
    if (v === "heat") syncActive();
    update();
  }
  /* the list's active row follows the tensor on screen */
  function syncActive() {
    const i = state.heat ? shown.indexOf(state.heat.name) : -1;
    if (i >= 0 && i !== active) { active = i; moveActive(0); } else renderRows();
  }

  hooks();
  themeButton();
  return { start, update: () => { update(); if (current === "heat") syncActive(); }, viewChanged, names: () => names };
})();
