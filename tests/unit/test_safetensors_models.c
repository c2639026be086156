/* test_safetensors_models.c: the real checkpoints in ../shared/models/safetensors (f32, f16,
** bf16, two shards) and the fuzz seeds in fuzz/corpus/safetensors, read by the safetensors
** reader. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <dirent.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/fsutil.h"
#include "helpers/fixture.h"
#include "helpers/st_fixture.h"
#include "helpers/vectors.h"
#include "tensormorph.h"

/* ---------------------------------------------------------------------------------------- */
/* Real checkpoints (../shared/models/safetensors)                                          */
/* ---------------------------------------------------------------------------------------- */

/* The models dir (malloc'd), or NULL after tmv_require_shared() skipped or failed the test. */
static char *models_or_skip(void) {
    if (!tmv_require_shared()) return NULL;
    return tmst_path(tmv_shared_dir(), "models/safetensors");
}


/* A LLaMA in HF layout: embed [vocab, dim], per layer q/o [dim, dim], k/v [kv, dim],
** gate/up [hidden, dim], down [dim, hidden], two norms [dim]; final norm; tied (no lm_head). */
static void check_llama(const tm_file *f, tm_dtype dt, int layers, int64_t kv_dim) {
    assert_int_equal(tm_file_n_tensors(f), 2 + 9 * layers);
    tmst_assert_shape2(tmst_must_find(f, "model.embed_tokens.weight"), 512, 64);
    tmst_assert_shape1(tmst_must_find(f, "model.norm.weight"), 64);
    assert_int_equal(tm_file_find(f, "lm_head.weight"), -1);
    char name[128];
    for (int l = 0; l < layers; l++) {
#define T(suffix) (snprintf(name, sizeof name, "model.layers.%d.%s", l, suffix), tmst_must_find(f, name))
        tmst_assert_shape1(T("input_layernorm.weight"), 64);
        tmst_assert_shape1(T("post_attention_layernorm.weight"), 64);
        tmst_assert_shape2(T("self_attn.q_proj.weight"), 64, 64);
        tmst_assert_shape2(T("self_attn.k_proj.weight"), kv_dim, 64);
        tmst_assert_shape2(T("self_attn.v_proj.weight"), kv_dim, 64);
        tmst_assert_shape2(T("self_attn.o_proj.weight"), 64, 64);
        tmst_assert_shape2(T("mlp.gate_proj.weight"), 172, 64);
        tmst_assert_shape2(T("mlp.up_proj.weight"), 172, 64);
        tmst_assert_shape2(T("mlp.down_proj.weight"), 64, 172);
#undef T
    }
    snprintf(name, sizeof name, "model.layers.%d.input_layernorm.weight", layers);
    assert_int_equal(tm_file_find(f, name), -1);
    for (int64_t i = 0; i < tm_file_n_tensors(f); i++) {
        const tm_tensor *t = tm_file_tensor(f, i);
        assert_int_equal(t->dtype, dt);
        assert_null(t->quant);
        assert_int_equal(t->role, TM_ROLE_DATA);
    }
    assert_int_equal(tm_file_n_meta(f), 1);
    assert_string_equal(tm_file_meta_key(f, 0), "format");
    assert_string_equal(tm_file_meta_value(f, 0), "pt");
    assert_int_equal(tm_file_n_warnings(f), 0);
}

static void check_config(const tm_file *f, int layers, const char *torch_dtype) {
    const char *c = tm_file_config_json(f);
    assert_non_null(c);
    json_t *j = json_loads(c, 0, NULL);
    assert_non_null(j);
    assert_int_equal(json_integer_value(json_object_get(j, "hidden_size")), 64);
    assert_int_equal(json_integer_value(json_object_get(j, "intermediate_size")), 172);
    assert_int_equal(json_integer_value(json_object_get(j, "num_hidden_layers")), layers);
    assert_int_equal(json_integer_value(json_object_get(j, "vocab_size")), 512);
    assert_string_equal(json_string_value(json_object_get(j, "torch_dtype")), torch_dtype);
    json_decref(j);
}

