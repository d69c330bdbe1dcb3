// Keeps the library non-empty while its sources are being written.
namespace tandem { const char* experiments_src_runner_module_name() { return "experiments/src/runner"; } }
