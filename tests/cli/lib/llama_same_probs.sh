# llama_same_probs.sh: sourced by the shell tests of tests/cli (needs their fail()).
# llama_same_probs REF.gguf CAND.gguf WHAT: llama.cpp (node-llama-cpp in $TM_NODE_MODULES, through
# tests/llama/load_probs.mjs) loads both files and gives the same next-token probabilities; WHAT
# names CAND in the messages. Without node-llama-cpp: a visible SKIP line, or a failure under
# TM_REQUIRE_LLAMA=1.
llama_same_probs() {
    local nm="${TM_NODE_MODULES:-}" a b
    if [ -n "$nm" ] && [ -f "$nm/node-llama-cpp/package.json" ] && command -v node > /dev/null; then
        a=$(timeout 300 node "${TM_SRC:?}/tests/llama/load_probs.mjs" "$nm" "$1") || fail "llama.cpp cannot load $1"
        b=$(timeout 300 node "$TM_SRC/tests/llama/load_probs.mjs" "$nm" "$2") || fail "llama.cpp cannot load $3"
        [ -n "$a" ] && [ "$a" = "$b" ] || fail "llama.cpp: $3 give other probabilities: $a / $b"
        echo "ok: llama.cpp loads $3: $b"
    elif [ "${TM_REQUIRE_LLAMA:-0}" = 1 ]; then
        fail "TM_REQUIRE_LLAMA=1 but node-llama-cpp is not in TM_NODE_MODULES='$nm'"
    else
        echo "SKIP (part): node-llama-cpp not found (TM_NODE_MODULES): llama.cpp load of $3 not run"
    fi
}
