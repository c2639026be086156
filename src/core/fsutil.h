/* fsutil.h: atomic file writing and directory helpers (write temp beside target, fsync, rename). */
#ifndef TM_CORE_FSUTIL_H
#define TM_CORE_FSUTIL_H
#include "core.h"

/* Write n bytes to path atomically: "<path>.tmp.<pid>", fsync, rename, fsync the directory. */
tm_status tm__write_file_atomic(const char *path, const void *data, size_t n, tm_err *err);
/* fsync the directory containing path (or path itself when it is a directory). */
tm_status tm__fsync_dir(const char *dir, tm_err *err);
/* Remove a directory tree we created (only regular files and directories; no symlink follow). */
void tm__rm_rf(const char *path);
/* mkdir -p. */
tm_status tm__mkdir_p(const char *path, tm_err *err);
/* The directory part of path ("." when none); malloc'd. */
char *tm__dirname(const char *path);
/* path's absolute form with its directory resolved by realpath(3) (path itself may not exist
** yet: its last component is appended as given); malloc'd, NULL when the directory cannot be
** resolved (errno set) or out of memory. resolve_last: when path exists, resolve it too
** (symbolic links in its last component followed); 0 keeps the last component as named (what a
** rename over it replaces). */
char *tm__abs_path(const char *path, int resolve_last);
/* Before writing the file `path`: its directory must exist and be a directory. TM_OK, or
** TM_E_IO naming the output path and the directory ("-o P: directory 'D' does not exist"). */
tm_status tm__check_out_dir(const char *path, tm_err *err);
/* Before a part sizes a file every part shares (part.h): a file already sized by other parts
** (non-empty) to other than `bytes` was laid out by another plan; TM_E_INVALID_ARG naming it and
** both sizes, the file untouched. TM_OK when empty or the same size. */
tm_status tm__shared_size_check(int fd, const char *path, uint64_t bytes, tm_err *err);
/* The count behind tm_outputs_pending (include/tensormorph.h): +1 just before a job creates its
** first file beside an output, -1 after it has removed or published the last. */
void tm__outputs_hold(int delta);
/* +1 to tm_outputs_published, right after an output is renamed into place. */
void tm__outputs_publish(void);
#endif
