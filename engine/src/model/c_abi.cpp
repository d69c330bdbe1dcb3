// The C ABI (tandem_engine.h) over the C++ Trainer and the engine I/O library. Every entry point
// catches everything: no exception crosses into C. Errors become a status plus a per-thread message.
#include "tandem_engine.h"

#include "tandem/atomic_file.h"
#include "tandem/engine/checkpoint.h"
#include "tandem/engine/generate.h"
#include "tandem/engine/io.h"
#include "tandem/engine/trainer.h"
#include "tandem/error.h"
#include "tandem/version.h"

#include <nlohmann/json.hpp>

#include <cstring>
#include <filesystem>
#include <limits>
#include <new>
#include <sstream>
#include <string>

namespace eng = tandem::engine;
namespace fs = std::filesystem;
using nlohmann::json;

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
            throw tandem::Error(s + ": not valid JSON (" + e.what() + ")");
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
                fail(TANDEM_ERROR_INVALID_ARGUMENT, std::string("caller_state_json is not valid JSON: ") + e.what());
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

}  // extern "C"
