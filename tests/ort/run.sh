#!/bin/bash
# tests/ort/run.sh: `tensormorph quantize X.onnx -o Y.onnx` checked in ONNX Runtime
# (onnxruntime-node, tests/ort/compare.js): the quantized model loads, and on the same
# deterministic input its outputs stay close to the original's. Also checks which opset
# strategy each model takes, the refusal of int4 blocks on an opset-9 model, and qdiff.
#
# Tolerances (relative L2 of an output unless said otherwise; observed values in brackets,
# onnxruntime-node 1.30.0):
#   PaddleOCR cls  (opset 9, Constant-node Conv/MatMul weights, int8 per-channel,
#                   com.microsoft)          rel L2 <= 0.10 [0.022], argmax agrees on every row
#   PaddleOCR rec v4 (opset 9, com.microsoft)  rel L2 <= 0.10 [0.018], argmax agrees on every row
#   silero VAD v5  (opset 16, Constant nodes in If subgraphs, native)
#                   speech probability |diff| <= 0.02 [0.007], state rel L2 <= 0.15 [0.066]
#   generated MatMul, opset 21, int4 group:32 (DequantizeLinear block_size) rel L2 <= 0.15 [0.10]
#   generated MatMul + Softmax, opset 9 (com.microsoft)   rel L2 <= 0.02 [0.001], argmax agrees
#   generated MatMul + Relu, opset 9 (opset raised to 13) rel L2 <= 0.02 [0.003]
#   generated float16 Conv weight, opset 13 (DequantizeLinear + Cast)  rel L2 <= 0.02
#
# Needs node and onnxruntime-node ($TM_NODE_MODULES or <source>/runner/node_modules): without
# them it exits 77 (skipped) unless TM_REQUIRE_ORT=1 or TM_REQUIRE_SHARED=1. Without ../shared
# the real models are skipped with a message (a failure with TM_REQUIRE_SHARED=1).
set -u
HERE="$(cd "$(dirname "$0")" && pwd)"
SRC="${TM_SRC:-$HERE/../..}"
BIN="${TM_BIN:-$SRC/build/tensormorph}"
GEN="${TM_GEN_MODELS:-${TM_BUILD:-$SRC/build}/test_onnx_quantize}"
COMPARE="$HERE/compare.js"
required=0
[ "${TM_REQUIRE_ORT:-0}" = 1 ] && required=1
[ "${TM_REQUIRE_SHARED:-0}" = 1 ] && required=1

skip_or_fail() {
    if [ "$required" = 1 ]; then echo "FAIL: $1 (TM_REQUIRE_ORT/TM_REQUIRE_SHARED set)"; exit 1; fi
    echo "SKIP: $1"
    exit 77
}
command -v node >/dev/null 2>&1 || skip_or_fail "node not found"
NM="${TM_NODE_MODULES:-$SRC/runner/node_modules}"
node -e "require(process.argv[1] + '/onnxruntime-node')" "$NM" >/dev/null 2>&1 ||
    skip_or_fail "onnxruntime-node not found in $NM (set TM_NODE_MODULES)"
[ -x "$BIN" ] || { echo "FAIL: tensormorph binary $BIN not found"; exit 1; }
[ -x "$GEN" ] || { echo "FAIL: model generator $GEN (test_onnx_quantize) not found"; exit 1; }

TMP="$(mktemp -d /tmp/tm_ort.XXXXXX)"
trap 'rm -rf "$TMP"' EXIT
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }

# json FILE EXPR: evaluate a JavaScript expression over the JSON document d in FILE
json() { node -e 'const d = JSON.parse(require("fs").readFileSync(process.argv[1], "utf8")); console.log(eval(process.argv[2]))' "$1" "$2"; }

# quantize IN OUT STRATEGY [options...]: quantize, assert the opset strategy the output took
quantize() {
    local in="$1" out="$2" strategy="$3"
    shift 3
    if ! "$BIN" quantize "$in" -o "$out" --json "$@" >"$out.json" 2>"$out.err"; then
        fail "quantize $in $*: $(cat "$out.err")"
        return 1
    fi
    local got
    got="$(json "$out.json" 'd.opset.strategy')"
    [ "$got" = "$strategy" ] || fail "$in: opset strategy '$got', expected '$strategy'"
    echo "ok: $(basename "$in") -> $(basename "$out"): $(json "$out.json" 'd.manifest.results.n_quantized') weights quantized, opset $got ($(json "$out.json" 'd.opset.reason'))"
}

# compare ORIG QUANT [compare.js options...]
compare() {
    local a="$1" b="$2"
    shift 2
    if node "$COMPARE" "$a" "$b" "$@" >"$b.cmp.json" 2>"$b.cmp.err"; then
        echo "ok: ORT $(basename "$b"): $(json "$b.cmp.json" 'Object.entries(d.outputs).map(([k, v]) => k + " rel_l2 " + v.rel_l2.toExponential(3) + " max_abs " + v.max_abs_diff.toExponential(3) + (v.argmax_agree !== undefined ? " argmax_agree " + v.argmax_agree : "")).join("; ")')"
    else
        fail "ORT $(basename "$b"): $(cat "$b.cmp.err") $(json "$b.cmp.json" 'd.failures.join("; ")' 2>/dev/null)"
    fi
}

