// make_backend: device name -> backend (tandem/engine_devices/make_backend.h).
#include "tandem/engine_devices/make_backend.h"

#include "tandem/error.h"

#if TANDEM_ENGINE_DEVICES_WITH_CUDA
#include "tandem/engine_cuda/cuda_backend.h"
#endif

namespace tandem::engine {

std::shared_ptr<Backend> make_backend(const std::string& device, int threads) {
    if (device == "cpu") return make_cpu_backend(threads);
    if (device.rfind("cuda:", 0) == 0) {
#if TANDEM_ENGINE_DEVICES_WITH_CUDA
        return cuda::make_cuda_backend(cuda::parse_device(device));
#else
        throw Error("device '" + device + "': this build of tandem has no CUDA backend (built without nvcc)");
#endif
    }
    throw Error("device '" + device + "' is neither cpu nor cuda:N");
}

}  // namespace tandem::engine
