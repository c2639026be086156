/* pool.c: parallel-for with pthreads. */
#include "pool.h"

#include <pthread.h>
#include <stdatomic.h>

typedef struct pool_run {
    int64_t n_tasks;
    tm__task_fn fn;
    void *ctx;
    volatile const int *cancel;
    atomic_llong next;
    atomic_int stop;
    pthread_mutex_t mu;
    int64_t fail_task;  /* lowest failed task, or n_tasks */
    tm_err fail_err;
} pool_run;

typedef struct worker_arg { pool_run *run; int thread; } worker_arg;

static void *worker(void *p) {
    worker_arg *wa = p;
    pool_run *run = wa->run;
    tm_err err;
    for (;;) {
        if (atomic_load(&run->stop)) break;
        if (run->cancel && *run->cancel) {
            pthread_mutex_lock(&run->mu);
            if (run->fail_task == run->n_tasks) {
                run->fail_task = run->n_tasks - 1 >= 0 ? run->n_tasks - 1 : 0;
                tm__err_set(&run->fail_err, TM_E_CANCELLED, -1, "interrupted");
            }
            pthread_mutex_unlock(&run->mu);
            atomic_store(&run->stop, 1);
            break;
        }
        int64_t t = atomic_fetch_add(&run->next, 1);
        if (t >= run->n_tasks) break;
        tm_err_clear(&err);
        tm_status s = run->fn(run->ctx, t, wa->thread, &err);
        if (s != TM_OK) {
            if (err.code == TM_OK) tm__err_set(&err, s, -1, "task %lld failed", (long long)t);
            pthread_mutex_lock(&run->mu);
            if (t < run->fail_task || run->fail_err.code == TM_E_CANCELLED) {
                run->fail_task = t;
                run->fail_err = err;
            }
            pthread_mutex_unlock(&run->mu);
            atomic_store(&run->stop, 1);
        }
    }
    return NULL;
}

tm_status tm__parallel_for(int64_t n_tasks, int n_threads, tm__task_fn fn, void *ctx,
                           volatile const int *cancel, tm_err *err) {
    if (n_tasks <= 0) return TM_OK;
    if (n_threads < 1) n_threads = 1;
    if (n_threads > n_tasks) n_threads = (int)n_tasks;
    pool_run run;
    run.n_tasks = n_tasks;
    run.fn = fn;
    run.ctx = ctx;
    run.cancel = cancel;
    atomic_init(&run.next, 0);
    atomic_init(&run.stop, 0);
    pthread_mutex_init(&run.mu, NULL);
    run.fail_task = n_tasks;
    tm_err_clear(&run.fail_err);
    worker_arg args[64];
    pthread_t th[64];
    if (n_threads > 64) n_threads = 64;
    int started = 0;
    for (int i = 1; i < n_threads; i++) {
        args[i].run = &run;
        args[i].thread = i;
        if (pthread_create(&th[i], NULL, worker, &args[i]) != 0) break;
        started = i;
    }
    args[0].run = &run;
    args[0].thread = 0;
    worker(&args[0]);
    for (int i = 1; i <= started; i++) pthread_join(th[i], NULL);
    pthread_mutex_destroy(&run.mu);
    if (run.fail_err.code != TM_OK) {
        if (err) *err = run.fail_err;
        return run.fail_err.code;
    }
    return TM_OK;
}
