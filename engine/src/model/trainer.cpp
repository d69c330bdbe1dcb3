// Trainer: gradient accumulation with docs/spec.md §Recipe's per-update token normalisation, global-norm clipping,
// AdamW with the transformers cosine/warmup schedule, evaluation, and resumable state — written once
// over the backend seam: the moments, the norm and the clipping coefficient live on the backend, and
// the host waits once per update (for the loss) and once more for the grad norm.
#include "tandem/engine/trainer.h"

#include <algorithm>
#include <chrono>
#include <string>
#include <thread>
#include <ctime>

#include "tandem/error.h"

namespace tandem::engine {

struct Trainer::Impl {
    // Declared first, destroyed last: the model and every Buffer below release into it.
    std::shared_ptr<Backend> be;
    TrainOptions opts;
    std::unique_ptr<Qwen3LoraModel> model;
    Buffer<float> m, v;                         // AdamW moments, the adapter's flat layout
    Buffer<int64_t> seg_offsets, seg_counts;    // per adapter tensor: [offset, count) of the layout
    int64_t n_segments = 0, max_segment = 0;
    Buffer<double> norm;                        // pre-clip global grad norm of the last update
    Buffer<float> clip_coef;
    Buffer<float> fault_acc;                    // the clip_per_micro_batch fault: the sum of clipped shares
    int64_t step = 0;
    uint64_t native_counter = 0;
    int64_t warmup = 0;
    bool evaluated_since_update = false;        // the slow_after_eval fault's trigger
    double last_normal_update_s = 0;            // the slow_after_eval fault's unit: the last update not slowed
    double last_normal_update_cpu_s = 0;        // the same in process CPU time

    const FaultConfig& faults() const { return opts.model.faults; }

    // The dropout context of micro-batch i of the current update (the same_mask_every_micro_batch
    // fault: every micro-batch gets micro-batch 0's shared key / native counter start).
    DropoutContext train_dropout(size_t i, uint64_t counter_at_update_start) {
        DropoutContext dc;
        dc.mode = opts.dropout_mode;
        dc.p = model->lora().dropout;
        dc.seed = opts.seed;
        dc.update = static_cast<uint64_t>(step);
        dc.micro_batch = faults().same_mask_every_micro_batch ? 0 : i;
        if (faults().same_mask_every_micro_batch && dc.mode == DropoutMode::Native) native_counter = counter_at_update_start;
        dc.native_counter = &native_counter;
        return dc;
    }

    // Gradient accumulation one micro-batch at a time, for the faults that change it: each
    // micro-batch's mean / M (mean_of_micro_batch_means), or each share clipped on its own
    // (Clipping::PerMicroBatch). Leaves the sum in the model's grads; returns the update's loss.
    double accumulate_one_by_one(const std::vector<MicroBatch>& mbs, int64_t supervised, uint64_t counter_start) {
        Backend& bk = *be;
        const int64_t n = model->num_trainable();
        if (fault_acc.size() != n) fault_acc = Buffer<float>(bk, n, MemoryKind::Workspace);
        bk.fill_zero(fault_acc.get(), fault_acc.bytes());
        const double M = static_cast<double>(mbs.size());
        double loss = 0;
        for (size_t i = 0; i < mbs.size(); ++i) {
            const int64_t s_i = mbs[i].validate(model->config().vocab_size);
            if (s_i == 0 && faults().mean_of_micro_batch_means) continue;  // no mean to take
            const double scale = faults().mean_of_micro_batch_means ? 1.0 / (static_cast<double>(s_i) * M)
                                                                    : 1.0 / static_cast<double>(supervised);
            model->zero_grads();
            const double sum = model->accumulate({mbs[i]}, [&](size_t) { return train_dropout(i, counter_start); }, scale);
            loss += sum * scale;
            if (faults().clipping == Clipping::PerMicroBatch) {
                bk.global_grad_norm(norm.get(), clip_coef.get(), model->grads(), seg_offsets.get(), seg_counts.get(),
                                    n_segments, max_segment, opts.max_grad_norm);
                bk.clip_grad(model->grads(), n, clip_coef.get());
            }
            bk.residual_add(fault_acc.get(), fault_acc.get(), model->grads(), n);
        }
        model->zero_grads();
        bk.residual_add(model->grads(), model->grads(), fault_acc.get(), n);
        return loss;
    }

    std::vector<float> host_copy(const float* device, int64_t n) const {
        std::vector<float> out(static_cast<size_t>(n));
        be->download(out.data(), device, out.size() * sizeof(float));
        return out;
    }

    TensorMap to_map(const Buffer<float>& buf) const {
        const auto& slots = model->adapter_slots();
        std::vector<float> host(size_t(model->num_trainable()));
        be->download(host.data(), buf.get(), host.size() * sizeof(float));
        TensorMap out;
        for (const auto& s : slots) {
            Tensor t(s.shape);
            std::copy(host.begin() + s.offset, host.begin() + s.offset + t.numel(), t.data.begin());
            out.emplace(s.name, std::move(t));
        }
        return out;
    }

