// Fuzz target: the safetensors header reader, on a whole file's bytes. Properties: only
// tandem::Error escapes; when the header validates, every tensor's byte range lies inside the
// file (converting each one to float32 touches exactly those bytes: ASan reports any overrun).
#include "tandem/engine/safetensors.h"
#include "tandem/error.h"

#include <cstdint>
#include <cstdlib>
#include <string_view>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    using namespace tandem::engine;
    const std::string_view bytes(reinterpret_cast<const char*>(data), size);
    SafetensorsHeader h;
    try {
        h = parse_safetensors_header(bytes, size, "fuzz.safetensors");
    } catch (const tandem::Error&) {
        return 0;
    }
    for (const auto& e : h.tensors) {
        if (h.data_start() + e.end > size || e.end < e.begin) std::abort();
        const size_t count = (e.end - e.begin) / dtype_size(e.dtype);
        std::vector<float> out(count);
        convert_to_f32(e.dtype, data + h.data_start() + e.begin, count, out.data());
    }
    return 0;
}
