// tandem_cuda_bench: the engine leg of the GPU benchmark (issue 6, run by scripts/gpu-check).
// Qwen3-0.6B architecture (SPEC §1) with generated weights, rsLoRA r 16 / alpha 32 / dropout 0.05
// on all seven projections, micro-batch 2 x accumulation 8 at sequence 512, float32, no TF32.
// Runs `warmup` updates, then times `timed` updates (steps warmup+1 .. warmup+timed) with wall
// clock around train_update (which synchronises the device once per update). Prints one JSON line:
// seconds/update (mean and median), tokens/s, peak device memory (allocator high-water marks and
// cudaMemGetInfo's view), achieved FLOP/s against the float32 peak given on the command line.
//
// FLOP count (per update, all 16 sequences, what the engine actually computes):
//   linear layers: forward 2*P_lin*tok, backward input-gradients 2*P_lin*tok (frozen base: no dW);
//   LM head on supervised tokens: forward 2*C*V*sup, backward 2*C*V*sup;
//   attention: forward 4*T_avg_keys*D*H per token per layer (QK^T and PV), backward 2.5x that
//   (dq: QK^T, dO V^T, dS K; dk/dv: QK^T again, dO V^T again, dS^T Q, P^T dO) -> 8 more products... we
//   count backward as 2x forward plus the recomputation (3x forward total), the flash-attention
//   convention; LoRA: forward 2*r*(in+out)*tok per projection, backward 2x that.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "tandem/engine/generate.h"
#include "tandem/engine_cuda/cuda_trainer.h"
#include "tandem/error.h"

using namespace tandem;
using namespace tandem::engine;

namespace {

struct Args {
    std::string config = "qwen3-0.6b";
    int device = 0;
    int64_t seq = 512, micro = 2, accum = 8;
    int warmup = 20, timed = 40;
    int64_t prompt = 64;  // unsupervised prefix of each sequence
    double peak_tflops = 67.0;
    int64_t ce_chunk = 256;
};

Args parse(int argc, char** argv) {
    Args a;
    for (int i = 1; i < argc; ++i) {
        const std::string k = argv[i];
        auto next = [&]() -> std::string {
            if (i + 1 >= argc) throw Error("tandem_cuda_bench: " + k + " needs a value");
            return argv[++i];
        };
        if (k == "--config") a.config = next();
        else if (k == "--device") a.device = std::stoi(next());
        else if (k == "--seq") a.seq = std::stoll(next());
        else if (k == "--micro-batch") a.micro = std::stoll(next());
        else if (k == "--accumulation") a.accum = std::stoll(next());
        else if (k == "--warmup") a.warmup = std::stoi(next());
        else if (k == "--timed") a.timed = std::stoi(next());
        else if (k == "--prompt") a.prompt = std::stoll(next());
        else if (k == "--peak-tflops") a.peak_tflops = std::stod(next());
        else if (k == "--ce-chunk") a.ce_chunk = std::stoll(next());
        else throw Error("tandem_cuda_bench: unknown argument " + k);
    }
    return a;
}

// Full-length sequences (every token real), a fixed prompt, the rest supervised: the same shapes
// bench_torch.py builds, so both legs do the same arithmetic.
MicroBatch make_batch(const Args& a, int64_t vocab, uint32_t seed) {
    std::mt19937 rng(seed);
    MicroBatch mb;
    mb.batch = a.micro;
    mb.seq = a.seq;
    mb.ids.resize(size_t(a.micro * a.seq));
    mb.supervised.assign(size_t(a.micro * a.seq), 0);
    for (auto& id : mb.ids) id = int32_t(rng() % uint32_t(std::min<int64_t>(vocab, 151669)));
    for (int64_t b = 0; b < a.micro; ++b) {
        mb.lengths.push_back(int32_t(a.seq));
        for (int64_t t = a.prompt; t < a.seq; ++t) mb.supervised[size_t(b * a.seq + t)] = 1;
    }
    return mb;
}

double update_flops(const Qwen3Config& c, const LoraConfig& l, const Args& a) {
    const double tok = double(a.micro * a.accum * a.seq);
    const double sup = double(a.micro * a.accum * (a.seq - a.prompt));
    const double C = double(c.hidden_size), H = double(c.num_attention_heads), KV = double(c.num_key_value_heads),
                 D = double(c.head_dim), I = double(c.intermediate_size), V = double(c.vocab_size),
                 L = double(c.num_hidden_layers), r = double(l.rank);
    const double p_lin = C * H * D + 2 * C * KV * D + H * D * C + 3 * C * I;  // per layer
    const double lora = r * ((C + H * D) + 2 * (C + KV * D) + (H * D + C) + 2 * (C + I) + (I + C));
    const double keys = (double(a.seq) + 1) / 2;  // causal: average keys per query
    const double attn_fwd = 4 * keys * D * H;     // per token per layer
    const double per_token_layer = 2 * p_lin * 2 + 2 * lora * 3 + attn_fwd * 3;
    return tok * L * per_token_layer + sup * 2 * C * V * 2;
}

}  // namespace

