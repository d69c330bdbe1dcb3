// Keeps the library non-empty while its sources are being written.
namespace tandem { const char* engine_src_model_module_name() { return "engine/src/model"; } }
