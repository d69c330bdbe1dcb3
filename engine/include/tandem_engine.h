/* tandem_engine.h — the engine's C ABI (issue 4): enough for an independently written training loop
 * in another language (Python ctypes, Rust, Go, Julia ...) to drive tandem's C++ engine.
 *
 * Conventions
 *  - Plain C99; every function returns a tandem_status (0 = TANDEM_OK) unless it is a getter.
 *  - Handles are opaque; create with tandem_trainer_create, free with tandem_trainer_destroy
 *    (NULL is accepted and ignored). A handle may be used from one thread at a time.
 *  - On failure, tandem_last_error() returns a one-line message naming the file, field or value at
 *    fault. It is per thread and stays valid until the next failing call on that thread.
 *  - No exception, abort or exit ever crosses this boundary.
 *  - Option structs start with struct_size = sizeof(the struct) as the caller compiled it, so the
 *    library can grow them; fill them with the *_default() function first.
 *  - Token data crosses as flat int32 arrays, row-major [batch * seq], right-padded.
 * Full description: docs/engine-io.md, "The C ABI".
 */
#ifndef TANDEM_ENGINE_H
#define TANDEM_ENGINE_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define TANDEM_ENGINE_ABI_VERSION 1

typedef enum tandem_status {
    TANDEM_OK = 0,
    TANDEM_ERROR_INVALID_ARGUMENT = 1, /* NULL handle or pointer, malformed batch, bad option value */
    TANDEM_ERROR_IO = 2,               /* a file or folder missing, unreadable, malformed or unwritable */
    TANDEM_ERROR_STATE = 3,            /* the call does not fit the state: no supervised token, no checkpoint, other spec */
    TANDEM_ERROR_INTERNAL = 4          /* out of memory or an unexpected failure (a bug: please report it) */
} tandem_status;

typedef enum tandem_dropout_mode {
    TANDEM_DROPOUT_OFF = 0,    /* no dropout whatever the adapter's lora_dropout */
    TANDEM_DROPOUT_NATIVE = 1, /* the engine's own counter-based masks */
    TANDEM_DROPOUT_SHARED = 2  /* SPEC §1 shared masks keyed by (seed, update, micro-batch, layer, projection) */
} tandem_dropout_mode;

typedef struct tandem_trainer tandem_trainer;

typedef struct tandem_train_options {
    uint32_t struct_size;   /* sizeof(tandem_train_options) */
    double lr;              /* peak learning rate (1e-4) */
    double beta1, beta2;    /* AdamW betas (0.9, 0.999) */
    double eps;             /* AdamW eps (1e-8) */
    double weight_decay;    /* (0) */
    int64_t total_updates;  /* T of the cosine schedule (must be >= 1) */
    int64_t warmup_updates; /* W; < 0: ceil(0.03 * T) (-1) */
    double max_grad_norm;   /* global-norm clipping (1.0) */
    int32_t dropout_mode;   /* tandem_dropout_mode (NATIVE) */
    int32_t threads;        /* <= 0: all hardware threads (0) */
    uint64_t seed;          /* experiment seed: dropout masks (0) */
} tandem_train_options;

typedef struct tandem_micro_batch {
    int64_t batch;             /* sequences */
    int64_t seq;               /* padded length */
    const int32_t* ids;        /* [batch * seq] token ids, padding any valid id */
    const int32_t* supervised; /* [batch * seq] 1 where token t is a label (predicted from t-1), else 0 */
    const int32_t* lengths;    /* [batch] real tokens per sequence, 1..seq */
} tandem_micro_batch;

typedef struct tandem_update_metrics {
    int64_t update;            /* 0-based index of the update just done */
    double loss;               /* sum of token losses / supervised tokens of the update */
    double grad_norm;          /* pre-clip global L2 norm */
    double lr;                 /* learning rate the update ran with */
    int64_t supervised_tokens;
    double wall_seconds;
} tandem_update_metrics;

/* ---- library -------------------------------------------------------------------------------- */
uint32_t tandem_engine_abi_version(void);   /* TANDEM_ENGINE_ABI_VERSION of the library */
const char* tandem_engine_version(void);    /* tandem's version string */
const char* tandem_last_error(void);        /* "" when the thread's last failing call left none */
void tandem_train_options_default(tandem_train_options* options);

/* ---- files ---------------------------------------------------------------------------------- */
/* Writes a base checkpoint (config.json + model.safetensors) generated from `seed`; `config` is a
 * named architecture ("qwen3-0.6b", "bench-cpu", "tiny") or the path of a config.json. */
tandem_status tandem_generate_base(const char* dir, const char* config, uint64_t seed);
/* Writes the initial LoRA adapter (peft layout) for the base checkpoint in base_dir: A kaiming-
 * uniform, B zero, from `seed`. `targets` is a comma-separated list of projections, NULL = all seven. */
tandem_status tandem_generate_adapter(const char* dir, const char* base_dir, uint64_t seed, int64_t rank, double alpha,
                                      int32_t use_rslora, double dropout, const char* targets);

/* ---- training ------------------------------------------------------------------------------- */
/* Loads the base checkpoint folder (HF) and the adapter folder (peft) and makes a trainer. */
tandem_status tandem_trainer_create(const char* base_dir, const char* adapter_dir, const tandem_train_options* options,
                                    tandem_trainer** out);
void tandem_trainer_destroy(tandem_trainer* trainer);

/* One optimizer update over n micro-batches (gradient accumulation over all of them). */
tandem_status tandem_trainer_step(tandem_trainer* trainer, const tandem_micro_batch* micro_batches, size_t n,
                                  tandem_update_metrics* out);
/* Token-weighted held-out cross-entropy (dropout off, adapter on). Either output may be NULL. */
tandem_status tandem_trainer_eval(tandem_trainer* trainer, const tandem_micro_batch* micro_batches, size_t n,
                                  double* loss, int64_t* supervised_tokens);

int64_t tandem_trainer_updates_done(const tandem_trainer* trainer);  /* -1 for NULL */
int64_t tandem_trainer_num_trainable(const tandem_trainer* trainer); /* -1 for NULL */

/* Writes the current adapter in peft's layout (adapter_model.safetensors + adapter_config.json). */
tandem_status tandem_trainer_save_adapter(const tandem_trainer* trainer, const char* dir);

/* Writes leg_dir/ckpt-<updates done:06d>/ (adapter, AdamW moments, step, RNG state, manifest last).
 * `caller_state_json` (NULL or a JSON text, e.g. the caller's data cursor) is stored with it. */
tandem_status tandem_trainer_save_checkpoint(const tandem_trainer* trainer, const char* leg_dir,
                                             const char* spec_sha256, const char* caller_state_json);
/* Restores the newest checkpoint of leg_dir whose manifest verifies (older ones when a newer one is
 * damaged); refuses one written for another spec. *update_out (may be NULL) = updates done. */
tandem_status tandem_trainer_load_checkpoint(tandem_trainer* trainer, const char* leg_dir, const char* spec_sha256,
                                             int64_t* update_out);
/* The caller_state_json stored with the checkpoint last loaded ("null" when none); owned by the
 * trainer, valid until the next call on it. */
const char* tandem_trainer_checkpoint_caller_state(const tandem_trainer* trainer);

#ifdef __cplusplus
}
#endif

#endif /* TANDEM_ENGINE_H */
