/* convert_vocab.c: the tokenizer.* GGUF keys of a llama SentencePiece tokenizer read from a
** Hugging Face checkpoint folder (tokenizer.model + config.json, tokenizer_config.json,
** added_tokens.json), as llama.cpp's convert_hf_to_gguf.py writes them (LlamaModel.set_vocab ->
** _set_vocab_sentencepiece / _create_vocab_sentencepiece, and gguf-py's SpecialVocab), for
** tm_convert_tokenizer_kv (tensormorph/convert.h, docs/convert.md "Tokenizer").
**
** tokenizer.model is a serialized sentencepiece ModelProto (sentencepiece_model.proto): field 1
** `pieces` (repeated SentencePiece {1 piece string, 2 score float, 3 type enum: NORMAL 1,
** UNKNOWN 2, CONTROL 3, USER_DEFINED 4, UNUSED 5, BYTE 6}), field 2 `trainer_spec` (field 35
** byte_fallback bool). Read with a small bounded protobuf wire reader: every varint, length and
** fixed field is checked against the bytes left; the rest of the message is skipped. */
#include "core/core.h"
#include "tensormorph/convert.h"
#include "tensormorph/gguf_write.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define VOC_FILE_MAX (256u << 20)   /* tokenizer.model / JSON files larger than this are refused */
#define VOC_MAX_TOKENS (1 << 24)

/* sentencepiece ModelProto.SentencePiece.Type, and gguf-py's SentencePieceTokenTypes (same ids) */
enum { SP_NORMAL = 1, SP_UNKNOWN = 2, SP_CONTROL = 3, SP_USER_DEFINED = 4, SP_UNUSED = 5, SP_BYTE = 6 };

typedef struct voc_tok {
    char  *text;   /* malloc'd, NUL-terminated (pieces are UTF-8 strings without NUL)            */
    size_t len;
    float  score;
    int    type;   /* the GGUF token type                                                    */
} voc_tok;

static char *slurp(const char *path, size_t *n, int *missing, tm_err *err) {
    *missing = 0;
    FILE *fp = fopen(path, "rb");
    if (!fp) {
        *missing = 1;
        return NULL;
    }
    struct stat st;
    char *buf = NULL;
    if (fstat(fileno(fp), &st) != 0 || !S_ISREG(st.st_mode) || (uint64_t)st.st_size > VOC_FILE_MAX) {
        tm__err_set(err, TM_E_UNSUPPORTED, -1, "%s: not a regular file of at most %u MiB", path, VOC_FILE_MAX >> 20);
    } else if (!(buf = malloc((size_t)st.st_size + 1))) {
        tm__err_set(err, TM_E_NOMEM, -1, "out of memory");
    } else if (fread(buf, 1, (size_t)st.st_size, fp) != (size_t)st.st_size) {
        tm__err_set(err, TM_E_IO, -1, "%s: read error", path);
        free(buf);
        buf = NULL;
    } else {
        buf[st.st_size] = '\0';
        *n = (size_t)st.st_size;
    }
    fclose(fp);
    return buf;
}

/* ---- protobuf wire format (protobuf.dev/programming-guides/encoding) ---- */

typedef struct pb {
    const uint8_t *b;
    size_t n, o, base; /* base: the offset of b[0] in the file, for messages */
    const char *path;
    tm_err *err;
} pb;

static tm_status pb_bad(pb *p, const char *what) {
    return tm__err_set(p->err, TM_E_CORRUPT, (int64_t)(p->base + p->o), "%s: byte %llu: %s (not a sentencepiece model)",
                       p->path, (unsigned long long)(p->base + p->o), what);
}

static tm_status pb_varint(pb *p, uint64_t *v) {
    uint64_t x = 0;
    for (int i = 0; i < 10; i++) {
        if (p->o >= p->n) return pb_bad(p, "truncated varint");
        uint8_t c = p->b[p->o++];
        x |= (uint64_t)(c & 0x7f) << (7 * i);
        if (!(c & 0x80)) {
            *v = x;
            return TM_OK;
        }
    }
    return pb_bad(p, "varint longer than 10 bytes");
}

