/* onnx_pb.c: the protobuf writer for ONNX fixtures (onnx_pb.h). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdlib.h>
#include <string.h>

#include "helpers/onnx_pb.h"

void pb_raw(pb *p, const void *d, size_t n) {
    if (p->n + n > p->cap) {
        p->cap = (p->n + n) * 2 + 64;
        p->b = realloc(p->b, p->cap);
        assert_non_null(p->b);
    }
    if (n) memcpy(p->b + p->n, d, n);
    p->n += n;
}
void pb_varint(pb *p, uint64_t v) {
    uint8_t t[10];
    size_t k = 0;
    do { t[k++] = (uint8_t)((v & 0x7f) | (v > 0x7f ? 0x80 : 0)); v >>= 7; } while (v);
    pb_raw(p, t, k);
}
void pb_vfield(pb *p, int field, uint64_t v) { pb_varint(p, (uint64_t)field << 3); pb_varint(p, v); }
void pb_bytes(pb *p, int field, const void *d, size_t n) {
    pb_varint(p, ((uint64_t)field << 3) | 2);
    pb_varint(p, n);
    pb_raw(p, d, n);
}
void pb_str(pb *p, int field, const char *s) { pb_bytes(p, field, s, strlen(s)); }
void pb_msg(pb *p, int field, pb *m) { pb_bytes(p, field, m->b, m->n); free(m->b); memset(m, 0, sizeof *m); }

void pb_tensor_raw(pb *t, const char *name, int dtype, int ndim, const int64_t *dims,
                   const void *raw, size_t n) {
    for (int d = 0; d < ndim; d++) pb_vfield(t, 1, (uint64_t)dims[d]);
    pb_vfield(t, 2, (uint64_t)dtype);
    pb_str(t, 8, name);
    if (raw) pb_bytes(t, 9, raw, n);
}

void pb_init_raw(pb *g, const char *name, int dtype, int ndim, const int64_t *dims,
                 const void *raw, size_t n) {
    pb t = {0};
    pb_tensor_raw(&t, name, dtype, ndim, dims, raw, n);
    pb_msg(g, 5, &t);
}

void pb_node_dom(pb *g, const char *op, const char *domain, const char *name, int n_in,
                 const char *const *in, int n_out, const char *const *out, const char *attr,
                 int64_t attr_v) {
    pb n = {0};
    for (int k = 0; k < n_in; k++) pb_str(&n, 1, in[k]);
    for (int k = 0; k < n_out; k++) pb_str(&n, 2, out[k]);
    pb_str(&n, 3, name);
    pb_str(&n, 4, op);
    if (attr) {
        pb a = {0};
        pb_str(&a, 1, attr);
        pb_vfield(&a, 3, (uint64_t)attr_v);
        pb_vfield(&a, 20, 2);
        pb_msg(&n, 5, &a);
    }
    if (domain && *domain) pb_str(&n, 7, domain);
    pb_msg(g, 1, &n);
}

void pb_node(pb *g, const char *op, const char *name, int n_in, const char *const *in,
             const char *out, const char *attr, int64_t attr_v) {
    pb_node_dom(g, op, NULL, name, n_in, in, 1, &out, attr, attr_v);
}

void pb_model_ms(pb *m, pb *graph, int opset, int ms_opset) {
    pb_vfield(m, 1, 8);
    pb o = {0};
    pb_vfield(&o, 2, (uint64_t)opset);
    pb_msg(m, 8, &o);
    if (ms_opset > 0) {
        pb_str(&o, 1, "com.microsoft");
        pb_vfield(&o, 2, (uint64_t)ms_opset);
        pb_msg(m, 8, &o);
    }
    pb_str(graph, 2, "g");
    pb_msg(m, 7, graph);
}

void pb_model(pb *m, pb *graph, int opset) { pb_model_ms(m, graph, opset, 0); }
