// The engine leg: tandem's tokenizer + template + supervision + the C++ engine, speaking the leg
// protocol. Mirrors experiments/legs/reference_leg.py step for step (docs/leg-protocol.md).
#include "tandem/legs/engine_leg.h"

#include "tandem/atomic_file.h"
#include "tandem/data/batch_plan.h"
#include "tandem/data/corpus.h"
#include "tandem/data/supervision.h"
#include "tandem/data/tokenizer.h"
#include "tandem/engine/checkpoint.h"
#include "tandem/engine/forwarding_backend.h"
#include "tandem/engine/gemm_library.h"
#include "tandem/engine/io.h"
#include "tandem/engine/observe.h"
#include "tandem/engine/safetensors.h"
#include "tandem/engine/trainer.h"
#include "tandem/engine_devices/make_backend.h"
#include "tandem/error.h"
#include "tandem/number_text.h"
#include "tandem/spec/experiment.h"
#include "tandem/spec/faults.h"
#include "tandem/legs/leg_protocol.h"
#include "tandem/legs/optimizer_replay.h"
#include "tandem/spec/model.h"
#include "tandem/sha256.h"
#include "tandem/strict_json.h"
#include "tandem/version.h"

#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>

namespace tandem::experiments {
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

constexpr int64_t kProbeCount = 16;  // probe prompts (docs/observables.md)

double seconds_since(std::chrono::steady_clock::time_point t0) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

int64_t peak_rss_bytes() {
    rusage u{};
    getrusage(RUSAGE_SELF, &u);
    return static_cast<int64_t>(u.ru_maxrss) * 1024;  // Linux: KiB
}

json read_json(const fs::path& p) { return parse_json_strict(read_file(p), p.string()); }


// A failure whose error event this leg already wrote (run_engine_leg must not write a second one).
struct ReportedFailure : Error {
    using Error::Error;
};

// A leg that computes a non-finite loss or grad norm stops at once (docs/leg-protocol.md, non-finite numbers). The event
// that carries the value (with the NaN spelt out) and the error are written in one write: the
// runner's live gate may stop the leg the moment it reads the value, and the error must already
// be in the pipe then.
void emit_or_stop(EventWriter& out, std::vector<std::pair<std::string, json>> events, const std::string& failure) {
    if (failure.empty()) {
        for (auto& [event, fields] : events) out.emit(event, std::move(fields));
        return;
    }
    std::fprintf(stderr, "engine leg: error: %s\n", failure.c_str());
    events.emplace_back("error", json{{"message", failure}});
    out.emit_together(std::move(events));
    throw ReportedFailure(failure);
}
std::string non_finite_step(const std::string& leg, int64_t update, double loss, double grad_norm) {
    const char* what = !std::isfinite(loss) ? "loss" : !std::isfinite(grad_norm) ? "grad norm" : nullptr;
    if (!what) return "";
    return "leg " + leg + ": non-finite " + what + " at update " + std::to_string(update) + " (loss " +
           number_text(loss, "%.9g") + ", grad norm " + number_text(grad_norm, "%.9g") + ")";
}
// Test-only fault injection (docs/leg-protocol.md): TANDEM_TEST_NONFINITE_LOSS_AT=k makes update
// k's loss NaN, as a numeric blow-up would; both legs honour it, so tests/legs/test_nonfinite.py can check that
// each leg stops and names the update. -1 (unset) in normal use.
int64_t injected_nonfinite_update() {
    const char* v = std::getenv("TANDEM_TEST_NONFINITE_LOSS_AT");
    if (!v || !*v) return -1;
    char* end = nullptr;
    const long long k = std::strtoll(v, &end, 10);
    return end && *end == '\0' && k >= 0 ? static_cast<int64_t>(k) : -1;
}

std::string non_finite_eval(const std::string& leg, int64_t update, double heldout_ce) {
    if (std::isfinite(heldout_ce)) return "";
    return "leg " + leg + ": non-finite held-out loss at update " + std::to_string(update) + " (held-out CE " +
           number_text(heldout_ce, "%.9g") + ")";
}

struct Encoded {
    std::vector<int32_t> ids;
    std::vector<uint8_t> supervised;
    data::TokenizedRecord full;
};

// Right padding to the longest sequence of the micro-batch (the same rule as the reference leg, so
// shared dropout masks, which are indexed over the padded [batch*seq, in] input, line up).
engine::MicroBatch make_micro_batch(const std::vector<const Encoded*>& seqs, int32_t pad_id) {
    engine::MicroBatch mb;
    mb.batch = static_cast<int64_t>(seqs.size());
    for (const auto* s : seqs) mb.seq = std::max<int64_t>(mb.seq, static_cast<int64_t>(s->ids.size()));
    mb.ids.assign(static_cast<size_t>(mb.batch * mb.seq), pad_id);
    mb.supervised.assign(static_cast<size_t>(mb.batch * mb.seq), 0);
    for (size_t b = 0; b < seqs.size(); ++b) {
        const auto& s = *seqs[b];
        std::copy(s.ids.begin(), s.ids.end(), mb.ids.begin() + static_cast<int64_t>(b) * mb.seq);
        // Token 0 is never a label (nothing predicts it): transformers' shift drops it too.
        for (size_t t = 1; t < s.supervised.size(); ++t) mb.supervised[b * mb.seq + t] = s.supervised[t];
        mb.lengths.push_back(static_cast<int32_t>(s.ids.size()));
    }
    return mb;
}

// ---- checkpoints (engine/include/tandem/engine/checkpoint.h: tmp folder, manifest last, rename) ----

engine::Checkpoint to_checkpoint(const engine::TrainerState& st, const std::string& spec_sha,
                                 const std::string& device) {
    engine::Checkpoint c;
    c.update = st.step;
    c.adapter = st.adapter;
    for (const auto& [name, t] : st.adam_m) c.optimizer["exp_avg." + name] = t;
    for (const auto& [name, t] : st.adam_v) c.optimizer["exp_avg_sq." + name] = t;
    // 64-bit counters as strings: JSON numbers lose bits above 2^53 in many readers.
    c.state = json{{"spec_sha256", spec_sha}, {"step", st.step},
                   {"native_rng_counter", std::to_string(st.native_rng_counter)}, {"seed", std::to_string(st.seed)},
                   {"tandem_version", TANDEM_VERSION}, {"device", device}};
    return c;
}

engine::TrainerState from_checkpoint(const engine::Checkpoint& c) {
    engine::TrainerState st;
    st.adapter = c.adapter;
    for (const auto& [name, t] : c.optimizer) {
        if (name.rfind("exp_avg_sq.", 0) == 0) st.adam_v[name.substr(11)] = t;
        else if (name.rfind("exp_avg.", 0) == 0) st.adam_m[name.substr(8)] = t;
    }
    st.step = c.state.at("step").get<int64_t>();
    st.native_rng_counter = std::stoull(c.state.at("native_rng_counter").get<std::string>());
    st.seed = std::stoull(c.state.at("seed").get<std::string>());
    return st;
}

// ---- observables (docs/observables.md) --------------------------------------------------------------

// |A|, |B| and |B A| * scaling of every adapted projection of every layer.
std::vector<AdapterNormRow> adapter_norms(const engine::Trainer& trainer, double scaling, int64_t update) {
    const engine::TensorMap adapter = trainer.adapter_tensors();
    const auto& targets = engine::all_lora_targets();
    std::map<std::pair<int64_t, int>, std::pair<const engine::Tensor*, const engine::Tensor*>> pairs;
    for (const auto& slot : const_cast<engine::Trainer&>(trainer).model().adapter_slots()) {
        auto& ab = pairs[{slot.layer, slot.projection}];
        (slot.is_a ? ab.first : ab.second) = &adapter.at(slot.name);
    }
    std::vector<AdapterNormRow> out;
    for (const auto& [key, ab] : pairs) {
        const engine::Tensor& a = *ab.first;
        const engine::Tensor& b = *ab.second;
        AdapterNormRow r;
        r.update = update;
        r.layer = key.first;
        r.projection = targets[static_cast<size_t>(key.second)];
        r.a_norm = engine::frobenius_norm(a.ptr(), static_cast<int64_t>(a.data.size()));
        r.b_norm = engine::frobenius_norm(b.ptr(), static_cast<int64_t>(b.data.size()));
        r.delta_norm = engine::lora_update_norm(a.ptr(), b.ptr(), a.shape[0], a.shape[1], b.shape[0], scaling);
        out.push_back(std::move(r));
    }
    return out;
}

// One probe prompt: a record of the eval prefix and the position of its last prompt token (the
// hidden state there predicts the first supervised token).
struct Probe {
    int64_t index = 0;   // in the probe set
    size_t record = 0;   // in records.jsonl
    int64_t position = 0;
};

// The next-token distribution of every probe: top-k ids and probabilities from the float32 logits
// (softmax in double).
// With `logits_file`, the probes' float32 logits [probes, vocab] are also written there (raw,
// little-endian, probe order): the full distributions the runner's KL between legs reads.
std::vector<ProbeRow> probe_rows(engine::Trainer& trainer, const std::vector<Probe>& probes,
                                 const std::function<const std::vector<int32_t>&(size_t)>& ids_of, int32_t pad_id,
                                 int64_t micro_batch, int64_t update, const fs::path& logits_file = {}) {
    std::vector<ProbeRow> out;
    std::string all_logits;
    const int64_t V = trainer.model().config().vocab_size;
    for (size_t first = 0; first < probes.size(); first += static_cast<size_t>(micro_batch)) {
        const size_t last = std::min(probes.size(), first + static_cast<size_t>(micro_batch));
        engine::MicroBatch mb;
        mb.batch = static_cast<int64_t>(last - first);
        for (size_t i = first; i < last; ++i) mb.seq = std::max<int64_t>(mb.seq, static_cast<int64_t>(ids_of(probes[i].record).size()));
        mb.ids.assign(static_cast<size_t>(mb.batch * mb.seq), pad_id);
        mb.supervised.assign(static_cast<size_t>(mb.batch * mb.seq), 0);
        std::vector<int32_t> rows;
        for (size_t i = first; i < last; ++i) {
            const auto& ids = ids_of(probes[i].record);
            const int64_t b = static_cast<int64_t>(i - first);
            std::copy(ids.begin(), ids.end(), mb.ids.begin() + b * mb.seq);
            mb.lengths.push_back(static_cast<int32_t>(ids.size()));
            rows.push_back(static_cast<int32_t>(b * mb.seq + probes[i].position));
        }
        const std::vector<float> logits = trainer.model().logits_at(mb, rows);
        if (!logits_file.empty())
            all_logits.append(reinterpret_cast<const char*>(logits.data()), logits.size() * sizeof(float));
        for (size_t i = first; i < last; ++i) {
            const float* z = logits.data() + static_cast<int64_t>(i - first) * V;
            double m = -INFINITY;
            for (int64_t v = 0; v < V; ++v) m = std::max(m, static_cast<double>(z[v]));
            double sum = 0;
            for (int64_t v = 0; v < V; ++v) sum += std::exp(static_cast<double>(z[v]) - m);
            const double lse = m + std::log(sum);
            std::vector<int64_t> order(static_cast<size_t>(V));
            for (int64_t v = 0; v < V; ++v) order[static_cast<size_t>(v)] = v;
            std::partial_sort(order.begin(), order.begin() + kProbeTopK, order.end(), [&](int64_t x, int64_t y) {
                return z[x] > z[y] || (z[x] == z[y] && x < y);
            });
            ProbeRow r;
            r.update = update;
            r.probe = probes[i].index;
            r.record = static_cast<int64_t>(probes[i].record);
            r.position = probes[i].position;
            for (int k = 0; k < kProbeTopK; ++k) {
                r.ids[static_cast<size_t>(k)] = order[static_cast<size_t>(k)];
                r.probs[static_cast<size_t>(k)] = std::exp(static_cast<double>(z[order[static_cast<size_t>(k)]]) - lse);
            }
            out.push_back(r);
        }
    }
    if (!logits_file.empty()) {
        fs::create_directories(logits_file.parent_path());
        write_file_atomic(logits_file, all_logits);
    }
    return out;
}

// ---- the test faults (spec's test_faults(), docs/thresholds.md "Injected faults") -----------------
// Numerical perturbations the tests inject (through the experiment's faults, like any catalogue
// fault) to check that the error-model bound and the live gate catch a numerical difference. They
// act on the trainer's state here, in the leg, so the engine itself stays fault-free:
//   test-lr-scale=M@K      the parameter change of every update >= K multiplied by M (lr x M, AdamW
//                          decoupled weight decay included)
//   test-adapter-noise=R@K after every update >= K, each adapter element x (1 + R s), s = +-1 from a hash
//   test-bf16-adapter@K    after every update >= K, the adapter rounded to bfloat16 (nearest even)
//   test-warmup-shift=N    the schedule's warmup N updates longer (an off-by-N schedule)
//   test-residual-noise=R@K from update K, every residual add's result x (1 + R s), s = +-1 from a hash
//                          (ResidualNoiseBackend: the one test fault inside an op)
float round_to_bf16(float x) {
    uint32_t b;
    std::memcpy(&b, &x, 4);
    if ((b & 0x7f800000u) == 0x7f800000u) return x;  // inf / NaN unchanged
    b += 0x7fffu + ((b >> 16) & 1u);                  // round to nearest even on the upper 16 bits
    b &= 0xffff0000u;
    std::memcpy(&x, &b, 4);
    return x;
}

// x[i] *= 1 + size * s_i, s_i = +-1 from a hash of (update, salt, i): the noise of test-adapter-noise
// (salt: the tensor's index) and test-residual-noise (salt: the add's index in the update).
void scale_by_hashed_signs(float* x, size_t n, int64_t update, uint64_t salt, double size) {
    for (size_t i = 0; i < n; ++i) {
        uint64_t h = (static_cast<uint64_t>(update) * 0x9E3779B97F4A7C15ull) ^ (salt << 40) ^ i;
        h ^= h >> 33;
        h *= 0xff51afd7ed558ccdull;
        h ^= h >> 33;
        x[i] *= static_cast<float>(1.0 + size * ((h & 1) ? 1.0 : -1.0));
    }
}

// test-residual-noise: a backend decorator around the leg's backend. The wiring records the add's
// operands (the layer input, the projection's output) before the add and its perturbed result after,
// so the leg's own forward fingerprints show an add that does not add up — what the residual-add
// check (compare judge/elementwise.h) must catch, while every other op stays exact. Every
// residual_add call is perturbed (the forward's two per layer, training and evaluation alike; the
// gradient sums of the per-micro-batch catalogue faults too, when combined with one).
class ResidualNoiseBackend final : public engine::ForwardingBackend {
public:
    ResidualNoiseBackend(std::shared_ptr<engine::Backend> inner, double size, int64_t from_update)
        : ForwardingBackend(std::move(inner)), size_(size), from_update_(from_update) {}
    // The update the next ops belong to (evaluations after update u: u); -1 before training.
    void set_update(int64_t u) {
        update_ = u;
        calls_ = 0;
    }
    void residual_add(float* out, const float* a, const float* b, int64_t n) override {
        inner_->residual_add(out, a, b, n);
        if (update_ < from_update_) return;
        ++calls_;
        host_.resize(static_cast<size_t>(n));
        inner_->download(host_.data(), out, host_.size() * sizeof(float));  // waits for the add
        scale_by_hashed_signs(host_.data(), host_.size(), update_, calls_, size_);
        inner_->upload(out, host_.data(), host_.size() * sizeof(float));
    }

private:
    double size_;
    int64_t from_update_;
    int64_t update_ = -1;
    uint64_t calls_ = 0;
    std::vector<float> host_;
};

// Applies the state faults of update `u`: `before` is the trainer state before the update (test-lr-scale).
void apply_test_faults(engine::Trainer& trainer, const std::vector<TestFault>& faults, int64_t u,
                       const std::optional<engine::TrainerState>& before) {
    bool touched = false;
    engine::TrainerState st;
    for (const auto& f : faults) {
        if (u < f.from_update || f.name == "test-warmup-shift" || f.name == "test-residual-noise") continue;  // not state faults
        if (!touched) st = trainer.state();
        touched = true;
        uint64_t tensor_index = 0;
        for (auto& [name, t] : st.adapter) {
            ++tensor_index;
            float* x = t.ptr();
            const size_t n = t.data.size();
            if (f.name == "test-lr-scale" && before) {
                const float* x0 = before->adapter.at(name).ptr();
                for (size_t i = 0; i < n; ++i) x[i] = x0[i] + static_cast<float>(f.size) * (x[i] - x0[i]);
            } else if (f.name == "test-adapter-noise") {
                scale_by_hashed_signs(x, n, u, tensor_index, f.size);
            } else if (f.name == "test-bf16-adapter") {
                for (size_t i = 0; i < n; ++i) x[i] = round_to_bf16(x[i]);
            }
        }
    }
    if (touched) trainer.restore(st);
}

// The engine leg as named steps, in the order its events come (docs/leg-protocol.md): open (the
// run's spec, the backend, the faults, hello, the checkpoint to resume from), load the model, encode
// the data, build the trainer, then either resume or report the checks (L2, L3, L1 with the first
// evaluation), the update loop (step, fingerprints, evaluate, checkpoint) and finish (the adapter,
// timing, memory, done). Mirrors experiments/legs/reference_leg.py step for step.
class EngineLeg {
public:
    EngineLeg(const EngineLegOptions& opt, EventWriter& out) : opt_(opt), out_(out) {}

