// CudaBackend: TANDEM_BACKEND_OPS on one CUDA device (tandem/engine_cuda/cuda_backend.h). Each op is a
// call of its kernels/ launcher on the backend's stream; nothing here synchronises except download()
// and upload() (which returns once the host source may be reused).
#include "tandem/engine_cuda/cuda_backend.h"

#include <algorithm>
#include <deque>
#include <string>
#include <type_traits>

#include "tandem/error.h"
#include "tandem/kernels/ops.h"

namespace tandem::engine::cuda {

namespace k = tandem::kernels;

bool device_available(std::string* reason) {
    const std::string why = k::no_device_reason();
    if (reason) *reason = why;
    return why.empty();
}

int parse_device(const std::string& name) {
    if (name.rfind("cuda:", 0) != 0 || name.size() == 5 || name.size() > 9)
        throw Error("device '" + name + "' is not of the form cuda:N");
    int idx = 0;
    for (size_t i = 5; i < name.size(); ++i) {
        if (name[i] < '0' || name[i] > '9') throw Error("device '" + name + "' is not of the form cuda:N");
        idx = idx * 10 + (name[i] - '0');
    }
    const int n = k::device_count_or_zero();
    if (idx >= n) throw Error("device '" + name + "': only " + std::to_string(n) + " CUDA device(s) present");
    return idx;
}

namespace {

k::MemoryCategory category(MemoryKind kind) {
    switch (kind) {
        case MemoryKind::Weights: return k::MemoryCategory::Weights;
        case MemoryKind::Adapter: return k::MemoryCategory::AdapterOptimizer;
        case MemoryKind::Activations: return k::MemoryCategory::Activations;
        case MemoryKind::Workspace: break;
    }
    return k::MemoryCategory::Workspace;
}

class CudaBackend final : public Backend {
public:
    explicit CudaBackend(int device) : dev_(device) {
        const int n = k::device_count_or_zero();
        if (device < 0 || device >= n)
            throw Error("CUDA engine: device cuda:" + std::to_string(device) + " not present (" + std::to_string(n) +
                        " device(s); " + k::no_device_reason() + ")");
        CUDA_CHECK(cudaSetDevice(device));
        CUDA_CHECK(cudaStreamCreateWithFlags(&stream_.s, cudaStreamNonBlocking));
        alloc_ = std::make_unique<k::DeviceAllocator>(device);
        blas_ = std::make_unique<k::BlasHandle>(stream_.s);
        cudaDeviceProp prop{};
        CUDA_CHECK(cudaGetDeviceProperties(&prop, device));
        name_ = prop.name;
        int runtime = 0;
        CUDA_CHECK(cudaRuntimeGetVersion(&runtime));
        stack_ = "tandem engine (C++20, CUDA " + std::to_string(runtime / 1000) + "." +
                 std::to_string(runtime % 1000 / 10) + " kernels, cuBLAS)";
    }

    k::MemoryReport memory_report() const { return alloc_->report(); }
    void reset_peak_memory() { alloc_->reset_peak(); }

    std::string device() const override { return "cuda:" + std::to_string(dev_); }
    std::string device_name() const override { return name_; }
    std::string stack() const override { return stack_; }
    int64_t peak_device_bytes() const override { return static_cast<int64_t>(alloc_->report().peak_bytes); }

