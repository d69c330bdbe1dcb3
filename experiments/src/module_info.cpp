// Identifies the library in version reports; the module's real sources are listed in CMakeLists.txt.
namespace tandem { const char* experiments_module_name() { return "tandem_experiments"; } }
