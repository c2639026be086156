/* version.c: the version and the git commit the library was built from (tm_version.h is
** regenerated at every build by cmake/version.cmake). */
#include "core.h"

#if defined(__has_include)
#if __has_include("tm_version.h")
#include "tm_version.h"
#endif
#endif
#ifndef TM_GIT_COMMIT_STR
#define TM_GIT_COMMIT_STR "unknown"
#endif

const char *tm_git_commit(void) { return TM_GIT_COMMIT_STR; }
const char *tm_version(void) { return TM_VERSION_STRING; }
