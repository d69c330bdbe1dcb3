// tandem bench tokenizer: tandem's tokenizer against HuggingFace tokenizers on every corpus text,
// tokens/s and the ratio; tandem bench engine: the CPU engine vs PyTorch + peft (docs/benchmarks.md).
#include "commands.h"

#include "cli_inputs.h"

#include "tandem/assets.h"
#include "tandem/atomic_file.h"
#include "tandem/data/chat_template.h"
#include "tandem/data/corpus.h"
#include "tandem/data/text_json.h"
#include "tandem/data/tokenizer.h"
#include "tandem/engine/gemm_library.h"
#include "tandem/error.h"
#include "tandem/spec/leg_paths.h"
#include "tandem/measure/host_info.h"
#include "tandem/strict_json.h"
#include "tandem/studies/bench_engine.h"
#include "tandem/version.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <barrier>
#include <chrono>
#include <cstdlib>
#include <cstdio>
#include <filesystem>
#include <ctime>
#include <fstream>
#include <functional>
#include <iostream>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <unistd.h>

namespace tandem::cli {
namespace {

// The benchmark's texts: every row of the three corpora as a Qwen3-rendered question/answer chat
// (a simple conversion of its own; the corpus builder's records are what training uses).
std::vector<std::string> bench_texts(const std::filesystem::path& corpora) {
    std::vector<std::string> texts;
    auto render = [&](const std::string& user, const std::string& answer) {
        texts.push_back(data::render_chat(data::TemplateKind::Qwen3, {{"user", user, std::nullopt, {}}, {"assistant", answer, std::nullopt, {}}}, {}));
    };
    auto str = [](const nlohmann::json& j, const char* key) {
        auto it = j.find(key);
        return it != j.end() && it->is_string() ? it->get<std::string>() : std::string();
    };
    auto read_lines = [](const std::filesystem::path& p, const std::function<void(const nlohmann::json&)>& f) {
        std::ifstream in(p);
        if (!in) throw Error("cannot read " + p.string());
        std::string line;
        while (std::getline(in, line))
            if (!line.empty()) f(nlohmann::json::parse(line));
    };
    {
        std::ifstream in(corpora / "pubmedqa" / "ori_pqal.json");
        if (!in) throw Error("cannot read " + (corpora / "pubmedqa" / "ori_pqal.json").string());
        auto all = nlohmann::json::parse(in);
        for (auto& [id, row] : all.items()) {
            std::string user = str(row, "QUESTION") + "\n\nContext:";
            for (const auto& c : row["CONTEXTS"]) user += "\n" + c.get<std::string>();
            render(user, str(row, "LONG_ANSWER"));
        }
    }
    for (const char* name : {"medmcqa_validation.parsed.jsonl", "medmcqa_train_first100single.parsed.jsonl"})
        read_lines(corpora / "medmcqa" / name, [&](const nlohmann::json& row) {
            std::string user = str(row, "question") + "\n\nA. " + str(row, "opa") + "\nB. " + str(row, "opb") +
                               "\nC. " + str(row, "opc") + "\nD. " + str(row, "opd");
            render(user, str(row, "exp"));
        });
    read_lines(corpora / "medqa_usmle" / "test.jsonl", [&](const nlohmann::json& row) {
        std::string user = str(row, "question") + "\n";
        for (auto& [k, v] : row["options"].items()) user += "\n" + k + ". " + v.get<std::string>();
        render(user, "The answer is: " + str(row, "answer") + ".");
    });
    return texts;
}

struct EncodeRun {
    double seconds = 0;        // the best pass
    size_t tokens = 0;
    double first_seconds = 0;  // the first pass: every cache cold
};

// Best of `repeat` passes over all texts with `threads` threads (texts dealt out round-robin). The
// threads live across the passes, like the rayon pool HF encodes on: what a thread has cached (its
// merged words) stays warm from pass to pass on both sides.
EncodeRun time_tandem(const data::Tokenizer& tok, const std::vector<std::string>& texts, int threads, int repeat) {
    EncodeRun best{1e300, 0, 0};
    std::vector<size_t> counts(static_cast<size_t>(threads), 0);
    std::chrono::steady_clock::time_point t0;
    auto pass_done = [&]() noexcept {  // runs once per pass, when every thread has finished it
        const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        size_t total = 0;
        for (size_t c : counts) total += c;
        if (best.first_seconds == 0) best.first_seconds = s;
        if (s < best.seconds) best.seconds = s, best.tokens = total;
    };
    std::barrier start(threads, [&]() noexcept { t0 = std::chrono::steady_clock::now(); });
    std::barrier finish(threads, pass_done);
    std::vector<std::thread> pool;
    for (int t = 0; t < threads; ++t)
        pool.emplace_back([&, t] {
            for (int r = 0; r < repeat; ++r) {
                start.arrive_and_wait();
                size_t n = 0;
                for (size_t i = static_cast<size_t>(t); i < texts.size(); i += static_cast<size_t>(threads)) n += tok.encode(texts[i]).size();
                counts[static_cast<size_t>(t)] = n;
                finish.arrive_and_wait();
            }
        });
    for (auto& th : pool) th.join();
    return best;
}

struct HfRun {
    double load_s = 0;
    double seconds = 0;        // the best pass
    double first_seconds = 0;  // the first pass: the tokenizer's cache cold
    size_t tokens = 0;
    std::string method;
};

HfRun time_hf(const std::string& python, const std::filesystem::path& tokenizer_json, const std::filesystem::path& texts_file,
              int threads, int repeat) {
    const std::filesystem::path script = std::filesystem::path(TANDEM_SOURCE_DIR) / "data/tools/bench_hf_tokenizer.py";
    const std::string cmd = "RAYON_NUM_THREADS=" + std::to_string(threads) + " TOKENIZERS_PARALLELISM=true '" + python + "' '" +
                            script.string() + "' --tokenizer-json '" + tokenizer_json.string() + "' --texts '" +
                            texts_file.string() + "' --repeat " + std::to_string(repeat);
    std::unique_ptr<FILE, int (*)(FILE*)> pipe(popen(cmd.c_str(), "r"), pclose);
    if (!pipe) throw Error("cannot run the reference Python: " + cmd);
    std::string out;
    char buf[4096];
    while (size_t n = std::fread(buf, 1, sizeof buf, pipe.get())) out.append(buf, n);
    int rc = pclose(pipe.release());
    if (rc != 0 || out.empty()) throw Error("reference tokenizer benchmark failed (exit " + std::to_string(rc) + "): " + cmd);
    auto j = nlohmann::json::parse(out.substr(out.rfind('{')));
    return {j["load_s"].get<double>(), j["encode_s"].get<double>(), j["first_encode_s"].get<double>(), j["tokens"].get<size_t>(),
            j.value("method", "?")};
}


namespace ex = tandem::experiments;

struct BenchEngineArgs {
    ex::BenchOptions bench;  // --shapes, --threads, --repeats, --updates, --warmup (their defaults are BenchOptions')
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
    if (!a.flops.empty()) {  // the formula's counts for each micro-batch of a request (tests/compare/test_flops.py)
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
    ex::BenchOptions o = a.bench;
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
    std::printf("machine: %s (%s), %lld logical cores; load average (1/5/15 min) before %s, after %s; %.1f min\n",
                host.cpu_model.c_str(), tandem::engine::cpu_kind().c_str(), static_cast<long long>(host.logical_cores),
                load_before.c_str(), load_after.c_str(), minutes);
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


// tandem bench engine: the CPU engine vs PyTorch + peft across shapes and thread counts,
// interleaved, with FLOP/s and the fraction of the measured sgemm peak (studies/bench_engine.h;
// docs/benchmarks.md). The same binary is the engine worker (--worker REQUEST), so the command is
// self-contained: only the reference Python environment is needed beside it.
void add_bench_engine(CLI::App* bench, int& exit_code) {
    auto a = std::make_shared<BenchEngineArgs>();
    auto* cmd = bench->add_subcommand(
        "engine", "The CPU engine vs PyTorch + peft (the reference leg's step) on three shapes at 1 and 2 threads, "
                  "interleaved; s/update, tokens/s, FLOP/s, fraction of the sgemm peak, peak memory, ratios");
    cmd->add_option("--shapes", a->bench.shapes, "clinical-tiny, qwen3-0.6b-2l, odd (default: all)")->delimiter(',');
    cmd->add_option("--threads", a->bench.threads, "thread counts (default 1,2)")->delimiter(',');
    cmd->add_option("--repeats", a->bench.repeats, "engine/reference pairs per case (default 3)")->check(CLI::PositiveNumber);
    cmd->add_option("--updates", a->bench.updates, "timed updates per repeat (default 3)")->check(CLI::PositiveNumber);
    cmd->add_option("--warmup", a->bench.warmup, "untimed updates first (default 1)")->check(CLI::NonNegativeNumber);
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

}  // namespace

void add_bench_commands(CLI::App& app, int& exit_code) {
    auto* bench = group(app, "bench", "Benchmarks against the reference implementation");
    add_bench_engine(bench, exit_code);
    auto* cmd = bench->add_subcommand("tokenizer", "Encode every corpus text with tandem and with HuggingFace tokenizers; print tokens/s and the ratio");
    auto threads = std::make_shared<int>(0);
    auto repeat = std::make_shared<int>(3);
    auto dir = std::make_shared<std::string>();
    auto python = std::make_shared<std::string>();
    cmd->add_option("--threads", *threads, "Threads for the multi-threaded run (default: all cores)")->check(CLI::PositiveNumber);
    cmd->add_option("--repeat", *repeat, "Passes per measurement; the best is reported")->check(CLI::PositiveNumber);
    cmd->add_option("--tokenizer", *dir, "Folder with tokenizer.json (default: the shared assets)");
    cmd->add_option("--python", *python, "Reference Python (default: $TANDEM_REFENV_PYTHON or the reference environment)");
    cmd->callback([&exit_code, threads, repeat, dir, python] {
        const AssetRoot root = require_asset_root();
        const std::filesystem::path tdir = dir->empty() ? tokenizer_dir(root) : std::filesystem::path(*dir);
        std::string py = *python;
        if (py.empty()) py = std::getenv("TANDEM_REFENV_PYTHON") ? std::getenv("TANDEM_REFENV_PYTHON") : TANDEM_REFENV_PYTHON_DEFAULT;
        const int all = *threads > 0 ? *threads : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));

        auto t0 = std::chrono::steady_clock::now();
        const auto texts = bench_texts(corpora_dir(root));
        const double build_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        t0 = std::chrono::steady_clock::now();
        const auto tok = data::Tokenizer::load(tdir);
        const double load_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();

        const std::filesystem::path texts_file = std::filesystem::temp_directory_path() / ("tandem-bench-texts-" + std::to_string(::getpid()) + ".jsonl");
        {
            std::string payload;
            for (const auto& t : texts) payload += nlohmann::json{{"text", t}}.dump() + "\n";
            write_file_atomic(texts_file, payload);
        }
        size_t bytes = 0;
        for (const auto& t : texts) bytes += t.size();
        std::printf("bench tokenizer: %zu texts (%.1f MB), every corpus row rendered with the Qwen3 template in %.3f s\n",
                    texts.size(), static_cast<double>(bytes) / 1e6, build_s);
        std::vector<int> counts{1};
        if (all > 1) counts.push_back(all);
        bool tokens_match = true;
        size_t total_tokens = 0;
        double hf_load = 0;
        std::string hf_method;
        std::printf("%8s %16s %16s %8s   %s\n", "threads", "tandem tok/s", "HF tok/s", "ratio", "first pass (caches cold): tandem / HF tok/s, ratio");
        for (int n : counts) {
            const EncodeRun ours = time_tandem(tok, texts, n, *repeat);
            const HfRun ref = time_hf(py, tdir / "tokenizer.json", texts_file, n, *repeat);
            hf_load = ref.load_s;
            hf_method = ref.method;
            tokens_match = tokens_match && ours.tokens == ref.tokens;
            total_tokens = ours.tokens;
            const double a = static_cast<double>(ours.tokens) / ours.seconds, b = static_cast<double>(ref.tokens) / ref.seconds;
            const double fa = static_cast<double>(ours.tokens) / ours.first_seconds, fb = static_cast<double>(ref.tokens) / ref.first_seconds;
            std::printf("%8d %16.0f %16.0f %7.2fx   %.0f / %.0f, %.2fx\n", n, a, b, a / b, fa, fb, fa / fb);
        }
        std::printf("tok/s: best of --repeat passes; tandem: Tokenizer::encode per text, texts dealt to threads that live across the "
                    "passes; HF: tokenizers %s (rayon threads)\n",
                    hf_method.c_str());
        std::printf("load tokenizer.json: tandem %.3f s, HF %.3f s\n", load_s, hf_load);
        std::printf("token count %zu, %s\n", total_tokens, tokens_match ? "identical on both sides" : "DIFFERS between tandem and HF");
        // The whole data boundary once: convert, dedup, render, tokenize and mask every source row
        // (what `tandem corpus build` does before writing its files), single-threaded.
        t0 = std::chrono::steady_clock::now();
        const data::CorpusBuild corpus = data::build_corpus(corpora_dir(root), tok, data::CorpusOptions{});
        const double corpus_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        std::printf("build + tokenize the whole corpus: %.3f s (%zu source rows, %zu records converted)\n", corpus_s,
                    corpus.input_total(), corpus.records.size());
        std::filesystem::remove(texts_file);
        exit_code = tokens_match ? kOk : kCheckFailed;
    });
}

}  // namespace tandem::cli
