// tandem bench engine (issue 28): the CPU engine vs PyTorch + peft across shapes and thread counts,
// interleaved, with FLOP/s and the fraction of the measured sgemm peak (experiments/bench_engine.h;
// docs/benchmarks.md). The same binary is the engine worker (--worker REQUEST), so the command is
// self-contained: only the reference Python environment is needed beside it.
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>

#include "commands.h"
#include "tandem/atomic_file.h"
#include "tandem/error.h"
#include "tandem/experiments/bench_engine.h"
#include "tandem/experiments/host_info.h"
#include "tandem/experiments/leg_paths.h"
#include "tandem/strict_json.h"

namespace tandem::cli {
namespace {

namespace ex = tandem::experiments;

struct BenchEngineArgs {
    std::vector<std::string> shapes;
    std::vector<int> threads{1, 2};
    int repeats = 3, updates = 3, warmup = 1;
    std::string format = "text", json_out, python, worker, flops, other_engine;
};

std::string load_text() {
    double l[3] = {0, 0, 0};
    if (getloadavg(l, 3) != 3) return "unknown";
    char b[64];
    std::snprintf(b, sizeof b, "%.2f %.2f %.2f", l[0], l[1], l[2]);
    return b;
}

nlohmann::json read_request(const std::string& path) { return parse_json_strict(read_file(path), path); }

void run_bench_engine(const BenchEngineArgs& a) {
    if (!a.worker.empty()) {  // one engine repeat: the JSON line on stdout
        std::cout << ex::run_engine_bench_worker(read_request(a.worker)).dump() << std::endl;
        return;
    }
    if (!a.flops.empty()) {  // the formula's counts for each micro-batch of a request (tests/experiments/test_flops.py)
        const nlohmann::json req = read_request(a.flops);
        const auto cfg = engine::Qwen3Config::from_json(req.at("config"), a.flops);
        engine::LoraConfig lora = ex::bench_lora();
        lora.rank = req.at("lora").at("r");
        if (req.at("lora").contains("targets")) lora.targets = req.at("lora").at("targets").get<std::vector<std::string>>();
        nlohmann::json out = nlohmann::json::array();
        for (size_t u = 0; u < req.at("updates").size(); ++u)
            for (const auto& mb : ex::request_update_shapes(req, u)) {
                const ex::FlopCount f = ex::training_flops(cfg, lora, mb);
                const ex::FlopCount e = ex::evaluation_flops(cfg, lora, {mb});
                out.push_back({{"batch", mb.batch}, {"seq", mb.seq}, {"supervised", mb.supervised}, {"total", f.total()},
                               {"forward", f.forward()}, {"evaluation", e.total()}, {"head", f.head_forward + f.head_backward},
                               {"attention", f.attention_forward + f.attention_backward}});
            }
        std::cout << out.dump() << std::endl;
        return;
    }
    if (a.format != "text" && a.format != "md") throw Error("--format must be text or md");
    ex::BenchOptions o;
    o.shapes = a.shapes;
    o.threads = a.threads;
    o.repeats = a.repeats;
    o.updates = a.updates;
    o.warmup = a.warmup;
    std::string self = "/proc/self/exe";
    std::error_code ec;
    if (auto p = std::filesystem::read_symlink("/proc/self/exe", ec); !ec) self = p.string();
    o.engine_argv = {self, "bench", "engine", "--worker"};
    const std::string python = a.python.empty() ? ex::reference_python() : a.python;
    o.reference_argv = {python, (ex::legs_dir() / "bench_reference.py").string()};
    if (!a.other_engine.empty()) o.other_engine_argv = {a.other_engine};
    o.work_dir = (std::filesystem::temp_directory_path() / ("tandem-bench-engine-" + std::to_string(::getpid()))).string();
    const ex::HostInfo host = ex::collect_host_info();
    const std::string load_before = load_text();
    const auto t0 = std::chrono::steady_clock::now();
    std::fprintf(stderr, "bench engine: %d repeat(s) x %d timed update(s) after %d warm-up, interleaved engine / reference; "
                         "requests and worker logs in %s\n",
                 o.repeats, o.updates, o.warmup, o.work_dir.c_str());
    const auto cases = ex::run_engine_bench(o, [](const std::string& line) { std::fprintf(stderr, "  %s\n", line.c_str()); });
    const double minutes = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / 60.0;
    const std::string load_after = load_text();
    std::printf("machine: %s, %lld logical cores; load average (1/5/15 min) before %s, after %s; %.1f min\n",
                host.cpu_model.c_str(), static_cast<long long>(host.logical_cores), load_before.c_str(), load_after.c_str(),
                minutes);
    if (!cases.empty())
        std::printf("engine: %s; reference: %s\n", cases.front().engine.versions.c_str(), cases.front().reference.versions.c_str());
    for (const auto& s : ex::bench_shapes()) {
        bool used = false;
        for (const auto& c : cases) used = used || c.shape == s.name;
        if (used)
            std::printf("shape %s: %s; seq %lld, micro-batch %lld x accumulation %lld, vocab %lld\n", s.name.c_str(),
                        s.description.c_str(), static_cast<long long>(s.seq), static_cast<long long>(s.micro_batch),
                        static_cast<long long>(s.accumulation), static_cast<long long>(s.config.vocab_size));
    }
    std::printf("%s", ex::format_engine_bench(cases, a.format).c_str());
    std::printf("s/update: mean over a repeat's timed updates, min / median / max over the repeats; ratio: reference s/update "
                "/ engine s/update of the medians (pairs: each repeat's engine and reference, run back to back); GFLOP: "
                "docs/benchmarks.md \"FLOPs and utilisation\" (one formula for both); of sgemm peak: GFLOP/s over the median "
                "sgemm probe of the case\n");
    if (!a.json_out.empty()) {
        nlohmann::json j{{"machine", host.cpu_model}, {"logical_cores", host.logical_cores}, {"load_before", load_before},
                         {"load_after", load_after}, {"minutes", minutes}, {"cases", ex::engine_bench_json(cases)}};
        write_file_atomic(a.json_out, j.dump(1) + "\n");
    }
    std::error_code rm;
    std::filesystem::remove_all(o.work_dir, rm);
}

}  // namespace

void add_bench_engine(CLI::App& app, int& exit_code) {
    auto* bench = group(app, "bench", "Benchmarks against the reference implementation");
    auto a = std::make_shared<BenchEngineArgs>();
    auto* cmd = bench->add_subcommand(
        "engine", "The CPU engine vs PyTorch + peft (the reference leg's step) on three shapes at 1 and 2 threads, "
                  "interleaved; s/update, tokens/s, FLOP/s, fraction of the sgemm peak, peak memory, ratios");
    cmd->add_option("--shapes", a->shapes, "clinical-tiny, qwen3-0.6b-2l, odd (default: all)")->delimiter(',');
    cmd->add_option("--threads", a->threads, "thread counts (default 1,2)")->delimiter(',');
    cmd->add_option("--repeats", a->repeats, "engine/reference pairs per case (default 3)")->check(CLI::PositiveNumber);
    cmd->add_option("--updates", a->updates, "timed updates per repeat (default 3)")->check(CLI::PositiveNumber);
    cmd->add_option("--warmup", a->warmup, "untimed updates first (default 1)")->check(CLI::NonNegativeNumber);
    cmd->add_option("--format", a->format, "text or md (default text)");
    cmd->add_option("--json", a->json_out, "also write every measurement to this JSON file");
    cmd->add_option("--other-engine", a->other_engine,
                    "also time another engine build's tests/engine/bench_engine in every repeat (e.g. main's: before/after)")
        ->check(CLI::ExistingFile);
    cmd->add_option("--python", a->python, "reference Python (default: $TANDEM_REFENV_PYTHON or the reference environment)");
    cmd->add_option("--worker", a->worker, "run one engine repeat of REQUEST and print its JSON (used by the bench)")
        ->group("");
    cmd->add_option("--flops", a->flops, "print the FLOP formula's counts for REQUEST's micro-batches")->group("");
    cmd->callback([a, &exit_code] {
        run_bench_engine(*a);
        exit_code = kOk;
    });
}

}  // namespace tandem::cli
