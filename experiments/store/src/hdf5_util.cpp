#include "hdf5_util.h"

#include "tandem/error.h"

#include <algorithm>
#include <mutex>

namespace tandem::experiments::h5 {

void silence_library_errors() {
    static std::once_flag once;
    std::call_once(once, [] {
        // No library shutdown at exit: HDF5 1.10 keeps a file whose close failed (a full disk) in its
        // ID table, and its exit handler then crashes closing it (exit 139 instead of our one-line
        // error). tandem closes every file it opens itself. Must precede any other HDF5 call.
        H5dont_atexit();
        H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
    });
}

std::string take_error_detail() {
    std::string detail;
    H5Ewalk2(
        H5E_DEFAULT, H5E_WALK_DOWNWARD,
        [](unsigned, const H5E_error2_t* error, void* out) -> herr_t {
            // Walking downward, the last entry is the innermost (most specific) message.
            if (error && error->desc && *error->desc) *static_cast<std::string*>(out) = error->desc;
            return 0;
        },
        &detail);
    H5Eclear2(H5E_DEFAULT);
    std::replace(detail.begin(), detail.end(), '\n', ' ');
    // A failed system call: HDF5's text holds the time, a buffer address and sizes around the one
    // thing a user needs ("file write failed: time = ..., errno = 28, error message = 'No space left
    // on device', buf = 0x..."): keep the system's message.
    const std::string key = "error message = '";
    if (const auto at = detail.find(key); at != std::string::npos) {
        const auto end = detail.find('\'', at + key.size());
        if (end != std::string::npos) return detail.substr(at + key.size(), end - at - key.size());
    }
    return detail;
}

void fail(const std::string& file, const std::string& what) {
    const std::string detail = take_error_detail();
    throw Error(file + ": " + what + (detail.empty() ? "" : " (" + detail + ")"));
}

bool exists(hid_t loc, const std::string& path) {
    // H5Lexists needs every intermediate component to exist, so walk them one by one.
    std::string prefix;
    std::size_t start = path.front() == '/' ? 1 : 0;
    if (start == 1) prefix = "/";
    while (start < path.size()) {
        std::size_t slash = path.find('/', start);
        if (slash == std::string::npos) slash = path.size();
        prefix += path.substr(start, slash - start);
        if (H5Lexists(loc, prefix.c_str(), H5P_DEFAULT) <= 0) {
            H5Eclear2(H5E_DEFAULT);
            return false;
        }
        prefix += "/";
        start = slash + 1;
    }
    return true;
}

Handle open_group(const std::string& file, hid_t loc, const std::string& path) {
    hid_t id = H5Gopen2(loc, path.c_str(), H5P_DEFAULT);
    if (id < 0) fail(file, "cannot open group " + path);
    return Handle(id, H5Gclose);
}

Handle require_group(const std::string& file, hid_t loc, const std::string& path) {
    if (exists(loc, path)) return open_group(file, loc, path);
    Handle lcpl(H5Pcreate(H5P_LINK_CREATE), H5Pclose);
    H5Pset_create_intermediate_group(lcpl, 1);
    H5Pset_char_encoding(lcpl, H5T_CSET_UTF8);
    hid_t id = H5Gcreate2(loc, path.c_str(), lcpl, H5P_DEFAULT, H5P_DEFAULT);
    if (id < 0) fail(file, "cannot create group " + path);
    return Handle(id, H5Gclose);
}

Handle open_object(const std::string& file, hid_t loc, const std::string& path) {
    hid_t id = H5Oopen(loc, path.c_str(), H5P_DEFAULT);
    if (id < 0) fail(file, "cannot open " + path);
    return Handle(id, H5Oclose);
}

void remove_link(const std::string& file, hid_t loc, const std::string& path) {
    if (!exists(loc, path)) return;
    if (H5Ldelete(loc, path.c_str(), H5P_DEFAULT) < 0) fail(file, "cannot replace " + path);
}

Handle utf8_string_type() {
    Handle type(H5Tcopy(H5T_C_S1), H5Tclose);
    H5Tset_size(type, H5T_VARIABLE);
    H5Tset_cset(type, H5T_CSET_UTF8);
    return type;
}

void write_attribute(const std::string& file, hid_t object, const std::string& name, const AttrValue& value) {
    if (H5Aexists(object, name.c_str()) > 0 && H5Adelete(object, name.c_str()) < 0)
        fail(file, "cannot replace attribute " + name);
    Handle space(H5Screate(H5S_SCALAR), H5Sclose);
    Handle string_type = utf8_string_type();
    hid_t file_type = std::holds_alternative<std::int64_t>(value) ? H5T_STD_I64LE
                      : std::holds_alternative<double>(value)   ? H5T_IEEE_F64LE
                                                                : string_type.get();
    if (const auto* text = std::get_if<std::string>(&value); text && text->size() > 60000)
        throw Error(file + ": attribute " + name + " is " + std::to_string(text->size()) +
                    " bytes; attributes hold at most 60000 (store it as a dataset)");
    Handle acpl(H5Pcreate(H5P_ATTRIBUTE_CREATE), H5Pclose);
    H5Pset_char_encoding(acpl, H5T_CSET_UTF8);
    Handle attribute(H5Acreate2(object, name.c_str(), file_type, space, acpl, H5P_DEFAULT), H5Aclose);
    if (!attribute.valid()) fail(file, "cannot create attribute " + name);
    herr_t status = -1;
    if (const auto* i = std::get_if<std::int64_t>(&value)) {
        status = H5Awrite(attribute, H5T_NATIVE_INT64, i);
    } else if (const auto* d = std::get_if<double>(&value)) {
        status = H5Awrite(attribute, H5T_NATIVE_DOUBLE, d);
    } else {
        const char* text = std::get<std::string>(value).c_str();
        status = H5Awrite(attribute, string_type, &text);
    }
    if (status < 0) fail(file, "cannot write attribute " + name);
}

void write_attributes(const std::string& file, hid_t object, const Attributes& attributes) {
    for (const auto& [name, value] : attributes) write_attribute(file, object, name, value);
}

namespace {

struct AttributeReadContext {
    const std::string* file;
    Attributes* out;
    std::string error;
};

herr_t read_one_attribute(hid_t object, const char* name, const H5A_info_t*, void* data) {
    auto* context = static_cast<AttributeReadContext*>(data);
    Handle attribute(H5Aopen(object, name, H5P_DEFAULT), H5Aclose);
    if (!attribute.valid()) return -1;
    Handle type(H5Aget_type(attribute), H5Tclose);
    Handle space(H5Aget_space(attribute), H5Sclose);
    if (H5Sget_simple_extent_npoints(space) != 1) return 0;  // only scalars are tandem's; skip others
    switch (H5Tget_class(type)) {
        case H5T_INTEGER: {
            std::int64_t v = 0;
            if (H5Aread(attribute, H5T_NATIVE_INT64, &v) < 0) return -1;
            (*context->out)[name] = v;
            return 0;
        }
        case H5T_FLOAT: {
            double v = 0;
            if (H5Aread(attribute, H5T_NATIVE_DOUBLE, &v) < 0) return -1;
            (*context->out)[name] = v;
            return 0;
        }
        case H5T_STRING: {
            if (H5Tis_variable_str(type) > 0) {
                Handle memory_type = utf8_string_type();
                char* text = nullptr;
                if (H5Aread(attribute, memory_type, &text) < 0) return -1;
                (*context->out)[name] = std::string(text ? text : "");
                H5free_memory(text);
            } else {
                std::string text(H5Tget_size(type), '\0');
                Handle memory_type(H5Tcopy(type), H5Tclose);
                if (H5Aread(attribute, memory_type, text.data()) < 0) return -1;
                text.erase(std::find(text.begin(), text.end(), '\0'), text.end());
                (*context->out)[name] = text;
            }
            return 0;
        }
        default:
            return 0;  // not a type tandem writes
    }
}

}  // namespace

Attributes read_attributes(const std::string& file, hid_t object) {
    Attributes out;
    AttributeReadContext context{&file, &out, {}};
    hsize_t index = 0;
    if (H5Aiterate2(object, H5_INDEX_NAME, H5_ITER_INC, &index, read_one_attribute, &context) < 0)
        fail(file, "cannot read attributes");
    return out;
}

Handle create_table(const std::string& file, hid_t loc, const std::string& name, hid_t file_type, hsize_t chunk_rows) {
    hsize_t dims[1] = {0};
    hsize_t max_dims[1] = {H5S_UNLIMITED};
    Handle space(H5Screate_simple(1, dims, max_dims), H5Sclose);
    Handle dcpl(H5Pcreate(H5P_DATASET_CREATE), H5Pclose);
    hsize_t chunk[1] = {chunk_rows};
    H5Pset_chunk(dcpl, 1, chunk);
    hid_t id = H5Dcreate2(loc, name.c_str(), file_type, space, H5P_DEFAULT, dcpl, H5P_DEFAULT);
    if (id < 0) fail(file, "cannot create dataset " + name);
    return Handle(id, H5Dclose);
}

hsize_t row_count(const std::string& file, hid_t dataset) {
    Handle space(H5Dget_space(dataset), H5Sclose);
    hsize_t dims[1] = {0};
    if (!space.valid() || H5Sget_simple_extent_ndims(space) != 1 || H5Sget_simple_extent_dims(space, dims, nullptr) < 0)
        fail(file, "dataset is not a 1-D table");
    return dims[0];
}

void append_rows(const std::string& file, hid_t dataset, hid_t memory_type, const void* rows, hsize_t count) {
    if (count == 0) return;
    const hsize_t old_rows = row_count(file, dataset);
    hsize_t new_dims[1] = {old_rows + count};
    if (H5Dset_extent(dataset, new_dims) < 0) fail(file, "cannot extend table");
    Handle file_space(H5Dget_space(dataset), H5Sclose);
    hsize_t start[1] = {old_rows};
    hsize_t size[1] = {count};
    H5Sselect_hyperslab(file_space, H5S_SELECT_SET, start, nullptr, size, nullptr);
    Handle memory_space(H5Screate_simple(1, size, nullptr), H5Sclose);
    if (H5Dwrite(dataset, memory_type, memory_space, file_space, H5P_DEFAULT, rows) < 0)
        fail(file, "cannot append rows");
}

void read_rows(const std::string& file, hid_t dataset, hid_t memory_type, void* rows) {
    if (row_count(file, dataset) == 0) return;
    if (H5Dread(dataset, memory_type, H5S_ALL, H5S_ALL, H5P_DEFAULT, rows) < 0) fail(file, "cannot read table");
}

void read_rows(const std::string& file, hid_t dataset, hid_t memory_type, hsize_t first, hsize_t count, void* rows) {
    if (count == 0) return;
    if (first + count > row_count(file, dataset)) fail(file, "rows beyond the end of the table");
    Handle file_space(H5Dget_space(dataset), H5Sclose);
    hsize_t start[1] = {first};
    hsize_t size[1] = {count};
    if (H5Sselect_hyperslab(file_space, H5S_SELECT_SET, start, nullptr, size, nullptr) < 0) fail(file, "cannot select rows");
    Handle memory_space(H5Screate_simple(1, size, nullptr), H5Sclose);
    if (H5Dread(dataset, memory_type, memory_space, file_space, H5P_DEFAULT, rows) < 0) fail(file, "cannot read table rows");
}

void write_string_dataset(const std::string& file, hid_t loc, const std::string& name, const std::string& text) {
    remove_link(file, loc, name);
    Handle type = utf8_string_type();
    Handle space(H5Screate(H5S_SCALAR), H5Sclose);
    Handle lcpl(H5Pcreate(H5P_LINK_CREATE), H5Pclose);
    H5Pset_char_encoding(lcpl, H5T_CSET_UTF8);
    Handle dataset(H5Dcreate2(loc, name.c_str(), type, space, lcpl, H5P_DEFAULT, H5P_DEFAULT), H5Dclose);
    if (!dataset.valid()) fail(file, "cannot create dataset " + name);
    const char* data = text.c_str();
    if (H5Dwrite(dataset, type, H5S_ALL, H5S_ALL, H5P_DEFAULT, &data) < 0) fail(file, "cannot write dataset " + name);
}

std::string read_string_dataset(const std::string& file, hid_t loc, const std::string& name) {
    Handle dataset(H5Dopen2(loc, name.c_str(), H5P_DEFAULT), H5Dclose);
    if (!dataset.valid()) fail(file, "cannot open dataset " + name);
    Handle type = utf8_string_type();
    char* text = nullptr;
    if (H5Dread(dataset, type, H5S_ALL, H5S_ALL, H5P_DEFAULT, &text) < 0) fail(file, "cannot read dataset " + name);
    std::string out(text ? text : "");
    H5free_memory(text);
    return out;
}

std::vector<std::string> child_names(const std::string& file, hid_t group) {
    std::vector<std::string> names;
    hsize_t index = 0;
    auto collect = [](hid_t, const char* name, const H5L_info_t*, void* data) -> herr_t {
        static_cast<std::vector<std::string>*>(data)->emplace_back(name);
        return 0;
    };
    if (H5Literate(group, H5_INDEX_NAME, H5_ITER_INC, &index, collect, &names) < 0) fail(file, "cannot list group");
    std::sort(names.begin(), names.end());
    return names;
}

}  // namespace tandem::experiments::h5
