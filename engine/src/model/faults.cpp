// The engine's fault switches (faults.h): the pieces that are not an op variant or a wiring step.
#include "tandem/engine/faults.h"

#include <cstring>
#include <string>

#include "tandem/error.h"

namespace tandem::engine {

bool FaultConfig::any() const {
    const FaultConfig none{};
    return rms_norm_eps_factor != none.rms_norm_eps_factor || rope_theta_divisor != none.rope_theta_divisor ||
           rope_pairing != none.rope_pairing ||
           skip_qk_norm != none.skip_qk_norm || kv_heads != none.kv_heads ||
           truncated_mantissa_bits != none.truncated_mantissa_bits || k_proj_uses_v_adapter != none.k_proj_uses_v_adapter ||
           lora_scaling != none.lora_scaling || lora_b_grad != none.lora_b_grad || label_shift != none.label_shift ||
           mean_of_micro_batch_means != none.mean_of_micro_batch_means || clipping != none.clipping ||
           adamw_no_bias_correction != none.adamw_no_bias_correction ||
           adamw_eps_inside_sqrt != none.adamw_eps_inside_sqrt || warmup_offset != none.warmup_offset ||
           eval_dropout != none.eval_dropout || eval_without_adapter != none.eval_without_adapter ||
           same_mask_every_micro_batch != none.same_mask_every_micro_batch || slow_after_eval != none.slow_after_eval;
}

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
