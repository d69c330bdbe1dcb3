// tandem_cuda_bench: the engine leg of the GPU benchmark (docs/benchmarks.md, run by scripts/gpu-check).
// Qwen3-0.6B architecture (docs/spec.md §Recipe) with generated weights, rsLoRA r 16 / alpha 32 / dropout 0.05
// on all seven projections, micro-batch 2 x accumulation 8 at sequence 512, float32, no TF32.
// Runs `warmup` updates, then times `timed` updates (steps warmup+1 .. warmup+timed) with wall
// clock around train_update (which synchronises the device once per update). Prints one JSON line:
// seconds/update (mean and median), tokens/s, peak device memory (allocator high-water marks and
// cudaMemGetInfo's view), achieved FLOP/s against the float32 peak given on the command line.
//
// FLOP count (per update, all micro-batches; what the engine computes, 2 FLOP per multiply-add):
//   linear layers: forward 2*P_lin per token, backward input-gradients 2*P_lin (frozen base: no dW);
//   LoRA: forward 2*r*(in+out) per token and projection, backward twice that (dA, dB, dx);
//   attention: forward 4*keys*D*H per token and layer (QK^T and PV, keys = (T+1)/2 causal average),
//     backward counted as twice the forward (flash-attention convention: 3x forward in total; the
//     engine's backward actually recomputes QK^T twice, so this undercounts its work);
//   LM head on supervised tokens: forward 2*C*V, backward 2*C*V (dh only: the head is frozen).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "tandem/engine/generate.h"
#include "tandem/engine/ops.h"
#include "tandem/kernels/ops.h"
#include "tandem/engine/trainer.h"
#include "tandem/engine_cuda/cuda_backend.h"
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
    bool kernels_only = false;
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
        else if (k == "--kernels") a.kernels_only = true;
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

