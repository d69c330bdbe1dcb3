// Keeps the library non-empty while its sources are being written.
namespace tandem { const char* experiments_src_storage_module_name() { return "experiments/src/storage"; } }