# ---- generated models (always) ----
"$GEN" --write-models "$TMP" || fail "generating models with $GEN"
quantize "$TMP/matmul_opset21.onnx" "$TMP/mm21_int4.onnx" native -t int4 -g group:32 &&
    compare "$TMP/matmul_opset21.onnx" "$TMP/mm21_int4.onnx" --input X:float32:1,64 --max-rel-l2 0.15
[ "$(json "$TMP/mm21_int4.onnx.json" 'd.manifest.tensors[0].scheme.group_size')" = 32 ] || fail "int4 group size not in the manifest"
quantize "$TMP/matmul_opset9_softmax.onnx" "$TMP/mm9s.onnx" com.microsoft &&
    compare "$TMP/matmul_opset9_softmax.onnx" "$TMP/mm9s.onnx" --input X:float32:1,64 --max-rel-l2 0.02 --argmax Y
quantize "$TMP/matmul_opset9_relu.onnx" "$TMP/mm9r.onnx" raised &&
    compare "$TMP/matmul_opset9_relu.onnx" "$TMP/mm9r.onnx" --input X:float32:1,64 --max-rel-l2 0.02
quantize "$TMP/conv_f16_opset13.onnx" "$TMP/conv_f16.onnx" native &&
    compare "$TMP/conv_f16_opset13.onnx" "$TMP/conv_f16.onnx" --input X:float32:1,3,16,16 --max-rel-l2 0.02
# refusal: int4 blocks need opset 21, Softmax changes meaning on the way, com.microsoft has none
"$BIN" quantize "$TMP/matmul_opset9_softmax.onnx" -o "$TMP/refused.onnx" -t int4 -g group:32 >/dev/null 2>"$TMP/refused.err"
rc=$?
[ "$rc" = 3 ] || fail "int4 on opset 9 with Softmax: exit $rc, expected 3"
grep -q "op Softmax" "$TMP/refused.err" || fail "int4 refusal does not name Softmax: $(cat "$TMP/refused.err")"
[ ! -e "$TMP/refused.onnx" ] || fail "refused run left $TMP/refused.onnx"
echo "ok: refused: $(cat "$TMP/refused.err")"

# ---- real models (../shared) ----
SH="${TM_SHARED:-}"
M="$SH/models/onnx/npm"
if [ -z "$SH" ] || [ ! -d "$M" ]; then
    if [ "${TM_REQUIRE_SHARED:-0}" = 1 ]; then fail "../shared not found (set TM_SHARED) and TM_REQUIRE_SHARED=1"
    else echo "SKIP: ../shared not found (set TM_SHARED): PaddleOCR and silero VAD not run"; fi
else
    CLS="$M/paddleocr/ch_ppocr_mobile_v2.0_cls_infer.onnx"
    REC="$M/paddleocr/ch_PP-OCRv4_rec_infer.onnx"
    VAD="$M/silero_vad/silero_vad_v5.onnx"
    quantize "$CLS" "$TMP/cls.onnx" com.microsoft &&
        compare "$CLS" "$TMP/cls.onnx" --input x:float32:4,3,48,192 --max-rel-l2 0.10 --argmax softmax_0.tmp_0
    quantize "$REC" "$TMP/rec.onnx" com.microsoft &&
        compare "$REC" "$TMP/rec.onnx" --input x:float32:1,3,48,320 --max-rel-l2 0.10 --argmax softmax_11.tmp_0
    quantize "$VAD" "$TMP/vad.onnx" native &&
        compare "$VAD" "$TMP/vad.onnx" --input input:float32:1,512 --input state:float32:2,1,128:0 \
            --input sr:int64::16000 --max-abs output:0.02 --max-rel stateN:0.15
    nv="$(json "$TMP/vad.onnx.json" 'd.manifest.tensors.filter(t => t.decision === "quantized" && t.graph.includes("branch") && t.source === "Constant node").length')"
    [ "$nv" -ge 10 ] 2>/dev/null || fail "silero: expected the If-branch Constant-node weights quantized, got $nv"
    # the refusal on a real opset-9 model names the first op that changes meaning
    "$BIN" quantize "$CLS" -o "$TMP/cls4.onnx" -t int4 -g group:32 >/dev/null 2>"$TMP/cls4.err"
    rc=$?
    [ "$rc" = 3 ] && grep -q "would change op [A-Za-z]" "$TMP/cls4.err" || fail "cls int4: exit $rc: $(cat "$TMP/cls4.err")"
    # qdiff pairs <w>_quantized with <w>: plain rounding, ~0.29 LSB RMSE
    "$BIN" qdiff "$CLS" "$TMP/cls.onnx" --json >"$TMP/qd.json" || fail "qdiff cls"
    r="$(json "$TMP/qd.json" 'd.tensors.length + " " + Math.max(...d.tensors.map(t => t.rmse_lsb)).toFixed(3) + " " + Math.min(...d.tensors.map(t => t.rmse_lsb)).toFixed(3)')"
    set -- $r
    [ "$1" -ge 50 ] && node -e "process.exit($2 < 0.36 && $3 > 0.2 ? 0 : 1)" || fail "qdiff cls: $r (tensors, max and min RMSE LSB)"
    echo "ok: qdiff cls: $1 tensors paired, RMSE LSB in [$3, $2]"
fi

if [ "$fails" -gt 0 ]; then echo "$fails check(s) failed"; exit 1; fi
echo "all ONNX Runtime checks passed"
