#pragma once
// Chooses the engine's backend by device name: the one library (tandem_engine_devices) that knows
// every backend of this build, so tandem_engine itself never links the CUDA kernels.
#include <memory>
#include <string>

#include "tandem/engine/backend.h"

namespace tandem::engine {

// "cpu" -> make_cpu_backend(threads); "cuda:N" -> the CUDA backend on device N when this build has
// CUDA. Anything else, or cuda:N without CUDA or without that device, throws tandem::Error naming it.
std::shared_ptr<Backend> make_backend(const std::string& device, int threads);

}  // namespace tandem::engine
