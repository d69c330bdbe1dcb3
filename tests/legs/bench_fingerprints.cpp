// bench_fingerprints: the cost of recording fingerprints on clinical-tiny's model (Qwen3Config::named
// ("tiny"), rsLoRA r 16 on all 7 projections, dropout 0.05, 2 micro-batches of 2 sequences of up to
// 256 tokens per update, the last 40 % of each sequence supervised). Not a test: a benchmark
// (docs/benchmarks.md "Fingerprints"). Observed and unobserved updates alternate in one process,
// so both sides run under the same machine load; each update's process CPU time (getrusage,
// all threads) and wall time are taken, and the ratios of the medians are printed:
//
//   bench_fingerprints [UPDATES=40] [THREADS=1]
//   -> observed / not observed, CPU and wall; the recorder's own seconds per observed update
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "tandem/engine/generate.h"
#include "tandem/engine/observe.h"
#include "tandem/engine/trainer.h"

using namespace tandem::engine;

namespace {
double cpu_seconds() {
    rusage r{};
    getrusage(RUSAGE_SELF, &r);
    return double(r.ru_utime.tv_sec + r.ru_stime.tv_sec) + 1e-6 * double(r.ru_utime.tv_usec + r.ru_stime.tv_usec);
}
double median(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v.size() % 2 ? v[v.size() / 2] : 0.5 * (v[v.size() / 2 - 1] + v[v.size() / 2]);
}
MicroBatch clinical_like(std::mt19937_64& rng, int64_t vocab) {
    MicroBatch mb;
    mb.batch = 2;
    std::uniform_int_distribution<int32_t> len(150, 256), tok(0, int32_t(vocab - 1));
    for (int b = 0; b < 2; ++b) mb.lengths.push_back(len(rng));
    mb.seq = *std::max_element(mb.lengths.begin(), mb.lengths.end());
    mb.ids.assign(size_t(mb.batch * mb.seq), 0);
    mb.supervised.assign(size_t(mb.batch * mb.seq), 0);
    for (int64_t b = 0; b < 2; ++b)
        for (int64_t t = 0; t < mb.lengths[size_t(b)]; ++t) {
            mb.ids[size_t(b * mb.seq + t)] = tok(rng);
            if (t >= mb.lengths[size_t(b)] * 6 / 10) mb.supervised[size_t(b * mb.seq + t)] = 1;
        }
    return mb;
}
}  // namespace

int main(int argc, char** argv) {
    const int updates = argc > 1 ? std::stoi(argv[1]) : 40;
    const int threads = argc > 2 ? std::stoi(argv[2]) : 1;
    const Qwen3Config c = Qwen3Config::named("tiny");
    LoraConfig l;
    l.rank = 16;
    l.alpha = 32;
    l.dropout = 0.05;
    TrainOptions o;
    o.lr = 1e-4;
    o.total_updates = updates;
    o.dropout_mode = DropoutMode::Shared;
    o.threads = threads;
    Trainer t = Trainer::create(c, generate_base_weights(c, 1), l, o);
    t.load_adapter(generate_initial_adapter(c, l, 2));
    FingerprintRecorder rec(t.backend());
    std::mt19937_64 rng(7);
    std::vector<double> cpu_on, cpu_off, wall_on, wall_off;
    double recorder_s = 0;
    size_t points = 0;
    // update 0 (first touch of every buffer) is left out; then off, on, off, on ...
    for (int u = 0; u <= updates; ++u) {
        std::vector<MicroBatch> mbs = {clinical_like(rng, c.vocab_size), clinical_like(rng, c.vocab_size)};
        int64_t tokens = 0;
        for (const auto& mb : mbs)
            for (int32_t n : mb.lengths) tokens += n;
        const bool observed = u % 2 == 0 && u > 0;
        const double r0 = rec.seconds(), c0 = cpu_seconds();
        const auto w0 = std::chrono::steady_clock::now();
        if (observed) rec.begin_update(u);
        t.train_update(mbs, observed ? &rec : nullptr);
        const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - w0).count() / double(tokens);
        const double cpu = (cpu_seconds() - c0) / double(tokens);
        if (u == 0) continue;
        if (observed) {
            cpu_on.push_back(cpu);
            wall_on.push_back(wall);
            recorder_s += rec.seconds() - r0;
            points = rec.take_points().size();
        } else {
            cpu_off.push_back(cpu);
            wall_off.push_back(wall);
        }
    }
    std::printf("clinical-tiny model (hidden %lld, %lld layers, vocab %lld), %d threads, %zu observed / %zu plain updates, %zu points per observed update\n",
                static_cast<long long>(c.hidden_size), static_cast<long long>(c.num_hidden_layers),
                static_cast<long long>(c.vocab_size), threads, cpu_on.size(), cpu_off.size(), points);
    std::printf("median CPU s/token: observed %.4e, plain %.4e, ratio %.4f\n", median(cpu_on), median(cpu_off),
                median(cpu_on) / median(cpu_off));
    std::printf("median wall s/token: observed %.4e, plain %.4e, ratio %.4f\n", median(wall_on), median(wall_off),
                median(wall_on) / median(wall_off));
    std::printf("recorder (downloads + summaries, wall) per observed update: %.4f s\n", recorder_s / double(cpu_on.size()));
    return 0;
}
