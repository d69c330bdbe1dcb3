#include "tandem/sha256.h"

#include "tandem/error.h"

#include <fstream>
#include <openssl/evp.h>
#include <vector>

namespace tandem {

struct Sha256::Impl {
    EVP_MD_CTX* ctx = nullptr;
};

Sha256::Sha256() : impl_(std::make_unique<Impl>()) {
    impl_->ctx = EVP_MD_CTX_new();
    if (!impl_->ctx || EVP_DigestInit_ex(impl_->ctx, EVP_sha256(), nullptr) != 1)
        throw Error("OpenSSL: cannot initialise SHA-256");
}

Sha256::~Sha256() { EVP_MD_CTX_free(impl_->ctx); }

void Sha256::update(const void* data, size_t size) {
    if (EVP_DigestUpdate(impl_->ctx, data, size) != 1) throw Error("OpenSSL: SHA-256 update failed");
}

std::string Sha256::hex_digest() {
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned int len = 0;
    if (EVP_DigestFinal_ex(impl_->ctx, md, &len) != 1) throw Error("OpenSSL: SHA-256 final failed");
    static const char* digits = "0123456789abcdef";
    std::string out;
    out.reserve(len * 2);
    for (unsigned i = 0; i < len; ++i) {
        out.push_back(digits[md[i] >> 4]);
        out.push_back(digits[md[i] & 15]);
    }
    return out;
}

std::string sha256_hex(const void* data, size_t size) {
    Sha256 h;
    h.update(data, size);
    return h.hex_digest();
}

std::string sha256_file_hex(const std::filesystem::path& path) {
    std::ifstream in(path, std::ios::binary);
    if (!in) throw Error("cannot open " + path.string() + " to hash it");
    Sha256 h;
    std::vector<char> buf(1 << 20);
    while (in) {
        in.read(buf.data(), static_cast<std::streamsize>(buf.size()));
        if (in.gcount() > 0) h.update(buf.data(), static_cast<size_t>(in.gcount()));
    }
    if (in.bad()) throw Error("cannot read " + path.string() + " to hash it");
    return h.hex_digest();
}

}  // namespace tandem
