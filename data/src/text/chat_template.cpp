// Chat templates rendered natively. The Qwen3 branch is the logic of Qwen3's jinja chat_template
// (tokenizer_config.json) written by hand; each step names the template line it reproduces.
// Python string semantics matter: split('</think>')[-1] is the text after the LAST separator,
// split(...)[0] the text before the FIRST, and strip/lstrip/rstrip('\n') remove only '\n'.
#include "tandem/data/chat_template.h"

#include "tandem/data/text_json.h"
#include "tandem/error.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

namespace tandem::data {
namespace {

bool starts_with(std::string_view s, std::string_view p) { return s.substr(0, p.size()) == p; }
bool ends_with(std::string_view s, std::string_view p) { return s.size() >= p.size() && s.substr(s.size() - p.size()) == p; }

std::string_view lstrip_newlines(std::string_view s) {
    size_t i = 0;
    while (i < s.size() && s[i] == '\n') ++i;
    return s.substr(i);
}
std::string_view rstrip_newlines(std::string_view s) {
    size_t n = s.size();
    while (n > 0 && s[n - 1] == '\n') --n;
    return s.substr(0, n);
}
std::string_view strip_newlines(std::string_view s) { return rstrip_newlines(lstrip_newlines(s)); }

// Python's s.split(sep)[-1] and s.split(sep)[0].
std::string_view after_last(std::string_view s, std::string_view sep) {
    size_t p = s.rfind(sep);
    return p == std::string_view::npos ? s : s.substr(p + sep.size());
}
std::string_view before_first(std::string_view s, std::string_view sep) {
    size_t p = s.find(sep);
    return p == std::string_view::npos ? s : s.substr(0, p);
}

bool is_tool_response(const std::string& content) {
    return starts_with(content, "<tool_response>") && ends_with(content, "</tool_response>");
}

void append_tool_calls(std::string& out, const Message& m, std::string_view content) {
    for (size_t k = 0; k < m.tool_calls.size(); ++k) {
        if ((k == 0 && !content.empty()) || k > 0) out += "\n";
        out += "<tool_call>\n{\"name\": \"";
        out += m.tool_calls[k].name;
        out += "\", \"arguments\": ";
        out += m.tool_calls[k].arguments;
        out += "}\n</tool_call>";
    }
}

std::string render_qwen3(const std::vector<Message>& messages, const RenderOptions& opt) {
    std::string out;
    const long n = static_cast<long>(messages.size());
    // {%- if messages[0].role == 'system' %} (no `tools` support: tandem never passes tools)
    if (messages[0].role == "system") out += "<|im_start|>system\n" + messages[0].content + "<|im_end|>\n";

    // The last user turn that is not a tool response ("last query"); reasoning is kept only after it.
    long last_query_index = n - 1;
    for (long i = n - 1; i >= 0; --i) {
        const Message& m = messages[static_cast<size_t>(i)];
        if (m.role == "user" && !is_tool_response(m.content)) {
            last_query_index = i;
            break;
        }
    }

    for (long i = 0; i < n; ++i) {
        const Message& m = messages[static_cast<size_t>(i)];
        const bool last = i == n - 1;
        if (m.role == "user" || (m.role == "system" && i != 0)) {
            out += "<|im_start|>" + m.role + "\n" + m.content + "<|im_end|>\n";
        } else if (m.role == "assistant") {
            std::string_view content = m.content;
            std::string_view reasoning;
            if (m.reasoning_content) {
                reasoning = *m.reasoning_content;
            } else if (m.content.find("</think>") != std::string::npos) {
                content = lstrip_newlines(after_last(m.content, "</think>"));
                reasoning = lstrip_newlines(after_last(rstrip_newlines(before_first(m.content, "</think>")), "<think>"));
            }
            out += "<|im_start|>" + m.role + "\n";
            if (i > last_query_index && (last || !reasoning.empty())) {
                out += "<think>\n";
                out += strip_newlines(reasoning);
                out += "\n</think>\n\n";
                out += lstrip_newlines(content);
            } else {
                out += content;
            }
            append_tool_calls(out, m, content);
            out += "<|im_end|>\n";
        } else if (m.role == "tool") {
            if (i == 0 || messages[static_cast<size_t>(i - 1)].role != "tool") out += "<|im_start|>user";
            out += "\n<tool_response>\n" + m.content + "\n</tool_response>";
            if (last || messages[static_cast<size_t>(i + 1)].role != "tool") out += "<|im_end|>\n";
        }
        // any other role: the template emits nothing for it
    }
    if (opt.add_generation_prompt) {
        out += "<|im_start|>assistant\n";
        if (opt.enable_thinking.has_value() && !*opt.enable_thinking) out += "<think>\n\n</think>\n\n";
    }
    return out;
}

// The generic layout every ChatML model shares: no reasoning block, no thinking switch.
std::string render_chatml(const std::vector<Message>& messages, const RenderOptions& opt) {
    std::string out;
    for (const Message& m : messages) out += "<|im_start|>" + m.role + "\n" + m.content + "<|im_end|>\n";
    if (opt.add_generation_prompt) out += "<|im_start|>assistant\n";
    return out;
}

void python_json_string(std::string& out, const std::string& s) {
    out += '"';
    for (unsigned char c : s) {
        switch (c) {
            case '"': out += "\\\""; break;
            case '\\': out += "\\\\"; break;
            case '\n': out += "\\n"; break;
            case '\r': out += "\\r"; break;
            case '\t': out += "\\t"; break;
            case '\b': out += "\\b"; break;
            case '\f': out += "\\f"; break;
            default:
                if (c < 0x20) {
                    char buf[8];
                    std::snprintf(buf, sizeof buf, "\\u%04x", c);
                    out += buf;
                } else {
                    out += static_cast<char>(c);
                }
        }
    }
    out += '"';
}

// Python's float repr: shortest round-trip digits, always with a '.', 'e' or 'inf'/'nan'.
std::string python_float(double v) {
    if (std::isnan(v)) return "NaN";
    if (std::isinf(v)) return v > 0 ? "Infinity" : "-Infinity";
    char buf[64];
    for (int prec = 1; prec <= 17; ++prec) {
        std::snprintf(buf, sizeof buf, "%.*g", prec, v);
        if (std::strtod(buf, nullptr) == v) break;
    }
    std::string s = buf;
    // %g writes 1e+20 / 1e-05; Python writes 1e+20 / 1e-05 as well, but 16 digits switch differently.
    if (s.find_first_of(".eni") == std::string::npos) s += ".0";
    return s;
}

void python_json(std::string& out, const nlohmann::ordered_json& v) {
    switch (v.type()) {
        case nlohmann::ordered_json::value_t::object: {
            out += '{';
            bool first = true;
            for (auto it = v.begin(); it != v.end(); ++it) {
                if (!first) out += ", ";
                first = false;
                python_json_string(out, it.key());
                out += ": ";
                python_json(out, it.value());
            }
            out += '}';
            break;
        }
        case nlohmann::ordered_json::value_t::array: {
            out += '[';
            for (size_t k = 0; k < v.size(); ++k) {
                if (k) out += ", ";
                python_json(out, v[k]);
            }
            out += ']';
            break;
        }
        case nlohmann::ordered_json::value_t::string: python_json_string(out, v.get_ref<const std::string&>()); break;
        case nlohmann::ordered_json::value_t::number_float: out += python_float(v.get<double>()); break;
        default: out += v.dump(); break;  // null, true, false, integers: same text in both
    }
}

}  // namespace

std::string to_python_json(const nlohmann::ordered_json& value) {
    std::string out;
    python_json(out, value);
    return out;
}

std::string render_chat(TemplateKind kind, const std::vector<Message>& messages, const RenderOptions& opt) {
    if (messages.empty()) throw Error("render_chat: the conversation has no messages");
    return kind == TemplateKind::Qwen3 ? render_qwen3(messages, opt) : render_chatml(messages, opt);
}

TemplateKind parse_template_kind(const std::string& name) {
    if (name == "qwen3") return TemplateKind::Qwen3;
    if (name == "chatml") return TemplateKind::ChatML;
    throw Error("unknown chat template '" + name + "' (expected qwen3 or chatml)");
}

const char* template_kind_name(TemplateKind kind) { return kind == TemplateKind::Qwen3 ? "qwen3" : "chatml"; }

}  // namespace tandem::data
