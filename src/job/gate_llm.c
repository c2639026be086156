/* gate_llm.c: the gate's checks of LLM evidence (runtime node-llama-cpp, an `llm` section:
** tensormorph/evidence_llm.h) against a policy target's `llm` bounds (docs/gate.md "LLM
** evidence"): target llamacpp-cpu (llama.cpp on CPU, measured by tensormorph evidence --text),
** llm.overall and llm.slices (a name or "*") bounds on max_kld_mean, max_kld_p99,
** min_same_top1, max_ppl_ratio; the protocol of LLM evidence; latency that is not
** representative (a converted checkpoint) refused for any other target. gate.c calls these
** through gate_llm.h and reports the checks they append. */
#include "gate_llm.h"

#include <stdio.h>

/* Append one check {name, status, reason, evidence} (evidence taken; NULL: {}). */
static void put(json_t *out, const char *name, const char *status, json_t *evidence, const char *reason) {
    json_t *c = json_object();
    json_object_set_new(c, "name", json_string(name));
    json_object_set_new(c, "status", json_string(status));
    json_object_set_new(c, "reason", json_string(reason));
    json_object_set_new(c, "evidence", evidence ? evidence : json_object());
    json_array_append_new(out, c);
}

int tm__gate_llm_target(const char *target) {
    return target && !strcmp(target, TM__GATE_LLM_TARGET);
}

int tm__gate_llm_evidence(const json_t *evd) {
    const char *rn = tm__json_str(json_object_get(evd, "runtime"), "name");
    return rn && !strcmp(rn, "node-llama-cpp");
}

json_t *tm__gate_llm_spec(void) {
    json_t *s = json_object();
    json_object_set_new(s, "runtime", json_string("node-llama-cpp"));
    json_object_set_new(s, "execution_provider", json_string("cpu"));
    json_object_set_new(s, "device_kind", json_string("cpu"));
    return s;
}

#define WHY(...) do { size_t u_ = strlen(why); \
    snprintf(why + u_, sizeof why - u_, "%s", u_ ? "; " : ""); u_ = strlen(why); \
    snprintf(why + u_, sizeof why - u_, __VA_ARGS__); } while (0)

void tm__gate_llm_protocol(json_t *out, const json_t *evd, const json_t *pt) {
    const json_t *proto = json_object_get(evd, "protocol"), *models = json_object_get(evd, "models");
    json_int_t gen = json_integer_value(json_object_get(proto, "gen")), chunks = json_integer_value(json_object_get(proto, "chunks"));
    json_int_t threads = json_integer_value(json_object_get(proto, "threads")), warm = json_integer_value(json_object_get(proto, "warmup"));
    const char *tsha = tm__json_str(proto, "text_sha256");
    size_t nb = json_array_size(json_object_get(json_object_get(models, "baseline"), "decode_ms"));
    size_t nc = json_array_size(json_object_get(json_object_get(models, "candidate"), "decode_ms"));
    json_t *ev = json_object();
    json_object_set_new(ev, "ctx", json_integer(json_integer_value(json_object_get(proto, "ctx"))));
    json_object_set_new(ev, "chunks", json_integer(chunks));
    json_object_set_new(ev, "gen", json_integer(gen));
    json_object_set_new(ev, "threads", json_integer(threads));
    json_object_set_new(ev, "warmup", json_integer(warm));
    json_object_set_new(ev, "text_sha256", tsha ? json_string(tsha) : json_null());
    json_object_set_new(ev, "baseline_samples", json_integer((json_int_t)nb));
    json_object_set_new(ev, "candidate_samples", json_integer((json_int_t)nc));
    char why[1000] = "";
    json_int_t want = gen * chunks;
    if ((json_int_t)nb != want) WHY("baseline has %zu decode samples, the protocol's gen x chunks = %lld", nb, (long long)want);
    if ((json_int_t)nc != want) WHY("candidate has %zu decode samples, the protocol's gen x chunks = %lld", nc, (long long)want);
    const json_t *req = json_object_get(pt, "protocol"), *v;
    if ((v = json_object_get(req, "threads")) && json_integer_value(v) != threads)
        WHY("threads %lld, the policy requires %lld", (long long)threads, (long long)json_integer_value(v));
    if ((v = json_object_get(req, "min_warmup")) && warm < json_integer_value(v))
        WHY("warmup %lld < the policy's min_warmup %lld", (long long)warm, (long long)json_integer_value(v));
    if ((v = json_object_get(req, "inputs_sha256")) && (!tsha || strcmp(tsha, json_string_value(v))))
        WHY("text_sha256 %.12s... differs from the policy's inputs_sha256 %.12s...", tsha ? tsha : "?", json_string_value(v));
    if (json_object_get(req, "min_runs")) WHY("min_runs applies to ONNX evidence; LLM evidence has gen x chunks decode samples");
    if (json_object_get(req, "min_inputs")) WHY("min_inputs applies to ONNX evidence; LLM evidence has no input sample sets");
    if (why[0]) put(out, "evidence.protocol", "fail", ev, why);
    else {
        snprintf(why, sizeof why, "LLM protocol: ctx %lld, %lld chunks, %lld decode steps per chunk, %lld threads, warmup %lld",
                 (long long)json_integer_value(json_object_get(proto, "ctx")), (long long)chunks, (long long)gen,
                 (long long)threads, (long long)warm);
        put(out, "evidence.protocol", "pass", ev, why);
    }
}

