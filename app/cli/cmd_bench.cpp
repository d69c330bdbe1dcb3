// tandem bench tokenizer: tandem's tokenizer against HuggingFace tokenizers on every corpus text,
// tokens/s and the ratio (docs/benchmarks.md).
#include "commands.h"

#include "cli_inputs.h"

#include "tandem/assets.h"
#include "tandem/atomic_file.h"
#include "tandem/data/chat_template.h"
#include "tandem/data/corpus.h"
#include "tandem/data/text_json.h"
#include "tandem/data/tokenizer.h"
#include "tandem/error.h"
#include "tandem/version.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstdio>
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
    double seconds = 0;
    size_t tokens = 0;
};

// Best of `repeat` passes over all texts with `threads` threads (texts dealt out round-robin).
EncodeRun time_tandem(const data::Tokenizer& tok, const std::vector<std::string>& texts, int threads, int repeat) {
    EncodeRun best{1e300, 0};
    for (int r = 0; r < repeat; ++r) {
        std::vector<size_t> counts(static_cast<size_t>(threads), 0);
        auto t0 = std::chrono::steady_clock::now();
        std::vector<std::thread> pool;
        for (int t = 0; t < threads; ++t)
            pool.emplace_back([&, t] {
                size_t n = 0;
                for (size_t i = static_cast<size_t>(t); i < texts.size(); i += static_cast<size_t>(threads)) n += tok.encode(texts[i]).size();
                counts[static_cast<size_t>(t)] = n;
            });
        for (auto& th : pool) th.join();
        double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        size_t total = 0;
        for (size_t c : counts) total += c;
        if (s < best.seconds) best = {s, total};
    }
    return best;
}

struct HfRun {
    double load_s = 0;
    double seconds = 0;
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
    return {j["load_s"].get<double>(), j["encode_s"].get<double>(), j["tokens"].get<size_t>(), j.value("method", "?")};
}

}  // namespace

void add_bench_commands(CLI::App& app, int& exit_code) {
    auto* bench = group(app, "bench", "Benchmarks against the reference implementation");
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
        std::printf("%8s %16s %16s %8s\n", "threads", "tandem tok/s", "HF tok/s", "ratio");
        for (int n : counts) {
            const EncodeRun ours = time_tandem(tok, texts, n, *repeat);
            const HfRun ref = time_hf(py, tdir / "tokenizer.json", texts_file, n, *repeat);
            hf_load = ref.load_s;
            hf_method = ref.method;
            tokens_match = tokens_match && ours.tokens == ref.tokens;
            total_tokens = ours.tokens;
            const double a = static_cast<double>(ours.tokens) / ours.seconds, b = static_cast<double>(ref.tokens) / ref.seconds;
            std::printf("%8d %16.0f %16.0f %7.2fx\n", n, a, b, a / b);
        }
        std::printf("tandem: Tokenizer::encode per text, texts dealt to std::threads; HF: tokenizers %s (rayon threads)\n",
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