    int run() {
        open();
        load_model();
        encode_data();
        build_trainer();
        if (resume_from_) resume();
        else report_checks();
        out_.emit("timing", {{"phase", "setup"}, {"model_load_s", model_load_s_}, {"tokenize_s", tokenize_s_},
                             {"setup_s", seconds_since(t_start_)}});
        train();
        finish();
        return 0;
    }

private:
    void open() {
        t_start_ = std::chrono::steady_clock::now();
        run_dir_ = fs::absolute(opt_.run);
        spec_ = load_run_spec(run_dir_);
        spec_sha_ = spec_.sha256();
        // The backend this leg really computes on (cpu, or cuda:N when the build has CUDA).
        backend_ = engine::make_backend(opt_.device, opt_.threads);
        // Injected faults (docs/faults.md): announced in the hello event and on stderr, so the leg's own
        // record says it is faulty.
        fault_list_ = parse_fault_list(opt_.faults, "--faults");
        faults_ = leg_faults(fault_list_);
        for (const auto& f : faults_.test)
            if (f.name == "test-residual-noise") {
                residual_noise_ = std::make_shared<ResidualNoiseBackend>(backend_, f.size, f.from_update);
                backend_ = residual_noise_;
            }

        json hello{{"implementation", "engine"}, {"leg", opt_.leg}, {"language", "c++"},
                   {"stack", backend_->stack()},
                   {"versions", {{"tandem", TANDEM_VERSION}}}, {"device", backend_->device()},
                   {"device_name", backend_->device_name()}, {"threads", opt_.threads}, {"pid", static_cast<int64_t>(getpid())},
                   {"spec_sha256", spec_sha_}, {"resume", opt_.resume}};
        if (!fault_list_.empty()) {
            hello["faults"] = faults_text(fault_list_);
            std::fprintf(stderr, "engine leg: %s\n", fault_banner({{opt_.leg, faults_text(fault_list_)}}).c_str());
        }
        // the CPU engine's numbers follow its GEMM library: the Stacks table names it
        if (backend_->device() == "cpu") hello["versions"]["gemm"] = engine::gemm_library_text();
        out_.emit("hello", hello);

        leg_dir_ = run_dir_ / "legs" / opt_.leg;
        fs::create_directories(leg_dir_);
        if (opt_.resume) {
            std::vector<std::string> skipped;
            resume_from_ = engine::find_latest_checkpoint(leg_dir_, spec_sha_, &skipped);
            for (const auto& s : skipped) std::fprintf(stderr, "engine leg: skipping checkpoint %s\n", s.c_str());
            if (!resume_from_) std::fprintf(stderr, "engine leg: no valid checkpoint: starting from the beginning\n");
        }
    }

