// The Trainer on the CUDA backend against the Trainer on the CPU backend (docs/engine-cuda.md): the same
// wiring and trainer core on both, so this checks the CUDA ops in place. The same generated tiny Qwen3 model, the same
// initial adapter and micro-batches, the same options and SHARED dropout masks (bit-identical on
// both backends), 10 updates: every update's loss within 1e-5 relative (the bound), the
// pre-clip grad norm within 1e-4. Then resume on the GPU (bit-identical to an uninterrupted run:
// every device reduction is deterministic) and checkpoints crossing backends in both directions.
// Skips with a message when there is no CUDA device.
#include <gtest/gtest.h>

#include "gpu_test_util.h"
#include "tandem/engine/generate.h"
#include "tandem/engine/trainer.h"
#include "tandem/engine_cuda/cuda_backend.h"

namespace {

using namespace tandem;
using namespace tandem::engine;
using gputest::rel_diff;

Qwen3Config tiny_config() {
    return Qwen3Config{.vocab_size = 515,  // not a multiple of anything
                       .hidden_size = 64, .intermediate_size = 160, .num_hidden_layers = 2,
                       .num_attention_heads = 4, .num_key_value_heads = 2, .head_dim = 32};
}

LoraConfig tiny_lora() {
    LoraConfig l;
    l.rank = 4;
    l.alpha = 8.0;
    l.dropout = 0.1;
    return l;
}

// A right-padded micro-batch: prompt of 3..6 tokens, the rest of each sequence supervised.
MicroBatch make_batch(int64_t batch, int64_t seq, uint32_t seed, int64_t vocab) {
    std::mt19937 rng(seed);
    MicroBatch mb;
    mb.batch = batch;
    mb.seq = seq;
    mb.ids.resize(size_t(batch * seq));
    mb.supervised.assign(size_t(batch * seq), 0);
    for (auto& id : mb.ids) id = int32_t(rng() % uint32_t(vocab));
    for (int64_t b = 0; b < batch; ++b) {
        const int64_t len = b == 0 ? seq : std::max<int64_t>(8, seq - int64_t(rng() % uint32_t(seq / 2)));
        mb.lengths.push_back(int32_t(len));
        const int64_t prompt = 3 + int64_t(rng() % 4);
        for (int64_t t = prompt; t < len; ++t) mb.supervised[size_t(b * seq + t)] = 1;
    }
    return mb;
}

std::vector<std::vector<MicroBatch>> make_updates(int n_updates, int64_t vocab) {
    std::vector<std::vector<MicroBatch>> u;
    for (int i = 0; i < n_updates; ++i)
        u.push_back({make_batch(2, 37 + i % 3, 100 + 2 * i, vocab), make_batch(2, 21, 101 + 2 * i, vocab)});
    return u;
}

TrainOptions options(DropoutMode mode) {
    TrainOptions o;
    o.lr = 2e-3;  // large enough that 10 updates move the loss visibly
    o.total_updates = 10;
    o.warmup_updates = 2;
    o.max_grad_norm = 1.0;
    o.dropout_mode = mode;
    o.seed = 1234;
    o.threads = 2;
    o.model.ce_token_chunk = 16;
    return o;
}

// A Trainer on cuda:0 (what the engine leg builds for --devices cuda:0).
Trainer gpu_trainer(const Qwen3Config& cfg, TensorMap base, const LoraConfig& lora, TrainOptions o) {
    return Trainer::create(cfg, std::move(base), lora, o, cuda::make_cuda_backend(0));
}

class GpuTrainer : public ::testing::Test {
protected:
    void SetUp() override { TANDEM_REQUIRE_GPU(); }
    const Qwen3Config cfg = tiny_config();
    const LoraConfig lora = tiny_lora();
    TensorMap base() const { return generate_base_weights(cfg, 7); }
    TensorMap adapter() const {
        TensorMap a = generate_initial_adapter(cfg, lora, 11);
        // B = 0 at init makes every A gradient zero in update 0; a small non-zero B exercises both.
        uint32_t s = 5;
        for (auto& [name, t] : a)
            if (name.find("lora_B") != std::string::npos) t.data = gputest::random_vector(t.data.size(), s++, 0.02f);
        return a;
    }
};

TEST_F(GpuTrainer, AdapterLayoutIsTheCpuModels) {
    Trainer cpu = Trainer::create(cfg, base(), lora, options(DropoutMode::Off));
    Trainer gpu = gpu_trainer(cfg, base(), lora, options(DropoutMode::Off));
    const auto& a = cpu.model().adapter_slots();
    const auto& b = gpu.model().adapter_slots();
    ASSERT_EQ(a.size(), b.size());
    for (size_t i = 0; i < a.size(); ++i) {
        EXPECT_EQ(a[i].name, b[i].name);
        EXPECT_EQ(a[i].shape, b[i].shape);
        EXPECT_EQ(a[i].offset, b[i].offset);
    }
}

TEST_F(GpuTrainer, HeldOutLossMatchesCpu) {
    Trainer cpu = Trainer::create(cfg, base(), lora, options(DropoutMode::Off));
    Trainer gpu = gpu_trainer(cfg, base(), lora, options(DropoutMode::Off));
    cpu.load_adapter(adapter());
    gpu.load_adapter(adapter());
    const auto batches = make_updates(3, cfg.vocab_size)[2];
    const EvalResult c = cpu.evaluate(batches), g = gpu.evaluate(batches);
    EXPECT_EQ(c.supervised_tokens, g.supervised_tokens);
    EXPECT_LE(rel_diff(g.loss, c.loss), 1e-5) << "cpu " << c.loss << " gpu " << g.loss;
}

void expect_ten_updates_match(const Qwen3Config& cfg, const LoraConfig& lora, TensorMap base_cpu, TensorMap base_gpu,
                              const TensorMap& init, DropoutMode mode) {
    Trainer cpu = Trainer::create(cfg, std::move(base_cpu), lora, options(mode));
    Trainer gpu = gpu_trainer(cfg, std::move(base_gpu), lora, options(mode));
    cpu.load_adapter(init);
    gpu.load_adapter(init);
    const auto updates = make_updates(10, cfg.vocab_size);
    double first = 0.0, last = 0.0;
    for (size_t i = 0; i < updates.size(); ++i) {
        const UpdateMetrics c = cpu.train_update(updates[i]);
        const UpdateMetrics g = gpu.train_update(updates[i]);
        EXPECT_EQ(c.supervised_tokens, g.supervised_tokens);
        EXPECT_EQ(c.lr, g.lr);
        EXPECT_LE(rel_diff(g.loss, c.loss), 1e-5) << "update " << i << ": cpu " << c.loss << " gpu " << g.loss;
        EXPECT_LE(rel_diff(g.grad_norm, c.grad_norm), 1e-4)
            << "update " << i << ": cpu " << c.grad_norm << " gpu " << g.grad_norm;
        if (i == 0) first = c.loss;
        last = c.loss;
    }
    EXPECT_NE(first, last);  // the run trained: the comparison is not between two frozen models
    EXPECT_EQ(cpu.state().native_rng_counter, gpu.state().native_rng_counter);
}

TEST_F(GpuTrainer, TenUpdatesMatchCpuWithSharedDropout) {
    expect_ten_updates_match(cfg, lora, base(), base(), adapter(), DropoutMode::Shared);
}

TEST_F(GpuTrainer, TenUpdatesMatchCpuWithNativeDropout) {
    expect_ten_updates_match(cfg, lora, base(), base(), adapter(), DropoutMode::Native);
}

TEST_F(GpuTrainer, ResumeOnGpuIsBitIdentical) {
    const auto updates = make_updates(6, cfg.vocab_size);
    Trainer straight = gpu_trainer(cfg, base(), lora, options(DropoutMode::Native));
    straight.load_adapter(adapter());
    std::vector<double> want;
    for (const auto& u : updates) want.push_back(straight.train_update(u).loss);

    Trainer first = gpu_trainer(cfg, base(), lora, options(DropoutMode::Native));
    first.load_adapter(adapter());
    for (int i = 0; i < 3; ++i) EXPECT_EQ(first.train_update(updates[size_t(i)]).loss, want[size_t(i)]);
    const TrainerState saved = first.state();
    Trainer resumed = gpu_trainer(cfg, base(), lora, options(DropoutMode::Native));
    resumed.restore(saved);
    EXPECT_EQ(resumed.step(), 3);
    for (int i = 3; i < 6; ++i)
        EXPECT_EQ(resumed.train_update(updates[size_t(i)]).loss, want[size_t(i)]) << "update " << i;
    const TensorMap a = resumed.adapter_tensors(), b = straight.adapter_tensors();
    for (const auto& [name, t] : b) EXPECT_EQ(a.at(name).data, t.data) << name;
}

TEST_F(GpuTrainer, CheckpointsCrossBackendsBothWays) {
    const auto updates = make_updates(5, cfg.vocab_size);
    // GPU -> CPU
    Trainer gpu = gpu_trainer(cfg, base(), lora, options(DropoutMode::Shared));
    gpu.load_adapter(adapter());
    for (int i = 0; i < 3; ++i) gpu.train_update(updates[size_t(i)]);
    Trainer cpu = Trainer::create(cfg, base(), lora, options(DropoutMode::Shared));
    cpu.restore(gpu.state());
    for (int i = 3; i < 5; ++i) {
        const double g = gpu.train_update(updates[size_t(i)]).loss, c = cpu.train_update(updates[size_t(i)]).loss;
        EXPECT_LE(rel_diff(g, c), 1e-5) << "update " << i;
    }
    // CPU -> GPU
    Trainer gpu2 = gpu_trainer(cfg, base(), lora, options(DropoutMode::Shared));
    gpu2.restore(cpu.state());
    EXPECT_EQ(gpu2.step(), 5);
    const TensorMap a = gpu2.adapter_tensors(), b = cpu.adapter_tensors();
    for (const auto& [name, t] : b) EXPECT_EQ(a.at(name).data, t.data) << name;  // a byte-exact round trip
    const auto extra = make_updates(7, cfg.vocab_size)[6];
    EXPECT_LE(rel_diff(gpu2.train_update(extra).loss, cpu.train_update(extra).loss), 1e-5);
}

TEST_F(GpuTrainer, MemoryReportCountsWeightsAndAdapterExactly) {
    const TensorMap b = base();
    size_t weight_bytes = 0;
    for (const auto& [name, t] : b) weight_bytes += size_t(t.numel()) * sizeof(float);
    Trainer gpu = gpu_trainer(cfg, base(), lora, options(DropoutMode::Off));
    kernels::MemoryReport r = cuda::memory_report(gpu.backend());
    EXPECT_EQ(r.category_current[int(kernels::MemoryCategory::Weights)], weight_bytes);
    size_t n_params = 0;
    for (const auto& s : gpu.model().adapter_slots()) n_params += size_t(Tensor::count(s.shape));
    // parameters, gradients, AdamW m and v
    EXPECT_EQ(r.category_current[int(kernels::MemoryCategory::AdapterOptimizer)], 4 * n_params * sizeof(float));
    EXPECT_EQ(r.category_current[int(kernels::MemoryCategory::Activations)], 0u);
    gpu.load_adapter(adapter());
    gpu.train_update(make_updates(1, cfg.vocab_size)[0]);
    r = cuda::memory_report(gpu.backend());
    EXPECT_GT(r.category_peak[int(kernels::MemoryCategory::Activations)], 0u);
    EXPECT_GE(r.peak_bytes, r.current_bytes);
    EXPECT_GE(r.peak_block_bytes, r.peak_bytes);
}

}  // namespace
