#pragma once
// The dropout masks the device code must reproduce bit for bit, checked on the device
// (test_gpu_ops.cpp) and by the host copies of its per-element functions (test_kernels_host.cpp):
// shared and native keys, a first index past 2^32, p from 0.05 to 0.5.
#include <cstdint>
#include <vector>

#include "tandem/engine/dropout.h"

namespace tandem::gputest {

struct DropoutCase {
    uint64_t key, first;
    double p;
};

inline std::vector<DropoutCase> dropout_cases() {
    return {{engine::shared_dropout_key(42, 7, 3, 5, 2), 0, 0.05},
            {engine::native_dropout_key(42), 123456789012ull, 0.05},
            {engine::shared_dropout_key(1, 0, 0, 0, 6), 0, 0.5},
            {engine::native_dropout_key(0), 0, 0.1}};
}

}  // namespace tandem::gputest
