#pragma once
// Small RAII and error helpers over the HDF5 C API, private to tandem_storage.
#include "tandem/store/run_file.h"

#include <hdf5.h>

#include <string>
#include <vector>

namespace tandem::experiments::h5 {

// Turns off HDF5's automatic error printing (once per process); our errors carry the detail.
void silence_library_errors();

// The innermost message on HDF5's error stack, on one line ("" when the stack is empty); clears it.
std::string take_error_detail();

// Throws tandem::Error "<file>: <what> (<hdf5 detail>)".
[[noreturn]] void fail(const std::string& file, const std::string& what);

// An owned hid_t closed by the matching H5?close on destruction.
class Handle {
public:
    using Closer = herr_t (*)(hid_t);
    Handle() = default;
    Handle(hid_t id, Closer closer) : id_(id), closer_(closer) {}
    ~Handle() { reset(); }
    Handle(const Handle&) = delete;
    Handle& operator=(const Handle&) = delete;
    Handle(Handle&& other) noexcept : id_(other.id_), closer_(other.closer_) { other.id_ = -1; }
    Handle& operator=(Handle&& other) noexcept {
        if (this != &other) {
            reset();
            id_ = other.id_;
            closer_ = other.closer_;
            other.id_ = -1;
        }
        return *this;
    }
    hid_t get() const { return id_; }
    operator hid_t() const { return id_; }
    bool valid() const { return id_ >= 0; }
    void reset() {
        if (id_ >= 0 && closer_) closer_(id_);
        id_ = -1;
    }

private:
    hid_t id_ = -1;
    Closer closer_ = nullptr;
};

// Every function below throws tandem::Error naming `file` (the run file path, for messages).
bool exists(hid_t loc, const std::string& path);  // every component of `path` exists
Handle open_group(const std::string& file, hid_t loc, const std::string& path);
Handle require_group(const std::string& file, hid_t loc, const std::string& path);  // creates missing parents
Handle open_object(const std::string& file, hid_t loc, const std::string& path);
void remove_link(const std::string& file, hid_t loc, const std::string& path);  // no-op when absent

void write_attribute(const std::string& file, hid_t object, const std::string& name, const AttrValue& value);
void write_attributes(const std::string& file, hid_t object, const Attributes& attributes);
Attributes read_attributes(const std::string& file, hid_t object);

// A UTF-8 variable-length string type (close with H5Tclose).
Handle utf8_string_type();

// A 1-D chunked table with an unlimited dimension (compound `file_type`), 0 rows.
Handle create_table(const std::string& file, hid_t loc, const std::string& name, hid_t file_type, hsize_t chunk_rows);
// Appends `rows` records laid out as `memory_type`.
void append_rows(const std::string& file, hid_t dataset, hid_t memory_type, const void* rows, hsize_t count);
hsize_t row_count(const std::string& file, hid_t dataset);
void read_rows(const std::string& file, hid_t dataset, hid_t memory_type, void* rows);
// Rows [first, first + count) of a 1-D table (a hyperslab: only those rows are read).
void read_rows(const std::string& file, hid_t dataset, hid_t memory_type, hsize_t first, hsize_t count, void* rows);

// Scalar UTF-8 string dataset.
void write_string_dataset(const std::string& file, hid_t loc, const std::string& name, const std::string& text);
std::string read_string_dataset(const std::string& file, hid_t loc, const std::string& name);

// Names of the links directly under a group, sorted.
std::vector<std::string> child_names(const std::string& file, hid_t group);

}  // namespace tandem::experiments::h5
