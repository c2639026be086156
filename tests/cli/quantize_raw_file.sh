#!/bin/bash
# quantize_raw_file.sh: a file path (a bare .safetensors, even with a LLaMA config.json beside
# it and no tokenizer, as demo's checkpoint) takes the raw path with its warning (tensor names
# kept); the directory takes the LLM path (exit 3 naming --vocab-from without a tokenizer);
# the file with --vocab-from converts (docs/convert.md). Needs ../shared
# (safetensors/stories260K-f32, gguf/stories260K-F32.gguf).
set -u
. "${TM_SRC:?TM_SRC: the source folder}/tests/cli/lib/scratch.sh"
tm_need_shared models/safetensors/stories260K-f32/model.safetensors
ST="$G"
tm_need_shared models/gguf/stories260K-F32.gguf
V="$G"
tm_scratch rawfile

"$T" demo -o demo -q >/dev/null 2>&1 || fail "demo"
"$T" quantize demo/model.safetensors -o raw.gguf --type Q8_0 --no-checksums 2>err.txt >/dev/null || fail "demo/model.safetensors: $(cat err.txt)"
grep -q "llama.cpp will not load" err.txt || fail "no raw-path warning: $(cat err.txt)"
"$T" inspect raw.gguf 2>/dev/null | grep -q "model.layers.0.self_attn.q_proj.weight" || fail "raw.gguf lost the source's tensor names"
"$T" quantize demo -o dir.gguf --type Q8_0 -q >/dev/null 2>err.txt
rc=$?
[ "$rc" = 3 ] || fail "demo (directory, no tokenizer) exit $rc, want 3"
grep -q -- "--vocab-from" err.txt || fail "the directory's refusal does not name --vocab-from: $(cat err.txt)"
"$T" quantize "$ST" -o raw2.gguf --type Q8_0 --no-checksums 2>err.txt >/dev/null || fail "$ST: $(cat err.txt)"
grep -q "llama.cpp will not load" err.txt || fail "no raw-path warning for $ST"
"$T" quantize "$ST" -o llm.gguf --type Q8_0 -q --no-checksums --vocab-from "$V" 2>err.txt || fail "--vocab-from: $(cat err.txt)"
"$T" inspect llm.gguf 2>/dev/null | grep -q "blk.0.attn_q.weight" || fail "with --vocab-from the file was not converted"
echo PASS
