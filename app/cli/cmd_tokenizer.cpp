// tandem subcommands: tokens encode, template render, bench tokenizer (issue 3).
// JSON Lines in on stdin, JSON Lines out on stdout, one output line per input line, order kept.
// A malformed line is reported on stderr with its line number and field; with --keep-going the
// line's output is {"error": "..."} and processing goes on; the exit status is 1 if any line failed.
#include "commands.h"

#include "tandem/assets.h"
#include "tandem/data/chat_template.h"
#include "tandem/data/text_json.h"
#include "tandem/data/tokenizer.h"
#include "tandem/error.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <functional>
#include <iostream>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

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
            std::fprintf(stderr, "tandem: error: stdin line %zu: field '%s': %s\n", line_no, error->field.c_str(),
                         error->message.c_str());
            if (!keep_going) {
                std::fflush(stdout);
                return kError;
            }
            out = ordered_json{{"error", "line " + std::to_string(line_no) + ": field '" + error->field + "': " + error->message}}.dump();
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
            const auto tok = data::Tokenizer::load(resolve_tokenizer_dir(*dir));
            if (tok.chat_template_source().find("<think>") == std::string::npos ||
                tok.chat_template_source().find("last_query_index") == std::string::npos)
                throw Error((tok.directory() / "tokenizer_config.json").string() +
                            ": chat_template is not Qwen3's template, which is the one tandem renders natively");
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

void add_bench_tokenizer(CLI::App& /*app*/, int& /*exit_code*/) {}

}  // namespace tandem::cli
