// Trainer: gradient accumulation with SPEC §1's per-update token normalisation, global-norm clipping,
// AdamW with the transformers cosine/warmup schedule, evaluation, and resumable state.
#include "tandem/engine/trainer.h"

#include <chrono>
#include <string>

#include "tandem/engine/ops.h"
#include "tandem/error.h"

namespace tandem::engine {

struct Trainer::Impl {
    TrainOptions opts;
    std::unique_ptr<Qwen3LoraModel> model;
    std::vector<float> m, v;  // AdamW moments, same layout as model->params()
    int64_t step = 0;
    uint64_t native_counter = 0;
    int64_t warmup = 0;
    std::vector<std::pair<int64_t, int64_t>> segments;  // per adapter tensor [offset, count]
};

Trainer::Trainer() : impl_(std::make_unique<Impl>()) {}
Trainer::~Trainer() = default;
Trainer::Trainer(Trainer&&) noexcept = default;
Trainer& Trainer::operator=(Trainer&&) noexcept = default;

Trainer Trainer::create(const Qwen3Config& config, TensorMap base_weights, const LoraConfig& lora,
                        TrainOptions options) {
    if (options.total_updates < 1) throw Error("trainer: total_updates must be >= 1");
    if (lora.dropout < 0.0 || lora.dropout >= 1.0)
        throw Error("trainer: LoRA dropout " + std::to_string(lora.dropout) + " outside [0, 1)");
    ops::set_num_threads(options.threads);
    Trainer t;
    t.impl_->opts = options;
    t.impl_->model = std::make_unique<Qwen3LoraModel>(config, std::move(base_weights), lora, options.model);
    const auto n = static_cast<size_t>(t.impl_->model->num_trainable());
    t.impl_->m.assign(n, 0.0f);
    t.impl_->v.assign(n, 0.0f);
    t.impl_->warmup = options.warmup_updates >= 0 ? options.warmup_updates
                                                  : warmup_updates(options.warmup_ratio, options.total_updates);
    for (const auto& s : t.impl_->model->adapter_slots())
        t.impl_->segments.emplace_back(s.offset, Tensor::count(s.shape));
    return t;
}

void Trainer::load_adapter(const TensorMap& peft_tensors) { impl_->model->load_adapter(peft_tensors); }
TensorMap Trainer::adapter_tensors() const { return impl_->model->adapter_tensors(); }
int64_t Trainer::step() const { return impl_->step; }
Qwen3LoraModel& Trainer::model() { return *impl_->model; }
const TrainOptions& Trainer::options() const { return impl_->opts; }

double Trainer::lr_for_update(int64_t t) const {
    return cosine_with_warmup_lr(impl_->opts.lr, t, impl_->warmup, impl_->opts.total_updates);
}

UpdateMetrics Trainer::train_update(const std::vector<MicroBatch>& micro_batches) {
    const auto start = std::chrono::steady_clock::now();
    Impl& s = *impl_;
    Qwen3LoraModel& model = *s.model;
    const int64_t vocab = model.config().vocab_size;
    int64_t supervised = 0;
    for (const auto& mb : micro_batches) supervised += mb.validate(vocab);
    if (supervised == 0)
        throw Error("trainer: update " + std::to_string(s.step) + " has no supervised token");

    // loss = (sum of token losses over the whole update) / (supervised tokens of the update), so every
    // micro-batch backpropagates with the same scale 1 / supervised.
    const double grad_scale = 1.0 / static_cast<double>(supervised);
    model.zero_grads();
    double loss_sum = 0.0;
    const LoraConfig& lora = model.lora();
    for (size_t i = 0; i < micro_batches.size(); ++i) {
        DropoutContext dc;
        dc.mode = s.opts.dropout_mode;
        dc.p = lora.dropout;
        dc.seed = s.opts.seed;
        dc.update = static_cast<uint64_t>(s.step);
        dc.micro_batch = i;
        dc.native_counter = &s.native_counter;
        loss_sum += model.forward_backward(micro_batches[i], dc, grad_scale);
    }

    UpdateMetrics out;
    out.update = s.step;
    out.supervised_tokens = supervised;
    out.loss = loss_sum / static_cast<double>(supervised);
    out.grad_norm = global_grad_norm(model.grads(), s.segments);
    clip_grad(model.grads(), model.num_trainable(), out.grad_norm, s.opts.max_grad_norm);
    out.lr = lr_for_update(s.step);
    ++s.step;  // torch increments the step before the bias corrections
    adamw_step(model.params(), model.grads(), s.m.data(), s.v.data(), model.num_trainable(), s.step, out.lr,
               s.opts.adamw);
    out.wall_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    return out;
}

EvalResult Trainer::evaluate(const std::vector<MicroBatch>& micro_batches) {
    EvalResult r;
    for (const auto& mb : micro_batches) {
        r.supervised_tokens += mb.validate(impl_->model->config().vocab_size);
        r.loss_sum += impl_->model->loss_sum(mb);
    }
    if (r.supervised_tokens == 0) throw Error("evaluate: the held-out batches have no supervised token");
    r.loss = r.loss_sum / static_cast<double>(r.supervised_tokens);
    return r;
}

namespace {
TensorMap buffer_to_map(const std::vector<AdapterSlot>& slots, const std::vector<float>& buf) {
    TensorMap out;
    for (const auto& s : slots) {
        Tensor t(s.shape);
        std::copy(buf.begin() + s.offset, buf.begin() + s.offset + t.numel(), t.data.begin());
        out.emplace(s.name, std::move(t));
    }
    return out;
}
void map_to_buffer(const std::vector<AdapterSlot>& slots, const TensorMap& map, std::vector<float>& buf,
                   const char* what) {
    if (map.size() != slots.size())
        throw Error(std::string("trainer state: ") + what + " has " + std::to_string(map.size()) +
                    " tensors, expected " + std::to_string(slots.size()));
    for (const auto& s : slots) {
        auto it = map.find(s.name);
        if (it == map.end()) throw Error(std::string("trainer state: ") + what + " lacks '" + s.name + "'");
        if (it->second.shape != s.shape)
            throw Error(std::string("trainer state: ") + what + " tensor '" + s.name + "' has the wrong shape");
        std::copy(it->second.data.begin(), it->second.data.end(), buf.begin() + s.offset);
    }
}
}  // namespace

TrainerState Trainer::state() const {
    TrainerState st;
    st.adapter = impl_->model->adapter_tensors();
    st.adam_m = buffer_to_map(impl_->model->adapter_slots(), impl_->m);
    st.adam_v = buffer_to_map(impl_->model->adapter_slots(), impl_->v);
    st.step = impl_->step;
    st.native_rng_counter = impl_->native_counter;
    st.seed = impl_->opts.seed;
    return st;
}

void Trainer::restore(const TrainerState& st) {
    if (st.seed != impl_->opts.seed)
        throw Error("trainer state: seed " + std::to_string(st.seed) + " differs from the run's seed " +
                    std::to_string(impl_->opts.seed));
    if (st.step < 0) throw Error("trainer state: negative step");
    impl_->model->load_adapter(st.adapter);
    map_to_buffer(impl_->model->adapter_slots(), st.adam_m, impl_->m, "adam_m");
    map_to_buffer(impl_->model->adapter_slots(), st.adam_v, impl_->v, "adam_v");
    impl_->step = st.step;
    impl_->native_counter = st.native_rng_counter;
}

}  // namespace tandem::engine
