// Identifies the CUDA library in version reports; kernels are listed in CMakeLists.txt.
namespace tandem { const char* kernels_module_name() { return "tandem_kernels"; } }
