/* tandem_engine.h — the engine's C ABI (docs/engine-io.md): enough for an independently written training loop
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
    TANDEM_DROPOUT_SHARED = 2  /* docs/spec.md §Recipe shared masks keyed by (seed, update, micro-batch, layer, projection) */
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

/* ---- the model, for a caller's own training loop ------------------------------------------------
 * A frozen base + LoRA model whose adapter parameters the CALLER owns (the SDK legs, sdk/): the caller
 * builds the flat parameter vector itself (tandem_model_adapter_tensor gives each peft tensor's name,
 * shape and offset in it), hands it over with tandem_model_set_params before computing, and gets the
 * gradient of each micro-batch back. Accumulation, clipping, the optimizer, the schedule and
 * checkpoints are the caller's; the engine only computes. Added in ABI 1 (tandem_model_* exist when
 * tandem_engine_has_model() returns 1). */
typedef struct tandem_model tandem_model;

typedef struct tandem_model_options {
    uint32_t struct_size;   /* sizeof(tandem_model_options) */
    int64_t rank;           /* LoRA rank (16) */
    double alpha;           /* LoRA alpha (32) */
    int32_t use_rslora;     /* scaling alpha/sqrt(r) when 1, alpha/r when 0 (1) */
    double dropout;         /* adapter-input dropout probability (0.05) */
    const char* targets;    /* comma-separated projections; NULL = all seven (NULL) */
    int32_t dropout_mode;   /* tandem_dropout_mode for training passes (SHARED) */
    int32_t threads;        /* <= 0: all hardware threads (0) */
    uint64_t seed;          /* experiment seed: dropout masks (0) */
} tandem_model_options;

int32_t tandem_engine_has_model(void);  /* 1: this library has the tandem_model_* calls */
void tandem_model_options_default(tandem_model_options* options);
/* Loads the base checkpoint folder (HF; float32, float16 or bfloat16 files, upcast to float32). The
 * adapter starts at zero until tandem_model_set_params. */
tandem_status tandem_model_create(const char* base_dir, const tandem_model_options* options, tandem_model** out);
void tandem_model_destroy(tandem_model* model);

int64_t tandem_model_vocab_size(const tandem_model* model);         /* -1 for NULL */
int64_t tandem_model_num_params(const tandem_model* model);         /* flat adapter length; -1 for NULL */
int64_t tandem_model_num_adapter_tensors(const tandem_model* model); /* -1 for NULL */
/* Adapter tensor i (0 <= i < num_adapter_tensors) in the flat layout: its peft name (valid while the
 * model lives), shape [rows, cols] and offset (in floats) into the parameter / gradient vectors. */
tandem_status tandem_model_adapter_tensor(const tandem_model* model, int64_t i, const char** name, int64_t* rows,
                                          int64_t* cols, int64_t* offset);
int64_t tandem_model_num_base_tensors(const tandem_model* model);    /* -1 for NULL */
/* The L2 digest of base tensor i as the engine loaded it (float32; names sorted): name, ndim and shape
 * (up to 4 dimensions), sum, sum of squares and max |x| accumulated in float64, and the sha256 (hex)
 * of its float32 little-endian bytes. Strings stay valid while the model lives; outputs may be NULL. */
tandem_status tandem_model_base_tensor(const tandem_model* model, int64_t i, const char** name, int32_t* ndim,
                                       int64_t shape[4], double* sum, double* sumsq, double* maxabs,
                                       const char** sha256_hex);

/* Copies the caller's flat adapter parameters (n = num_params floats) into the model. */
tandem_status tandem_model_set_params(tandem_model* model, const float* params, int64_t n);
/* Forward + fused cross-entropy over one micro-batch with the training dropout of (update, micro_batch)
 * (shared masks are keyed by them; native masks advance the model's counter), then the backward pass:
 * grads[0..n) is OVERWRITTEN with grad_scale * d(sum of token losses)/d(params). grads NULL: forward
 * only. loss_sum: sum of token losses (unscaled); supervised: labels in the micro-batch. */
tandem_status tandem_model_forward_backward(tandem_model* model, const tandem_micro_batch* micro_batch, int64_t update,
                                            int64_t micro_batch_index, double grad_scale, float* grads, int64_t n,
                                            double* loss_sum, int64_t* supervised);
/* Sum of token losses over one micro-batch, dropout off, adapter on (evaluation). */
tandem_status tandem_model_loss(tandem_model* model, const tandem_micro_batch* micro_batch, double* loss_sum,
                                int64_t* supervised);
/* The native-dropout element counter (for the caller's checkpoints); unused with shared masks. */
uint64_t tandem_model_dropout_counter(const tandem_model* model);
void tandem_model_set_dropout_counter(tandem_model* model, uint64_t counter);

#ifdef __cplusplus
}
#endif

#endif /* TANDEM_ENGINE_H */
