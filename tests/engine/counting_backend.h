#pragma once
// A Backend decorator that counts every op call and forwards it to the backend it wraps. Generated
// from TANDEM_BACKEND_OPS, so it always has exactly the interface's ops: the op-table test uses it to
// prove that each table entry exercised its op, and that the model wiring reaches every op of the
// interface (and can reach none outside it: the wiring sees only `Backend`).
#include <array>
#include <memory>
#include <string>

#include "tandem/engine/backend.h"

namespace tandem::engine::test {

class CountingBackend final : public Backend {
public:
    explicit CountingBackend(std::shared_ptr<Backend> inner) : inner_(std::move(inner)) {}

    int64_t calls(Op op) const { return calls_[size_t(op)]; }
    void reset_counts() { calls_.fill(0); }

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
    void check_supported(const Qwen3Config& c) const override { inner_->check_supported(c); }

#define TANDEM_COUNTING_OP(name, params, args) \
    void name params override {                \
        ++calls_[size_t(Op::name)];            \
        inner_->name args;                     \
    }
    TANDEM_BACKEND_OPS(TANDEM_COUNTING_OP)
#undef TANDEM_COUNTING_OP

private:
    std::shared_ptr<Backend> inner_;
    std::array<int64_t, kOpCount> calls_{};
};

}  // namespace tandem::engine::test
