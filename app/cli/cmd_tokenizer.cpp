// tandem subcommands: tokens encode, template render, bench tokenizer (docs/data-text.md).
// JSON Lines in on stdin, JSON Lines out on stdout, one output line per input line, order kept.
// A malformed line is reported on stderr with its line number and field; with --keep-going the
// line's output is {"error": "..."} and processing goes on; the exit status is 1 if any line failed.
#include "commands.h"

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

using nlohmann::ordered_json;

std::filesystem::path resolve_tokenizer_dir(const std::string& flag) {
    if (!flag.empty()) return flag;
    return tokenizer_dir(require_asset_root());
}

// A per-line failure: names the field at fault.
struct LineError {
    std::string field;
    std::string message;
};

template <typename T>
const ordered_json& field(const ordered_json& obj, const std::string& name, bool (ordered_json::*is_type)() const noexcept,
                          const char* type_name) {
    auto it = obj.find(name);
    if (it == obj.end()) throw LineError{name, "missing"};
    if (!((*it).*is_type)()) throw LineError{name, std::string("must be ") + type_name};
    return *it;
}

std::string one_line(std::string s) {
    for (char& c : s)
        if (c == '\n' || c == '\r') c = ' ';
    return s;
}

// Runs `handle` on every stdin line; returns the exit status.
int process_jsonl(bool keep_going, const std::function<ordered_json(const ordered_json&)>& handle) {
    std::ios::sync_with_stdio(false);
    std::string line;
    size_t line_no = 0;
    bool failed = false;
    std::string out;
    while (std::getline(std::cin, line)) {
        ++line_no;
        if (!line.empty() && line.back() == '\r') line.pop_back();
        std::optional<LineError> error;
        try {
            ordered_json in = ordered_json::parse(line);
            if (!in.is_object()) throw LineError{"(line)", "must be a JSON object"};
            out = handle(in).dump(-1, ' ', false, nlohmann::json::error_handler_t::strict);
        } catch (const LineError& e) {
            error = e;
        } catch (const ordered_json::parse_error& e) {
            error = LineError{"(line)", std::string("not valid JSON: ") + e.what()};
        } catch (const ordered_json::exception& e) {
            error = LineError{"(line)", e.what()};
        } catch (const Error& e) {
            error = LineError{"(value)", e.what()};
        }
        if (error) {
            failed = true;
            // The message may quote the offending bytes (invalid UTF-8 among them): written with
            // U+FFFD in their place, so the error line and the {"error"} output stay valid UTF-8.
            const std::string message = "line " + std::to_string(line_no) + ": field '" + error->field + "': " + error->message;
            const std::string as_json = ordered_json(message).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
            const std::string printable = ordered_json::parse(as_json).get<std::string>();
            std::fprintf(stderr, "tandem: error: stdin %s\n", one_line(printable).c_str());
            if (!keep_going) {
                std::fflush(stdout);
                return kError;
            }
            out = "{\"error\":" + as_json + "}";
        }
        out += '\n';
        std::fwrite(out.data(), 1, out.size(), stdout);
    }
    std::fflush(stdout);
    return failed ? kError : kOk;
}

std::vector<data::Message> parse_messages(const ordered_json& in) {
    const ordered_json& arr = field<ordered_json>(in, "messages", &ordered_json::is_array, "an array");
    std::vector<data::Message> messages;
    for (size_t i = 0; i < arr.size(); ++i) {
        const std::string where = "messages[" + std::to_string(i) + "]";
        const ordered_json& m = arr[i];
        if (!m.is_object()) throw LineError{where, "must be an object"};
        data::Message msg;
        auto role = m.find("role");
        if (role == m.end() || !role->is_string()) throw LineError{where + ".role", "missing or not a string"};
        msg.role = role->get<std::string>();
        auto content = m.find("content");
        if (content != m.end() && content->is_string())
            msg.content = content->get<std::string>();
        else if (content != m.end() && !content->is_null())
            throw LineError{where + ".content", "must be a string"};
        auto reasoning = m.find("reasoning_content");
        if (reasoning != m.end() && !reasoning->is_null()) {
            if (!reasoning->is_string()) throw LineError{where + ".reasoning_content", "must be a string or null"};
            msg.reasoning_content = reasoning->get<std::string>();
        }
        auto calls = m.find("tool_calls");
        if (calls != m.end() && !calls->is_null()) {
            if (!calls->is_array()) throw LineError{where + ".tool_calls", "must be an array"};
            for (size_t k = 0; k < calls->size(); ++k) {
                const std::string cw = where + ".tool_calls[" + std::to_string(k) + "]";
                const ordered_json* call = &(*calls)[k];
                if (call->contains("function")) call = &(*call)["function"];
                if (!call->is_object() || !call->contains("name") || !(*call)["name"].is_string())
                    throw LineError{cw + ".name", "missing or not a string"};
                data::ToolCall tc;
                tc.name = (*call)["name"].get<std::string>();
                auto args = call->find("arguments");
                if (args == call->end()) throw LineError{cw + ".arguments", "missing"};
                tc.arguments = args->is_string() ? args->get<std::string>() : data::to_python_json(*args);
                msg.tool_calls.push_back(std::move(tc));
            }
        }
        messages.push_back(std::move(msg));
    }
    if (messages.empty()) throw LineError{"messages", "is empty"};
    return messages;
}

