// safetensors read/write; see safetensors.h for the validation rules.
#include "tandem/engine/safetensors.h"
#include "tandem/strict_json.h"

#include "file_util.h"
#include "tandem/error.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <bit>
#include <cstring>
#include <fstream>
#include <set>
#include <stack>

static_assert(std::endian::native == std::endian::little, "safetensors is little-endian; big-endian hosts need byte swaps");

namespace tandem::engine {

namespace {

using nlohmann::json;

// The reference library refuses headers above 100 MB; so do we (it also bounds what a bad length
// field can make us allocate).
constexpr uint64_t kMaxHeaderBytes = 100'000'000;

[[noreturn]] void bad(const std::string& source, const std::string& what) {
    throw Error(source + ": malformed safetensors file: " + what);
}

[[noreturn]] void bad_tensor(const std::string& source, const std::string& name, const std::string& what) {
    throw Error(source + ": malformed safetensors file: tensor '" + name + "': " + what);
}

bool parse_dtype(const std::string& s, DType& out) {
    if (s == "F32") out = DType::F32;
    else if (s == "F16") out = DType::F16;
    else if (s == "BF16") out = DType::BF16;
    else if (s == "F64") out = DType::F64;
    else return false;
    return true;
}

uint64_t read_u64_le(const char* p) {
    uint64_t v = 0;
    std::memcpy(&v, p, 8);
    return v;
}

// Parses the header JSON, refusing duplicate keys in any object (nlohmann keeps the last silently).
json parse_header_json(std::string_view text, const std::string& source) {
    std::stack<std::set<std::string>> keys;
    std::string duplicate;
    auto cb = [&](int /*depth*/, json::parse_event_t event, json& parsed) {
        switch (event) {
            case json::parse_event_t::object_start: keys.emplace(); break;
            case json::parse_event_t::object_end: if (!keys.empty()) keys.pop(); break;
            case json::parse_event_t::key:
                if (!keys.empty() && !keys.top().insert(parsed.get<std::string>()).second && duplicate.empty())
                    duplicate = parsed.get<std::string>();
                break;
            default: break;
        }
        return true;
    };
    json j;
    try {
        j = json::parse(text.begin(), text.end(), cb);
    } catch (const json::exception& e) {
        bad(source, "header is not valid JSON (" + tandem::json_error_text(e) + ")");
    }
    if (!duplicate.empty()) bad(source, "duplicate key '" + duplicate + "' in the header");
    return j;
}

}  // namespace

const char* dtype_name(DType d) {
    switch (d) {
        case DType::F64: return "F64";
        case DType::F32: return "F32";
        case DType::F16: return "F16";
        case DType::BF16: return "BF16";
    }
    return "?";
}

size_t dtype_size(DType d) {
    switch (d) {
        case DType::F64: return 8;
        case DType::F32: return 4;
        case DType::F16: return 2;
        case DType::BF16: return 2;
    }
    return 0;
}

const SafetensorsEntry* SafetensorsHeader::find(std::string_view name) const {
    auto it = std::lower_bound(tensors.begin(), tensors.end(), name,
                               [](const SafetensorsEntry& e, std::string_view n) { return e.name < n; });
    return it != tensors.end() && it->name == name ? &*it : nullptr;
}

SafetensorsHeader parse_safetensors_header(std::string_view prefix, uint64_t file_size, const std::string& source) {
    if (file_size < 8 || prefix.size() < 8)
        bad(source, "file is " + std::to_string(file_size) + " bytes, shorter than the 8-byte header length");
    SafetensorsHeader h;
    h.file_bytes = file_size;
    h.header_bytes = read_u64_le(prefix.data());
    if (h.header_bytes < 2) bad(source, "header length " + std::to_string(h.header_bytes) + " is too small for a JSON object");
    if (h.header_bytes > kMaxHeaderBytes)
        bad(source, "header length " + std::to_string(h.header_bytes) + " exceeds the 100 MB limit");
    if (h.header_bytes > file_size - 8)
        bad(source, "header length " + std::to_string(h.header_bytes) + " runs past the end of the file (" +
                        std::to_string(file_size) + " bytes)");
    if (prefix.size() < 8 + h.header_bytes) bad(source, "header could not be read completely");
    const std::string_view text = prefix.substr(8, h.header_bytes);
    if (text.front() != '{') bad(source, "header does not start with '{'");
    const json j = parse_header_json(text, source);
    if (!j.is_object()) bad(source, "header is not a JSON object");

    const uint64_t buffer_bytes = file_size - 8 - h.header_bytes;
    for (const auto& [name, value] : j.items()) {
        if (name == "__metadata__") {
            if (!value.is_object()) bad(source, "__metadata__ is not an object");
            for (const auto& [k, v] : value.items()) {
                if (!v.is_string()) bad(source, "__metadata__ value of '" + k + "' is not a string");
                h.metadata[k] = v.get<std::string>();
            }
            continue;
        }
        if (name.empty()) bad(source, "a tensor has an empty name");
        if (!value.is_object()) bad_tensor(source, name, "entry is not an object");
        for (const auto& [k, v] : value.items()) {
            (void)v;
            if (k != "dtype" && k != "shape" && k != "data_offsets") bad_tensor(source, name, "unknown field '" + k + "'");
        }
        SafetensorsEntry e;
        e.name = name;
        const auto dt = value.find("dtype");
        if (dt == value.end() || !dt->is_string()) bad_tensor(source, name, "missing or non-string dtype");
        if (!parse_dtype(dt->get<std::string>(), e.dtype))
            bad_tensor(source, name, "unsupported dtype " + dt->dump() + " (supported: F32, F16, BF16, F64)");
        const auto sh = value.find("shape");
        if (sh == value.end() || !sh->is_array()) bad_tensor(source, name, "missing or non-array shape");
        uint64_t numel = 1;
        for (const auto& d : *sh) {
            if (!d.is_number_unsigned()) bad_tensor(source, name, "shape entry " + d.dump() + " is not a non-negative integer");
            const auto n = d.get<uint64_t>();
            if (n > static_cast<uint64_t>(INT64_MAX) || __builtin_mul_overflow(numel, n, &numel))
                bad_tensor(source, name, "shape " + sh->dump() + " overflows");
            e.shape.push_back(static_cast<int64_t>(n));
        }
        const auto off = value.find("data_offsets");
        if (off == value.end() || !off->is_array() || off->size() != 2 || !(*off)[0].is_number_unsigned() ||
            !(*off)[1].is_number_unsigned())
            bad_tensor(source, name, "data_offsets must be two non-negative integers");
        e.begin = (*off)[0].get<uint64_t>();
        e.end = (*off)[1].get<uint64_t>();
        if (e.end < e.begin) bad_tensor(source, name, "data_offsets " + off->dump() + " end before they begin");
        if (e.end > buffer_bytes)
            bad_tensor(source, name, "data_offsets " + off->dump() + " run past the data buffer (" +
                                         std::to_string(buffer_bytes) + " bytes)");
        uint64_t expected = 0;
        if (__builtin_mul_overflow(numel, static_cast<uint64_t>(dtype_size(e.dtype)), &expected) ||
            e.end - e.begin != expected)
            bad_tensor(source, name, "data_offsets " + off->dump() + " hold " + std::to_string(e.end - e.begin) +
                                         " bytes but shape " + sh->dump() + " of " + dtype_name(e.dtype) + " needs " +
                                         std::to_string(numel) + " x " + std::to_string(dtype_size(e.dtype)));
        if (e.begin % dtype_size(e.dtype) != 0)
            bad_tensor(source, name, "data offset " + std::to_string(e.begin) + " is not aligned to its " +
                                         std::to_string(dtype_size(e.dtype)) + "-byte elements");
        h.tensors.push_back(std::move(e));
    }
    // The data buffer must be covered exactly: sorted by offset, each tensor starts where the previous
    // one ended, and the last ends at the end of the file (no overlaps, no holes, no trailing bytes).
    std::vector<const SafetensorsEntry*> by_offset;
    for (const auto& e : h.tensors) by_offset.push_back(&e);
    std::stable_sort(by_offset.begin(), by_offset.end(), [](const SafetensorsEntry* a, const SafetensorsEntry* b) {
        return a->begin != b->begin ? a->begin < b->begin : a->end < b->end;
    });
    uint64_t cursor = 0;
    for (const auto* e : by_offset) {
        if (e->begin < cursor) bad_tensor(source, e->name, "data overlaps the previous tensor's bytes");
        if (e->begin > cursor)
            bad_tensor(source, e->name, "a hole of " + std::to_string(e->begin - cursor) + " bytes precedes its data");
        cursor = e->end;
    }
    if (cursor != buffer_bytes)
        bad(source, "tensors cover " + std::to_string(cursor) + " of the " + std::to_string(buffer_bytes) +
                        " data bytes (trailing bytes after the last tensor)");
    std::sort(h.tensors.begin(), h.tensors.end(),
              [](const SafetensorsEntry& a, const SafetensorsEntry& b) { return a.name < b.name; });
    return h;
}

SafetensorsHeader read_safetensors_header(const std::filesystem::path& path) {
    const std::string source = path.string();
    std::ifstream in(path, std::ios::binary);
    if (!in) throw Error(source + ": cannot open for reading");
    std::error_code ec;
    const uint64_t size = std::filesystem::file_size(path, ec);
    if (ec) throw Error(source + ": cannot read its size: " + ec.message());
    std::string prefix(8, '\0');
    if (size < 8 || !in.read(prefix.data(), 8)) return parse_safetensors_header(std::string_view(), size, source);
    const uint64_t n = read_u64_le(prefix.data());
    if (n <= kMaxHeaderBytes && n <= size - 8) {
        prefix.resize(8 + n);
        if (!in.read(prefix.data() + 8, static_cast<std::streamsize>(n))) throw Error(source + ": read failed in the header");
    }
    return parse_safetensors_header(prefix, size, source);
}

void convert_to_f32(DType dtype, const unsigned char* src, size_t count, float* dst) {
    if (count == 0) return;  // empty tensors may come with null pointers
    switch (dtype) {
        case DType::F32: std::memcpy(dst, src, count * 4); return;
        case DType::BF16:
            for (size_t i = 0; i < count; ++i) {
                uint16_t b;
                std::memcpy(&b, src + 2 * i, 2);
                dst[i] = std::bit_cast<float>(static_cast<uint32_t>(b) << 16);
            }
            return;
        case DType::F16:
            for (size_t i = 0; i < count; ++i) {
                uint16_t hbits;
                std::memcpy(&hbits, src + 2 * i, 2);
                const uint32_t sign = static_cast<uint32_t>(hbits & 0x8000u) << 16;
                uint32_t exp = (hbits >> 10) & 0x1Fu;
                uint32_t mant = hbits & 0x3FFu;
                uint32_t bits;
                if (exp == 0x1F) {  // inf / nan: keep the payload
                    bits = sign | 0x7F800000u | (mant << 13);
                } else if (exp != 0) {  // normal
                    bits = sign | ((exp + 112u) << 23) | (mant << 13);
                } else if (mant == 0) {  // signed zero
                    bits = sign;
                } else {  // subnormal: normalise (every f16 subnormal is a normal f32)
                    int e = -1;
                    do { mant <<= 1; ++e; } while ((mant & 0x400u) == 0);
                    bits = sign | (static_cast<uint32_t>(112 - e) << 23) | ((mant & 0x3FFu) << 13);
                }
                dst[i] = std::bit_cast<float>(bits);
            }
            return;
        case DType::F64:
            for (size_t i = 0; i < count; ++i) {
                double d;
                std::memcpy(&d, src + 8 * i, 8);
                dst[i] = static_cast<float>(d);  // round to nearest even, as torch's .float()
            }
            return;
    }
}

TensorMap read_safetensors(const std::filesystem::path& path, std::map<std::string, std::string>* metadata) {
    const detail::MappedFile file(path);
    const std::string source = path.string();
    const SafetensorsHeader h = parse_safetensors_header(file.view(), file.size(), source);
    if (metadata) *metadata = h.metadata;
    TensorMap out;
    const auto* base = reinterpret_cast<const unsigned char*>(file.data()) + h.data_start();
    for (const auto& e : h.tensors) {
        Tensor t;
        t.shape = e.shape;
        const auto n = static_cast<size_t>(Tensor::count(e.shape));
        const unsigned char* src = base + e.begin;
        // Fill the vector by appending converted chunks rather than zero-filling it first: one pass
        // over the destination instead of two.
        t.data.reserve(n);
        if (e.dtype == DType::F32 && reinterpret_cast<uintptr_t>(src) % alignof(float) == 0) {
            const auto* f = reinterpret_cast<const float*>(src);  // mapped file bytes, F32 little-endian
            t.data.assign(f, f + n);
        } else {
            constexpr size_t kChunk = 8192;
            float buffer[kChunk];
            for (size_t done = 0; done < n; done += kChunk) {
                const size_t k = std::min(kChunk, n - done);
                convert_to_f32(e.dtype, src + done * dtype_size(e.dtype), k, buffer);
                t.data.insert(t.data.end(), buffer, buffer + k);
            }
        }
        out.emplace(e.name, std::move(t));
    }
    return out;
}

std::string safetensors_header_bytes(const TensorMap& tensors, const std::map<std::string, std::string>& metadata) {
    json header = json::object();
    if (!metadata.empty()) header["__metadata__"] = metadata;
    uint64_t offset = 0;
    for (const auto& [name, t] : tensors) {
        if (name == "__metadata__" || name.empty()) throw Error("safetensors: invalid tensor name '" + name + "'");
        if (static_cast<int64_t>(t.data.size()) != Tensor::count(t.shape))
            throw Error("safetensors: tensor '" + name + "' holds " + std::to_string(t.data.size()) +
                        " values but its shape needs " + std::to_string(Tensor::count(t.shape)));
        const uint64_t bytes = t.data.size() * 4;
        header[name] = {{"dtype", "F32"}, {"shape", t.shape}, {"data_offsets", {offset, offset + bytes}}};
        offset += bytes;
    }
    std::string text = header.dump();
    text.append((8 - text.size() % 8) % 8, ' ');  // data starts 8-byte aligned: 8 + len(text) ≡ 0 (mod 8)
    std::string out(8, '\0');
    const uint64_t n = text.size();
    std::memcpy(out.data(), &n, 8);
    return out + text;
}

void write_safetensors(const std::filesystem::path& path, const TensorMap& tensors,
                       const std::map<std::string, std::string>& metadata) {
    const std::string header = safetensors_header_bytes(tensors, metadata);
    detail::AtomicStreamWriter w(path);
    w.write(header.data(), header.size());
    for (const auto& [name, t] : tensors) w.write(t.data.data(), t.data.size() * sizeof(float));
    w.commit();
}

}  // namespace tandem::engine