/* One field's header; for wire type 2 *len gets the checked length, the cursor left on the data. */
static tm_status pb_field(pb *p, uint32_t *field, int *wt, uint64_t *len) {
    uint64_t tag = 0;
    tm_status s = pb_varint(p, &tag);
    if (s) return s;
    *field = (uint32_t)(tag >> 3);
    *wt = (int)(tag & 7);
    if (*field == 0) return pb_bad(p, "field number 0");
    *len = 0;
    if (*wt == 2) {
        if ((s = pb_varint(p, len))) return s;
        if (*len > p->n - p->o) return pb_bad(p, "length past the end of the message");
    }
    return TM_OK;
}

static tm_status pb_skip(pb *p, int wt, uint64_t len) {
    uint64_t v;
    switch (wt) {
    case 0: return pb_varint(p, &v);
    case 1: if (p->n - p->o < 8) return pb_bad(p, "truncated fixed64"); p->o += 8; return TM_OK;
    case 2: p->o += (size_t)len; return TM_OK;
    case 5: if (p->n - p->o < 4) return pb_bad(p, "truncated fixed32"); p->o += 4; return TM_OK;
    default: return pb_bad(p, "unsupported wire type (groups are not used by sentencepiece)");
    }
}

static int utf8_ok(const uint8_t *s, size_t n) {
    for (size_t i = 0; i < n;) {
        uint8_t c = s[i];
        size_t k = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
        if (!k || i + k > n || (k == 2 && c < 0xc2)) return 0;
        for (size_t j = 1; j < k; j++)
            if ((s[i + j] & 0xc0) != 0x80) return 0;
        if (k == 3 && ((c == 0xe0 && s[i + 1] < 0xa0) || (c == 0xed && s[i + 1] >= 0xa0))) return 0;
        if (k == 4 && ((c == 0xf0 && s[i + 1] < 0x90) || c > 0xf4 || (c == 0xf4 && s[i + 1] >= 0x90))) return 0;
        if (c == 0) return 0;
        i += k;
    }
    return 1;
}

/* One SentencePiece message of len bytes at the cursor. */
static tm_status pb_piece(pb *p, size_t len, voc_tok *t, int *sp_type, int64_t id) {
    pb q = {p->b + p->o, len, 0, p->base + p->o, p->path, p->err};
    const uint8_t *txt = NULL;
    size_t tl = 0;
    float score = 0.0f;
    uint64_t type = SP_NORMAL; /* the proto default */
    tm_status s = TM_OK;
    while (!s && q.o < q.n) {
        uint32_t f;
        int wt;
        uint64_t l = 0;
        if ((s = pb_field(&q, &f, &wt, &l))) break;
        if (f == 1 && wt == 2) {
            txt = q.b + q.o;
            tl = (size_t)l;
            q.o += (size_t)l;
        } else if (f == 2 && wt == 5) {
            if (q.n - q.o < 4) s = pb_bad(&q, "truncated score");
            else {
                memcpy(&score, q.b + q.o, 4); /* little-endian hosts (as the GGUF writer) */
                q.o += 4;
            }
        } else if (f == 3 && wt == 0) {
            s = pb_varint(&q, &type);
        } else if (f <= 3) {
            s = pb_bad(&q, "a SentencePiece field of the wrong wire type");
        } else {
            s = pb_skip(&q, wt, l);
        }
    }
    if (s) return s;
    if (type < SP_NORMAL || type > SP_BYTE)
        return tm__err_set(p->err, TM_E_CORRUPT, (int64_t)q.base, "%s: piece %lld: type %llu is not a sentencepiece type (1..6)",
                           p->path, (long long)id, (unsigned long long)type);
    if (!txt || !tl) /* sentencepiece: "piece must not be empty" */
        return tm__err_set(p->err, TM_E_CORRUPT, (int64_t)q.base, "%s: piece %lld is empty", p->path, (long long)id);
    if (!utf8_ok(txt, tl))
        return tm__err_set(p->err, TM_E_CORRUPT, (int64_t)q.base, "%s: piece %lld is not valid UTF-8", p->path, (long long)id);
    if (!(t->text = malloc(tl + 1))) return tm__err_set(p->err, TM_E_NOMEM, -1, "out of memory");
    memcpy(t->text, txt, tl);
    t->text[tl] = '\0';
    t->len = tl;
    t->score = score;
    *sp_type = (int)type;
    /* _create_vocab_sentencepiece: IsUnknown -> UNKNOWN, IsControl -> CONTROL, IsUnused -> UNUSED,
    ** IsByte -> BYTE, everything else (NORMAL, USER_DEFINED) -> NORMAL */
    t->type = type == SP_UNKNOWN || type == SP_CONTROL || type == SP_UNUSED || type == SP_BYTE ? (int)type : SP_NORMAL;
    return TM_OK;
}

