// main.js: entry of the Architecture diagram bundle (esbuild -> /arch.js, CMakeLists.txt): mounts
// the diagram into the Architecture view (#view-arch, index.html) once the page is there. The
// table of app.js stays one click away ("Table"). window.tmArch is the handle tests and the
// benchmark (bench/arch_layout.mjs) read: the view, its timings and the diagram model.
import { ArchView } from "./view.js";
import { onnxDiagram, blockDiagram } from "./model.js";
import { layoutDiagram } from "./layout.js";

function start() {
  const sec = document.getElementById("view-arch");
  if (!sec) return;
  const view = new ArchView(sec);
  window.tmArch = { view, onnxDiagram, blockDiagram, layoutDiagram };
  view.load();
}
if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", start);
else start();
