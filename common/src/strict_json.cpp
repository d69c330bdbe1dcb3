// Strict JSON parsing with field-naming errors (strict_json.h).
#include "tandem/strict_json.h"

#include "tandem/error.h"

#include <set>
#include <vector>

namespace tandem {
namespace {

using nlohmann::json;

// Where the parser is: one frame per open object or array.
struct Frame {
    bool object = true;
    std::set<std::string> keys;  // keys seen so far (objects)
    std::string key;             // the key whose value is being read (objects)
    size_t index = 0;            // the element being read (arrays)
};

std::string path_of(const std::vector<Frame>& stack) {
    std::string p;
    for (const auto& f : stack) {
        if (f.object) {
            if (f.key.empty()) break;
            p += (p.empty() ? "" : ".") + f.key;
        } else {
            p += "[" + std::to_string(f.index) + "]";
        }
    }
    return p;
}

// A parser message may quote the bytes it stopped at; keep the error one printable UTF-8 line.
std::string printable(std::string s) {
    for (char& c : s)
        if (c == '\n' || c == '\r') c = ' ';
    const std::string quoted = json(s).dump(-1, ' ', false, json::error_handler_t::replace);
    return quoted.substr(1, quoted.size() - 2);
}

}  // namespace

json parse_json_strict(std::string_view text, const std::string& source) {
    std::vector<Frame> stack;
    auto field = [&](const std::string& path) { return path.empty() ? std::string("(top level)") : path; };
    auto advance = [&] {  // a value of the enclosing container is complete
        if (!stack.empty() && !stack.back().object) ++stack.back().index;
    };
    auto cb = [&](int /*depth*/, json::parse_event_t event, json& parsed) -> bool {
        switch (event) {
            case json::parse_event_t::object_start: stack.push_back(Frame{true, {}, {}, 0}); break;
            case json::parse_event_t::array_start: stack.push_back(Frame{false, {}, {}, 0}); break;
            case json::parse_event_t::object_end:
            case json::parse_event_t::array_end:
                if (!stack.empty()) stack.pop_back();
                advance();
                break;
            case json::parse_event_t::key: {
                if (stack.empty()) break;
                Frame& f = stack.back();
                f.key = parsed.get<std::string>();
                if (!f.keys.insert(f.key).second)
                    throw Error(source + ": field " + printable(path_of(stack)) +
                                ": duplicate key (an object may name a field once)");
                break;
            }
            case json::parse_event_t::value: advance(); break;
        }
        return true;
    };
    try {
        return json::parse(text.begin(), text.end(), cb);
    } catch (const json::out_of_range& e) {
        // 406: a number literal beyond the double range; the callback's path names its field.
        std::string what = e.what();
        std::string literal;
        if (auto q = what.find('\''); q != std::string::npos)
            if (auto q2 = what.find('\'', q + 1); q2 != std::string::npos) literal = what.substr(q + 1, q2 - q - 1);
        throw Error(source + ": field " + printable(field(path_of(stack))) + ": number out of range (" +
                    (literal.empty() ? std::string("it") : printable(literal)) + " does not fit a double)");
    } catch (const json::exception& e) {
        const std::string near = path_of(stack);
        const std::string what = json_error_text(e);
        throw Error(source + ": not valid JSON" + (near.empty() ? "" : " (near field " + printable(near) + ")") + ": " +
                    printable(what));
    }
}

std::string json_error_text(const nlohmann::json::exception& e) {
    std::string what = e.what();
    if (auto p = what.find("] "); p != std::string::npos && what.rfind("[json.exception.", 0) == 0) what = what.substr(p + 2);
    return what;
}

}  // namespace tandem