static int byte_fallback(const uint8_t *b, size_t n) {
    pb q = {b, n, 0, 0, "", NULL};
    while (q.o < q.n) {
        uint32_t f;
        int wt;
        uint64_t l = 0, v = 0;
        if (pb_field(&q, &f, &wt, &l)) return 0;
        if (f == 35 && wt == 0) {
            if (pb_varint(&q, &v)) return 0;
            return v != 0;
        }
        if (pb_skip(&q, wt, l)) return 0;
    }
    return 0;
}

typedef struct piece_ref { const voc_tok *t; int reserved; int64_t id; } piece_ref;

static int cmp_ref(const void *a, const void *b) {
    const piece_ref *x = a, *y = b;
    if (x->reserved != y->reserved) return x->reserved - y->reserved;
    size_t n = x->t->len < y->t->len ? x->t->len : y->t->len;
    int c = memcmp(x->t->text, y->t->text, n);
    if (c) return c;
    return x->t->len < y->t->len ? -1 : x->t->len > y->t->len;
}

/* Parse tokenizer.model into toks[0..*np); the checks sentencepiece's loader makes
** (model_interface.cc InitializePieces): one UNKNOWN piece, pieces unique within the normal
** (NORMAL/USER_DEFINED/UNUSED) and the reserved (UNKNOWN/CONTROL/BYTE) sets, BYTE pieces only
** with trainer_spec.byte_fallback. */
static tm_status read_model(const char *path, const uint8_t *b, size_t n, voc_tok **out, int64_t *np, tm_err *err) {
    pb p = {b, n, 0, 0, path, err};
    voc_tok *t = NULL;
    int *spt = NULL;
    int64_t k = 0, cap = 0, unk = -1, n_byte = 0;
    int bf = 0;
    tm_status s = TM_OK;
    while (!s && p.o < p.n) {
        uint32_t f;
        int wt;
        uint64_t l = 0;
        if ((s = pb_field(&p, &f, &wt, &l))) break;
        if (f == 1 && wt == 2) {
            if (k == cap) {
                int64_t nc = cap ? cap * 2 : 1024;
                voc_tok *nt = nc <= VOC_MAX_TOKENS ? realloc(t, (size_t)nc * sizeof *t) : NULL;
                int *ns = nt ? realloc(spt, (size_t)nc * sizeof *ns) : NULL;
                if (nt) t = nt;
                if (ns) spt = ns;
                if (!nt || !ns) {
                    s = nc > VOC_MAX_TOKENS ? tm__err_set(err, TM_E_LIMIT, -1, "%s: more than %d pieces", path, VOC_MAX_TOKENS)
                                            : tm__err_set(err, TM_E_NOMEM, -1, "out of memory");
                    break;
                }
                cap = nc;
            }
            memset(&t[k], 0, sizeof t[k]);
            s = pb_piece(&p, (size_t)l, &t[k], &spt[k], k);
            if (s) break;
            p.o += (size_t)l;
            if (spt[k] == SP_UNKNOWN) {
                if (unk >= 0) s = tm__err_set(err, TM_E_CORRUPT, -1, "%s: pieces %lld and %lld are both UNKNOWN (sentencepiece: unk is already defined)",
                                              path, (long long)unk, (long long)k);
                unk = k;
            }
            n_byte += spt[k] == SP_BYTE;
            k++;
        } else if (f == 2 && wt == 2) {
            bf = byte_fallback(p.b + p.o, (size_t)l);
            p.o += (size_t)l;
        } else {
            s = pb_skip(&p, wt, l);
        }
    }
    if (!s && k == 0) s = tm__err_set(err, TM_E_CORRUPT, -1, "%s: no pieces (not a sentencepiece model)", path);
    if (!s && unk < 0) s = tm__err_set(err, TM_E_CORRUPT, -1, "%s: no UNKNOWN piece (sentencepiece: unk is not defined)", path);
    if (!s && n_byte && !bf)
        s = tm__err_set(err, TM_E_CORRUPT, -1, "%s: %lld BYTE pieces but trainer_spec.byte_fallback is false (sentencepiece refuses it)",
                        path, (long long)n_byte);
    if (!s) {
        piece_ref *r = malloc((size_t)k * sizeof *r);
        if (!r) s = tm__err_set(err, TM_E_NOMEM, -1, "out of memory");
        for (int64_t i = 0; r && i < k; i++) {
            r[i].t = &t[i];
            r[i].id = i;
            r[i].reserved = !(spt[i] == SP_NORMAL || spt[i] == SP_USER_DEFINED || spt[i] == SP_UNUSED);
        }
        if (r) qsort(r, (size_t)k, sizeof *r, cmp_ref);
        for (int64_t i = 1; r && i < k && !s; i++)
            if (!cmp_ref(&r[i - 1], &r[i]))
                s = tm__err_set(err, TM_E_CORRUPT, -1, "%s: piece '%.60s' is defined twice (ids %lld and %lld)", path,
                                r[i].t->text, (long long)(r[i - 1].id < r[i].id ? r[i - 1].id : r[i].id),
                                (long long)(r[i - 1].id < r[i].id ? r[i].id : r[i - 1].id));
        free(r);
    }
    free(spt);
    if (s) {
        for (int64_t i = 0; i < k; i++) free(t[i].text);
        free(t);
        return s;
    }
    *out = t;
    *np = k;
    return TM_OK;
}

