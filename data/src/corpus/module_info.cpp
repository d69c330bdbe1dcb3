// Keeps the library non-empty while its sources are being written.
namespace tandem { const char* data_src_corpus_module_name() { return "data/src/corpus"; } }
