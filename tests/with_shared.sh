#!/bin/sh
# with_shared.sh CMD ARGS...: run a test with TM_SHARED taken from the caller's environment
# when set (`TM_SHARED=/path ctest`), else the build's default (-DTM_SHARED_DIR, normally
# <source>/../shared), passed in as TM_SHARED_DEFAULT.
TM_SHARED="${TM_SHARED:-$TM_SHARED_DEFAULT}"
export TM_SHARED
exec "$@"
