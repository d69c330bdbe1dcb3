// Identifies the library in version reports; the module's real sources are listed in CMakeLists.txt.
namespace tandem { const char* data_module_name() { return "tandem_data"; } }
