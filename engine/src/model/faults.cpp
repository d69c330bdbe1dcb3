// The engine's fault switches (faults.h): the pieces that are not an op variant or a wiring step.
#include "tandem/engine/faults.h"

#include <cstring>
#include <string>

#include "tandem/error.h"

namespace tandem::engine {

void truncate_mantissa(float* data, int64_t n, int bits) {
    if (bits < 1 || bits > 23) throw Error("fault: mantissa bits to truncate must be in 1..23, not " + std::to_string(bits));
    const uint32_t mask = ~((uint32_t{1} << bits) - 1u);
    for (int64_t i = 0; i < n; ++i) {
        uint32_t u;
        std::memcpy(&u, data + i, sizeof u);
        u &= mask;
        std::memcpy(data + i, &u, sizeof u);
    }
}

Qwen3Config effective_config(const Qwen3Config& config, const FaultConfig& faults) {
    Qwen3Config c = config;
    if (faults.rms_norm_eps_factor <= 0 || faults.rope_theta_divisor <= 0)
        throw Error("fault: the RMSNorm eps factor and the RoPE theta divisor must be positive");
    c.rms_norm_eps = config.rms_norm_eps * faults.rms_norm_eps_factor;  // x 1: exactly the config's
    c.rope_theta = config.rope_theta / faults.rope_theta_divisor;
    return c;
}

double effective_lora_scaling(const LoraConfig& lora, const FaultConfig& faults) {
    switch (faults.lora_scaling) {
        case LoraScaling::FromConfig: return lora.scaling();
        case LoraScaling::AlphaOverRank: return lora.alpha / static_cast<double>(lora.rank);
        case LoraScaling::RawAlpha: return lora.alpha;
    }
    return lora.scaling();
}

}  // namespace tandem::engine