    // Model: base weights + the shared initial adapter (docs/spec.md §Shared artifacts).
    void load_model() {
        t_model_ = std::chrono::steady_clock::now();
        base_ = engine::load_hf_checkpoint(run_dir_ / "base");
        if (const int bits = faults_.engine.truncated_mantissa_bits; bits > 0) {
            // the loading fault bf16-truncation: one tensor as loaded (before L2's digests)
            auto it = base_.tensors.find(engine::kTruncatedTensor);
            if (it == base_.tensors.end())
                throw Error(std::string("fault bf16-truncation: the base has no tensor ") + engine::kTruncatedTensor);
            engine::truncate_mantissa(it->second.ptr(), static_cast<int64_t>(it->second.data.size()), bits);
        }
        lora_ = lora_config_of(spec_);
        init_ = engine::load_peft_adapter(run_dir_ / "init", base_.config);
        if (!resume_from_) {
            // L2 over the tensors as loaded (names sorted, as the files name them): base, then adapter.
            for (const auto& [name, t] : base_.tensors)
                digests_.push_back(digest_tensor(name, "base", t.shape, t.ptr(), t.data.size()));
        }
    }

    // Data: tandem's own rendering and tokenization of every record this leg needs.
    void encode_data() {
        t_data_ = std::chrono::steady_clock::now();
        // the data path's faults render with ChatML under template-chatml (encode_record)
        template_name_ = faults_.data.chatml ? "chatml" : spec_.leg_setting(opt_.leg, "template");
        kind_ = data::parse_template_kind(template_name_);
        tokenizer_ = std::make_unique<data::Tokenizer>(data::Tokenizer::load(run_dir_ / "tokenizer"));
        pad_id_ = tokenizer_->token_id("<|endoftext|>").value_or(0);
        records_ = data::read_records(run_dir_ / "corpus" / "records.jsonl");
        plan_ = data::read_plan(run_dir_ / "plan.json");
        json prefix_json = read_json(run_dir_ / "corpus" / "eval_prefix.json");
        if (!prefix_json.is_object() || !prefix_json.contains("indices") || !prefix_json["indices"].is_array())
            throw Error((run_dir_ / "corpus" / "eval_prefix.json").string() + ": field indices missing or not a list");
        for (const auto& i : prefix_json["indices"]) {
            if (!i.is_number_unsigned())
                throw Error((run_dir_ / "corpus" / "eval_prefix.json").string() + ": field indices: " + i.dump() +
                            " is not a record index");
            eval_indices_.push_back(i.get<size_t>());
        }
        l3_count_ = std::min(static_cast<size_t>(spec_.l3_records), records_.size());
        if (spec_.leg_setting(opt_.leg, "plan") == "native") {
            // The engine's own sampler: tandem's batch-plan algorithm over the lengths this leg measured.
            data::Split split = data::read_split(run_dir_ / "corpus" / "split.json");
            std::vector<size_t> lengths;
            for (size_t i : split.train) lengths.push_back(encode(i).ids.size());
            size_t total = plan_.updates.size();
            plan_ = data::make_batch_plan(split.train, lengths, batch_plan_options(spec_));
            if (plan_.updates.size() > total) plan_.updates.resize(total);
        }
        for (size_t i : eval_indices_) encode(i);
        for (size_t i = 0; i < l3_count_; ++i) encode(i);
        for (const auto& u : plan_.updates)
            for (const auto& mb : u)
                for (size_t i : mb) encode(i);
        tokenize_s_ = seconds_since(t_data_);
    }

