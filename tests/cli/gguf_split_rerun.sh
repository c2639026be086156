#!/bin/bash
# gguf_split_rerun.sh: a refused run of a split GGUF output (--max-shard-size, --keep-split)
# changes nothing on disk; --force replaces a previous tensormorph split output (the files its
# OUT.manifest.json lists) and nothing else; every part of a split input is "the input".
# Needs ../shared (stories260K-F32.gguf).
set -u
. "${TM_SRC:?TM_SRC: the source folder}/tests/cli/lib/scratch.sh"
tm_need_shared models/gguf/stories260K-F32.gguf
tm_scratch gsrerun

E=$(mktemp) || fail mktemp  # messages, outside the folders compared
trap 'rm -rf "$W" "$E"' EXIT
state() { ls -la --time-style=+%s.%N . | awk '$7 != "." && $7 != ".." {print $5, $6, $7}' | sort; sha256sum ./*.gguf ./*.json 2>/dev/null; }
same_state() { [ "$(state)" = "$1" ] || fail "$2: the directory changed: $(ls)"; }

"$T" quantize "$G" -o m.gguf --type Q8_0 --max-shard-size 300KB -q || fail "split run"
[ "$(ls | tr '\n' ' ')" = "m-00001-of-00002.gguf m-00002-of-00002.gguf m.gguf.manifest.json " ] || fail "split run wrote: $(ls)"
before=$(state)

# a re-run without --force: exit 2, says how to replace it, nothing changes
"$T" quantize "$G" -o m.gguf --type Q8_0 --max-shard-size 300KB -q 2> "$E"; rc=$?
msg=$(cat "$E")
[ $rc = 2 ] || fail "re-run without --force: exit $rc, not 2"
same_state "$before" "a refused re-run"
case "$msg" in *"holds a previous tensormorph output"*"--force"*) ;; *) fail "re-run message: $msg";; esac
case "$msg" in *"did not write"*) fail "re-run message says tensormorph did not write its own output: $msg";; esac
echo "ok: refused re-run keeps the split output and its manifest"

# the same with --keep-split (a split input) into the same OUT
mkdir in && "$T" quantize "$G" -o in/s.gguf --type F32 --max-shard-size 400KB -q || fail "split input"
[ "$(ls in | tr '\n' ' ')" = "s-00001-of-00003.gguf s-00002-of-00003.gguf s-00003-of-00003.gguf s.gguf.manifest.json " ] || fail "split input: $(ls in)"
before=$(state)
"$T" quantize in/s-00001-of-00003.gguf -o m.gguf --type Q8_0 --keep-split -q 2> "$E"; rc=$?
msg=$(cat "$E")
[ $rc = 2 ] || fail "--keep-split re-run: exit $rc, not 2"
same_state "$before" "a refused --keep-split run"
case "$msg" in *"holds a previous tensormorph output"*) ;; *) fail "--keep-split message: $msg";; esac
echo "ok: refused --keep-split run changes nothing"

# --force replaces it (here with 3 files: the 2 previous ones go)
"$T" quantize in/s-00001-of-00003.gguf -o m.gguf --type Q8_0 --keep-split -q --force || fail "--force --keep-split"
[ "$(ls | grep -v '^in$' | tr '\n' ' ')" = "m-00001-of-00003.gguf m-00002-of-00003.gguf m-00003-of-00003.gguf m.gguf.manifest.json " ] \
    || fail "--force --keep-split left: $(ls)"
"$T" quantize "$G" -o m.gguf --type Q8_0 --max-shard-size 300KB -q --force || fail "--force --max-shard-size"
[ "$(ls | grep -v '^in$' | tr '\n' ' ')" = "m-00001-of-00002.gguf m-00002-of-00002.gguf m.gguf.manifest.json " ] \
    || fail "--force split run left: $(ls)"
# a one-file run at OUT: the split output is a previous output (--force), its files go
"$T" quantize "$G" -o m.gguf --type Q8_0 -q 2> /dev/null && fail "one-file run over a split output without --force"
[ -e m-00001-of-00002.gguf ] && [ -e m.gguf.manifest.json ] || fail "a refused one-file run removed the split output"
"$T" quantize "$G" -o m.gguf --type Q8_0 -q --force || fail "one-file --force run"
[ "$(ls | grep -v '^in$' | tr '\n' ' ')" = "m.gguf m.gguf.manifest.json " ] || fail "one-file --force left: $(ls)"
echo "ok: --force replaces a previous split output, its stale files removed"

# a file at a split name that no manifest lists: refused with and without --force, untouched
rm m.gguf m.gguf.manifest.json
"$T" quantize "$G" -o x.gguf --type Q8_0 --max-shard-size 300KB -q || fail "x split"
cp x.gguf.manifest.json keep.json
python3 -c "
import json; m = json.load(open('x.gguf.manifest.json'))
m['output']['files'] = m['output']['files'][:1]
json.dump(m, open('x.gguf.manifest.json', 'w'))"
before=$(state)
for f in "" --force; do
    "$T" quantize "$G" -o x.gguf --type Q8_0 --max-shard-size 300KB -q $f 2> "$E"; rc=$?
    msg=$(cat "$E")
    [ $rc = 2 ] || fail "unlisted split file ($f): exit $rc, not 2"
    same_state "$before" "a refused run over an unlisted split file ($f)"
    case "$f$msg" in --force*"x-00002-of-00002.gguf exists and is not listed"*"did not write"*) ;;
        "tensormorph: -o x.gguf holds a previous tensormorph output"*"--force"*) ;; *) fail "unlisted ($f): $msg";; esac
done
mv keep.json x.gguf.manifest.json
"$T" quantize "$G" -o x.gguf --type Q8_0 --max-shard-size 300KB -q --force || fail "x --force with its manifest"
echo "ok: a split-named file the manifest does not list is never replaced"

# -o naming the split input set: "is the input", nothing changes (with a manifest or not)
cd in || fail cd
before=$(state)
for f in "" --force; do
    "$T" quantize s-00001-of-00003.gguf -o s.gguf --type Q8_0 --keep-split -q $f 2> "$E"; rc=$?
    msg=$(cat "$E")
    [ $rc = 2 ] || fail "-o the split input ($f): exit $rc, not 2"
    same_state "$before" "-o the split input ($f)"
    case "$msg" in *"s-00001-of-00003.gguf is the input"*) ;; *) fail "-o the split input ($f): $msg";; esac
done
rm s.gguf.manifest.json
before=$(state)
for args in "--keep-split" "--max-shard-size 300KB" "--max-shard-size 200KB"; do
    "$T" quantize s-00001-of-00003.gguf -o s.gguf --type Q8_0 $args -q --force 2> "$E"; rc=$?
    msg=$(cat "$E")
    [ $rc = 2 ] || fail "-o the split input without a manifest ($args): exit $rc, not 2"
    same_state "$before" "-o the split input without a manifest ($args)"
    case "$msg" in *"s-00001-of-00003.gguf"*"input"*) ;; *) fail "-o the split input ($args): $msg";; esac
done
echo "ok: every part of a split input is the input"
echo PASS
