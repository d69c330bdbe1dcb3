// The C ABI (tandem_engine.h) over the C++ Trainer and the engine I/O library. Every entry point
// catches everything: no exception crosses into C. Errors become a status plus a per-thread message.
#include "tandem_engine.h"
#include "tandem/strict_json.h"

#include "tandem/atomic_file.h"
#include "tandem/engine/checkpoint.h"
#include "tandem/engine/generate.h"
#include "tandem/engine/io.h"
#include "tandem/engine/trainer.h"
#include "tandem/error.h"
#include "tandem/engine/ops.h"
#include "tandem/sha256.h"
#include "tandem/version.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <filesystem>
#include <limits>
#include <new>
#include <sstream>
#include <string>

namespace eng = tandem::engine;
namespace fs = std::filesystem;
using nlohmann::json;

struct tandem_model {
    struct BaseDigest {
        std::string name;
        std::vector<int64_t> shape;
        double sum = 0, sumsq = 0, maxabs = 0;
        std::string sha256;
    };
    eng::Qwen3Config config;
    eng::LoraConfig lora;
    std::unique_ptr<eng::Qwen3LoraModel> model;
    std::vector<BaseDigest> base;  // digests of the base as loaded, names sorted
    eng::DropoutMode dropout_mode = eng::DropoutMode::Shared;
    uint64_t seed = 0;
    uint64_t native_counter = 0;
};

struct tandem_trainer {
    eng::Trainer trainer;
    eng::Qwen3Config config;
    eng::LoraConfig lora;
    std::string base_dir;
    std::string caller_state = "null";
};

