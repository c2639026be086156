#!/bin/bash
# report_outputs.sh: the JSON reports (evidence -o, sensitivity -o / OUT.sensitivity.json /
# merge -o) and the base cache are checked before any work (docs/exit-codes.md): never an input
# (exit 2, the input unchanged), never a file tensormorph did not write (exit 2), a missing
# directory at once (exit 4, not after the run). The checks run before a model is opened, so
# stand-in files serve as models here; no runtime is needed.
set -u
. "${TM_SRC:?TM_SRC: the source folder}/tests/cli/lib/scratch.sh"
tm_scratch reports

printf 'GGUF stand-in' > b.gguf
printf 'GGUF stand-in 2' > c.gguf
printf 'once upon a time\n' > t.txt
printf 'precious\n' > foreign.json
printf 'ONNX stand-in' > b.onnx
printf 'ONNX stand-in 2' > c.onnx
mkdir src && printf '{}' > src/config.json
sums() { md5sum b.gguf c.gguf b.onnx c.onnx t.txt foreign.json src/config.json; }
before=$(sums)

# expect RC MESSAGE-REGEX COMMAND...: the exit status and the message on stderr
expect() {
    local want=$1 re=$2; shift 2
    "$T" "$@" > out.txt 2> err.txt
    local rc=$?
    [ "$rc" = "$want" ] || fail "$* -> exit $rc (want $want): $(cat err.txt)"
    grep -Eq -e "$re" err.txt || fail "$* -> message '$(cat err.txt)' does not match /$re/"
}
E=(evidence b.gguf c.gguf --text t.txt --ctx 128)
expect 2 "-o c.gguf is the input c.gguf" "${E[@]}" -o c.gguf
expect 2 "-o t.txt is the input t.txt" "${E[@]}" -o t.txt
expect 2 "-o foreign.json exists and is not a tensormorph.evidence/1 document" "${E[@]}" -o foreign.json
expect 4 "-o nope/x.json: directory 'nope' does not exist" "${E[@]}" -o nope/x.json
expect 2 "--base-cache b.gguf is the input b.gguf" "${E[@]}" --base-cache b.gguf
expect 4 "--base-cache nope/bc: directory 'nope' does not exist" "${E[@]}" --base-cache nope/bc
expect 2 "-o b.onnx is the input b.onnx" evidence b.onnx c.onnx --random-inputs 1 -o b.onnx

S=(sensitivity b.gguf --text t.txt --ctx 128 -t Q2_K)
expect 2 "-o foreign.json exists and is not a tensormorph.sensitivity/1 document" "${S[@]}" --probe 0/2 -o foreign.json
expect 2 "-o t.txt is the input t.txt" "${S[@]}" --probe 0/2 -o t.txt
expect 4 "-o nope/p.json: directory 'nope' does not exist" "${S[@]}" --probe 0/2 -o nope/p.json
expect 2 "--base-cache t.txt is the input t.txt" "${S[@]}" --base-cache t.txt
expect 2 "is inside the input directory src" sensitivity src --text t.txt --ctx 128 -t Q2_K -o src/r
printf 'not yet a part\n' > part.json
expect 2 "-o part.json is the input part.json" sensitivity merge part.json -o part.json
expect 2 "-o foreign.json exists and is not a tensormorph.sensitivity/1 document" sensitivity merge part.json -o foreign.json

[ "$(sums)" = "$before" ] || fail "an input or a foreign file changed"
[ "$(ls | sort | tr "\n" " ")" = "b.gguf b.onnx c.gguf c.onnx err.txt foreign.json out.txt part.json src t.txt " ] || fail "files left: $(ls)"
[ "$(ls src)" = config.json ] || fail "files left in src: $(ls src)"
echo "ok: report outputs checked before any work"
