#pragma once
// The host-side tensor used at every file boundary (safetensors, checkpoints, adapters):
// float32, row-major, a shape and a flat buffer. Compute code uses raw pointers into these.
#include <cstdint>
#include <map>
#include <numeric>
#include <string>
#include <vector>

namespace tandem::engine {

struct Tensor {
    std::vector<int64_t> shape;
    std::vector<float> data;

    Tensor() = default;
    explicit Tensor(std::vector<int64_t> s) : shape(std::move(s)), data(static_cast<size_t>(count(shape)), 0.0f) {}

    static int64_t count(const std::vector<int64_t>& s) {
        return std::accumulate(s.begin(), s.end(), int64_t{1}, [](int64_t a, int64_t b) { return a * b; });
    }
    int64_t numel() const { return static_cast<int64_t>(data.size()); }
    float* ptr() { return data.data(); }
    const float* ptr() const { return data.data(); }
};

// Named tensors, keyed by their file names (HF / peft names), sorted for deterministic files.
using TensorMap = std::map<std::string, Tensor>;

// "[2, 3]" — how every error message and report prints a shape.
inline std::string shape_text(const std::vector<int64_t>& shape) {
    std::string out = "[";
    for (size_t i = 0; i < shape.size(); ++i) out += (i ? ", " : "") + std::to_string(shape[i]);
    return out + "]";
}

}  // namespace tandem::engine