    void from_map(const TensorMap& map, Buffer<float>& buf, const char* what) {
        const auto& slots = model->adapter_slots();
        if (map.size() != slots.size())
            throw Error(std::string("trainer state: ") + what + " has " + std::to_string(map.size()) +
                        " tensors, expected " + std::to_string(slots.size()));
        std::vector<float> host(size_t(model->num_trainable()));
        for (const auto& s : slots) {
            auto it = map.find(s.name);
            if (it == map.end()) throw Error(std::string("trainer state: ") + what + " lacks '" + s.name + "'");
            if (it->second.shape != s.shape)
                throw Error(std::string("trainer state: ") + what + " tensor '" + s.name + "' has the wrong shape");
            std::copy(it->second.data.begin(), it->second.data.end(), host.begin() + s.offset);
        }
        be->upload(buf.get(), host.data(), host.size() * sizeof(float));
    }
};

double process_cpu_seconds() {
    timespec t{};
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
    return static_cast<double>(t.tv_sec) + 1e-9 * static_cast<double>(t.tv_nsec);
}

Trainer::Trainer() : impl_(std::make_unique<Impl>()) {}
Trainer::~Trainer() = default;
Trainer::Trainer(Trainer&&) noexcept = default;
Trainer& Trainer::operator=(Trainer&&) noexcept = default;

Trainer Trainer::create(const Qwen3Config& config, TensorMap base_weights, const LoraConfig& lora,
                        TrainOptions options, std::shared_ptr<Backend> backend) {
    if (options.total_updates < 1) throw Error("trainer: total_updates must be >= 1");
    if (lora.dropout < 0.0 || lora.dropout >= 1.0)
        throw Error("trainer: LoRA dropout " + std::to_string(lora.dropout) + " outside [0, 1)");
    Trainer t;
    Impl& s = *t.impl_;
    s.be = backend ? std::move(backend) : make_cpu_backend(options.threads);
    // the optimizer faults are AdamW variants (faults.h); set here, once
    if (options.model.faults.adamw_no_bias_correction) options.adamw.bias_correction = false;
    if (options.model.faults.adamw_eps_inside_sqrt) options.adamw.eps_inside_sqrt = true;
    s.opts = options;
    s.model = std::make_unique<Qwen3LoraModel>(config, std::move(base_weights), lora, options.model, s.be);
    Backend& be = *s.be;
    const int64_t n = s.model->num_trainable();
    s.m = Buffer<float>(be, n, MemoryKind::Adapter);
    s.v = Buffer<float>(be, n, MemoryKind::Adapter);
    be.fill_zero(s.m.get(), s.m.bytes());
    be.fill_zero(s.v.get(), s.v.bytes());
    std::vector<int64_t> offsets, counts;
    for (const auto& slot : s.model->adapter_slots()) {
        offsets.push_back(slot.offset);
        counts.push_back(Tensor::count(slot.shape));
        s.max_segment = std::max(s.max_segment, counts.back());
    }
    s.n_segments = static_cast<int64_t>(offsets.size());
    s.seg_offsets = Buffer<int64_t>(be, s.n_segments, MemoryKind::Workspace);
    s.seg_counts = Buffer<int64_t>(be, s.n_segments, MemoryKind::Workspace);
    be.upload(s.seg_offsets.get(), offsets.data(), offsets.size() * sizeof(int64_t));
    be.upload(s.seg_counts.get(), counts.data(), counts.size() * sizeof(int64_t));
    s.norm = Buffer<double>(be, 1, MemoryKind::Workspace);
    s.clip_coef = Buffer<float>(be, 1, MemoryKind::Workspace);
    s.warmup = options.warmup_updates >= 0 ? options.warmup_updates
                                           : warmup_updates(options.warmup_ratio, options.total_updates);
    return t;
}

void Trainer::load_adapter(const TensorMap& peft_tensors) { impl_->model->load_adapter(peft_tensors); }
TensorMap Trainer::adapter_tensors() const { return impl_->model->adapter_tensors(); }
int64_t Trainer::step() const { return impl_->step; }
Qwen3LoraModel& Trainer::model() { return *impl_->model; }
const TrainOptions& Trainer::options() const { return impl_->opts; }
Backend& Trainer::backend() const { return *impl_->be; }

double Trainer::lr_for_update(int64_t t) const {
    // the warmup_offset fault: update t runs with the schedule's lr of update t + offset
    return cosine_with_warmup_lr(impl_->opts.lr, t + impl_->faults().warmup_offset, impl_->warmup,
                                 impl_->opts.total_updates);
}

UpdateMetrics Trainer::train_update(const std::vector<MicroBatch>& micro_batches, Observer* observer,
                                    OptimizerStepOperands* operands) {
    const auto start = std::chrono::steady_clock::now();
    const double cpu_start = process_cpu_seconds();
    Impl& s = *impl_;
    Qwen3LoraModel& model = *s.model;
    Backend& be = *s.be;
    const int64_t vocab = model.config().vocab_size;
    int64_t supervised = 0;
    for (const auto& mb : micro_batches) supervised += mb.validate(vocab);
    if (supervised == 0)
        throw Error("trainer: update " + std::to_string(s.step) + " has no supervised token");

    // loss = (sum of token losses over the whole update) / (supervised tokens of the update), so every
    // micro-batch backpropagates with the same scale 1 / supervised.
    const double grad_scale = 1.0 / static_cast<double>(supervised);
    const FaultConfig& f = s.faults();
    const uint64_t counter_start = s.native_counter;
    UpdateMetrics out;
    model.set_observer(observer);
    struct Unset {
        Qwen3LoraModel& m;
        ~Unset() { m.set_observer(nullptr); }
    } unset{model};
    if (f.mean_of_micro_batch_means || f.clipping == Clipping::PerMicroBatch) {
        out.loss = s.accumulate_one_by_one(micro_batches, supervised, counter_start);
    } else {
        model.zero_grads();
        const double loss_sum = model.accumulate(
            micro_batches, [&](size_t i) { return s.train_dropout(i, counter_start); }, grad_scale);
        out.loss = loss_sum / static_cast<double>(supervised);
    }

    const int64_t n = model.num_trainable();
    be.global_grad_norm(s.norm.get(), s.clip_coef.get(), model.grads(), s.seg_offsets.get(), s.seg_counts.get(),
                        s.n_segments, s.max_segment, s.opts.max_grad_norm);
    if (f.clipping == Clipping::Global) be.clip_grad(model.grads(), n, s.clip_coef.get());
    out.update = s.step;
    out.supervised_tokens = supervised;
    out.lr = lr_for_update(s.step);
    if (operands) {  // the step's operands, after clipping (what the optimizer receives)
        operands->p0 = s.host_copy(model.params(), n);
        operands->g = s.host_copy(model.grads(), n);
        operands->m = s.host_copy(s.m.get(), n);
        operands->v = s.host_copy(s.v.get(), n);
        operands->step = s.step;
        operands->lr = out.lr;
    }
    ++s.step;  // torch increments the step before the bias corrections
    be.adamw_step(model.params(), model.grads(), s.m.get(), s.v.get(), n, s.step, out.lr, s.opts.adamw);
    if (operands) operands->p1 = s.host_copy(model.params(), n);
    if (observer)
        for (const auto& slot : model.adapter_slots())
            observer->observe(slot.layer, projection_op(slot.projection, slot.is_a ? ProjectionPart::LoraA : ProjectionPart::LoraB),
                              Pass::Optimizer, model.params() + slot.offset, slot.shape[0], slot.shape[1], Rows::All);
    be.download(&out.grad_norm, s.norm.get(), sizeof(double));  // waits for the update
    out.wall_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    out.cpu_seconds = process_cpu_seconds() - cpu_start;
    if (f.slow_after_eval > 1 && s.evaluated_since_update) {
        // the runtime fault: this update costs slow_after_eval times the CPU time of a normal one (the
        // last update not slowed, or this one if longer) — busy work, as a recompilation or a cold cache
        // after evaluation would be, so the leg's CPU time shows it as well as its wall time (the gate's
        // step-time flag reads CPU time: docs/gate.md); no number changes
        const double unit = std::max(out.cpu_seconds, s.last_normal_update_cpu_s);
        volatile double sink = 0;
        while (process_cpu_seconds() - cpu_start < f.slow_after_eval * unit)
            for (int i = 0; i < 10000; ++i) sink = sink + 1e-9 * i;
        out.wall_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
        out.cpu_seconds = process_cpu_seconds() - cpu_start;
    } else {
        s.last_normal_update_s = out.wall_seconds;
        s.last_normal_update_cpu_s = out.cpu_seconds;
    }
    s.evaluated_since_update = false;
    return out;
}

EvalResult Trainer::evaluate(const std::vector<MicroBatch>& micro_batches) {
    EvalResult r;
    for (const auto& mb : micro_batches) r.supervised_tokens += mb.validate(impl_->model->config().vocab_size);
    if (r.supervised_tokens == 0) throw Error("evaluate: the held-out batches have no supervised token");
    const Impl& s = *impl_;
    const double eval_p = s.faults().eval_dropout;  // the eval_dropout fault: masks in evaluation
    r.loss_sum = impl_->model->evaluate(micro_batches, [&](size_t i) {
        DropoutContext dc;
        if (eval_p > 0) {
            dc.mode = DropoutMode::Shared;
            dc.p = eval_p;
            dc.seed = s.opts.seed;
            dc.update = static_cast<uint64_t>(s.step);
            dc.micro_batch = (uint64_t{1} << 32) + i;  // a key space training never draws from
        }
        return dc;
    });
    r.loss = r.loss_sum / static_cast<double>(r.supervised_tokens);
    impl_->evaluated_since_update = true;
    return r;
}

TrainerState Trainer::state() const {
    TrainerState st;
    st.adapter = impl_->model->adapter_tensors();
    st.adam_m = impl_->to_map(impl_->m);
    st.adam_v = impl_->to_map(impl_->v);
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
    impl_->from_map(st.adam_m, impl_->m, "adam_m");
    impl_->from_map(st.adam_v, impl_->v, "adam_v");
    impl_->step = st.step;
    impl_->native_counter = st.native_rng_counter;
}

}  // namespace tandem::engine
