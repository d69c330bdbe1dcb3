#pragma once
// A Backend decorator that counts every op call and forwards it to the backend it wraps. Generated
// from TANDEM_BACKEND_OPS, so it always has exactly the interface's ops: the op-table test uses it to
// prove that each table entry exercised its op, and that the model wiring reaches every op of the
// interface (and can reach none outside it: the wiring sees only `Backend`).
#include <array>
#include <memory>
#include <string>

#include "tandem/engine/forwarding_backend.h"
#include "tandem/engine/backend.h"

namespace tandem::engine::test {

class CountingBackend final : public ForwardingBackend {
public:
    explicit CountingBackend(std::shared_ptr<Backend> inner) : ForwardingBackend(std::move(inner)) {}

    int64_t calls(Op op) const { return calls_[size_t(op)]; }
    void reset_counts() { calls_.fill(0); }

#define TANDEM_COUNTING_OP(name, params, args) \
    void name params override {                \
        ++calls_[size_t(Op::name)];            \
        inner_->name args;                     \
    }
    TANDEM_BACKEND_OPS(TANDEM_COUNTING_OP)
#undef TANDEM_COUNTING_OP

private:
    std::array<int64_t, kOpCount> calls_{};
};

}  // namespace tandem::engine::test