    const Encoded& encode(size_t i) {
        auto it = encoded_.find(i);
        if (it != encoded_.end()) return it->second;
        if (i >= records_.size()) throw Error("record index " + std::to_string(i) + " out of range in the run folder");
        Encoded e;
        e.full = encode_record(*tokenizer_, kind_, records_[i].messages, static_cast<size_t>(spec_.max_len), faults_.data);
        e.ids = e.full.ids;
        e.supervised = e.full.supervised;
        return encoded_.emplace(i, std::move(e)).first->second;
    }

    // The trainer (docs/spec.md §Recipe), the probe set, the fingerprint recorder, the evaluation batches.
    void build_trainer() {
        total_updates_ = static_cast<int64_t>(plan_.updates.size());
        engine::TrainOptions to;
        to.lr = spec_.lr;
        to.adamw.beta1 = spec_.beta1;
        to.adamw.beta2 = spec_.beta2;
        to.adamw.eps = spec_.eps;
        to.adamw.weight_decay = spec_.weight_decay;
        to.total_updates = total_updates_;
        to.warmup_ratio = spec_.warmup_fraction;
        for (const auto& f : faults_.test)
            if (f.name == "test-warmup-shift")
                to.warmup_updates = static_cast<int64_t>(std::ceil(spec_.warmup_fraction * static_cast<double>(total_updates_))) +
                                    static_cast<int64_t>(f.size);
        to.max_grad_norm = spec_.clip;
        // What the trainer is given, as the `settings` event (docs/leg-protocol.md): the test faults
        // stand for bugs in a trainer's code, not its settings, so test-warmup-shift is not in it.
        {
            const int64_t warmup = engine::warmup_updates(spec_.warmup_fraction, total_updates_);
            settings_ = json{{"optimizer", "AdamW"}, {"decoupled_weight_decay", true}, {"amsgrad", false},
                             {"schedule", "cosine"}, {"warmup_updates", warmup}, {"total_updates", total_updates_},
                             {"clip", to.max_grad_norm > 0 ? json(to.max_grad_norm) : json(nullptr)}};
            settings_group_ = json{{"lr", to.lr},
                                   {"lr_update0", engine::cosine_with_warmup_lr(to.lr, 0, warmup, total_updates_)},
                                   {"betas", {to.adamw.beta1, to.adamw.beta2}}, {"eps", to.adamw.eps},
                                   {"weight_decay", to.adamw.weight_decay}};
        }
        to.dropout_mode = spec_.leg_setting(opt_.leg, "dropout_masks") == "shared" ? engine::DropoutMode::Shared
                                                                                   : engine::DropoutMode::Native;
        to.seed = spec_.seeds.dropout;  // shared masks and the native RNG (docs/experiment-format.md "seeds")
        to.threads = opt_.threads;
        to.model.faults = faults_.engine;
        config_ = base_.config;
        trainer_.emplace(engine::Trainer::create(config_, std::move(base_.tensors), lora_, to, backend_));
        trainer_->load_adapter(init_.tensors);
        model_load_s_ = std::chrono::duration<double>(t_data_ - t_model_).count() + seconds_since(t_data_) - tokenize_s_;

        // The probe set (docs/observables.md): the first kProbeCount records of the eval prefix; a probe's
        // position is the token before the record's first kept supervised token (records without one
        // are left out, keeping their index).
        for (size_t k = 0; k < eval_indices_.size() && k < static_cast<size_t>(kProbeCount); ++k) {
            const Encoded& e = encoded_.at(eval_indices_[k]);
            for (size_t t = 1; t < e.supervised.size(); ++t)
                if (e.supervised[t]) {
                    probes_.push_back(Probe{static_cast<int64_t>(k), eval_indices_[k], static_cast<int64_t>(t) - 1});
                    break;
                }
        }
        if (spec_.observes_any()) recorder_ = std::make_unique<engine::FingerprintRecorder>(trainer_->backend());

        for (size_t i = 0; i < eval_indices_.size(); i += static_cast<size_t>(spec_.micro_batch)) {
            std::vector<const Encoded*> seqs;
            for (size_t k = i; k < std::min(eval_indices_.size(), i + static_cast<size_t>(spec_.micro_batch)); ++k)
                seqs.push_back(&encoded_.at(eval_indices_[k]));
            eval_batches_.push_back(make_micro_batch(seqs, pad_id_));
        }
    }

