/* The C ABI driven from C (compiled as C99): generate a tiny base and adapter, train, evaluate,
 * checkpoint, resume in a fresh handle and check the resumed run equals the straight one bit for
 * bit; every error path returns its status and a message naming what is wrong. */
#include "tandem_engine.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int failures = 0;
#define CHECK(cond, ...)                                                   \
    do {                                                                   \
        if (!(cond)) {                                                     \
            ++failures;                                                    \
            fprintf(stderr, "%s:%d: CHECK(%s) failed: ", __FILE__, __LINE__, #cond); \
            fprintf(stderr, __VA_ARGS__);                                  \
            fprintf(stderr, " [last error: %s]\n", tandem_last_error());  \
        }                                                                  \
    } while (0)
#define OK(call) CHECK((call) == TANDEM_OK, "%s", #call)

enum { B = 2, S = 12, MBS = 2, VOCAB = 97, UPDATES = 6, SPLIT = 3 };
static int32_t ids[MBS][B * S], sup[MBS][B * S], lens[MBS][B];
static tandem_micro_batch batches[MBS];

static void make_batches(void) {
    for (int m = 0; m < MBS; ++m) {
        for (int b = 0; b < B; ++b) {
            lens[m][b] = S - 3 * b - m;  /* right padding of different lengths */
            for (int t = 0; t < S; ++t) {
                ids[m][b * S + t] = (int32_t)((7 * m + 13 * b + 5 * t * t + 1) % VOCAB);
                sup[m][b * S + t] = (t >= 4 && t < lens[m][b]) ? 1 : 0;
            }
        }
        batches[m].batch = B;
        batches[m].seq = S;
        batches[m].ids = ids[m];
        batches[m].supervised = sup[m];
        batches[m].lengths = lens[m];
    }
}

static long file_bytes(const char* path, unsigned char** out) {
    FILE* f = fopen(path, "rb");
    if (!f) return -1;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    *out = malloc((size_t)n);
    if (fread(*out, 1, (size_t)n, f) != (size_t)n) n = -1;
    fclose(f);
    return n;
}

static tandem_trainer* make_trainer(const char* base, const char* adapter) {
    tandem_train_options o;
    tandem_train_options_default(&o);
    o.lr = 1e-2; /* large enough that every update changes the adapter visibly */
    o.total_updates = UPDATES;
    o.warmup_updates = 1;
    o.dropout_mode = TANDEM_DROPOUT_NATIVE;
    o.seed = 7;
    o.threads = 2;
    tandem_trainer* t = NULL;
    OK(tandem_trainer_create(base, adapter, &o, &t));
    return t;
}

int main(void) {
    char root[] = "/tmp/tandem-c-abi-XXXXXX";
    if (!mkdtemp(root)) return 2;
    char cfg[256], base[256], adapter[256], leg[256], out_a[256], out_c[256], path[512];
    snprintf(cfg, sizeof cfg, "%s/config.json", root);
    snprintf(base, sizeof base, "%s/base", root);
    snprintf(adapter, sizeof adapter, "%s/init", root);
    snprintf(leg, sizeof leg, "%s/leg", root);
    snprintf(out_a, sizeof out_a, "%s/final-straight", root);
    snprintf(out_c, sizeof out_c, "%s/final-resumed", root);
    FILE* f = fopen(cfg, "w");
    fprintf(f, "{\"model_type\": \"qwen3\", \"vocab_size\": %d, \"hidden_size\": 32, \"intermediate_size\": 48, "
               "\"num_hidden_layers\": 2, \"num_attention_heads\": 4, \"num_key_value_heads\": 2, \"head_dim\": 8, "
               "\"tie_word_embeddings\": true, \"rope_theta\": 1000000.0}\n", VOCAB);
    fclose(f);

    CHECK(tandem_engine_abi_version() == TANDEM_ENGINE_ABI_VERSION, "abi version");
    CHECK(strlen(tandem_engine_version()) > 0, "version");
    OK(tandem_generate_base(base, cfg, 11));
    OK(tandem_generate_adapter(adapter, base, 1234, 4, 8.0, 1, 0.1, NULL));
    make_batches();

    /* Straight run: UPDATES updates. */
    tandem_trainer* a = make_trainer(base, adapter);
    CHECK(tandem_trainer_num_trainable(a) == 2 * (4 * (32 + 32) + 4 * (32 + 16) * 2 + 4 * (32 + 32) + 4 * (32 + 48) * 3),
          "trainable %lld", (long long)tandem_trainer_num_trainable(a));
    double eval0 = 0;
    int64_t eval_tokens = 0;
    OK(tandem_trainer_eval(a, batches, MBS, &eval0, &eval_tokens));
    int64_t expected_tokens = 0;
    for (int m = 0; m < MBS; ++m)
        for (int c = 0; c < B * S; ++c) expected_tokens += sup[m][c];
    CHECK(eval_tokens == expected_tokens, "eval tokens %lld vs %lld", (long long)eval_tokens, (long long)expected_tokens);
    /* B = 0 at init, so the model is the generated base: loss near ln(vocab) for 0.02-scale weights. */
    CHECK(fabs(eval0 - log((double)VOCAB)) < 0.05, "initial eval %f vs ln(V) %f", eval0, log((double)VOCAB));
    tandem_update_metrics straight[UPDATES];
    for (int u = 0; u < UPDATES; ++u) OK(tandem_trainer_step(a, batches, MBS, &straight[u]));
    CHECK(straight[0].lr == 0.0 && straight[1].lr > 0.0, "schedule: lr %g then %g", straight[0].lr, straight[1].lr);
    CHECK(straight[UPDATES - 1].loss < straight[0].loss, "loss %f -> %f", straight[0].loss, straight[UPDATES - 1].loss);
    CHECK(straight[2].supervised_tokens == expected_tokens, "tokens");
    CHECK(tandem_trainer_updates_done(a) == UPDATES, "updates done");
    OK(tandem_trainer_save_adapter(a, out_a));

    /* Interrupted run: SPLIT updates, checkpoint, a fresh handle resumes and finishes. */
    tandem_trainer* b = make_trainer(base, adapter);
    for (int u = 0; u < SPLIT; ++u) OK(tandem_trainer_step(b, batches, MBS, NULL));
    OK(tandem_trainer_save_checkpoint(b, leg, "spec-abc", "{\"cursor\": 3}"));
    tandem_trainer_destroy(b);
    tandem_trainer* c = make_trainer(base, adapter);
    int64_t resumed_at = -1;
    OK(tandem_trainer_load_checkpoint(c, leg, "spec-abc", &resumed_at));
    CHECK(resumed_at == SPLIT, "resumed at %lld", (long long)resumed_at);
    CHECK(strcmp(tandem_trainer_checkpoint_caller_state(c), "{\"cursor\":3}") == 0, "caller state %s",
          tandem_trainer_checkpoint_caller_state(c));
    for (int u = SPLIT; u < UPDATES; ++u) {
        tandem_update_metrics m;
        OK(tandem_trainer_step(c, batches, MBS, &m));
        CHECK(m.update == u, "update index");
        CHECK(memcmp(&m.loss, &straight[u].loss, sizeof(double)) == 0, "update %d loss %.17g vs %.17g", u, m.loss,
              straight[u].loss);
        CHECK(memcmp(&m.grad_norm, &straight[u].grad_norm, sizeof(double)) == 0, "update %d grad norm", u);
    }
    OK(tandem_trainer_save_adapter(c, out_c));
    unsigned char *fa = NULL, *fc = NULL;
    snprintf(path, sizeof path, "%s/adapter_model.safetensors", out_a);
    long na = file_bytes(path, &fa);
    snprintf(path, sizeof path, "%s/adapter_model.safetensors", out_c);
    long nc = file_bytes(path, &fc);
    CHECK(na > 0 && na == nc && memcmp(fa, fc, (size_t)na) == 0, "resumed adapter file differs from the straight one");
    free(fa);
    free(fc);

    /* Error paths. */
    tandem_update_metrics m;
    CHECK(tandem_trainer_step(NULL, batches, MBS, &m) == TANDEM_ERROR_INVALID_ARGUMENT, "null handle");
    CHECK(strstr(tandem_last_error(), "trainer is NULL") != NULL, "message");
    CHECK(tandem_trainer_step(a, batches, 0, &m) == TANDEM_ERROR_INVALID_ARGUMENT, "no micro-batch");
    ids[1][5] = VOCAB + 3;
    CHECK(tandem_trainer_step(a, batches, MBS, &m) == TANDEM_ERROR_INVALID_ARGUMENT, "id outside the vocabulary");
    CHECK(strstr(tandem_last_error(), "micro-batch 1") != NULL, "message names the micro-batch");
    ids[1][5] = 1;
    sup[0][0] = 2;
    CHECK(tandem_trainer_step(a, batches, MBS, &m) == TANDEM_ERROR_INVALID_ARGUMENT, "supervised not 0/1");
    sup[0][0] = 0;
    CHECK(tandem_trainer_updates_done(a) == UPDATES, "failed steps must not count");
    tandem_trainer* none = (tandem_trainer*)1;
    CHECK(tandem_trainer_create("/nonexistent/base", adapter, NULL, &none) == TANDEM_ERROR_IO, "missing base");
    CHECK(none == NULL, "out cleared on failure");
    CHECK(strstr(tandem_last_error(), "/nonexistent/base") != NULL, "message names the folder");
    tandem_train_options bad;
    tandem_train_options_default(&bad);
    bad.struct_size = 3;
    CHECK(tandem_trainer_create(base, adapter, &bad, &none) == TANDEM_ERROR_INVALID_ARGUMENT, "struct_size");
    CHECK(tandem_trainer_load_checkpoint(a, leg, "other-spec", NULL) == TANDEM_ERROR_STATE, "other spec");
    CHECK(strstr(tandem_last_error(), "refusing") != NULL, "message says it refuses");
    snprintf(path, sizeof path, "%s/empty-leg", root);
    CHECK(tandem_trainer_load_checkpoint(a, path, "spec-abc", NULL) == TANDEM_ERROR_STATE, "no checkpoint");
    CHECK(strstr(tandem_last_error(), "no checkpoint to resume from") != NULL, "message");
    CHECK(tandem_trainer_save_checkpoint(a, leg, "spec-abc", "{not json") == TANDEM_ERROR_INVALID_ARGUMENT, "bad JSON");
    CHECK(tandem_generate_base(path, "no-such-config", 1) == TANDEM_ERROR_INVALID_ARGUMENT, "unknown config");
    CHECK(tandem_generate_adapter(path, base, 1, 4, 8.0, 1, 0.0, "q_proj,lm_head") == TANDEM_ERROR_INVALID_ARGUMENT,
          "unknown target");
    tandem_trainer_destroy(NULL);
    tandem_trainer_destroy(a);
    tandem_trainer_destroy(c);

    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", root);
    if (failures == 0 && system(cmd) != 0) fprintf(stderr, "could not remove %s\n", root);
    if (failures) fprintf(stderr, "%d check(s) failed (files kept in %s)\n", failures, root);
    else printf("test_c_abi: all checks passed\n");
    return failures ? 1 : 0;
}