data::RenderOptions parse_render_options(const ordered_json& in) {
    data::RenderOptions opt;
    auto gen = in.find("add_generation_prompt");
    if (gen != in.end() && !gen->is_null()) {
        if (!gen->is_boolean()) throw LineError{"add_generation_prompt", "must be true or false"};
        opt.add_generation_prompt = gen->get<bool>();
    }
    auto think = in.find("enable_thinking");
    if (think != in.end() && !think->is_null()) {
        if (!think->is_boolean()) throw LineError{"enable_thinking", "must be true, false or null"};
        opt.enable_thinking = think->get<bool>();
    }
    return opt;
}

void add_encode(CLI::App& app, int& exit_code) {
    auto* tokens = group(app, "tokens", "Tokenize and inspect token sequences");
    auto* cmd = tokens->add_subcommand("encode", "Encode JSON Lines {\"text\": ...} from stdin to {\"ids\": [...]} with tandem's tokenizer");
    auto dir = std::make_shared<std::string>();
    auto keep_going = std::make_shared<bool>(false);
    auto offsets = std::make_shared<bool>(false);
    cmd->add_option("--tokenizer", *dir, "Folder with tokenizer.json (default: the shared assets)");
    cmd->add_flag("--keep-going", *keep_going, "After a malformed line, report it and go on");
    cmd->add_flag("--offsets", *offsets, "Also write \"offsets\": [[begin, end], ...] (byte offsets into the text)");
    cmd->callback([&exit_code, dir, keep_going, offsets] {
        const auto tok = data::Tokenizer::load(resolve_tokenizer_dir(*dir));
        exit_code = process_jsonl(*keep_going, [&](const ordered_json& in) {
            const std::string& text = field<ordered_json>(in, "text", &ordered_json::is_string, "a string").get_ref<const std::string&>();
            ordered_json out;
            std::vector<data::Token> toks;
            try {
                toks = tok.encode_with_offsets(text);
            } catch (const Error& e) {
                throw LineError{"text", e.what()};
            }
            ordered_json ids = ordered_json::array();
            for (const auto& t : toks) ids.push_back(t.id);
            out["ids"] = std::move(ids);
            if (*offsets) {
                ordered_json offs = ordered_json::array();
                for (const auto& t : toks) offs.push_back({t.begin, t.end});
                out["offsets"] = std::move(offs);
            }
            return out;
        });
    });
}

void add_render(CLI::App& app, int& exit_code) {
    auto* tmpl = group(app, "template", "Chat templates");
    auto* cmd = tmpl->add_subcommand("render", "Render JSON Lines {\"messages\": [...], \"add_generation_prompt\": bool, \"enable_thinking\": bool|null} to {\"text\": ...}");
    auto dir = std::make_shared<std::string>();
    auto kind = std::make_shared<std::string>("qwen3");
    auto keep_going = std::make_shared<bool>(false);
    cmd->add_option("--tokenizer", *dir, "Folder with tokenizer_config.json (default: the shared assets)");
    cmd->add_option("--template", *kind, "qwen3 (the model's own template) or chatml (generic layout)")
        ->check(CLI::IsMember({"qwen3", "chatml"}));
    cmd->add_flag("--keep-going", *keep_going, "After a malformed line, report it and go on");
    cmd->callback([&exit_code, dir, kind, keep_going] {
        const data::TemplateKind k = data::parse_template_kind(*kind);
        if (k == data::TemplateKind::Qwen3) {
            // The native renderer implements Qwen3's template; make sure the folder really is Qwen3's.
            const std::filesystem::path config = resolve_tokenizer_dir(*dir) / "tokenizer_config.json";
            std::string source;
            try {
                auto c = nlohmann::json::parse(read_file(config));
                if (c.contains("chat_template") && c["chat_template"].is_string()) source = c["chat_template"].get<std::string>();
            } catch (const nlohmann::json::exception& e) {
                throw Error(config.string() + ": not valid JSON (" + e.what() + ")");
            }
            if (source.find("<think>") == std::string::npos || source.find("last_query_index") == std::string::npos)
                throw Error(config.string() + ": chat_template is not Qwen3's template, which is the one tandem renders natively");
        }
        exit_code = process_jsonl(*keep_going, [&](const ordered_json& in) {
            auto messages = parse_messages(in);
            auto opt = parse_render_options(in);
            return ordered_json{{"text", data::render_chat(k, messages, opt)}};
        });
    });
}

}  // namespace

void add_bench_tokenizer(CLI::App& app, int& exit_code);  // below

void add_tokenizer_commands(CLI::App& app, int& exit_code) {
    add_encode(app, exit_code);
    add_render(app, exit_code);
    add_bench_tokenizer(app, exit_code);
}

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

void add_bench_tokenizer(CLI::App& app, int& exit_code) {
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