    void resume() {
        trainer_->restore(from_checkpoint(resume_from_->checkpoint));
        start_update_ = resume_from_->checkpoint.update;
        out_.emit("resume", {{"update", start_update_}, {"path", fs::relative(resume_from_->dir, run_dir_).string()}});
    }

    // L2 (the loaded tensors' digests), L3 (the first records as this leg encodes them), L1 (the
    // untrained held-out CE, which is also the evaluation at update 0): docs/spec.md §Levels.
    void report_checks() {
        for (const auto& [name, t] : trainer_->adapter_tensors())
            digests_.push_back(digest_tensor(name, "adapter", t.shape, t.ptr(), t.data.size()));
        LegTrace l2;
        l2.l2 = digests_;
        out_.emit("l2", l2_to_json(l2));
        {
            json names = json::array();
            for (const auto& [name, t] : trainer_->adapter_tensors()) names.push_back(name);
            json group = settings_group_;
            group["tensors"] = std::move(names);
            json s = settings_;
            s["groups"] = json::array({std::move(group)});
            out_.emit("settings", std::move(s));
        }

        json l3 = json::array();
        for (size_t i = 0; i < l3_count_; ++i) {
            const Encoded& e = encoded_.at(i);
            json r{{"index", i}, {"id", records_[i].id}, {"ids", e.ids},
                   {"boundary", static_cast<int64_t>(e.full.boundary)},
                   {"supervised_count", static_cast<int64_t>(e.full.supervised_count)},
                   {"full_length", static_cast<int64_t>(e.full.full_length)}, {"text", e.full.full_text}};
            r["truncated_at"] = e.full.truncated() ? json(static_cast<int64_t>(e.full.truncated_length)) : json(nullptr);
            l3.push_back(std::move(r));
        }
        out_.emit("l3", {{"max_len", spec_.max_len}, {"template", template_name_}, {"records", l3}});

        engine::EvalResult ev = trainer_->evaluate(eval_batches_);
        emit_or_stop(out_,
                     {{"l1", {{"heldout_ce", ev.loss}, {"tokens", ev.supervised_tokens}, {"examples", eval_indices_.size()}}},
                      {"eval", {{"update", 0}, {"heldout_ce", ev.loss}, {"tokens", ev.supervised_tokens}}}},
                     non_finite_eval(opt_.leg, 0, ev.loss));
        emit_observables(0);
    }

