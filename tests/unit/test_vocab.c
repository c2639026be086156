/*
** test_vocab.c: one table per vocabulary. The granularity and observer names
** (src/quant/qnames.c) read back to exactly what wrote them, and the ONNX element-type table
** (src/formats/onnx_types.c) names every TensorProto.DataType.
*/
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <string.h>

#include "tensormorph.h"
#include "tensormorph/graph.h"

static void assert_same_observer(const tm_observer *a, const tm_observer *b) {
    assert_int_equal(a->kind, b->kind);
    assert_true(a->percentile == b->percentile && a->averaging_constant == b->averaging_constant);
    assert_int_equal(a->n_bins, b->n_bins);
    assert_int_equal(a->n_quantized_bins, b->n_quantized_bins);
}

/* The one spelling (src/quant/qnames.c): every granularity and every observer with its
** parameters reads back to exactly itself, and the texts are the documented ones. */
static void test_names_round_trip(void **state) {
    (void)state;
    const tm_qgran grans[] = {
        {.kind = TM_GRAN_TENSOR}, {.kind = TM_GRAN_CHANNEL, .axis = 0}, {.kind = TM_GRAN_CHANNEL, .axis = -1},
        {.kind = TM_GRAN_GROUP, .axis = -1, .group_size = 128}, {.kind = TM_GRAN_GROUP, .axis = 1, .group_size = 32},
        {.kind = TM_GRAN_BLOCK, .block_h = 128, .block_w = 64},
    };
    const char *const gtext[] = {"tensor", "channel:0", "channel:-1", "group:128:-1", "group:32:1", "block:128x64"};
    char buf[128];
    for (size_t k = 0; k < sizeof grans / sizeof grans[0]; k++) {
        tm_qgran back;
        assert_int_equal(tm_granularity_name(&grans[k], buf, sizeof buf), strlen(gtext[k]));
        assert_string_equal(buf, gtext[k]);
        memset(&back, 0x5a, sizeof back);
        assert_int_equal(tm_granularity_parse(buf, &back), TM_OK);
        assert_memory_equal(&back, &grans[k], sizeof back);
    }
    tm_qgran g;
    assert_int_equal(tm_granularity_parse("group:64", &g), TM_OK);
    assert_int_equal(g.axis, -1);
    assert_int_equal(tm_granularity_parse("channel", &g), TM_OK);
    assert_int_equal(g.axis, 0);
    const char *const bad_g[] = {"", "chan", "channel:", "channel:x", "group:", "group:0", "group:8:", "group:8:1:2",
                                 "block:4", "block:4x", "block:0x4", "tensor:0", "group: 8"};
    for (size_t k = 0; k < sizeof bad_g / sizeof bad_g[0]; k++)
        assert_int_equal(tm_granularity_parse(bad_g[k], &g), TM_E_INVALID_ARG);
    assert_string_equal(tm_granularity_kind_name(TM_GRAN_GROUP), "group");
    assert_string_equal(tm_granularity_kind_name(TM_GRAN_COUNT), "?");

    tm_observer obs[16];
    int n = 0;
    for (int k = 0; k < TM_OBS_COUNT; k++) obs[n++] = tm_observer_default((tm_observer_kind)k);
    obs[n] = tm_observer_default(TM_OBS_EMA_MINMAX), obs[n++].averaging_constant = 0.9;
    obs[n] = tm_observer_default(TM_OBS_EMA_MINMAX), obs[n++].averaging_constant = 0.1 + 0.2; /* 0.30000000000000004 */
    obs[n] = tm_observer_default(TM_OBS_PERCENTILE), obs[n++].percentile = 99.9;
    obs[n] = tm_observer_default(TM_OBS_PERCENTILE), obs[n].percentile = 99.99999, obs[n++].n_bins = 1024;
    obs[n] = tm_observer_default(TM_OBS_HISTOGRAM), obs[n++].n_bins = 512;
    obs[n] = tm_observer_default(TM_OBS_ENTROPY), obs[n].n_bins = 128, obs[n++].n_quantized_bins = 64;
    const char *const otext[] = {"minmax", "ema_minmax:0.01", "histogram", "percentile:99.999", "mse", "entropy",
                                 "ema_minmax:0.9", "ema_minmax:0.30000000000000004", "percentile:99.9",
                                 "percentile:99.99999:bins=1024", "histogram:bins=512",
                                 "entropy:bins=128:quantized_bins=64"};
    assert_int_equal(n, (int)(sizeof otext / sizeof otext[0]));
    for (int k = 0; k < n; k++) {
        tm_observer back;
        tm_observer_name(&obs[k], buf, sizeof buf);
        assert_string_equal(buf, otext[k]);
        memset(&back, 0x5a, sizeof back);
        assert_int_equal(tm_observer_from_name(buf, &back), TM_OK);
        assert_same_observer(&back, &obs[k]);
    }
    tm_observer o;
    assert_int_equal(tm_observer_from_name("entropy:quantized_bins=64:bins=128", &o), TM_OK);
    assert_same_observer(&o, &obs[n - 1]);
    assert_int_equal(tm_observer_from_name("percentile:bins=1024", &o), TM_OK);
    assert_true(o.percentile == 99.999 && o.n_bins == 1024);
    const char *const bad_o[] = {"", "min", "minmax:1", "mse:bins=8", "percentile:0", "percentile:100.5",
                                 "ema_minmax:2", "ema_minmax:", "percentile:99:", "histogram:bins=1",
                                 "entropy:bins=64", "histogram:quantized_bins=8", "percentile:nan"};
    for (size_t k = 0; k < sizeof bad_o / sizeof bad_o[0]; k++)
        assert_int_equal(tm_observer_from_name(bad_o[k], &o), TM_E_INVALID_ARG);
}