// --kernels: the per-kernel benchmark hook (docs/engine-cuda.md "cuDNN"): each device op at the
// Qwen3-0.6B shapes of one micro-batch (B 2, T 512), best of 20 after 3 warm-ups, timed with CUDA
// events, with its FLOP or byte count, so a GPU session can compare our kernels against cuDNN /
// cuBLAS alternatives and against the SGEMM rate that bounds the whole step.
int run_kernels(const Args& a) {
    namespace k = tandem::kernels;
    const Qwen3Config c = Qwen3Config::named(a.config);
    const int64_t B = a.micro, T = a.seq, N = B * T, C = c.hidden_size, H = c.num_attention_heads,
                  KV = c.num_key_value_heads, D = c.head_dim, I = c.intermediate_size, V = c.vocab_size;
    CUDA_CHECK(cudaSetDevice(a.device));
    cudaStream_t st;
    CUDA_CHECK(cudaStreamCreate(&st));
    k::DeviceAllocator alloc(a.device);
    k::BlasHandle blas(st);
    auto buf = [&](int64_t n) {
        k::DeviceBuffer<float> b(alloc, size_t(n), k::MemoryCategory::Workspace);
        CUDA_CHECK(cudaMemsetAsync(b.get(), 0, b.bytes(), st));
        k::fill(b.get(), 0.01f, n, st);
        return b;
    };
    auto q = buf(N * H * D), kk = buf(N * KV * D), v = buf(N * KV * D), o = buf(N * H * D), lse = buf(B * H * T),
         dq = buf(N * H * D), dk = buf(N * KV * D), dv = buf(N * KV * D), delta = buf(B * H * T), x = buf(N * C),
         y = buf(N * C), w = buf(C), rstd = buf(N), wg = buf(I * C), g = buf(N * I), emb = buf(V * C),
         ce_ws = buf(a.ce_chunk * V), dh = buf(N * C);
    std::vector<int32_t> lens(static_cast<size_t>(B), static_cast<int32_t>(T)), targets(static_cast<size_t>(N));
    for (int64_t i = 0; i < N; ++i) targets[size_t(i)] = int32_t((i * 7919) % V);
    k::DeviceBuffer<int32_t> lens_d(alloc, size_t(B), k::MemoryCategory::Workspace),
        tgt_d(alloc, size_t(N), k::MemoryCategory::Workspace);
    CUDA_CHECK(cudaMemcpy(lens_d.get(), lens.data(), sizeof(int32_t) * lens.size(), cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaMemcpy(tgt_d.get(), targets.data(), sizeof(int32_t) * targets.size(), cudaMemcpyHostToDevice));
    k::DeviceBuffer<double> losses(alloc, size_t(N), k::MemoryCategory::Workspace);
    cudaEvent_t e0, e1;
    CUDA_CHECK(cudaEventCreate(&e0));
    CUDA_CHECK(cudaEventCreate(&e1));
    auto time = [&](auto&& fn) {
        float best = 1e30f;
        for (int rep = 0; rep < 23; ++rep) {
            CUDA_CHECK(cudaEventRecord(e0, st));
            fn();
            CUDA_CHECK(cudaEventRecord(e1, st));
            CUDA_CHECK(cudaEventSynchronize(e1));
            float ms = 0;
            CUDA_CHECK(cudaEventElapsedTime(&ms, e0, e1));
            if (rep >= 3) best = std::min(best, ms);
        }
        return double(best) * 1e-3;
    };
    const double keys = double(T + 1) / 2, attn_f = 4.0 * double(N) * keys * double(D) * double(H);
    std::printf("{\"leg\":\"engine-kernels\",\"config\":\"%s\",\"B\":%lld,\"T\":%lld,\"kernels\":[", a.config.c_str(),
                (long long)B, (long long)T);
    auto report = [&](const char* name, double s, double flops, double bytes, bool first = false) {
        std::printf("%s{\"name\":\"%s\",\"seconds\":%.6e,\"tflops\":%.3f,\"gbps\":%.1f}", first ? "" : ",", name, s,
                    flops / s / 1e12, bytes / s / 1e9);
    };
    report("sgemm_gate_proj_fwd [N,C]x[I,C]^T", time([&] { k::linear_forward(blas.get(), g.get(), x.get(), wg.get(), N, C, I); }),
           2.0 * double(N * C * I), 0, true);
    report("attention_forward", time([&] {
               k::attention_forward(o.get(), lse.get(), q.get(), kk.get(), v.get(), lens_d.get(), B, T, H, KV, D, st);
           }), attn_f, 0);
    report("attention_backward", time([&] {
               k::attention_backward(dq.get(), dk.get(), dv.get(), delta.get(), o.get(), o.get(), q.get(), kk.get(),
                                     v.get(), lse.get(), lens_d.get(), B, T, H, KV, D, st);
           }), 2.5 * attn_f, 0);
    report("rmsnorm_forward [N,C]", time([&] { k::rmsnorm_forward(y.get(), rstd.get(), x.get(), w.get(), N, C, 1e-6, st); }),
           0, 2.0 * 4 * double(N * C));
    report("rmsnorm_backward [N,C]", time([&] {
               k::rmsnorm_backward(y.get(), nullptr, x.get(), x.get(), w.get(), rstd.get(), N, C, st, true);
           }), 0, 4.0 * 4 * double(N * C));
    report("qk_norm_forward [N*H,D]", time([&] {
               k::rmsnorm_forward(q.get(), lse.get(), q.get(), w.get(), N * H, D, 1e-6, st);
           }), 0, 2.0 * 4 * double(N * H * D));
    report("swiglu_forward [N,I]", time([&] { k::swiglu_forward(g.get(), g.get(), g.get(), N * I, st); }), 0,
           3.0 * 4 * double(N * I));
    report("lm_head_ce_fwd_bwd [N,C]x[V,C]", time([&] {
               k::lm_head_cross_entropy(blas.get(), st, losses.get(), dh.get(), ce_ws.get(), x.get(), emb.get(),
                                        tgt_d.get(), N, C, V, 1e-3f, a.ce_chunk);
           }), 4.0 * double(N * C * V), 0);
    std::printf("]}\n");
    CUDA_CHECK(cudaEventDestroy(e0));
    CUDA_CHECK(cudaEventDestroy(e1));
    CUDA_CHECK(cudaStreamDestroy(st));
    return 0;
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
        if (a.kernels_only) return run_kernels(a);
        const Qwen3Config cfg = Qwen3Config::named(a.config);
        LoraConfig lora;  // docs/spec.md §Recipe defaults: r 16, alpha 32, rsLoRA, dropout 0.05, all seven projections
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
        Trainer trainer = Trainer::create(cfg, std::move(base), lora, opts, cuda::make_cuda_backend(a.device));
        trainer.load_adapter(init);
        const double load_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();

        std::vector<MicroBatch> update;
        for (int64_t i = 0; i < a.accum; ++i) update.push_back(make_batch(a, cfg.vocab_size, uint32_t(100 + i)));
        std::vector<double> times, losses;
        for (int s = 0; s < a.warmup + a.timed; ++s) {
            if (s == a.warmup) cuda::reset_peak_memory(trainer.backend());
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
        const kernels::MemoryReport mem = cuda::memory_report(trainer.backend());
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