    void* allocate(size_t bytes, MemoryKind kind) override {
        CUDA_CHECK(cudaSetDevice(dev_));
        return alloc_->allocate(bytes, category(kind));
    }
    void release(void* p) noexcept override { alloc_->release(p); }
    void upload(void* dst, const void* src, size_t bytes) override {
        if (!bytes) return;
        CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, s()));
        CUDA_CHECK(cudaStreamSynchronize(s()));  // the caller may free or reuse src
    }
    void download(void* dst, const void* src, size_t bytes) override {
        if (!bytes) return;
        CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, s()));
        CUDA_CHECK(cudaStreamSynchronize(s()));
    }
    void fill_zero(void* dst, size_t bytes) override {
        if (bytes) CUDA_CHECK(cudaMemsetAsync(dst, 0, bytes, s()));
    }
    const float* take_weight(Tensor&& t) override {
        weights_.emplace_back(*alloc_, size_t(std::max<int64_t>(t.numel(), 1)), k::MemoryCategory::Weights);
        upload(weights_.back().get(), t.ptr(), size_t(t.numel()) * sizeof(float));
        t = Tensor{};  // the host copy goes now: the model never holds both
        return weights_.back().get();
    }
    // cache = the row log-sum-exp lse[B,H,T]; the backward recomputes the probabilities
    int64_t attention_cache_floats(int64_t B, int64_t T, int64_t H) const override { return B * H * T; }
    void check_supported(const Qwen3Config& c) const override {
        if (c.head_dim != 32 && c.head_dim != 64 && c.head_dim != 128)
            throw Error("CUDA engine: head_dim " + std::to_string(c.head_dim) + " not supported (32, 64 or 128)");
    }
    // The op-variant faults (faults.h) have no CUDA kernels: a faulty run names the fault and the CPU.
    void check_faults_supported(const FaultConfig& f) const override {
        require_no_variant(f.rope_pairing == RopePairing::RotateHalf, "rope-interleaved");
        require_no_variant(f.kv_heads == KvHeadMapping::Grouped, "gqa-modulo");
        require_no_variant(f.lora_b_grad == LoraBGrad::Correct, "lora-b-grad-transposed");
        require_no_variant(!f.adamw_no_bias_correction, "adamw-no-bias-correction");
        require_no_variant(!f.adamw_eps_inside_sqrt, "adamw-eps-inside-sqrt");
    }
    static void require_no_variant(bool correct, const char* fault) {
        if (!correct)
            throw Error(std::string("CUDA engine: fault '") + fault + "' is an op variant the CUDA backend does not have "
                        "(run the faulty leg on the cpu device)");
    }

    // ---- ops
    void embedding_forward(float* out, const int32_t* ids, const float* table, int64_t N, int64_t C,
                           int64_t /*V: ids were validated on the host*/) override {
        k::gather_rows(out, table, ids, N, C, s());
    }
    void rmsnorm_forward(float* out, float* rstd, const float* in, const float* weight, int64_t rows, int64_t C,
                         double eps) override {
        k::rmsnorm_forward(out, rstd, in, weight, rows, C, eps, s());
    }
    void rmsnorm_backward(float* din, float* dweight, const float* dout, const float* in, const float* weight,
                          const float* rstd, int64_t rows, int64_t C, bool accumulate_din) override {
        k::rmsnorm_backward(din, dweight, dout, in, weight, rstd, rows, C, s(), accumulate_din);
    }
    void rope_forward(float* out, const float* in, const float* cos, const float* sin, int64_t B, int64_t T,
                      int64_t H, int64_t D, RopePairing pairing) override {
        require_no_variant(pairing == RopePairing::RotateHalf, "rope-interleaved");
        k::rope_forward(out, in, cos, sin, B, T, H, D, s());
    }
    void rope_backward(float* din, const float* dout, const float* cos, const float* sin, int64_t B, int64_t T,
                       int64_t H, int64_t D, RopePairing pairing) override {
        require_no_variant(pairing == RopePairing::RotateHalf, "rope-interleaved");
        k::rope_backward(din, dout, cos, sin, B, T, H, D, s());
    }
    void attention_forward(float* out, float* cache, const float* q, const float* k, const float* v,
                           const int32_t* lengths, int64_t B, int64_t T, int64_t H, int64_t KV, int64_t D,
                           KvHeadMapping kv_heads) override {
        require_no_variant(kv_heads == KvHeadMapping::Grouped, "gqa-modulo");
        k::attention_forward(out, cache, q, k, v, lengths, B, T, H, KV, D, s());
    }
    void attention_backward(float* dq, float* dk, float* dv, const float* dout, const float* out, const float* q,
                            const float* k, const float* v, const float* cache, const int32_t* lengths, int64_t B,
                            int64_t T, int64_t H, int64_t KV, int64_t D, KvHeadMapping kv_heads) override {
        require_no_variant(kv_heads == KvHeadMapping::Grouped, "gqa-modulo");
        float* row_dots = scratch(delta_, B * H * T);  // rowsum(dout * out) per query row
        k::attention_backward(dq, dk, dv, row_dots, dout, out, q, k, v, cache, lengths, B, T, H, KV, D, s());
    }
    void swiglu_forward(float* out, const float* gate, const float* up, int64_t n) override {
        k::swiglu_forward(out, gate, up, n, s());
    }
    void swiglu_backward(float* dgate, float* dup, const float* dout, const float* gate, const float* up,
                         int64_t n) override {
        k::swiglu_backward(dgate, dup, dout, gate, up, n, s());
    }
    void lora_linear_forward(float* y, float* t, const float* x, const float* w, const float* a, const float* b,
                             const DropoutMask& dropout, float scaling, int64_t N, int64_t in, int64_t out,
                             int64_t r) override {
        float* xd = a && dropout.active ? scratch(xd_, N * in) : nullptr;
        k::lora_linear_forward(h(), s(), y, t, xd, x, w, a, b, spec(dropout), scaling, N, in, out, r);
    }
    void lora_linear_backward(float* dx, float* da, float* db, const float* dy, const float* x, const float* w,
                              const float* a, const float* b, const float* t, const DropoutMask& dropout, float scaling,
                              int64_t N, int64_t in, int64_t out, int64_t r, bool accumulate_dx,
                              LoraBGrad b_grad) override {
        require_no_variant(b_grad == LoraBGrad::Correct, "lora-b-grad-transposed");
        float* xd = a && dropout.active ? scratch(xd_, N * in) : nullptr;
        float* dt = a ? scratch(dt_, N * r) : nullptr;
        k::lora_linear_backward(h(), s(), dx, da, db, dt, xd, dy, x, w, a, b, t, spec(dropout), scaling, N, in, out, r,
                                accumulate_dx);
    }
    void residual_add(float* out, const float* a, const float* b, int64_t n) override {
        if (out != a) CUDA_CHECK(cudaMemcpyAsync(out, a, sizeof(float) * size_t(n), cudaMemcpyDeviceToDevice, s()));
        k::add_inplace(out, b, n, s());  // a + b: the same float sum as the CPU's
    }
    void gather_rows(float* out, const float* in, const int32_t* rows, int64_t n_rows, int64_t C) override {
        k::gather_rows(out, in, rows, n_rows, C, s());
    }
    void scatter_rows(float* out, const float* in, const int32_t* rows, int64_t n_rows, int64_t C) override {
        k::scatter_rows(out, in, rows, n_rows, C, s());
    }
    void lm_head_cross_entropy(double* loss_sum, float* dh, const float* hidden, const float* emb,
                               const int32_t* targets, int64_t N, int64_t C, int64_t V, double grad_scale,
                               int64_t token_chunk, int64_t /*vocab_chunk: whole rows on CUDA*/) override {
        if (N <= 0) return;
        const int64_t chunk = token_chunk <= 0 ? N : std::min(token_chunk, N);
        float* logits = scratch(ce_logits_, chunk * V);
        double* losses = scratch(ce_losses_, N);
        // the kernel applies grad_scale in float32, rounded once here
        k::lm_head_cross_entropy(h(), s(), losses, dh, logits, hidden, emb, targets, N, C, V,
                                 static_cast<float>(grad_scale), chunk);
        k::sum_losses(loss_sum, losses, N, s());
    }
    void linear_forward(float* y, const float* x, const float* w, int64_t N, int64_t K, int64_t M) override {
        k::linear_forward(h(), y, x, w, N, K, M);
    }
    void global_grad_norm(double* norm, float* clip_coef, const float* grad, const int64_t* offsets,
                          const int64_t* counts, int64_t n_segments, int64_t max_count, double max_norm) override {
        double* partials = scratch(norm_partials_, std::max<int64_t>(1, k::global_norm_partials(max_count, n_segments)));
        k::global_grad_norm(norm, clip_coef, partials, grad, offsets, counts, n_segments, max_count, max_norm, s());
    }
    void clip_grad(float* grad, int64_t n, const float* clip_coef) override { k::clip_grad(grad, n, clip_coef, s()); }
    void adamw_step(float* param, const float* grad, float* m, float* v, int64_t n, int64_t step, double lr,
                    const AdamWOptions& o) override {
        require_no_variant(o.bias_correction && !o.eps_inside_sqrt, "adamw-no-bias-correction / adamw-eps-inside-sqrt");
        k::adamw_step(param, grad, m, v, n, k::adamw_scalars(step, lr, o.beta1, o.beta2, o.eps, o.weight_decay), s());
    }

