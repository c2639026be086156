# scratch.sh: the common start of the CLI shell tests, sourced after `set -u`.
#   tm_need_shared REL   G = $TM_SHARED/REL; without it: SKIP (exit 77) with the reason, or FAIL
#                        when TM_REQUIRE_SHARED=1 (as .ci/run sets)
#   tm_scratch TAG       a scratch folder W (removed on exit), made the working directory
#   fail MSG             "FAIL: MSG", exit 1
# T is the tensormorph binary ($TM_BIN).
T="${TM_BIN:?TM_BIN: the tensormorph binary}"
fail() { echo "FAIL: $*"; exit 1; }
tm_need_shared() {
    G="${TM_SHARED:-}/$1"
    if [ -z "${TM_SHARED:-}" ] || [ ! -f "$G" ]; then
        [ "${TM_REQUIRE_SHARED:-0}" = 1 ] && { echo "FAIL: TM_REQUIRE_SHARED=1 but $G is missing"; exit 1; }
        echo "SKIP: ../shared not found (set TM_SHARED)"; exit 77
    fi
}
tm_scratch() {
    W=$(mktemp -d "${TMPDIR:-/tmp}/tm_$1.XXXXXX") || fail "mktemp"
    trap 'rm -rf "$W"' EXIT
    cd "$W" || exit 1
}