/* One llm stats object {kld: {mean, p99}, same_top1, ppl_ratio} against one bound; reasons go to why. */
static void llm_against(const json_t *st, const json_t *bound, const char *where, char *why, size_t n, json_t *ev) {
    static const struct { const char *bkey, *skey, *sub; int is_min; } B[] = {
        {"max_kld_mean", "mean", "kld", 0}, {"max_kld_p99", "p99", "kld", 0},
        {"min_same_top1", "same_top1", NULL, 1}, {"max_ppl_ratio", "ppl_ratio", NULL, 0}};
    for (size_t q = 0; q < sizeof B / sizeof B[0]; q++) {
        const json_t *bv = json_object_get(bound, B[q].bkey);
        if (!bv) continue;
        const json_t *sv = json_object_get(B[q].sub ? json_object_get(st, B[q].sub) : st, B[q].skey);
        char key[64];
        snprintf(key, sizeof key, "%s%s%s", B[q].sub ? B[q].sub : "", B[q].sub ? "." : "", B[q].skey);
        json_object_set_new(ev, key, json_is_number(sv) ? json_real(json_number_value(sv)) : json_null());
        size_t u = strlen(why);
        if (!json_is_number(sv))
            snprintf(why + u, n - u, "%s%s: %s is null (NaN probabilities or nothing scored: %lld NaN positions), bound %s %.6g",
                     u ? "; " : "", where, key, (long long)json_integer_value(json_object_get(st, "nan_positions")), B[q].bkey,
                     json_number_value(bv));
        else if (B[q].is_min ? json_number_value(sv) < json_number_value(bv) : json_number_value(sv) > json_number_value(bv))
            snprintf(why + u, n - u, "%s%s: %s %.6g %s %s %.6g", u ? "; " : "", where, key, json_number_value(sv),
                     B[q].is_min ? "<" : ">", B[q].bkey, json_number_value(bv));
    }
}

static void check_llm_overall(json_t *out, const json_t *llm, const json_t *bound) {
    char why[1200] = "";
    json_t *ev = json_object();
    const json_t *ov = json_object_get(llm, "overall");
    if (!ov) { put(out, "llm.overall", "fail", ev, "missing evidence: the evidence has no llm.overall"); return; }
    llm_against(ov, bound, "overall", why, sizeof why, ev);
    if (why[0]) put(out, "llm.overall", "fail", ev, why);
    else put(out, "llm.overall", "pass", ev, "overall KLD, top-1 and PPL ratio within the policy");
}