private:
    // Every op reaches the device through these: the calling thread's current device is made this
    // backend's first (a no-op when it already is), so several backends may share a process.
    cudaStream_t s() const {
        CUDA_CHECK(cudaSetDevice(dev_));
        return stream_.s;
    }
    cublasHandle_t h() const {
        CUDA_CHECK(cudaSetDevice(dev_));
        return blas_->get();
    }
    static k::DropoutSpec spec(const DropoutMask& d) { return k::DropoutSpec{d.active, d.key, d.first_index, d.p, d.scale}; }
    template <class T>
    T* scratch(k::DeviceBuffer<T>& buf, int64_t count) {
        if (int64_t(buf.size()) < count) {
            buf.reset();
            buf = k::DeviceBuffer<T>(*alloc_, size_t(count), k::MemoryCategory::Workspace);
        }
        return buf.get();
    }

    // Destroyed in reverse order: the buffers (into the allocator), the cuBLAS handle, the
    // allocator (frees its blocks), the stream last.
    int dev_;
    struct StreamOwner {
        cudaStream_t s = nullptr;
        ~StreamOwner() {
            if (s) (void)cudaStreamDestroy(s);
        }
    } stream_;
    std::unique_ptr<k::DeviceAllocator> alloc_;
    std::unique_ptr<k::BlasHandle> blas_;
    std::deque<k::DeviceBuffer<float>> weights_;
    k::DeviceBuffer<float> xd_, dt_, delta_, ce_logits_;
    k::DeviceBuffer<double> ce_losses_, norm_partials_;
    std::string name_, stack_;
};

}  // namespace

std::shared_ptr<Backend> make_cuda_backend(int device) { return std::make_shared<CudaBackend>(device); }

namespace {
template <class B>
auto& as_cuda(B& backend) {
    auto* cuda = dynamic_cast<std::conditional_t<std::is_const_v<B>, const CudaBackend, CudaBackend>*>(&backend);
    if (!cuda) throw Error("the engine's backend on " + backend.device() + " is not a CUDA backend");
    return *cuda;
}
}  // namespace

kernels::MemoryReport memory_report(const Backend& backend) { return as_cuda(backend).memory_report(); }
void reset_peak_memory(Backend& backend) { as_cuda(backend).reset_peak_memory(); }

}  // namespace tandem::engine::cuda
