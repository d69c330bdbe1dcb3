#pragma once
// Chat templates rendered natively (no jinja engine): the logic of Qwen3's chat_template from
// tokenizer_config.json written by hand, byte-identical to transformers' apply_chat_template
// (Python jinja2), and a generic ChatML layout for showing what the wrong template does.
// See docs/data-text.md for the exact rules and the Python string semantics reproduced.
#include <optional>
#include <string>
#include <vector>

namespace tandem::data {

struct ToolCall {
    std::string name;
    // Emitted verbatim after "arguments": — a JSON text. (The template writes a string argument
    // as-is and a mapping through tojson; callers that hold a mapping serialise it the way
    // Python's json.dumps(ensure_ascii=False) does.)
    std::string arguments;
};

struct Message {
    std::string role;     // "system", "user", "assistant", "tool"; other roles are skipped (as Qwen3 does)
    std::string content;
    std::optional<std::string> reasoning_content;  // assistant only; nullopt = not given
    std::vector<ToolCall> tool_calls;              // assistant only
};

enum class TemplateKind { Qwen3, ChatML };

struct RenderOptions {
    bool add_generation_prompt = false;
    std::optional<bool> enable_thinking;  // nullopt = not passed to the template
};

// Throws tandem::Error for an empty message list (the Qwen3 template reads messages[0]).
std::string render_chat(TemplateKind kind, const std::vector<Message>& messages, const RenderOptions& opt);

// "qwen3" / "chatml" <-> TemplateKind; parse throws tandem::Error naming the value.
TemplateKind parse_template_kind(const std::string& name);
const char* template_kind_name(TemplateKind kind);

}  // namespace tandem::data