static void first_bytes(const tm_file *f, const char *name, const char *hex4) {
    const void *p;
    tm_err e;
    assert_int_equal(tm_tensor_data(f, tm_file_find(f, name), 0, 4, &p, &e), TM_OK);
    char got[9];
    const uint8_t *b = p;
    snprintf(got, sizeof got, "%02x%02x%02x%02x", b[0], b[1], b[2], b[3]);
    assert_string_equal(got, hex4);
}

static void test_real_models(void **state) {
    (void)state;
    char *models = models_or_skip();
    if (!models) return;
    /* stories260K: dim 64, hidden 172, 5 layers, 8 heads / 4 KV heads of 8 -> k/v [32, 64] */
    tm_file *f32 = tmst_open_in(models, "stories260K-f32/model.safetensors");
    check_llama(f32, TM_F32, 5, 32);
    check_config(f32, 5, "float32");
    assert_int_equal(tm_file_size(f32, 0), 1044984);
    /* header 4848 bytes; the embedding is first in the data area */
    assert_int_equal(tmst_must_find(f32, "model.embed_tokens.weight")->offset, 8 + 4848);
    assert_int_equal(tmst_must_find(f32, "model.embed_tokens.weight")->n_bytes, 512 * 64 * 4);
    assert_int_equal(tmst_must_find(f32, "model.norm.weight")->offset + 256, 1044984);
    first_bytes(f32, "model.embed_tokens.weight", "50e996be"); /* -0.29474878f */

    tm_file *f16 = tmst_open_in(models, "stories260K-f16"); /* directory */
    check_llama(f16, TM_F16, 5, 32);
    check_config(f16, 5, "float16");
    first_bytes(f16, "model.embed_tokens.weight", "b7b47f38"); /* -0.2947 as f16 0xb4b7 */
    tm_file *bf = tmst_open_in(models, "stories260K-bf16/model.safetensors");
    check_llama(bf, TM_BF16, 5, 32);
    first_bytes(bf, "model.embed_tokens.weight", "97be103f"); /* 0xbe96e950 rounds to 0xbe97 */
    assert_int_equal(tmst_must_find(bf, "model.embed_tokens.weight")->offset, 8 + 4880);

    /* two shards (23 + 24 tensors) equal the single file tensor by tensor, byte for byte */
    tm_file *sh = tmst_open_in(models, "stories260K-f32-2shards/model.safetensors.index.json");
    check_llama(sh, TM_F32, 5, 32);
    check_config(sh, 5, "float32");
    assert_int_equal(tm_file_n_paths(sh), 2);
    assert_non_null(strstr(tm_file_path(sh, 0), "model-00001-of-00002.safetensors"));
    assert_non_null(strstr(tm_file_path(sh, 1), "model-00002-of-00002.safetensors"));
    int per_shard[2] = {0, 0};
    for (int64_t i = 0; i < tm_file_n_tensors(sh); i++) {
        const tm_tensor *a = tm_file_tensor(sh, i);
        per_shard[a->file_index]++;
        const tm_tensor *b = tmst_must_find(f32, a->name);
        assert_int_equal(a->dtype, b->dtype);
        assert_int_equal(a->ndim, b->ndim);
        for (int d = 0; d < a->ndim; d++) assert_int_equal(a->shape[d], b->shape[d]);
        assert_int_equal(a->n_bytes, b->n_bytes);
        const void *pa, *pb;
        tm_err e;
        assert_int_equal(tm_tensor_data(sh, i, 0, a->n_bytes, &pa, &e), TM_OK);
        assert_int_equal(tm_tensor_data(f32, tm_file_find(f32, a->name), 0, b->n_bytes, &pb, &e),
                         TM_OK);
        assert_memory_equal(pa, pb, a->n_bytes);
    }
    assert_int_equal(per_shard[0], 23);
    assert_int_equal(per_shard[1], 24);
    assert_int_equal(tmst_must_find(sh, "model.layers.2.self_attn.v_proj.weight")->file_index, 0);
    assert_int_equal(tmst_must_find(sh, "model.layers.2.self_attn.o_proj.weight")->file_index, 1);
    tm_file *shd = tmst_open_in(models, "stories260K-f32-2shards"); /* directory -> index */
    assert_int_equal(tm_file_n_tensors(shd), 47);
    tm_close(shd);

    /* aidreams260K: 4 layers, 4 heads = 4 KV heads of 16 -> k/v [64, 64], 38 tensors */
    tm_file *ad = tmst_open_in(models, "aidreams260K-bf16");
    check_llama(ad, TM_BF16, 4, 64);
    check_config(ad, 4, "bfloat16");

    /* no_recognize lists the same physical tensors */
    tm_open_params p = tm_open_params_default();
    p.no_recognize = 1;
    char *path = tmst_path(models, "stories260K-f32");
    tm_file *raw = NULL;
    tm_err e;
    assert_int_equal(tm_open(path, &p, &raw, &e), TM_OK);
    assert_int_equal(tm_file_n_tensors(raw), 47);
    tm_close(raw);
    free(path);

    tm_close(f32);
    tm_close(f16);
    tm_close(bf);
    tm_close(sh);
    tm_close(ad);
    free(models);
}