/* ---- the GGUF arrays ---- */

static void put_u32(uint8_t *p, uint32_t v) { memcpy(p, &v, 4); }
static void put_u64(uint8_t *p, uint64_t v) { memcpy(p, &v, 8); }

static tm_status set_arrays(tm_gguf_kvlist *kv, const voc_tok *t, int64_t n, tm_err *err) {
    size_t bytes = 12;
    for (int64_t i = 0; i < n; i++) bytes += 8 + t[i].len;
    uint8_t *b = malloc(bytes > 12 + (size_t)n * 4 ? bytes : 12 + (size_t)n * 4);
    if (!b) return tm__err_set(err, TM_E_NOMEM, -1, "out of memory");
    put_u32(b, TM_GGUF_STRING);
    put_u64(b + 4, (uint64_t)n);
    size_t o = 12;
    for (int64_t i = 0; i < n; i++) {
        put_u64(b + o, t[i].len);
        memcpy(b + o + 8, t[i].text, t[i].len);
        o += 8 + t[i].len;
    }
    tm_status s = tm_gguf_kvlist_set_raw(kv, "tokenizer.ggml.tokens", TM_GGUF_ARRAY, b, o, err);
    put_u32(b, TM_GGUF_F32);
    for (int64_t i = 0; i < n; i++) memcpy(b + 12 + 4 * i, &t[i].score, 4);
    if (!s) s = tm_gguf_kvlist_set_raw(kv, "tokenizer.ggml.scores", TM_GGUF_ARRAY, b, 12 + (size_t)n * 4, err);
    put_u32(b, TM_GGUF_I32);
    for (int64_t i = 0; i < n; i++) {
        int32_t v = t[i].type;
        memcpy(b + 12 + 4 * i, &v, 4);
    }
    if (!s) s = tm_gguf_kvlist_set_raw(kv, "tokenizer.ggml.token_type", TM_GGUF_ARRAY, b, 12 + (size_t)n * 4, err);
    free(b);
    return s;
}

