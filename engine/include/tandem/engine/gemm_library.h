#pragma once
// Which float32 GEMM library the CPU engine runs, chosen once per process (docs/engine.md "GEMM library").
//
// The engine's float32 GEMMs go to OpenBLAS or, when the build found it, oneDNN's dnnl_sgemm. The default
// is the library measured fastest on the CPU kind at the engine's real shapes (docs/benchmarks.md): oneDNN
// on Intel CPUs with AVX-512 and AMD CPUs with AVX2 only, OpenBLAS on kinds not measured yet.
// TANDEM_GEMM=openblas|onednn picks one by hand. Float64 GEMMs (the finite-difference checks) always go
// to OpenBLAS.
//
// Numbers depend on the library and the thread count, never on anything else: a run, its resume and a
// rerun with the same library and threads are bit-identical.
#include <string>

namespace tandem::engine {

enum class GemmLibrary { OpenBlas, OneDnn };

// The library in use (TANDEM_GEMM if set, else the CPU kind's default). Throws tandem::Error naming
// TANDEM_GEMM when it names an unknown library or one this build lacks.
GemmLibrary gemm_library();
// The library a TANDEM_GEMM value picks (nullptr or empty: the CPU kind's default); what gemm_library()
// runs once on the environment.
GemmLibrary gemm_library_for(const char* tandem_gemm);
// What a report names: "oneDNN 2.6.3 dnnl_sgemm" or "OpenBLAS 0.3.21 (kernel SkylakeX)".
std::string gemm_library_text();
// The CPU kind the default follows: "Intel AVX-512", "AMD AVX-512", "Intel AVX2", ...
std::string cpu_kind();
// The instruction set the ops' row loops run beside the GEMMs: "AVX-512", "AVX2" or "scalar" (the same bits
// on every one; docs/engine.md "Speed without changing a number").
std::string row_kernels_text();
// The libraries this build can run ("openblas", "onednn"), for tests and `--help` texts.
std::string gemm_libraries_built();

}  // namespace tandem::engine
