#pragma once
// A Backend that forwards every call to the backend it wraps. Generated from TANDEM_BACKEND_OPS, so it
// always has exactly the interface's ops. Decorators derive from it to count op calls
// (tests/engine/counting_backend.h), to time them (bench_engine) or to perturb one op (test_localise;
// the engine leg's test fault test-residual-noise, experiments/legs/src/engine_leg.cpp).
#include <memory>
#include <string>

#include "tandem/engine/backend.h"

namespace tandem::engine {

class ForwardingBackend : public Backend {
public:
    explicit ForwardingBackend(std::shared_ptr<Backend> inner) : inner_(std::move(inner)) {}

    std::string device() const override { return inner_->device(); }
    std::string device_name() const override { return inner_->device_name(); }
    std::string stack() const override { return inner_->stack(); }
    int64_t peak_device_bytes() const override { return inner_->peak_device_bytes(); }
    void* allocate(size_t bytes, MemoryKind kind) override { return inner_->allocate(bytes, kind); }
    void release(void* p) noexcept override { inner_->release(p); }
    void upload(void* dst, const void* src, size_t bytes) override { inner_->upload(dst, src, bytes); }
    void download(void* dst, const void* src, size_t bytes) override { inner_->download(dst, src, bytes); }
    void fill_zero(void* dst, size_t bytes) override { inner_->fill_zero(dst, bytes); }
    const float* take_weight(Tensor&& t) override { return inner_->take_weight(std::move(t)); }
    int64_t attention_cache_floats(int64_t B, int64_t T, int64_t H) const override {
        return inner_->attention_cache_floats(B, T, H);
    }
    bool keeps_dropout_masks() const override { return inner_->keeps_dropout_masks(); }
    int64_t default_ce_token_chunk() const override { return inner_->default_ce_token_chunk(); }
    void check_supported(const Qwen3Config& c) const override { inner_->check_supported(c); }

#define TANDEM_FORWARDING_OP(name, params, args) \
    void name params override { inner_->name args; }
    TANDEM_BACKEND_OPS(TANDEM_FORWARDING_OP)
#undef TANDEM_FORWARDING_OP

protected:
    std::shared_ptr<Backend> inner_;
};

}  // namespace tandem::engine
