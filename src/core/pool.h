/* pool.h: a minimal parallel-for over task indices (pthreads). Tasks are claimed in index
** order by an atomic counter; results must be written per task index so that the outcome does
** not depend on the thread count. */
#ifndef TM_CORE_POOL_H
#define TM_CORE_POOL_H
#include "core.h"

/* fn(ctx, task, thread) is called once for every task in [0, n_tasks); returns a tm_status.
** The first failure stops the claiming of new tasks; tm__parallel_for returns the status of
** the lowest-numbered failed task (deterministic) with its message in err.
** cancel: optional flag polled between tasks (TM_E_CANCELLED). */
typedef tm_status (*tm__task_fn)(void *ctx, int64_t task, int thread, tm_err *err);
tm_status tm__parallel_for(int64_t n_tasks, int n_threads, tm__task_fn fn, void *ctx,
                           volatile const int *cancel, tm_err *err);
#endif