static tm_status set_tok(voc_tok *t, const char *text, float score, int type, tm_err *err) {
    size_t l = strlen(text);
    char *c = malloc(l + 1);
    if (!c) return tm__err_set(err, TM_E_NOMEM, -1, "out of memory");
    memcpy(c, text, l + 1);
    free(t->text);
    t->text = c;
    t->len = l;
    t->score = score;
    t->type = type;
    return TM_OK;
}

/* convert_hf_to_gguf.py TextModel.does_token_look_special */
static int looks_special(const char *s) {
    size_t n = strlen(s);
#define ENDS(x) (n >= strlen(x) && !strcmp(s + n - strlen(x), x))
#define STARTS(x) (!strncmp(s, x, strlen(x)))
    return !strcmp(s, "<pad>") || !strcmp(s, "<mask>") || !strcmp(s, "<2mass>") || !strcmp(s, "[@BOS@]") ||
           (STARTS("<|") && ENDS("|>")) || (STARTS("<\xef\xbd\x9c") && ENDS("\xef\xbd\x9c>")) || /* may overlap, as Python's */
           (STARTS("<unused") && ENDS(">"));
#undef ENDS
#undef STARTS
}

/* "\xe2\x96\x81" (U+2581, sentencepiece's space) -> " ", in place */
static void unspace(char *s) {
    char *w = s;
    for (const char *r = s; *r;) {
        if (!strncmp(r, "\xe2\x96\x81", 3)) {
            *w++ = ' ';
            r += 3;
        } else {
            *w++ = *r++;
        }
    }
    *w = '\0';
}

static json_t *load_json(const char *dir, const char *leaf, char *path, size_t psz, int *missing, tm_err *err) {
    snprintf(path, psz, "%s/%s", dir, leaf);
    size_t n = 0;
    char *txt = slurp(path, &n, missing, err);
    if (!txt) return NULL;
    json_error_t je;
    json_t *j = json_loadb(txt, n, 0, &je);
    free(txt);
    if (!j) tm__err_set(err, TM_E_CORRUPT, (int64_t)je.position, "%s: not valid JSON at byte %d (%s)", path, je.position, je.text);
    else if (!json_is_object(j)) {
        tm__err_set(err, TM_E_CORRUPT, 0, "%s: not a JSON object", path);
        json_decref(j);
        j = NULL;
    }
    return j;
}

/* gguf-py SpecialVocab.special_token_types and the keys GGUFWriter.add_<typ>_token_id writes */
static const char *const k_types[] = {"bos", "eos", "unk", "sep", "pad", "cls", "mask"};
static const char *const k_id_keys[] = {"tokenizer.ggml.bos_token_id", "tokenizer.ggml.eos_token_id",
                                        "tokenizer.ggml.unknown_token_id", "tokenizer.ggml.seperator_token_id",
                                        "tokenizer.ggml.padding_token_id", "tokenizer.ggml.cls_token_id",
                                        "tokenizer.ggml.mask_token_id"};

