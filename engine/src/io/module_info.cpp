// Keeps the library non-empty while its sources are being written.
namespace tandem { const char* engine_src_io_module_name() { return "engine/src/io"; } }
