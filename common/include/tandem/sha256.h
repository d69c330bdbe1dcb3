#pragma once
// SHA-256 (OpenSSL EVP) as lowercase hex: spec hashes, L2 parameter digests, manifests.
#include <cstddef>
#include <filesystem>
#include <memory>
#include <string>
#include <string_view>

namespace tandem {

std::string sha256_hex(const void* data, size_t size);
inline std::string sha256_hex(std::string_view bytes) { return sha256_hex(bytes.data(), bytes.size()); }
std::string sha256_file_hex(const std::filesystem::path& path);

// Incremental hashing for data that arrives in pieces.
class Sha256 {
public:
    Sha256();
    ~Sha256();
    Sha256(const Sha256&) = delete;
    Sha256& operator=(const Sha256&) = delete;
    void update(const void* data, size_t size);
    std::string hex_digest();  // finishes the hash

private:
    struct Impl;
    std::unique_ptr<Impl> impl_;
};

}  // namespace tandem