namespace {

thread_local std::string g_last_error;

// An error the caller can act on, with the status it maps to.
struct AbiError {
    tandem_status status;
    std::string message;
};

[[noreturn]] void fail(tandem_status status, const std::string& message) { throw AbiError{status, message}; }

// Runs `body`; a tandem::Error thrown inside becomes `error_status` (the failure class of that call
// phase), AbiError keeps its own status, anything else is INTERNAL.
template <class F>
tandem_status guarded(tandem_status error_status, F&& body) {
    try {
        body();
        return TANDEM_OK;
    } catch (const AbiError& e) {
        g_last_error = e.message;
        return e.status;
    } catch (const tandem::Error& e) {
        g_last_error = e.what();
        return error_status;
    } catch (const std::bad_alloc&) {
        g_last_error = "out of memory";
        return TANDEM_ERROR_INTERNAL;
    } catch (const std::exception& e) {
        g_last_error = std::string("internal error: ") + e.what();
        return TANDEM_ERROR_INTERNAL;
    } catch (...) {
        g_last_error = "internal error: unknown exception";
        return TANDEM_ERROR_INTERNAL;
    }
}

void need(const void* p, const char* what) {
    if (!p) fail(TANDEM_ERROR_INVALID_ARGUMENT, std::string(what) + " is NULL");
}

eng::Qwen3Config config_from_arg(const std::string& s) {
    if (fs::exists(s)) {
        const std::string text = tandem::read_file(s);
        json j;
        try {
            j = json::parse(text);
        } catch (const json::exception& e) {
            throw tandem::Error(s + ": not valid JSON (" + tandem::json_error_text(e) + ")");
        }
        return eng::Qwen3Config::from_json(j, s);
    }
    return eng::Qwen3Config::named(s);
}

eng::TrainOptions train_options(const tandem_train_options* o) {
    tandem_train_options d;
    tandem_train_options_default(&d);
    if (o) {
        if (o->struct_size < offsetof(tandem_train_options, seed) + sizeof(uint64_t) || o->struct_size > sizeof d)
            fail(TANDEM_ERROR_INVALID_ARGUMENT, "tandem_train_options.struct_size " + std::to_string(o->struct_size) +
                                                    " is not a size this library knows (expected " +
                                                    std::to_string(sizeof d) + ")");
        std::memcpy(&d, o, o->struct_size);
    }
    eng::TrainOptions t;
    t.lr = d.lr;
    t.adamw.beta1 = d.beta1;
    t.adamw.beta2 = d.beta2;
    t.adamw.eps = d.eps;
    t.adamw.weight_decay = d.weight_decay;
    t.total_updates = d.total_updates;
    t.warmup_updates = d.warmup_updates;
    t.max_grad_norm = d.max_grad_norm;
    switch (d.dropout_mode) {
        case TANDEM_DROPOUT_OFF: t.dropout_mode = eng::DropoutMode::Off; break;
        case TANDEM_DROPOUT_NATIVE: t.dropout_mode = eng::DropoutMode::Native; break;
        case TANDEM_DROPOUT_SHARED: t.dropout_mode = eng::DropoutMode::Shared; break;
        default: fail(TANDEM_ERROR_INVALID_ARGUMENT, "dropout_mode " + std::to_string(d.dropout_mode) + " is not 0, 1 or 2");
    }
    t.threads = d.threads;
    t.seed = d.seed;
    if (!(t.lr >= 0.0) || t.total_updates < 1 || !(t.max_grad_norm > 0.0))
        fail(TANDEM_ERROR_INVALID_ARGUMENT, "options: lr must be >= 0, total_updates >= 1, max_grad_norm > 0");
    return t;
}

std::vector<eng::MicroBatch> micro_batches(const tandem_micro_batch* mbs, size_t n, int64_t vocab) {
    if (n > 0) need(mbs, "micro_batches");
    std::vector<eng::MicroBatch> out;
    out.reserve(n);
    for (size_t i = 0; i < n; ++i) {
        const tandem_micro_batch& m = mbs[i];
        const std::string where = "micro-batch " + std::to_string(i) + ": ";
        if (m.batch <= 0 || m.seq <= 0 || m.batch > std::numeric_limits<int32_t>::max() / m.seq)
            fail(TANDEM_ERROR_INVALID_ARGUMENT, where + "batch and seq must be positive (got " + std::to_string(m.batch) +
                                                    " x " + std::to_string(m.seq) + ")");
        need(m.ids, (where + "ids").c_str());
        need(m.supervised, (where + "supervised").c_str());
        need(m.lengths, (where + "lengths").c_str());
        const auto cells = static_cast<size_t>(m.batch * m.seq);
        eng::MicroBatch b;
        b.batch = m.batch;
        b.seq = m.seq;
        b.ids.assign(m.ids, m.ids + cells);
        b.lengths.assign(m.lengths, m.lengths + m.batch);
        b.supervised.resize(cells);
        for (size_t c = 0; c < cells; ++c) {
            if (m.supervised[c] != 0 && m.supervised[c] != 1)
                fail(TANDEM_ERROR_INVALID_ARGUMENT, where + "supervised[" + std::to_string(c) + "] is " +
                                                        std::to_string(m.supervised[c]) + ", not 0 or 1");
            b.supervised[c] = static_cast<uint8_t>(m.supervised[c]);
        }
        try {
            b.validate(vocab);
        } catch (const tandem::Error& e) {
            fail(TANDEM_ERROR_INVALID_ARGUMENT, where + e.what());
        }
        out.push_back(std::move(b));
    }
    return out;
}

eng::DropoutMode dropout_mode_of(int32_t mode) {
    switch (mode) {
        case TANDEM_DROPOUT_OFF: return eng::DropoutMode::Off;
        case TANDEM_DROPOUT_NATIVE: return eng::DropoutMode::Native;
        case TANDEM_DROPOUT_SHARED: return eng::DropoutMode::Shared;
        default: fail(TANDEM_ERROR_INVALID_ARGUMENT, "dropout_mode " + std::to_string(mode) + " is not 0, 1 or 2");
    }
}

// "q_proj,v_proj" -> the engine's target list in its canonical order; NULL -> all seven.
std::vector<std::string> parse_targets(const char* targets) {
    if (!targets) return eng::all_lora_targets();
    std::vector<std::string> want;
    std::stringstream ss(targets);
    for (std::string t; std::getline(ss, t, ',');)
        if (!t.empty()) want.push_back(t);
    for (const auto& w : want) {
        try {
            eng::projection_block(w);
        } catch (const tandem::Error& e) {
            fail(TANDEM_ERROR_INVALID_ARGUMENT, std::string("targets: ") + e.what());
        }
    }
    std::vector<std::string> out;
    for (const auto& t : eng::all_lora_targets())
        if (std::find(want.begin(), want.end(), t) != want.end()) out.push_back(t);
    if (out.empty()) fail(TANDEM_ERROR_INVALID_ARGUMENT, "targets: empty list");
    return out;
}

// One micro-batch (validated) from the C struct.
eng::MicroBatch one_micro_batch(const tandem_micro_batch* mb, int64_t vocab) {
    need(mb, "micro_batch");
    return std::move(micro_batches(mb, 1, vocab).front());
}

}  // namespace

