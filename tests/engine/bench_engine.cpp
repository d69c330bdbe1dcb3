// bench_engine: times tandem's CPU engine on a batch file written by bench_engine_vs_torch.py, which
// times PyTorch + peft on the same batches and prints the ratio (docs/benchmarks.md, "Engine (CPU)").
// Not a test: performance is only ever reported next to the reference measured in the same run.
//
//   bench_engine REQUEST.json [--profile]  ->  one JSON line on stdout
//   --profile: also the process CPU seconds and wall seconds spent in each backend op over the timed
//   updates (a decorator around the CPU backend), one table on stderr: where a change should go.
// REQUEST: {"config": {HF config.json fields}, "lora": {"r", "alpha", "dropout"}, "threads": 2,
//           "warmup_updates": 1, "updates": [[mb, ...], ...], "micro_batches": [{batch, seq, ids,
//           supervised, lengths}], "seed": 0}
#include <sys/resource.h>

#include <time.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <fstream>
#include <iostream>
#include <map>

#include <nlohmann/json.hpp>

#include "tandem/engine/generate.h"
#include "tandem/engine/trainer.h"
#include "tandem/studies/bench_engine.h"
#include "tandem/engine/forwarding_backend.h"

using json = nlohmann::json;
using namespace tandem::engine;

namespace {

double process_cpu_seconds() {
    timespec t{};
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
    return double(t.tv_sec) + 1e-9 * double(t.tv_nsec);
}

// Process CPU and wall seconds per op (LoRA linears per projection shape), while `on`.
class TimingBackend final : public ForwardingBackend {
public:
    using ForwardingBackend::ForwardingBackend;
    bool on = false;
    struct Cost {
        double cpu = 0, wall = 0;
        int64_t calls = 0;
    };
    std::map<std::string, Cost> costs;

#define TANDEM_TIMING_OP(name, params, args)                           \
    void name params override {                                        \
        if (!on) return inner_->name args;                             \
        const double c0 = process_cpu_seconds();                       \
        const auto w0 = std::chrono::steady_clock::now();              \
        inner_->name args;                                             \
        Cost& cost_ = costs[key(#name, args_shape args)];                  \
        cost_.cpu += process_cpu_seconds() - c0;                           \
        cost_.wall += std::chrono::duration<double>(std::chrono::steady_clock::now() - w0).count(); \
        ++cost_.calls;                                                     \
    }
    TANDEM_BACKEND_OPS(TANDEM_TIMING_OP)
#undef TANDEM_TIMING_OP

private:
    // The LoRA linears' shape (in x out) separates the projections; every other op has one key.
    template <class... A>
    static std::string args_shape(A&&...) { return ""; }
    static std::string args_shape(float*, float*, const float*, const float*, const float* a, const float*,
                                  const DropoutMask&, float, int64_t, int64_t in, int64_t out, int64_t) {
        return " " + std::to_string(in) + "x" + std::to_string(out) + (a ? " lora" : "");
    }
    static std::string args_shape(float*, float*, float*, const float*, const float*, const float*, const float* a,
                                  const float*, const float*, const DropoutMask&, float, int64_t, int64_t in,
                                  int64_t out, int64_t, bool, LoraBGrad) {
        return " " + std::to_string(in) + "x" + std::to_string(out) + (a ? " lora" : "");
    }
    static std::string key(const char* name, const std::string& shape) { return name + shape; }
};

}  // namespace

int main(int argc, char** argv) {
    const bool profile = argc == 3 && std::strcmp(argv[2], "--profile") == 0;
    if (argc != 2 && !profile) {
        std::cerr << "usage: bench_engine REQUEST.json [--profile]\n";
        return 2;
    }
    try {
        std::ifstream in(argv[1]);
        const json req = json::parse(in);
        const Qwen3Config cfg = Qwen3Config::from_json(req.at("config"), argv[1]);
        LoraConfig lora;
        lora.rank = req.at("lora").at("r");
        lora.alpha = req.at("lora").at("alpha");
        lora.dropout = req.at("lora").at("dropout");
        TrainOptions opts;
        opts.threads = req.value("threads", 2);
        opts.total_updates = int64_t(req.at("updates").size());
        opts.dropout_mode = DropoutMode::Native;
        opts.seed = req.value("seed", uint64_t{0});

        const auto t_load = std::chrono::steady_clock::now();
        std::shared_ptr<TimingBackend> timing;
        if (profile) timing = std::make_shared<TimingBackend>(make_cpu_backend(opts.threads));
        Trainer trainer = Trainer::create(cfg, generate_base_weights(cfg, 1), lora, opts, timing);
        trainer.load_adapter(generate_initial_adapter(cfg, lora, 2));
        const double setup_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t_load).count();

        const std::vector<MicroBatch> mbs = tandem::experiments::request_micro_batches(req);
        const auto cpu_seconds = [] {
            rusage r{};
            getrusage(RUSAGE_SELF, &r);
            return double(r.ru_utime.tv_sec + r.ru_stime.tv_sec) + 1e-6 * double(r.ru_utime.tv_usec + r.ru_stime.tv_usec);
        };
        double timed_cpu = 0.0;
        const int warmup = req.value("warmup_updates", 1);
        double timed_s = 0.0;
        int64_t timed_tokens = 0;
        json per_update = json::array();
        int u = 0;
        for (const auto& upd : req.at("updates")) {
            std::vector<MicroBatch> batch;
            int64_t tokens = 0;
            for (const auto& i : upd) {
                batch.push_back(mbs.at(i.get<size_t>()));
                for (auto l : batch.back().lengths) tokens += l;
            }
            if (timing) timing->on = u >= warmup;
            const double cpu0 = cpu_seconds();
            const UpdateMetrics m = trainer.train_update(batch);
            const double cpu = cpu_seconds() - cpu0;
            per_update.push_back(json{{"loss", m.loss}, {"seconds", m.wall_seconds}});
            if (u++ >= warmup) {
                timed_s += m.wall_seconds;
                timed_cpu += cpu;
                timed_tokens += tokens;
            }
        }
        if (timing) {
            std::vector<std::pair<std::string, TimingBackend::Cost>> rows(timing->costs.begin(), timing->costs.end());
            std::sort(rows.begin(), rows.end(), [](const auto& a, const auto& b) { return a.second.cpu > b.second.cpu; });
            double total_cpu = 0;
            for (const auto& [k, c] : rows) total_cpu += c.cpu;
            std::fprintf(stderr, "%-40s %8s %10s %7s %10s\n", "op", "calls", "CPU s", "CPU %", "wall s");
            for (const auto& [k, c] : rows)
                std::fprintf(stderr, "%-40s %8lld %10.3f %6.1f%% %10.3f\n", k.c_str(), static_cast<long long>(c.calls), c.cpu,
                             100.0 * c.cpu / total_cpu, c.wall);
            std::fprintf(stderr, "%-40s %8s %10.3f (timed updates' process CPU: %.3f)\n", "sum over ops", "", total_cpu, timed_cpu);
        }
        rusage ru{};
        getrusage(RUSAGE_SELF, &ru);
        std::cout << json{{"tokens_per_s", double(timed_tokens) / timed_s},
                          {"timed_seconds", timed_s},
                          {"timed_cpu_seconds", timed_cpu},
                          {"timed_tokens", timed_tokens},
                          {"setup_seconds", setup_s},
                          {"peak_rss_mb", double(ru.ru_maxrss) / 1024.0},
                          {"updates", per_update}}
                         .dump()
                  << "\n";
        return 0;
    } catch (const std::exception& e) {
        std::cerr << "bench_engine: " << e.what() << "\n";
        return 1;
    }
}
