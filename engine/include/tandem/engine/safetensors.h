#pragma once
// safetensors files (https://github.com/huggingface/safetensors, format of safetensors 0.x):
//   [u64 little-endian N][N bytes of JSON header, padded with spaces][data buffer]
// header: {"__metadata__": {str: str}, "<name>": {"dtype": "F32", "shape": [..], "data_offsets": [b, e]}}
// with offsets relative to the data buffer.
//
// Reading converts F32 / F16 / BF16 / F64 to float32 (exact for F16 and BF16, round-to-nearest for
// F64). Every header is validated before any tensor byte is touched: the header length against the
// file size, JSON well-formed and an object, no duplicate names, known dtypes, shapes of non-negative
// integers, data_offsets in bounds, end - begin == numel * dtype size, begin aligned to the dtype size,
// no overlaps and no holes (the buffer is exactly covered, as the reference library requires). Any
// violation throws tandem::Error naming the file and the tensor. Files are memory-mapped read-only.
//
// Writing produces F32 tensors in name order, the header padded with spaces to a multiple of 8 bytes
// (as the reference library does, so every tensor is 8-byte aligned), written to a temporary in the
// same folder, fsynced and renamed into place.
#include "tandem/engine/tensor.h"

#include <cstdint>
#include <filesystem>
#include <map>
#include <string>
#include <string_view>
#include <vector>

namespace tandem::engine {

enum class DType { F64, F32, F16, BF16 };

const char* dtype_name(DType d);     // "F32", ...
size_t dtype_size(DType d);          // bytes per element

struct SafetensorsEntry {
    std::string name;
    DType dtype = DType::F32;
    std::vector<int64_t> shape;
    uint64_t begin = 0;  // offsets into the data buffer
    uint64_t end = 0;
};

struct SafetensorsHeader {
    std::vector<SafetensorsEntry> tensors;          // sorted by name
    std::map<std::string, std::string> metadata;    // "__metadata__"
    uint64_t header_bytes = 0;                      // N
    uint64_t file_bytes = 0;

    const SafetensorsEntry* find(std::string_view name) const;
    uint64_t data_start() const { return 8 + header_bytes; }
};

// Validates and parses the first bytes of a file of `file_size` bytes (`prefix` holds at least the
// 8-byte length and the header). `source` names the file in errors.
SafetensorsHeader parse_safetensors_header(std::string_view prefix, uint64_t file_size, const std::string& source);

// Reads only the header of a file (for `tandem inspect --model`, shape checks before loading).
SafetensorsHeader read_safetensors_header(const std::filesystem::path& path);

// Reads every tensor as float32. `metadata`, when given, receives "__metadata__".
TensorMap read_safetensors(const std::filesystem::path& path, std::map<std::string, std::string>* metadata = nullptr);

// Converts one element buffer to float32 (exposed for tests).
void convert_to_f32(DType dtype, const unsigned char* src, size_t count, float* dst);

// Writes `tensors` as F32 atomically (temporary + fsync + rename + fsync of the folder).
void write_safetensors(const std::filesystem::path& path, const TensorMap& tensors,
                       const std::map<std::string, std::string>& metadata = {});

// The header bytes (8-byte length + padded JSON) write_safetensors would write for these tensors.
std::string safetensors_header_bytes(const TensorMap& tensors, const std::map<std::string, std::string>& metadata);

}  // namespace tandem::engine