/* The fuzz seeds (fuzz/corpus/safetensors) are valid checkpoints and stay so. */
static void test_fuzz_seeds(void **state) {
    (void)state;
    const char *src = getenv("TM_SRC");
    if (!src || !*src) {
        print_message("SKIP: TM_SRC not set\n");
        skip();
        return;
    }
    char *dir = tmst_path(src, "fuzz/corpus/safetensors");
    int n = 0;
    DIR *d = opendir(dir);
    assert_non_null(d);
    struct dirent *de;
    while ((de = readdir(d)) != NULL) {
        if (de->d_name[0] == '.') continue;
        char *p = tmst_path(dir, de->d_name);
        struct stat st;
        assert_int_equal(stat(p, &st), 0);
        assert_true(st.st_size < 4096);
        free(p);
        tm_file *f = tmst_open_in(dir, de->d_name);
        assert_int_equal(tm_file_n_warnings(f), 0);
        tm_close(f);
        n++;
    }
    closedir(d);
    assert_true(n >= 3 && n <= 12); /* the hand-made seeds; a fuzzing run left in the corpus would add many */
    tm_file *f = tmst_open_in(dir, "ct-pack-int4-group.safetensors");
    const tm_tensor *l = tmst_must_find(f, "l.weight");
    assert_int_equal(l->dtype, TM_I4);
    tmst_assert_shape2(l, 4, 16);
    assert_string_equal(l->quant->layout, "compressed-tensors/pack-quantized+g_idx");
    assert_int_equal(l->quant->gran.group_size, 8);
    assert_int_equal(tmst_must_find(f, "l.weight_g_idx")->role, TM_ROLE_AUX);
    assert_string_equal(tmst_must_find(f, "q.weight")->quant->layout,
                        "compressed-tensors/naive-quantized");
    tm_close(f);
    f = tmst_open_in(dir, "ct-int8-naive-fp8.safetensors");
    assert_int_equal(tmst_must_find(f, "p.weight")->dtype, TM_I8);
    assert_int_equal(tmst_must_find(f, "p.weight")->quant->gran.kind, TM_GRAN_CHANNEL);
    assert_string_equal(tmst_must_find(f, "k.weight")->quant->layout, "compressed-tensors/int-quantized");
    assert_string_equal(tmst_must_find(f, "f.weight")->quant->layout, "fp8/scale_inv");
    tm_close(f);
    free(dir);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_real_models),
        cmocka_unit_test(test_fuzz_seeds),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
