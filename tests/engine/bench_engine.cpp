// bench_engine: times tandem's CPU engine on a batch file written by bench_engine_vs_torch.py, which
// times PyTorch + peft on the same batches and prints the ratio (docs/benchmarks.md, "Engine (CPU)").
// Not a test: performance is only ever reported next to the reference measured in the same run.
//
//   bench_engine REQUEST.json   ->  one JSON line on stdout
// REQUEST: {"config": {HF config.json fields}, "lora": {"r", "alpha", "dropout"}, "threads": 2,
//           "warmup_updates": 1, "updates": [[mb, ...], ...], "micro_batches": [{batch, seq, ids,
//           supervised, lengths}], "seed": 0}
#include <sys/resource.h>

#include <chrono>
#include <fstream>
#include <iostream>

#include <nlohmann/json.hpp>

#include "tandem/engine/generate.h"
#include "tandem/engine/trainer.h"

using json = nlohmann::json;
using namespace tandem::engine;

int main(int argc, char** argv) {
    if (argc != 2) {
        std::cerr << "usage: bench_engine REQUEST.json\n";
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
        Trainer trainer = Trainer::create(cfg, generate_base_weights(cfg, 1), lora, opts);
        trainer.load_adapter(generate_initial_adapter(cfg, lora, 2));
        const double setup_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t_load).count();

        std::vector<MicroBatch> mbs;
        for (const auto& j : req.at("micro_batches")) {
            MicroBatch mb;
            mb.batch = j.at("batch");
            mb.seq = j.at("seq");
            mb.ids = j.at("ids").get<std::vector<int32_t>>();
            mb.supervised = j.at("supervised").get<std::vector<uint8_t>>();
            mb.lengths = j.at("lengths").get<std::vector<int32_t>>();
            mbs.push_back(std::move(mb));
        }
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
