#pragma once
// An attention test shape (test_gpu_ops on the device, test_attention_emulated on the host) and its
// readable name: "B2_T45_H4_KV2_D64" (the gtest parameter name and what a failure prints).
#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

namespace tandem::gputest {

struct AttnCase {
    int64_t B, T, H, KV, D;
    std::vector<int32_t> lengths;  // per sequence, in [1, T]
};

inline std::string attn_name(const AttnCase& c) {
    return "B" + std::to_string(c.B) + "_T" + std::to_string(c.T) + "_H" + std::to_string(c.H) + "_KV" +
           std::to_string(c.KV) + "_D" + std::to_string(c.D);
}

inline void PrintTo(const AttnCase& c, std::ostream* os) { *os << attn_name(c); }

}  // namespace tandem::gputest