int main(int argc, char** argv) {
    try {
        const Args a = parse(argc, argv);
        std::string why;
        if (!cuda::device_available(&why)) {
            std::fprintf(stderr, "tandem_cuda_bench: no CUDA device: %s\n", why.c_str());
            return 1;
        }
        const Qwen3Config cfg = Qwen3Config::named(a.config);
        LoraConfig lora;  // SPEC §1 defaults: r 16, alpha 32, rsLoRA, dropout 0.05, all seven projections
        TrainOptions opts;
        opts.total_updates = a.warmup + a.timed;
        opts.dropout_mode = DropoutMode::Native;
        opts.seed = 1;
        opts.model.ce_token_chunk = a.ce_chunk;

        auto t0 = std::chrono::steady_clock::now();
        TensorMap base = generate_base_weights(cfg, 1);
        const TensorMap init = generate_initial_adapter(cfg, lora, 1);
        const double gen_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        t0 = std::chrono::steady_clock::now();
        cuda::CudaTrainer trainer = cuda::CudaTrainer::create(a.device, cfg, std::move(base), lora, opts);
        trainer.load_adapter(init);
        const double load_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();

        std::vector<MicroBatch> update;
        for (int64_t i = 0; i < a.accum; ++i) update.push_back(make_batch(a, cfg.vocab_size, uint32_t(100 + i)));
        std::vector<double> times, losses;
        for (int s = 0; s < a.warmup + a.timed; ++s) {
            if (s == a.warmup) trainer.reset_peak_memory();
            const auto start = std::chrono::steady_clock::now();
            const UpdateMetrics m = trainer.train_update(update);
            const double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
            losses.push_back(m.loss);
            if (s >= a.warmup) times.push_back(dt);
        }
        std::vector<double> sorted = times;
        std::sort(sorted.begin(), sorted.end());
        double mean = 0.0;
        for (double t : times) mean += t;
        mean /= double(times.size());
        const double median = sorted[sorted.size() / 2];
        const double tokens = double(a.micro * a.accum * a.seq);
        const double flops = update_flops(cfg, lora, a);
        const kernels::MemoryReport mem = trainer.memory_report();
        size_t free_b = 0, total_b = 0;
        CUDA_CHECK(cudaMemGetInfo(&free_b, &total_b));
        std::printf(
            "{\"leg\":\"engine\",\"config\":\"%s\",\"seq\":%lld,\"micro_batch\":%lld,\"accumulation\":%lld,"
            "\"warmup_updates\":%d,\"timed_updates\":%d,\"generate_s\":%.3f,\"load_s\":%.3f,"
            "\"s_per_update_mean\":%.6f,\"s_per_update_median\":%.6f,\"tokens_per_s\":%.1f,"
            "\"flops_per_update\":%.6e,\"achieved_tflops\":%.3f,\"peak_fp32_tflops\":%.1f,\"fraction_of_peak\":%.4f,"
            "\"peak_device_bytes\":%zu,\"peak_block_bytes\":%zu,\"peak_reserved_bytes\":%zu,"
            "\"device_used_bytes_now\":%zu,\"loss_first\":%.6f,\"loss_last\":%.6f,\"memory\":%s}\n",
            a.config.c_str(), (long long)a.seq, (long long)a.micro, (long long)a.accum, a.warmup, a.timed, gen_s, load_s,
            mean, median, tokens / median, flops, flops / median / 1e12, a.peak_tflops,
            flops / median / 1e12 / a.peak_tflops, mem.peak_bytes, mem.peak_block_bytes, mem.peak_reserved_bytes,
            total_b - free_b, losses.front(), losses.back(), mem.to_json().c_str());
        return 0;
    } catch (const std::exception& e) {
        std::fprintf(stderr, "tandem_cuda_bench: %s\n", e.what());
        return 1;
    }
}