static void check_llm_slices(json_t *out, const json_t *llm, const json_t *ps) {
    const json_t *es = json_object_get(llm, "slices");
    char why[1600] = "";
    json_t *ev = json_object();
    const char *sn;
    json_t *b, *s;
    int n_checked = 0;
    json_object_foreach((json_t *)ps, sn, b) {
        if (!strcmp(sn, "*")) continue;
        if (!(s = json_object_get(es, sn))) { WHY("missing evidence: no llm slice '%s'", sn); continue; }
        char where[160];
        snprintf(where, sizeof where, "slice '%s'", sn);
        json_t *sev = json_object();
        llm_against(s, b, where, why, sizeof why, sev);
        json_object_set_new(ev, sn, sev);
        n_checked++;
    }
    const json_t *star = json_object_get(ps, "*");
    if (star) {
        if (json_object_size(es) == 0) WHY("missing evidence: the policy bounds every llm slice but the evidence has none");
        json_object_foreach((json_t *)es, sn, s) {
            char where[160];
            snprintf(where, sizeof where, "slice '%s'", sn);
            json_t *sev = json_object_get(ev, sn);
            if (!sev) { sev = json_object(); json_object_set_new(ev, sn, sev); }
            llm_against(s, star, where, why, sizeof why, sev);
            n_checked++;
        }
    }
    if (why[0]) put(out, "llm.slices", "fail", ev, why);
    else {
        snprintf(why, sizeof why, "%d llm slice check%s within budget", n_checked, n_checked == 1 ? "" : "s");
        put(out, "llm.slices", "pass", ev, why);
    }
}

void tm__gate_check_llm(json_t *out, const json_t *evd, const json_t *pt, const char *target) {
    /* latency of a converted checkpoint (dequantized weights) says nothing about other runtimes */
    if (evd && tm__gate_llm_evidence(evd) && !tm__gate_llm_target(target) &&
        (json_object_get(pt, "latency_ms") || json_object_get(pt, "peak_rss_bytes"))) {
        const json_t *models = json_object_get(evd, "models");
        const char *who[2] = {"baseline", "candidate"};
        char why[600] = "";
        for (int i = 0; i < 2; i++) {
            const json_t *lr = json_object_get(json_object_get(models, who[i]), "latency_representative");
            if (!json_is_true(lr))
                WHY("the %s's latency_representative is %s: its latency was measured on llama.cpp CPU with dequantized "
                    "weights and is accepted only for target " TM__GATE_LLM_TARGET, who[i], lr ? "false" : "missing");
        }
        if (why[0]) put(out, "latency.representative", "fail", json_object(), why);
    }
    const json_t *pl = json_object_get(pt, "llm");
    if (!pl) return;
    const json_t *po = json_object_get(pl, "overall"), *ps = json_object_get(pl, "slices");
    const char *name = po ? "llm.overall" : "llm.slices";
    if (!evd) { put(out, name, "not_run", NULL, "needs the evidence"); return; }
    const json_t *llm = json_object_get(evd, "llm");
    if (!llm) {
        char why[600];
        snprintf(why, sizeof why, "missing evidence: the policy bounds llm.%s%s%s but the evidence has no llm section "
                 "(runtime %s; LLM evidence comes from tensormorph evidence BASE.gguf CAND.gguf --text FILE)",
                 po ? "overall" : "", po && ps ? " and llm." : "", ps ? "slices" : "",
                 tm__json_str(json_object_get(evd, "runtime"), "name") ? tm__json_str(json_object_get(evd, "runtime"), "name") : "?");
        if (po) put(out, "llm.overall", "fail", json_object(), why);
        if (ps) put(out, "llm.slices", "fail", json_object(), why);
        return;
    }
    if (po) check_llm_overall(out, llm, po);
    if (ps) check_llm_slices(out, llm, ps);
}
