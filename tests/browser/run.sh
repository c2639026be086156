#!/usr/bin/env bash
# run.sh [TEST.mjs]: ctest entry for a browser test (tests/browser/ui.test.mjs by default). Exit 77 (skipped) with a
# reason when node is missing, unless TM_REQUIRE_BROWSER=1; the .mjs decides the rest.
set -euo pipefail
if ! command -v node >/dev/null 2>&1; then
  if [[ "${TM_REQUIRE_BROWSER:-}" == 1 ]]; then echo "FAIL: node not found (TM_REQUIRE_BROWSER=1)"; exit 1; fi
  echo "SKIP: node not found (apt-get install nodejs npm)"
  exit 77
fi
exec node "$(dirname "$0")/${1:-ui.test.mjs}"