extern "C" {

uint32_t tandem_engine_abi_version(void) { return TANDEM_ENGINE_ABI_VERSION; }
const char* tandem_engine_version(void) { return TANDEM_VERSION; }
const char* tandem_last_error(void) { return g_last_error.c_str(); }

void tandem_train_options_default(tandem_train_options* o) {
    if (!o) return;
    std::memset(o, 0, sizeof *o);
    o->struct_size = sizeof *o;
    o->lr = 1e-4;
    o->beta1 = 0.9;
    o->beta2 = 0.999;
    o->eps = 1e-8;
    o->weight_decay = 0.0;
    o->total_updates = 1;
    o->warmup_updates = -1;
    o->max_grad_norm = 1.0;
    o->dropout_mode = TANDEM_DROPOUT_NATIVE;
    o->threads = 0;
    o->seed = 0;
}

tandem_status tandem_generate_base(const char* dir, const char* config, uint64_t seed) {
    return guarded(TANDEM_ERROR_IO, [&] {
        need(dir, "dir");
        need(config, "config");
        eng::Qwen3Config c;
        try {
            c = config_from_arg(config);
        } catch (const tandem::Error& e) {
            fail(fs::exists(config) ? TANDEM_ERROR_IO : TANDEM_ERROR_INVALID_ARGUMENT, e.what());
        }
        eng::write_generated_base(dir, c, seed);
    });
}

tandem_status tandem_generate_adapter(const char* dir, const char* base_dir, uint64_t seed, int64_t rank, double alpha,
                                      int32_t use_rslora, double dropout, const char* targets) {
    return guarded(TANDEM_ERROR_IO, [&] {
        need(dir, "dir");
        need(base_dir, "base_dir");
        eng::LoraConfig l;
        l.rank = rank;
        l.alpha = alpha;
        l.use_rslora = use_rslora != 0;
        l.dropout = dropout;
        if (rank < 1 || !(alpha > 0.0) || !(dropout >= 0.0 && dropout < 1.0))
            fail(TANDEM_ERROR_INVALID_ARGUMENT, "adapter: rank must be >= 1, alpha > 0, dropout in [0, 1)");
        if (targets) {
            std::vector<std::string> want;
            std::stringstream ss(targets);
            for (std::string t; std::getline(ss, t, ',');)
                if (!t.empty()) want.push_back(t);
            l.targets.clear();
            for (const auto& t : eng::all_lora_targets())
                for (const auto& w : want)
                    if (w == t) l.targets.push_back(t);
            for (const auto& w : want) {
                try {
                    eng::projection_block(w);
                } catch (const tandem::Error& e) {
                    fail(TANDEM_ERROR_INVALID_ARGUMENT, std::string("targets: ") + e.what());
                }
            }
            if (l.targets.empty()) fail(TANDEM_ERROR_INVALID_ARGUMENT, "targets: empty list");
        }
        const eng::Qwen3Config c = eng::read_hf_config(base_dir);
        eng::write_initial_adapter(dir, c, l, seed, fs::absolute(base_dir).string());
    });
}

tandem_status tandem_trainer_create(const char* base_dir, const char* adapter_dir, const tandem_train_options* options,
                                    tandem_trainer** out) {
    return guarded(TANDEM_ERROR_IO, [&] {
        need(out, "out");
        *out = nullptr;
        need(base_dir, "base_dir");
        need(adapter_dir, "adapter_dir");
        const eng::TrainOptions opts = train_options(options);
        eng::HfCheckpoint base = eng::load_hf_checkpoint(base_dir);        // IO errors
        eng::LoraAdapter adapter = eng::load_peft_adapter(adapter_dir, base.config);
        const eng::Qwen3Config config = base.config;
        try {
            auto* t = new tandem_trainer{eng::Trainer::create(config, std::move(base.tensors), adapter.config, opts),
                                         config, adapter.config, fs::absolute(base_dir).string(), "null"};
            try {
                t->trainer.load_adapter(adapter.tensors);
            } catch (...) {
                delete t;
                throw;
            }
            *out = t;
        } catch (const tandem::Error& e) {
            fail(TANDEM_ERROR_INVALID_ARGUMENT, e.what());
        }
    });
}

void tandem_trainer_destroy(tandem_trainer* trainer) { delete trainer; }

tandem_status tandem_trainer_step(tandem_trainer* trainer, const tandem_micro_batch* mbs, size_t n,
                                  tandem_update_metrics* out) {
    return guarded(TANDEM_ERROR_STATE, [&] {
        need(trainer, "trainer");
        if (n == 0) fail(TANDEM_ERROR_INVALID_ARGUMENT, "an update needs at least one micro-batch");
        const auto batches = micro_batches(mbs, n, trainer->config.vocab_size);
        const eng::UpdateMetrics m = trainer->trainer.train_update(batches);
        if (out) *out = tandem_update_metrics{m.update, m.loss, m.grad_norm, m.lr, m.supervised_tokens, m.wall_seconds};
    });
}

tandem_status tandem_trainer_eval(tandem_trainer* trainer, const tandem_micro_batch* mbs, size_t n, double* loss,
                                  int64_t* supervised_tokens) {
    return guarded(TANDEM_ERROR_STATE, [&] {
        need(trainer, "trainer");
        const auto batches = micro_batches(mbs, n, trainer->config.vocab_size);
        const eng::EvalResult r = trainer->trainer.evaluate(batches);
        if (loss) *loss = r.loss;
        if (supervised_tokens) *supervised_tokens = r.supervised_tokens;
    });
}

int64_t tandem_trainer_updates_done(const tandem_trainer* trainer) { return trainer ? trainer->trainer.step() : -1; }

int64_t tandem_trainer_num_trainable(const tandem_trainer* trainer) {
    return trainer ? eng::count_parameters(trainer->config, &trainer->lora).trainable : -1;
}

tandem_status tandem_trainer_save_adapter(const tandem_trainer* trainer, const char* dir) {
    return guarded(TANDEM_ERROR_IO, [&] {
        need(trainer, "trainer");
        need(dir, "dir");
        eng::save_peft_adapter(dir, trainer->lora, trainer->trainer.adapter_tensors(), trainer->config, trainer->base_dir);
    });
}

tandem_status tandem_trainer_save_checkpoint(const tandem_trainer* trainer, const char* leg_dir, const char* spec_sha256,
                                             const char* caller_state_json) {
    return guarded(TANDEM_ERROR_IO, [&] {
        need(trainer, "trainer");
        need(leg_dir, "leg_dir");
        need(spec_sha256, "spec_sha256");
        if (!*spec_sha256) fail(TANDEM_ERROR_INVALID_ARGUMENT, "spec_sha256 is empty");
        json caller = nullptr;
        if (caller_state_json) {
            try {
                caller = json::parse(caller_state_json);
            } catch (const json::exception& e) {
                fail(TANDEM_ERROR_INVALID_ARGUMENT, "caller_state_json is not valid JSON: " + tandem::json_error_text(e));
            }
        }
        const eng::TrainerState st = trainer->trainer.state();
        eng::Checkpoint ck;
        ck.update = st.step;
        ck.adapter = st.adapter;
        for (const auto& [n, t] : st.adam_m) ck.optimizer.emplace("exp_avg." + n, t);
        for (const auto& [n, t] : st.adam_v) ck.optimizer.emplace("exp_avg_sq." + n, t);
        // 64-bit unsigned values as decimal strings: JSON readers in other languages keep them exact.
        ck.state = {{"step", st.step},
                    {"native_rng_counter", std::to_string(st.native_rng_counter)},
                    {"seed", std::to_string(st.seed)},
                    {"spec_sha256", spec_sha256},
                    {"tandem_version", TANDEM_VERSION},
                    {"device", "cpu"},
                    {"writer", "c-abi"},
                    {"caller", caller}};
        ck.adapter_config = trainer->lora.to_peft_json(trainer->base_dir);
        eng::write_checkpoint(leg_dir, ck);
    });
}

tandem_status tandem_trainer_load_checkpoint(tandem_trainer* trainer, const char* leg_dir, const char* spec_sha256,
                                             int64_t* update_out) {
    return guarded(TANDEM_ERROR_STATE, [&] {
        need(trainer, "trainer");
        need(leg_dir, "leg_dir");
        need(spec_sha256, "spec_sha256");
        const eng::LoadedCheckpoint got = eng::load_latest_checkpoint(leg_dir, spec_sha256);
        const json& s = got.checkpoint.state;
        const std::string where = (got.dir / "state.json").string();
        eng::TrainerState st;
        try {
            st.step = s.at("step").get<int64_t>();
            st.native_rng_counter = std::stoull(s.at("native_rng_counter").get<std::string>());
            st.seed = std::stoull(s.at("seed").get<std::string>());
        } catch (const std::exception& e) {
            fail(TANDEM_ERROR_STATE, where + ": missing or malformed step / native_rng_counter / seed (" + e.what() + ")");
        }
        st.adapter = got.checkpoint.adapter;
        for (const auto& [n, t] : got.checkpoint.optimizer) {
            if (n.starts_with("exp_avg_sq.")) st.adam_v.emplace(n.substr(11), t);
            else if (n.starts_with("exp_avg.")) st.adam_m.emplace(n.substr(8), t);
            else fail(TANDEM_ERROR_STATE, (got.dir / "optimizer.safetensors").string() + ": unexpected tensor '" + n + "'");
        }
        trainer->trainer.restore(st);
        trainer->caller_state = s.contains("caller") ? s["caller"].dump() : "null";
        if (update_out) *update_out = st.step;
    });
}

const char* tandem_trainer_checkpoint_caller_state(const tandem_trainer* trainer) {
    return trainer ? trainer->caller_state.c_str() : "null";
}

// ---- the model, for a caller's own training loop ------------------------------------------------

int32_t tandem_engine_has_model(void) { return 1; }

void tandem_model_options_default(tandem_model_options* o) {
    if (!o) return;
    std::memset(o, 0, sizeof *o);
    o->struct_size = sizeof *o;
    o->rank = 16;
    o->alpha = 32.0;
    o->use_rslora = 1;
    o->dropout = 0.05;
    o->targets = nullptr;
    o->dropout_mode = TANDEM_DROPOUT_SHARED;
    o->threads = 0;
    o->seed = 0;
}

tandem_status tandem_model_create(const char* base_dir, const tandem_model_options* options, tandem_model** out) {
    return guarded(TANDEM_ERROR_IO, [&] {
        need(out, "out");
        *out = nullptr;
        need(base_dir, "base_dir");
        tandem_model_options d;
        tandem_model_options_default(&d);
        if (options) {
            if (options->struct_size < offsetof(tandem_model_options, seed) + sizeof(uint64_t) ||
                options->struct_size > sizeof d)
                fail(TANDEM_ERROR_INVALID_ARGUMENT, "tandem_model_options.struct_size " +
                                                        std::to_string(options->struct_size) +
                                                        " is not a size this library knows (expected " +
                                                        std::to_string(sizeof d) + ")");
            std::memcpy(&d, options, options->struct_size);
        }
        if (d.rank < 1 || !(d.alpha > 0.0) || !(d.dropout >= 0.0 && d.dropout < 1.0))
            fail(TANDEM_ERROR_INVALID_ARGUMENT, "model options: rank must be >= 1, alpha > 0, dropout in [0, 1)");
        auto m = std::make_unique<tandem_model>();
        m->dropout_mode = dropout_mode_of(d.dropout_mode);
        m->seed = d.seed;
        m->lora.rank = d.rank;
        m->lora.alpha = d.alpha;
        m->lora.use_rslora = d.use_rslora != 0;
        m->lora.dropout = d.dropout;
        m->lora.targets = parse_targets(d.targets);
        eng::HfCheckpoint base = eng::load_hf_checkpoint(base_dir);  // IO errors
        m->config = base.config;
        // L2 digests of what was loaded, before the tensors move into the model.
        for (const auto& [name, t] : base.tensors) {
            tandem_model::BaseDigest g;
            g.name = name;
            g.shape = t.shape;
            for (float f : t.data) {
                const double x = f;
                g.sum += x;
                g.sumsq += x * x;
                g.maxabs = std::max(g.maxabs, std::fabs(x));
            }
            g.sha256 = tandem::sha256_hex(t.ptr(), t.data.size() * sizeof(float));
            m->base.push_back(std::move(g));
        }
        eng::ops::set_num_threads(d.threads);
        try {
            m->model = std::make_unique<eng::Qwen3LoraModel>(m->config, std::move(base.tensors), m->lora);
        } catch (const tandem::Error& e) {
            fail(TANDEM_ERROR_INVALID_ARGUMENT, e.what());
        }
        *out = m.release();
    });
}

void tandem_model_destroy(tandem_model* model) { delete model; }

int64_t tandem_model_vocab_size(const tandem_model* model) { return model ? model->config.vocab_size : -1; }
int64_t tandem_model_num_params(const tandem_model* model) { return model ? model->model->num_trainable() : -1; }
int64_t tandem_model_num_adapter_tensors(const tandem_model* model) {
    return model ? static_cast<int64_t>(model->model->adapter_slots().size()) : -1;
}

tandem_status tandem_model_adapter_tensor(const tandem_model* model, int64_t i, const char** name, int64_t* rows,
                                          int64_t* cols, int64_t* offset) {
    return guarded(TANDEM_ERROR_INVALID_ARGUMENT, [&] {
        need(model, "model");
        const auto& slots = model->model->adapter_slots();
        if (i < 0 || i >= static_cast<int64_t>(slots.size()))
            fail(TANDEM_ERROR_INVALID_ARGUMENT, "adapter tensor index " + std::to_string(i) + " outside [0, " +
                                                    std::to_string(slots.size()) + ")");
        const eng::AdapterSlot& s = slots[static_cast<size_t>(i)];
        if (name) *name = s.name.c_str();
        if (rows) *rows = s.shape.at(0);
        if (cols) *cols = s.shape.at(1);
        if (offset) *offset = s.offset;
    });
}

int64_t tandem_model_num_base_tensors(const tandem_model* model) {
    return model ? static_cast<int64_t>(model->base.size()) : -1;
}

tandem_status tandem_model_base_tensor(const tandem_model* model, int64_t i, const char** name, int32_t* ndim,
                                       int64_t shape[4], double* sum, double* sumsq, double* maxabs,
                                       const char** sha256_hex) {
    return guarded(TANDEM_ERROR_INVALID_ARGUMENT, [&] {
        need(model, "model");
        if (i < 0 || i >= static_cast<int64_t>(model->base.size()))
            fail(TANDEM_ERROR_INVALID_ARGUMENT, "base tensor index " + std::to_string(i) + " outside [0, " +
                                                    std::to_string(model->base.size()) + ")");
        const auto& g = model->base[static_cast<size_t>(i)];
        if (g.shape.size() > 4) fail(TANDEM_ERROR_STATE, g.name + ": more than 4 dimensions");
        if (name) *name = g.name.c_str();
        if (ndim) *ndim = static_cast<int32_t>(g.shape.size());
        if (shape)
            for (size_t k = 0; k < 4; ++k) shape[k] = k < g.shape.size() ? g.shape[k] : 0;
        if (sum) *sum = g.sum;
        if (sumsq) *sumsq = g.sumsq;
        if (maxabs) *maxabs = g.maxabs;
        if (sha256_hex) *sha256_hex = g.sha256.c_str();
    });
}

tandem_status tandem_model_set_params(tandem_model* model, const float* params, int64_t n) {
    return guarded(TANDEM_ERROR_INVALID_ARGUMENT, [&] {
        need(model, "model");
        need(params, "params");
        if (n != model->model->num_trainable())
            fail(TANDEM_ERROR_INVALID_ARGUMENT, "params: " + std::to_string(n) + " floats given, the adapter has " +
                                                    std::to_string(model->model->num_trainable()));
        eng::TensorMap m;
        for (const auto& s : model->model->adapter_slots()) {
            eng::Tensor t(s.shape);
            std::memcpy(t.ptr(), params + s.offset, t.data.size() * sizeof(float));
            m.emplace(s.name, std::move(t));
        }
        model->model->load_adapter(m);
    });
}

tandem_status tandem_model_forward_backward(tandem_model* model, const tandem_micro_batch* micro_batch, int64_t update,
                                            int64_t micro_batch_index, double grad_scale, float* grads, int64_t n,
                                            double* loss_sum, int64_t* supervised) {
    return guarded(TANDEM_ERROR_STATE, [&] {
        need(model, "model");
        if (update < 0 || micro_batch_index < 0)
            fail(TANDEM_ERROR_INVALID_ARGUMENT, "update and micro_batch_index must be >= 0");
        if (grads && n != model->model->num_trainable())
            fail(TANDEM_ERROR_INVALID_ARGUMENT, "grads: room for " + std::to_string(n) + " floats, the adapter has " +
                                                    std::to_string(model->model->num_trainable()));
        if (!std::isfinite(grad_scale)) fail(TANDEM_ERROR_INVALID_ARGUMENT, "grad_scale is not finite");
        const eng::MicroBatch mb = one_micro_batch(micro_batch, model->config.vocab_size);
        eng::DropoutContext dc;
        dc.mode = model->dropout_mode;
        dc.p = model->lora.dropout;
        dc.seed = model->seed;
        dc.update = static_cast<uint64_t>(update);
        dc.micro_batch = static_cast<uint64_t>(micro_batch_index);
        dc.native_counter = &model->native_counter;
        model->model->zero_grads();
        const int64_t labels = mb.validate(model->config.vocab_size);
        const double s = model->model->forward_backward(mb, dc, grads ? grad_scale : 0.0);
        if (grads) {
            const eng::TensorMap g = model->model->adapter_gradients();
            for (const auto& slot : model->model->adapter_slots()) {
                const eng::Tensor& t = g.at(slot.name);
                std::memcpy(grads + slot.offset, t.ptr(), t.data.size() * sizeof(float));
            }
        }
        if (loss_sum) *loss_sum = s;
        if (supervised) *supervised = labels;
    });
}

tandem_status tandem_model_loss(tandem_model* model, const tandem_micro_batch* micro_batch, double* loss_sum,
                                int64_t* supervised) {
    return guarded(TANDEM_ERROR_STATE, [&] {
        need(model, "model");
        const eng::MicroBatch mb = one_micro_batch(micro_batch, model->config.vocab_size);
        const int64_t labels = mb.validate(model->config.vocab_size);
        const double s = model->model->loss_sum(mb);
        if (loss_sum) *loss_sum = s;
        if (supervised) *supervised = labels;
    });
}

uint64_t tandem_model_dropout_counter(const tandem_model* model) { return model ? model->native_counter : 0; }
void tandem_model_set_dropout_counter(tandem_model* model, uint64_t counter) {
    if (model) model->native_counter = counter;
}

}  // extern "C"
