#pragma once
// The CUDA backend of the engine's seam (tandem/engine/backend.h): every op of TANDEM_BACKEND_OPS on
// one device, through the launchers of kernels/ (tandem_kernels) and cuBLAS, on one stream held here
// with its cuBLAS handle and caching allocator. Host code only; the model wiring and the trainer are
// the engine's own (engine/src/model/), so a CUDA run is the CPU run's wiring with other ops.
//
// By design (docs/engine-cuda.md): attention caches the row log-sum-exp lse[B,H,T] (not the
// probabilities); dropout masks are regenerated inside the kernels from their key; the LM head is
// chunked over tokens only (vocab_chunk is ignored: whole vocabulary rows). Op scratch (the dropped
// adapter input, LoRA's dt, attention's row dots, the CE logits chunk and per-row losses, the norm's
// partial sums) grows to the largest call and stays allocated.
#include <cstdint>
#include <memory>
#include <string>

#include "tandem/engine/backend.h"
#include "tandem/kernels/device.h"

namespace tandem::engine::cuda {

// True when at least one CUDA device can be used; otherwise false and *reason says why.
bool device_available(std::string* reason = nullptr);
// "cuda:N" -> N; throws tandem::Error for anything else or an index >= the device count.
int parse_device(const std::string& name);

// The backend on cuda:device (throws tandem::Error when the device is not there).
std::shared_ptr<Backend> make_cuda_backend(int device);
// The memory accounting of a backend made by make_cuda_backend (throws for any other backend), and
// its peaks reset to the current values (benchmarks time steady-state updates).
kernels::MemoryReport memory_report(const Backend& backend);
void reset_peak_memory(Backend& backend);

}  // namespace tandem::engine::cuda