/* The one element-type table: every TensorProto.DataType 0..26 has its onnx.proto name, the
** name reads back to the code, and the sizes/dtypes the reader and writer rely on. */
static void test_elem_type_table(void **state) {
    (void)state;
    static const char *const names[] = {"UNDEFINED", "FLOAT", "UINT8", "INT8", "UINT16", "INT16", "INT32",
        "INT64", "STRING", "BOOL", "FLOAT16", "DOUBLE", "UINT32", "UINT64", "COMPLEX64", "COMPLEX128",
        "BFLOAT16", "FLOAT8E4M3FN", "FLOAT8E4M3FNUZ", "FLOAT8E5M2", "FLOAT8E5M2FNUZ", "UINT4", "INT4",
        "FLOAT4E2M1", "FLOAT8E8M0", "UINT2", "INT2"};
    assert_int_equal(TM_ONNX_ELEM_COUNT, (int)(sizeof names / sizeof names[0]));
    for (int k = 0; k < TM_ONNX_ELEM_COUNT; k++) {
        const tm_onnx_elem_info *e = tm_onnx_elem_get(k);
        assert_non_null(e);
        assert_int_equal(e->code, k);
        assert_string_equal(e->name, names[k]);
        assert_ptr_equal(tm_onnx_elem_by_name(names[k]), e);
        assert_string_equal(tm_onnx_elem_name(k, "?"), names[k]);
        if (e->dtype >= 0) assert_int_equal(tm_dtype_get((tm_dtype)e->dtype)->bits, e->bits);
    }
    assert_null(tm_onnx_elem_get(-1));
    assert_null(tm_onnx_elem_get(TM_ONNX_ELEM_COUNT));
    assert_string_equal(tm_onnx_elem_name(99, "other"), "other");
    assert_null(tm_onnx_elem_by_name("int8"));
    assert_int_equal(tm_onnx_elem_get(TM_ONNX_INT4)->dtype, TM_I4);
    assert_int_equal(tm_onnx_elem_get(TM_ONNX_FLOAT8E4M3FN)->dtype, TM_F8_E4M3);
    assert_int_equal(tm_onnx_elem_get(TM_ONNX_FLOAT8E4M3FNUZ)->dtype, -1);
    assert_int_equal(tm_onnx_elem_get(TM_ONNX_COMPLEX128)->bits, 128);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_names_round_trip),
        cmocka_unit_test(test_elem_type_table),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
