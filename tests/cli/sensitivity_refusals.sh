#!/bin/bash
# sensitivity_refusals.sh: an already-quantized SRC is refused by sensitivity's own rule (exit
# 3, naming the tensor and its type, pointing at the unquantized checkpoint), not by the
# quantizer's requantize refusal, which names an option sensitivity does not have; nothing is
# left behind. Needs ../shared (stories260K-Q4_K_M.gguf) and node-llama-cpp (the runner is
# looked up before SRC is read).
set -u
. "${TM_SRC:?TM_SRC: the source folder}/tests/cli/lib/scratch.sh"
tm_need_shared models/gguf/stories260K-Q4_K_M.gguf
tm_scratch sensref
NM="${TM_NODE_MODULES:-$TM_SRC/runner/node_modules}"
if [ ! -d "$NM/node-llama-cpp" ]; then
    [ "${TM_REQUIRE_LLAMA:-0}" = 1 ] && fail "TM_REQUIRE_LLAMA=1 but node-llama-cpp is not in $NM"
    echo "SKIP: node-llama-cpp not installed (set TM_NODE_MODULES)"; exit 77
fi
head -c 20000 "$TM_SHARED/models/text/stories260K-eval.txt" > t.txt
export TMPDIR="$W"
"$T" sensitivity "$G" --text t.txt --ctx 128 --chunks 2 -t Q2_K -o plan.gguf --budget 0.01 > out.txt 2> err.txt
rc=$?
[ $rc = 3 ] || fail "an already-quantized SRC: exit $rc (want 3): $(cat err.txt)"
grep -q "tensor 'token_embd.weight' is already quantized (Q8_0); sensitivity needs F32/F16/BF16 weights" err.txt || fail "message: $(cat err.txt)"
grep -q -- "--allow-requantize" err.txt && fail "the message names --allow-requantize, which sensitivity does not have"
[ "$(ls | sort | tr '\n' ' ')" = "err.txt out.txt t.txt " ] || fail "files left: $(ls)"
echo "ok: an already-quantized SRC refused"
