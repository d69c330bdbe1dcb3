// Seeded generators for base weights and the initial adapter; the algorithm is spelled out in
// generate.h and docs/engine-io.md.
#include "tandem/engine/generate.h"

#include "tandem/engine/io.h"
#include "tandem/engine/safetensors.h"

#include <algorithm>
#include <cmath>
#include <numbers>
#include <thread>
#include <vector>

namespace tandem::engine {

uint64_t splitmix64_mix(uint64_t z) {
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}

uint64_t fnv1a64(std::string_view bytes) {
    uint64_t h = 0xCBF29CE484222325ULL;
    for (unsigned char c : bytes) {
        h ^= c;
        h *= 0x100000001B3ULL;
    }
    return h;
}

uint64_t generator_key(uint64_t seed, std::string_view domain, std::string_view name) {
    std::string s(domain);
    s += '/';
    s += name;
    return splitmix64_mix(seed ^ fnv1a64(s));
}

namespace {

double to_unit(uint64_t x) { return static_cast<double>(x >> 11) * 0x1.0p-53; }

// Runs body(begin, end) over [0, n) in contiguous chunks on a few threads. Every element depends
// only on (key, index), so the split cannot change the result.
template <class F>
void parallel_ranges(size_t n, F body) {
    const size_t min_chunk = size_t{1} << 18;
    const size_t hw = std::max(1u, std::thread::hardware_concurrency());
    const size_t threads = std::min(hw, std::max<size_t>(1, n / min_chunk));
    if (threads <= 1) {
        body(size_t{0}, n);
        return;
    }
    std::vector<std::thread> pool;
    const size_t per = (n + threads - 1) / threads;
    for (size_t t = 0; t < threads; ++t) {
        const size_t b = t * per, e = std::min(n, b + per);
        if (b < e) pool.emplace_back(body, b, e);
    }
    for (auto& th : pool) th.join();
}

}  // namespace

void fill_normal(float* out, size_t n, double std, uint64_t key) {
    const size_t pairs = (n + 1) / 2;
    parallel_ranges(pairs, [&](size_t pb, size_t pe) {
        for (size_t j = pb; j < pe; ++j) {
            const double u1 = 1.0 - to_unit(generator_value(key, 2 * j));
            const double u2 = to_unit(generator_value(key, 2 * j + 1));
            const double r = std::sqrt(-2.0 * std::log(u1));
            const double angle = 2.0 * std::numbers::pi * u2;
            out[2 * j] = static_cast<float>(std * r * std::cos(angle));
            if (2 * j + 1 < n) out[2 * j + 1] = static_cast<float>(std * r * std::sin(angle));
        }
    });
}

void fill_uniform(float* out, size_t n, double lo, double hi, uint64_t key) {
    parallel_ranges(n, [&](size_t b, size_t e) {
        for (size_t k = b; k < e; ++k) out[k] = static_cast<float>(lo + (hi - lo) * to_unit(generator_value(key, k)));
    });
}

TensorMap generate_base_weights(const Qwen3Config& c, uint64_t seed) {
    TensorMap m;
    for (const auto& [name, shape] : expected_base_shapes(c)) {
        Tensor t(shape);
        if (shape.size() == 1) {
            std::fill(t.data.begin(), t.data.end(), 1.0f);  // RMSNorm weights start at one
        } else {
            fill_normal(t.ptr(), t.data.size(), c.initializer_range, generator_key(seed, kBaseGeneratorDomain, name));
        }
        m.emplace(name, std::move(t));
    }
    return m;
}

void write_generated_base(const std::filesystem::path& dir, const Qwen3Config& c, uint64_t seed) {
    save_hf_checkpoint(dir, c, generate_base_weights(c, seed),
                       {{"format", "pt"}, {"tandem_generator", kGeneratorName}, {"tandem_seed", std::to_string(seed)}});
}

TensorMap generate_initial_adapter(const Qwen3Config& c, const LoraConfig& l, uint64_t seed) {
    TensorMap m;
    for (const auto& [name, shape] : expected_adapter_shapes(c, l)) {
        Tensor t(shape);
        if (name.find(".lora_A.") != std::string::npos) {
            const double bound = 1.0 / std::sqrt(static_cast<double>(shape[1]));  // shape = [r, in]
            fill_uniform(t.ptr(), t.data.size(), -bound, bound, generator_key(seed, kLoraInitDomain, name));
        }  // lora_B stays zero
        m.emplace(name, std::move(t));
    }
    return m;
}

void write_initial_adapter(const std::filesystem::path& dir, const Qwen3Config& c, const LoraConfig& l, uint64_t seed,
                           const std::string& base_model_path) {
    save_peft_adapter(dir, l, generate_initial_adapter(c, l, seed), c, base_model_path);
}

}  // namespace tandem::engine
