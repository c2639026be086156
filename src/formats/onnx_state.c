/*
** onnx_state.c: the ONNX reader's state (onnx_impl.h): freeing it, and the arena that holds the
** tensor data the reader decodes or re-lays. The lowest of the reader's files: onnx.c,
** onnx_qrec.c and onnx_graph.c use it; it uses none of them.
*/
#include "onnx_impl.h"

void tm__ox_state_free(void *p) {
    ox_state *s = p;
    if (!s) return;
    for (int64_t i = 0; i < s->n_nodes; i++) free(s->nodes[i].io);
    free(s->nodes);
    free(s->values);
    for (int64_t i = 0; i < s->n_strings; i++) free(s->strings[i]);
    free(s->strings);
    json_decref(s->value_index);
    free(s->arena);
    free(s);
}

/* Reserve n bytes in the arena (8-byte aligned start); *off gets their offset. */
tm_status tm__ox_arena_alloc(ox_state *s, uint64_t n, uint64_t *off, tm_err *err) {
    uint64_t start = (s->arena_len + 7) & ~7ull, end;
    if (!tm__add_u64_ok(start, n, &end) || end > (uint64_t)SIZE_MAX / 2)
        return tm__err_set(err, TM_E_LIMIT, -1, "tensor data exceeds the addressable size");
    if (end > s->arena_cap || !s->arena) {
        uint64_t nc = s->arena_cap ? s->arena_cap : 4096;
        while (nc < end) nc *= 2;
        uint8_t *p = realloc(s->arena, (size_t)nc);
        if (!p) return tm__err_set(err, TM_E_NOMEM, -1, "out of memory (%llu bytes of tensor data)",
                                   (unsigned long long)nc);
        s->arena = p;
        s->arena_cap = nc;
    }
    memset(s->arena + s->arena_len, 0, (size_t)(end - s->arena_len));
    s->arena_len = end;
    *off = start;
    return TM_OK;
}