    // The update loop: each update's step event, its fingerprints when observed, the evaluations and
    // the checkpoints on their intervals.
    void train() {
        const int64_t inject_at = injected_nonfinite_update();
        for (int64_t u = start_update_; u < total_updates_; ++u) {
            std::vector<engine::MicroBatch> mbs;
            int64_t input_tokens = 0;
            for (const auto& mb : plan_.updates[static_cast<size_t>(u)]) {
                std::vector<const Encoded*> seqs;
                for (size_t i : mb) {
                    seqs.push_back(&encoded_.at(i));
                    input_tokens += static_cast<int64_t>(encoded_.at(i).ids.size());
                }
                mbs.push_back(make_micro_batch(seqs, pad_id_));
            }
            auto tu = std::chrono::steady_clock::now();
            std::optional<engine::TrainerState> before;
            for (const auto& f : faults_.test)
                if (f.name == "test-lr-scale" && u >= f.from_update) before = trainer_->state();
            const bool observed = recorder_ && spec_.observes(u);
            if (observed) recorder_->begin_update(u);
            if (residual_noise_) residual_noise_->set_update(u);
            // the step replayed with the spec's AdamW on updates 0, 1 and the observed ones, as the
            // Python legs replay theirs (tandem_leg.torch.Pairing; docs/thresholds.md "The optimizer step")
            const bool replayed = u <= 1 || spec_.observes(u);
            engine::OptimizerStepOperands operands;
            engine::UpdateMetrics m = trainer_->train_update(mbs, observed ? recorder_.get() : nullptr, replayed ? &operands : nullptr);
            if (!faults_.test.empty()) apply_test_faults(*trainer_, faults_.test, u, before);
            if (u == inject_at) m.loss = std::nan("");
            double wall = seconds_since(tu);
            train_s_ += wall;
            emit_or_stop(out_,
                         {{"step", {{"update", u}, {"loss", m.loss}, {"grad_norm", m.grad_norm}, {"lr", m.lr},
                                    {"tokens", m.supervised_tokens}, {"input_tokens", input_tokens}, {"wall_s", wall},
                                    {"cpu_s", m.cpu_seconds}}}},
                         non_finite_step(opt_.leg, u, m.loss, m.grad_norm));
            if (observed) out_.emit("fingerprints", fingerprints_event(u, fingerprint_rows(recorder_->take_points())));
            if (replayed) {
                const SpecAdamW adamw{spec_.beta1, spec_.beta2, spec_.eps, spec_.weight_decay};
                out_.emit("optimizer_check", optimizer_check_event(u, replay_adamw(operands, trainer_->model().adapter_slots(), adamw)));
            }
            const int64_t done = u + 1;
            if (done % spec_.eval_interval == 0 || done == total_updates_) evaluate(done);
            if (spec_.checkpoint_interval > 0 && done % spec_.checkpoint_interval == 0 && done < total_updates_) checkpoint(done);
        }
    }

