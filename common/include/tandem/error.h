#pragma once
// The one exception type tandem throws for bad input and failed I/O. Its message is meant to be
// printed as-is on one line, so it always names the file, record, field or value at fault.
#include <stdexcept>
#include <string>

namespace tandem {

class Error : public std::runtime_error {
public:
    explicit Error(const std::string& message) : std::runtime_error(message) {}
};

}  // namespace tandem
