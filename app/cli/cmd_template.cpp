// tandem template render: JSON Lines {"messages": [...]} on stdin to {"text": ...} on stdout with
// tandem's chat template (docs/data-text.md); one output line per input line, order kept. A
// malformed line is reported on stderr with its line number and field; with --keep-going the line's
// output is {"error": "..."} and processing goes on; the exit status is 1 if any line failed.
#include "commands.h"

#include "cli_inputs.h"
#include "tandem/atomic_file.h"
#include "tandem/data/chat_template.h"
#include "tandem/data/text_json.h"
#include "tandem/error.h"

#include "tandem/strict_json.h"

#include <nlohmann/json.hpp>

#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace tandem::cli {
namespace {

std::vector<data::Message> parse_messages(const ordered_json& in, data::TemplateKind kind) {
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
        // Qwen3's template emits nothing for another role (the renderer does the same, as transformers
        // does); asked to render one, `template render` says so instead of printing a text without it.
        if (kind == data::TemplateKind::Qwen3 && msg.role != "system" && msg.role != "user" && msg.role != "assistant" &&
            msg.role != "tool")
            throw LineError{where + ".role", "'" + msg.role + "' is not a role the qwen3 template renders (system, user, "
                                             "assistant, tool): it would render as nothing"};
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
        // A message without content renders as an empty turn, silently; only an assistant's tool
        // calls may stand without it (OpenAI's format gives them content null).
        if ((content == m.end() || content->is_null()) && !(msg.role == "assistant" && !msg.tool_calls.empty()))
            throw LineError{where + ".content", "missing (a string; null only for an assistant message with tool_calls)"};
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

}  // namespace

void add_template_commands(CLI::App& app, int& exit_code) {
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
            const std::filesystem::path config = tokenizer_folder(*dir) / "tokenizer_config.json";
            std::string source;
            try {
                auto c = nlohmann::json::parse(read_file(config));
                if (c.contains("chat_template") && c["chat_template"].is_string()) source = c["chat_template"].get<std::string>();
            } catch (const nlohmann::json::exception& e) {
                throw Error(config.string() + ": not valid JSON (" + json_error_text(e) + ")");
            }
            if (source.find("<think>") == std::string::npos || source.find("last_query_index") == std::string::npos)
                throw Error(config.string() + ": chat_template is not Qwen3's template, which is the one tandem renders natively");
        }
        exit_code = process_jsonl(*keep_going, [&](const ordered_json& in) {
            auto messages = parse_messages(in, k);
            auto opt = parse_render_options(in);
            return ordered_json{{"text", data::render_chat(k, messages, opt)}};
        });
    });
}

}  // namespace tandem::cli