tm_status tm_convert_tokenizer_kv(const char *dir, const char *config_json, int64_t vocab_size, tm_gguf_kvlist *kv,
                                  tm_err *err) {
    char path[4200];
    int missing = 0;
    size_t n = 0;
    if (vocab_size < 1 || vocab_size > VOC_MAX_TOKENS)
        return tm__err_set(err, TM_E_INVALID_ARG, -1, "tokenizer: vocab_size %lld out of range", (long long)vocab_size);
    snprintf(path, sizeof path, "%s/tokenizer.json", dir);
    struct stat st;
    int has_json = stat(path, &st) == 0;
    snprintf(path, sizeof path, "%s/tokenizer.model", dir);
    uint8_t *b = (uint8_t *)slurp(path, &n, &missing, err);
    if (!b && missing)
        return tm__err_set(err, TM_E_UNSUPPORTED, -1,
                           "no tokenizer: %s has %s; pass --vocab-from X.gguf (a GGUF with this model's tokenizer.* keys)", dir,
                           has_json ? "a tokenizer.json but no tokenizer.model (a tokenizer.json alone is converted by "
                                      "convert_hf_to_gguf.py through the transformers library and a pre-tokenizer hash table, "
                                      "which convert does not reproduce)"
                                    : "no tokenizer.model");
    if (!b) return err->code;
    if (has_json) {
        free(b);
        return tm__err_set(err, TM_E_UNSUPPORTED, -1,
                           "%s: tokenizer.json beside tokenizer.model: convert_hf_to_gguf.py then takes special tokens and "
                           "add_bos/add_eos from tokenizer.json's added_tokens and post-processor, which convert does not "
                           "reproduce; pass --vocab-from X.gguf (a GGUF with this model's tokenizer.* keys)", dir);
    }
    voc_tok *pieces = NULL;
    int64_t np = 0;
    tm_status s = read_model(path, b, n, &pieces, &np, err);
    free(b);
    if (s) return s;
    if (np > vocab_size) {
        for (int64_t i = 0; i < np; i++) free(pieces[i].text);
        free(pieces);
        return tm__err_set(err, TM_E_UNSUPPORTED, -1, "%s: %lld pieces, but config.json's vocab_size is %lld", path, (long long)np,
                           (long long)vocab_size);
    }
    /* [PAD{i}], -10000, UNUSED for ids the model does not define (convert_hf_to_gguf.py) */
    voc_tok *t = calloc((size_t)vocab_size, sizeof *t);
    if (!t) s = tm__err_set(err, TM_E_NOMEM, -1, "out of memory");
    for (int64_t i = 0; !s && i < vocab_size; i++) {
        if (i < np) {
            t[i] = pieces[i];
            pieces[i].text = NULL;
        } else {
            char pad[32];
            snprintf(pad, sizeof pad, "[PAD%lld]", (long long)i);
            s = set_tok(&t[i], pad, -10000.0f, SP_UNUSED, err);
        }
    }
    for (int64_t i = 0; i < np; i++) free(pieces[i].text);
    free(pieces);
    /* added_tokens.json: {"text": id} -> USER_DEFINED, score -1000 */
    json_t *at = s ? NULL : load_json(dir, "added_tokens.json", path, sizeof path, &missing, err);
    if (!s && !at && !missing) s = err->code;
    const char *key;
    json_t *v;
    if (at) json_object_foreach(at, key, v) {
        if (s) break;
        if (!json_is_integer(v) || json_integer_value(v) < 0) {
            s = tm__err_set(err, TM_E_CORRUPT, -1, "%s: \"%s\": not a token id", path, key);
            break;
        }
        if (json_integer_value(v) < vocab_size) s = set_tok(&t[json_integer_value(v)], key, -1000.0f, SP_USER_DEFINED, err);
    }
    json_decref(at);
    /* tokenizer_config.json: added_tokens_decoder, add_<typ>_token, chat_template */
    json_t *tc = s ? NULL : load_json(dir, "tokenizer_config.json", path, sizeof path, &missing, err);
    if (!s && !tc && !missing) s = err->code;
    json_t *dec = tc ? json_object_get(tc, "added_tokens_decoder") : NULL;
    if (dec && !json_is_object(dec)) s = tm__err_set(err, TM_E_CORRUPT, -1, "%s: added_tokens_decoder is not an object", path);
    if (!s && dec) json_object_foreach(dec, key, v) {
        char *end = NULL;
        long long id = strtoll(key, &end, 10);
        const char *content = json_string_value(json_object_get(v, "content"));
        if (!end || *end || id < 0 || !content) {
            s = tm__err_set(err, TM_E_CORRUPT, -1, "%s: added_tokens_decoder \"%s\": not {id: {\"content\": ...}}", path, key);
            break;
        }
        if (id >= vocab_size) continue;
        char *c = tm__strdup(content);
        if (!c) {
            s = tm__err_set(err, TM_E_NOMEM, -1, "out of memory");
            break;
        }
        int special = json_is_true(json_object_get(v, "special")) || looks_special(c);
        if (!special) unspace(c);
        s = set_tok(&t[id], c, -1000.0f, special ? SP_CONTROL : SP_USER_DEFINED, err);
        free(c);
        if (s) break;
    }
    /* the keys, in convert_hf_to_gguf.py's order */
    if (!s) s = tm_gguf_kvlist_set_str(kv, "tokenizer.ggml.model", "llama", err);
    if (!s) s = tm_gguf_kvlist_set_str(kv, "tokenizer.ggml.pre", "default", err);
    if (!s) s = set_arrays(kv, t, vocab_size, err);
    /* SpecialVocab: with no tokenizer.json the ids come from config.json's <typ>_token_id (an
    ** int, 0 <= id < n_vocab), in special_token_types order */
    json_t *cfg = !s && config_json ? json_loads(config_json, 0, NULL) : NULL;
    for (size_t i = 0; !s && cfg && i < sizeof k_types / sizeof k_types[0]; i++) {
        char k[32];
        snprintf(k, sizeof k, "%s_token_id", k_types[i]);
        json_t *x = json_object_get(cfg, k);
        if (!json_is_integer(x)) continue;
        if (json_integer_value(x) < 0) {
            s = tm__err_set(err, TM_E_CORRUPT, -1, "%s/config.json: %s is negative", dir, k);
            break;
        }
        if (json_integer_value(x) < vocab_size) s = tm_gguf_kvlist_set_u32(kv, k_id_keys[i], (uint32_t)json_integer_value(x), err);
    }
    json_decref(cfg);
    /* add_bos_token / add_eos_token booleans (GGUFWriter has add_add_bos_token, add_add_eos_token) */
    static const char *const adds[][2] = {{"add_bos_token", "tokenizer.ggml.add_bos_token"},
                                          {"add_eos_token", "tokenizer.ggml.add_eos_token"}};
    for (size_t i = 0; !s && tc && i < 2; i++) {
        json_t *x = json_object_get(tc, adds[i][0]);
        if (!json_is_boolean(x)) continue;
        uint8_t bv = json_is_true(x);
        s = tm_gguf_kvlist_set_raw(kv, adds[i][1], TM_GGUF_BOOL, &bv, 1, err);
    }
    json_t *ct = tc ? json_object_get(tc, "chat_template") : NULL;
    if (!s && json_is_string(ct)) s = tm_gguf_kvlist_set_str(kv, "tokenizer.chat_template", json_string_value(ct), err);
    else if (!s && ct && !json_is_null(ct))
        s = tm__err_set(err, TM_E_UNSUPPORTED, -1, "%s: a chat_template that is not one string is not supported; pass --vocab-from", path);
    json_decref(tc);
    for (int64_t i = 0; t && i < vocab_size; i++) free(t[i].text);
    free(t);
    return s;
}