    void evaluate(int64_t done) {
        engine::EvalResult ev = trainer_->evaluate(eval_batches_);
        emit_or_stop(out_, {{"eval", {{"update", done}, {"heldout_ce", ev.loss}, {"tokens", ev.supervised_tokens}}}},
                     non_finite_eval(opt_.leg, done, ev.loss));
        emit_observables(done);
    }

    void checkpoint(int64_t done) {
        fs::path p = engine::write_checkpoint(leg_dir_, to_checkpoint(trainer_->state(), spec_sha_, opt_.device));
        out_.emit("checkpoint", {{"update", done}, {"path", fs::relative(p, run_dir_).string()}});
    }

    // docs/observables.md: the adapter's update norms and the probes' next tokens; with `observe`,
    // the probes' full logits per evaluation too, for the KL between legs.
    void emit_observables(int64_t update) {
        const fs::path logits =
            spec_.observes_any() ? leg_dir_ / "next_token" / ("update-" + std::to_string(update) + ".f32") : fs::path{};
        auto ids_of = [&](size_t record) -> const std::vector<int32_t>& { return encoded_.at(record).ids; };
        out_.emit("observables", observables_event(update, adapter_norms(*trainer_, lora_.scaling(), update),
                                                   probe_rows(*trainer_, probes_, ids_of, pad_id_, spec_.micro_batch, update, logits)));
    }

