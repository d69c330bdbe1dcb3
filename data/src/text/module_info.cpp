// Keeps the library non-empty while its sources are being written.
namespace tandem { const char* data_src_text_module_name() { return "data/src/text"; } }
