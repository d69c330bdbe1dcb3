// Fuzz target: the leg-event parser (apply_event_line) on a stream of lines, then the check
// records the runner stores (l1/l2/l3 to JSON and back). Property: nothing throws (the parser's
// contract: a malformed line is recorded, never thrown), the JSON it produces is valid UTF-8-safe
// text, and every line is accounted for (an event kind or a malformed entry).
#include "tandem/legs/leg_protocol.h"

#include <cstdint>
#include <cstdlib>
#include <string_view>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    using namespace tandem::experiments;
    using nlohmann::json;
    std::string_view rest(reinterpret_cast<const char*>(data), size);
    LegTrace t;
    while (!rest.empty()) {
        const size_t nl = rest.find('\n');
        const std::string_view line = rest.substr(0, nl);
        const size_t malformed_before = t.malformed.size();
        const EventKind k = apply_event_line(t, line);
        if (k == EventKind::Malformed && t.malformed.size() != malformed_before + 1 && !line.empty() &&
            line.find_first_not_of("\r") != std::string_view::npos)
            std::abort();  // a malformed line must be recorded
        if (nl == std::string_view::npos) break;
        rest.remove_prefix(nl + 1);
    }
    // The stored forms: dumped (invalid UTF-8 in strings replaced) and read back.
    for (const json& j : {l1_to_json(t), l2_to_json(t), l3_to_json(t)}) {
        const std::string text = j.dump(-1, ' ', false, json::error_handler_t::replace);
        const json back = json::parse(text);
        LegTrace u;
        l1_from_json(u, back);
        l2_from_json(u, back);
        l3_from_json(u, back);
    }
    return 0;
}