    void finish() {
        engine::save_peft_adapter(leg_dir_ / "final", lora_, trainer_->adapter_tensors(), config_, "");
        out_.emit("timing", {{"phase", "train"}, {"train_s", train_s_}, {"total_s", seconds_since(t_start_)}});
        const int64_t peak_device = backend_->peak_device_bytes();
        out_.emit("memory", {{"peak_host_rss_bytes", peak_rss_bytes()},
                             {"peak_device_bytes", peak_device < 0 ? json(nullptr) : json(peak_device)}});
        out_.emit("done", {{"updates", total_updates_}, {"final", fs::relative(leg_dir_ / "final", run_dir_).string()}});
    }

    const EngineLegOptions& opt_;
    EventWriter& out_;
    // open
    std::chrono::steady_clock::time_point t_start_, t_model_, t_data_;
    fs::path run_dir_, leg_dir_;
    ExperimentSpec spec_;
    std::string spec_sha_;
    std::shared_ptr<engine::Backend> backend_;
    std::shared_ptr<ResidualNoiseBackend> residual_noise_;  // test-residual-noise: backend_ wraps the real one
    std::vector<FaultSwitch> fault_list_;
    LegFaults faults_;
    std::optional<engine::LoadedCheckpoint> resume_from_;
    // load_model
    engine::HfCheckpoint base_;
    engine::LoraConfig lora_;
    engine::LoraAdapter init_;
    std::vector<TensorDigest> digests_;
    json settings_, settings_group_;  // the `settings` event, its one parameter group (tensors added)
    // encode_data
    std::string template_name_;
    data::TemplateKind kind_{};
    std::unique_ptr<data::Tokenizer> tokenizer_;
    int32_t pad_id_ = 0;
    std::vector<data::Record> records_;
    data::BatchPlan plan_;
    std::vector<size_t> eval_indices_;
    size_t l3_count_ = 0;
    std::map<size_t, Encoded> encoded_;
    double tokenize_s_ = 0;
    // build_trainer
    int64_t total_updates_ = 0;
    engine::Qwen3Config config_;
    std::optional<engine::Trainer> trainer_;
    double model_load_s_ = 0;
    std::vector<Probe> probes_;
    std::unique_ptr<engine::FingerprintRecorder> recorder_;
    std::vector<engine::MicroBatch> eval_batches_;
    // train
    int64_t start_update_ = 0;
    double train_s_ = 0;
};

}  // namespace

int run_engine_leg(const EngineLegOptions& options) {
    EventWriter out(stdout);
    try {
        return EngineLeg(options, out).run();
    } catch (const ReportedFailure&) {
        return 1;
    } catch (const std::exception& e) {
        std::fprintf(stderr, "engine leg: error: %s\n", e.what());
        out.emit("error", {{"message", e.what()}});
        return 1;
    }
}

std::vector<FingerprintRow> fingerprint_rows(const std::vector<engine::Fingerprint>& points) {
    std::vector<FingerprintRow> rows;
    rows.reserve(points.size());
    for (const auto& p : points) {
        FingerprintRow r;
        r.update = p.update;
        r.micro_batch = p.micro_batch;
        r.layer = p.layer;
        r.op = engine::observed_op_name(p.op);
        r.pass = engine::pass_name(p.pass);
        r.count = p.summary.count;
        r.norm = p.summary.norm;
        r.mean = p.summary.mean;
        r.maxabs = p.summary.maxabs;
        std::copy(p.summary.sketch.begin(), p.summary.sketch.end(), r.sketch.begin());
        rows.push_back(std::move(r));
    }
    return rows;
}

}  // namespace tandem::experiments
