// Parsing and validation of the GGUF header (see gguf_header.h).
#include "moeserve/io/gguf_header.h"

#include <algorithm>
#include <cstring>

#include "moeserve/core/error.h"

namespace moeserve::io {
namespace {

constexpr uint8_t kMagic[4] = {'G', 'G', 'U', 'F'};
// The fewest bytes a tensor entry and a key/value can take (empty name, no dims, 1-byte value).
constexpr uint64_t kMinTensorEntryBytes = 8 + 4 + 4 + 8;
constexpr uint64_t kMinKeyValueBytes = 8 + 4 + 1;

// Reads little-endian values from the file's bytes; every read is bounds-checked and a short
// read raises naming `what()` (called only on error, so the hot path builds no strings).
class Reader {
public:
    Reader(std::span<const uint8_t> bytes, const std::string& file) : bytes_(bytes), file_(file) {}

    uint64_t pos() const { return pos_; }
    uint64_t remaining() const { return bytes_.size() - pos_; }
    const std::string& file() const { return file_; }

    template <typename What>
    const uint8_t* take(uint64_t n, const What& what) {
        if (n > remaining()) {
            raise(ErrorCode::kInvalidModel, "{}: truncated: {} needs {} bytes at offset {}, but the file ends at {}",
                  file_, what(), n, pos_, bytes_.size());
        }
        const uint8_t* p = bytes_.data() + pos_;
        pos_ += n;
        return p;
    }

    template <typename T, typename What>
    T read(const What& what) {
        T v;
        std::memcpy(&v, take(sizeof(T), what), sizeof(T));
        return v;
    }

    template <typename What>
    std::string_view read_string(const What& what) {
        const auto n = read<uint64_t>(what);
        if (n > remaining()) {
            raise(ErrorCode::kInvalidModel,
                  "{}: {}: string of {} bytes at offset {} is longer than the rest of the file ({} bytes)", file_,
                  what(), n, pos_ - 8, remaining());
        }
        return {reinterpret_cast<const char*>(take(n, what)), n};
    }

    // Raises unless `count` entries of at least `min_bytes` each fit in the rest of the file.
    template <typename What>
    void check_count(uint64_t count, uint64_t min_bytes, const What& what) {
        if (count > remaining() / min_bytes) {
            raise(ErrorCode::kInvalidModel,
                  "{}: {} says {} entries of at least {} bytes each, but only {} bytes are left; the file is "
                  "truncated or corrupt",
                  file_, what(), count, min_bytes, remaining());
        }
    }

    uint64_t num_nested_arrays = 0;

private:
    std::span<const uint8_t> bytes_;
    const std::string& file_;
    uint64_t pos_ = 0;
};

uint32_t read_version(Reader& r) {
    const auto what = [] { return std::string("the header"); };
    const uint8_t* magic = r.take(4, what);
    if (std::memcmp(magic, kMagic, 4) != 0) {
        raise(ErrorCode::kInvalidModel, "{}: not a GGUF file: magic is {:02x} {:02x} {:02x} {:02x}, expected 'GGUF'",
              r.file(), magic[0], magic[1], magic[2], magic[3]);
    }
    const auto version = r.read<uint32_t>(what);
    if (version == 2 || version == 3) return version;
    if (version != 0 && (version & 0xffffu) == 0) {
        raise(ErrorCode::kUnsupported,
              "{}: GGUF version {:#x} looks byte-swapped: big-endian GGUF files are not supported", r.file(), version);
    }
    raise(ErrorCode::kUnsupported, "{}: GGUF version {} is not supported (versions 2 and 3 are)", r.file(), version);
}

GgufValue read_value(Reader& r, uint32_t type, int depth, const std::string& key);

// The fewest bytes one element of `type` takes in the file.
uint64_t min_element_bytes(GgufValueType type) {
    if (type == GgufValueType::kString) return 8;
    if (type == GgufValueType::kArray) return 4 + 8;
    return gguf_scalar_size(type);
}

void check_value_type(Reader& r, uint32_t type, const std::string& key) {
    if (type >= kNumGgufValueTypes) {
        raise(ErrorCode::kInvalidModel, "{}: metadata key '{}' has value type {}, which GGUF does not define (0-12)",
              r.file(), gguf_printable(key), type);
    }
}

void check_bools(Reader& r, const uint8_t* p, uint64_t n, const std::string& key) {
    for (uint64_t i = 0; i < n; ++i) {
        if (p[i] > 1) {
            raise(ErrorCode::kInvalidModel, "{}: metadata key '{}': BOOL value {} at offset {} is neither 0 nor 1",
                  r.file(), gguf_printable(key), p[i], r.pos() - n + i);
        }
    }
}

GgufArray read_array(Reader& r, int depth, const std::string& key) {
    const auto what = [&] { return fmt::format("metadata key '{}' (array)", gguf_printable(key)); };
    const auto elem = r.read<uint32_t>(what);
    check_value_type(r, elem, key);
    const auto type = static_cast<GgufValueType>(elem);
    const auto n = r.read<uint64_t>(what);
    r.check_count(n, min_element_bytes(type), what);
    if (type == GgufValueType::kArray) {
        if (depth + 1 >= kGgufMaxArrayDepth) {
            raise(ErrorCode::kInvalidModel, "{}: metadata key '{}' nests arrays deeper than {} levels", r.file(),
                  gguf_printable(key), kGgufMaxArrayDepth);
        }
        r.num_nested_arrays += n;
        if (r.num_nested_arrays > kGgufMaxNestedArrays) {
            raise(ErrorCode::kInvalidModel, "{}: metadata key '{}': more than {} nested arrays in the file", r.file(),
                  gguf_printable(key), kGgufMaxNestedArrays);
        }
        std::vector<GgufArray> arrays;
        arrays.reserve(n);
        for (uint64_t i = 0; i < n; ++i) arrays.push_back(read_array(r, depth + 1, key));
        return GgufArray::of_arrays(std::move(arrays));
    }
    if (type == GgufValueType::kString) {
        std::string data;
        std::vector<uint64_t> ends;
        ends.reserve(n);
        for (uint64_t i = 0; i < n; ++i) {
            data += r.read_string([&] { return fmt::format("metadata key '{}' string {}", gguf_printable(key), i); });
            ends.push_back(data.size());
        }
        return GgufArray::of_packed_strings(std::move(data), std::move(ends));
    }
    const uint64_t nbytes = n * gguf_scalar_size(type);  // cannot overflow: check_count bounded n
    const uint8_t* p = r.take(nbytes, what);
    if (type == GgufValueType::kBool) check_bools(r, p, n, key);
    return GgufArray::of_scalars(type, std::string(reinterpret_cast<const char*>(p), nbytes));
}

template <GgufValueType T, typename V>
GgufValue read_scalar(Reader& r, const std::string& key) {
    return GgufValue::of<T>(r.read<V>([&] { return fmt::format("metadata key '{}'", gguf_printable(key)); }));
}

GgufValue read_value(Reader& r, uint32_t type, int depth, const std::string& key) {
    using T = GgufValueType;
    check_value_type(r, type, key);
    switch (static_cast<T>(type)) {
        case T::kUint8:
            return read_scalar<T::kUint8, uint8_t>(r, key);
        case T::kInt8:
            return read_scalar<T::kInt8, int8_t>(r, key);
        case T::kUint16:
            return read_scalar<T::kUint16, uint16_t>(r, key);
        case T::kInt16:
            return read_scalar<T::kInt16, int16_t>(r, key);
        case T::kUint32:
            return read_scalar<T::kUint32, uint32_t>(r, key);
        case T::kInt32:
            return read_scalar<T::kInt32, int32_t>(r, key);
        case T::kFloat32:
            return read_scalar<T::kFloat32, float>(r, key);
        case T::kUint64:
            return read_scalar<T::kUint64, uint64_t>(r, key);
        case T::kInt64:
            return read_scalar<T::kInt64, int64_t>(r, key);
        case T::kFloat64:
            return read_scalar<T::kFloat64, double>(r, key);
        case T::kBool: {
            const uint8_t* p = r.take(1, [&] { return fmt::format("metadata key '{}'", gguf_printable(key)); });
            check_bools(r, p, 1, key);
            return GgufValue::of<T::kBool>(*p != 0);
        }
        case T::kString: {
            const auto s = r.read_string([&] { return fmt::format("metadata key '{}'", gguf_printable(key)); });
            return GgufValue::of<T::kString>(std::string(s));
        }
        case T::kArray:
            return GgufValue::of<T::kArray>(read_array(r, depth, key));
    }
    raise(ErrorCode::kInternal, "unreachable");
}

void read_metadata(Reader& r, uint64_t n_kv, GgufHeader& h) {
    h.metadata.reserve(n_kv);
    for (uint64_t i = 0; i < n_kv; ++i) {
        const auto what = [&] { return fmt::format("metadata key {} of {}", i, n_kv); };
        std::string key(r.read_string(what));
        if (key.empty()) raise(ErrorCode::kInvalidModel, "{}: {} has an empty name", r.file(), what());
        if (h.key_index.count(key) != 0) {
            raise(ErrorCode::kInvalidModel, "{}: metadata key '{}' appears more than once", r.file(),
                  gguf_printable(key));
        }
        const auto type = r.read<uint32_t>([&] { return fmt::format("metadata key '{}'", gguf_printable(key)); });
        GgufValue value = read_value(r, type, 0, key);
        h.key_index.emplace(key, h.metadata.size());
        h.metadata.push_back({std::move(key), std::move(value)});
    }
}

uint32_t read_alignment(const GgufHeader& h) {
    const GgufValue* v = h.find("general.alignment");
    if (v == nullptr) return kGgufDefaultAlignment;
    const auto* a = std::get_if<uint32_t>(&v->storage());
    if (a == nullptr || *a == 0 || (*a & (*a - 1)) != 0) {
        raise(ErrorCode::kInvalidModel, "{}: metadata key 'general.alignment' must be a UINT32 power of two, got {}",
              h.file, v->brief());
    }
    return *a;
}

Shape read_shape(Reader& r, const std::string& name) {
    const auto what = [&] { return fmt::format("tensor '{}'", gguf_printable(name)); };
    const auto n_dims = r.read<uint32_t>(what);
    if (n_dims > static_cast<uint32_t>(kGgufMaxDims)) {
        raise(ErrorCode::kInvalidModel, "{}: tensor '{}' has {} dims, GGUF allows at most {}", r.file(),
              gguf_printable(name), n_dims, kGgufMaxDims);
    }
    int64_t dims[kGgufMaxDims] = {};
    // NOTE: zero dims are left out of the product, so that Shape::numel(), which multiplies in
    // the other order, cannot overflow before it reaches the zero (found by gguf_header_fuzz).
    uint64_t nonzero_numel = 1;
    for (uint32_t j = 0; j < n_dims; ++j) {
        const auto ne = r.read<uint64_t>(what);
        if (ne > static_cast<uint64_t>(INT64_MAX) ||
            __builtin_mul_overflow(nonzero_numel, ne == 0 ? 1 : ne, &nonzero_numel) ||
            nonzero_numel > static_cast<uint64_t>(INT64_MAX)) {
            raise(ErrorCode::kInvalidModel, "{}: tensor '{}': dim {} = {} makes more elements than fit in 63 bits",
                  r.file(), gguf_printable(name), j, ne);
        }
        dims[n_dims - 1 - j] = static_cast<int64_t>(ne);  // ggml lists the innermost dim first
    }
    return Shape(std::span<const int64_t>(dims, n_dims));
}

GgmlType read_type(Reader& r, const GgufTensorInfo& t) {
    const auto number = r.read<uint32_t>([&] { return fmt::format("tensor '{}'", gguf_printable(t.name)); });
    if (!ggml_type_traits(number)) {
        raise(ErrorCode::kUnsupported,
              "{}: tensor '{}' has ggml type {}, which is unknown (a newer ggml or a corrupt file)", r.file(),
              gguf_printable(t.name), number);
    }
    return static_cast<GgmlType>(number);
}

uint64_t tensor_nbytes(const GgufTensorInfo& t, const std::string& file) {
    const GgmlTypeTraits traits = ggml_traits(t.type);
    const int64_t row = t.shape.rank() == 0 ? 1 : t.shape[t.shape.rank() - 1];
    if (row % traits.block_size != 0) {
        raise(ErrorCode::kInvalidModel,
              "{}: tensor '{}' of type {} has rows of {} elements, not a multiple of its block size {}", file,
              gguf_printable(t.name), traits.name, row, traits.block_size);
    }
    const auto n = ggml_nbytes(t.type, static_cast<uint64_t>(t.numel()));
    if (!n) {
        raise(ErrorCode::kInvalidModel, "{}: tensor '{}': {} {} has more bytes than fit in 64 bits", file,
              gguf_printable(t.name), traits.name, t.shape.str());
    }
    return *n;
}

void read_tensor_table(Reader& r, uint64_t n_tensors, GgufHeader& h) {
    h.tensors.reserve(n_tensors);
    for (uint64_t i = 0; i < n_tensors; ++i) {
        GgufTensorInfo t;
        t.name = std::string(r.read_string([&] { return fmt::format("tensor {} of {}", i, n_tensors); }));
        if (t.name.empty())
            raise(ErrorCode::kInvalidModel, "{}: tensor {} of {} has an empty name", r.file(), i, n_tensors);
        if (h.tensor_index.count(t.name) != 0) {
            raise(ErrorCode::kInvalidModel, "{}: tensor '{}' appears more than once in the tensor table", r.file(),
                  gguf_printable(t.name));
        }
        t.shape = read_shape(r, t.name);
        t.type = read_type(r, t);
        t.nbytes = tensor_nbytes(t, r.file());
        t.offset = r.read<uint64_t>([&] { return fmt::format("tensor '{}'", gguf_printable(t.name)); });
        h.tensor_index.emplace(t.name, h.tensors.size());
        h.tensors.push_back(std::move(t));
    }
}

// Every tensor aligned, inside the file, and no byte shared by two tensors.
void check_placement(const GgufHeader& h, uint64_t file_size) {
    std::vector<const GgufTensorInfo*> by_offset;
    for (const GgufTensorInfo& t : h.tensors) {
        if (t.offset % h.alignment != 0) {
            raise(ErrorCode::kInvalidModel, "{}: tensor '{}' has offset {}, not a multiple of the alignment {}", h.file,
                  gguf_printable(t.name), t.offset, h.alignment);
        }
        const uint64_t room = file_size - h.data_offset;  // data_offset <= file_size: checked by the caller
        if (t.offset > room || t.nbytes > room - t.offset) {
            raise(ErrorCode::kInvalidModel,
                  "{}: tensor '{}' ({} bytes at data offset {}) runs past the end of the file ({} bytes, data from "
                  "byte {}); the file may be truncated",
                  h.file, gguf_printable(t.name), t.nbytes, t.offset, file_size, h.data_offset);
        }
        if (t.nbytes > 0) by_offset.push_back(&t);
    }
    std::sort(by_offset.begin(), by_offset.end(),
              [](const GgufTensorInfo* a, const GgufTensorInfo* b) { return a->offset < b->offset; });
    for (size_t i = 1; i < by_offset.size(); ++i) {
        const GgufTensorInfo& prev = *by_offset[i - 1];
        const GgufTensorInfo& cur = *by_offset[i];
        if (cur.offset < prev.offset + prev.nbytes) {
            raise(ErrorCode::kInvalidModel, "{}: tensors '{}' [{}, {}) and '{}' [{}, {}) overlap", h.file,
                  gguf_printable(prev.name), prev.offset, prev.offset + prev.nbytes, gguf_printable(cur.name),
                  cur.offset, cur.offset + cur.nbytes);
        }
    }
}

}  // namespace

GgufHeader parse_gguf_header(std::span<const uint8_t> file, const std::string& file_label) {
    Reader r(file, file_label);
    GgufHeader h;
    h.file = file_label;
    h.version = read_version(r);
    const auto what = [] { return std::string("the header"); };
    const auto n_tensors = r.read<uint64_t>(what);
    const auto n_kv = r.read<uint64_t>(what);
    if (n_tensors > kGgufMaxTensors || n_kv > kGgufMaxKeys) {
        raise(ErrorCode::kInvalidModel,
              "{}: header says {} tensors and {} metadata keys; at most {} and {} are accepted", file_label, n_tensors,
              n_kv, kGgufMaxTensors, kGgufMaxKeys);
    }
    r.check_count(n_kv, kMinKeyValueBytes, [] { return std::string("the metadata key count"); });
    read_metadata(r, n_kv, h);
    h.alignment = read_alignment(h);
    r.check_count(n_tensors, kMinTensorEntryBytes, [] { return std::string("the tensor count"); });
    read_tensor_table(r, n_tensors, h);
    h.data_offset = (r.pos() + h.alignment - 1) / h.alignment * h.alignment;  // pos <= file size: no overflow
    if (n_tensors > 0 && h.data_offset > file.size()) {
        raise(ErrorCode::kInvalidModel,
              "{}: truncated: the data section would start at byte {} (aligned to {}), past the end of the file ({} "
              "bytes)",
              file_label, h.data_offset, h.alignment, file.size());
    }
    check_placement(h, file.size());
    return h;
}

const GgufValue* GgufHeader::find(const std::string& key) const {
    auto it = key_index.find(key);
    return it == key_index.end() ? nullptr : &metadata[it->second].value;
}

const GgufTensorInfo* GgufHeader::find_tensor(const std::string& name) const {
    auto it = tensor_index.find(name);
    return it == tensor_index.end() ? nullptr : &tensors[it->second];
}

namespace {

const GgufValue& require(const GgufHeader& h, const std::string& key, std::string_view expected) {
    const GgufValue* v = h.find(key);
    if (v == nullptr) {
        raise(ErrorCode::kInvalidModel, "{}: metadata key '{}' ({}) is missing", h.file, gguf_printable(key), expected);
    }
    return *v;
}

[[noreturn]] void wrong_type(const GgufHeader& h, const std::string& key, const GgufValue& v,
                             std::string_view expected) {
    raise(ErrorCode::kInvalidModel, "{}: metadata key '{}' must be {}, got {}", h.file, gguf_printable(key), expected,
          v.brief());
}

}  // namespace

int64_t GgufHeader::get_int(const std::string& key) const {
    constexpr std::string_view kExpected = "an integer";
    const GgufValue& v = require(*this, key, kExpected);
    const auto i = v.type() == GgufValueType::kBool ? std::nullopt : v.as_int();
    if (!i) wrong_type(*this, key, v, kExpected);
    return *i;
}

double GgufHeader::get_float(const std::string& key) const {
    constexpr std::string_view kExpected = "a number";
    const GgufValue& v = require(*this, key, kExpected);
    const auto f = v.as_float();
    if (!f) wrong_type(*this, key, v, kExpected);
    return *f;
}

bool GgufHeader::get_bool(const std::string& key) const {
    constexpr std::string_view kExpected = "a BOOL";
    const GgufValue& v = require(*this, key, kExpected);
    const auto b = v.as_bool();
    if (!b) wrong_type(*this, key, v, kExpected);
    return *b;
}

const std::string& GgufHeader::get_string(const std::string& key) const {
    constexpr std::string_view kExpected = "a STRING";
    const GgufValue& v = require(*this, key, kExpected);
    const std::string* s = v.as_string();
    if (s == nullptr) wrong_type(*this, key, v, kExpected);
    return *s;
}

const GgufArray& GgufHeader::get_array(const std::string& key) const {
    constexpr std::string_view kExpected = "an ARRAY";
    const GgufValue& v = require(*this, key, kExpected);
    const GgufArray* a = v.as_array();
    if (a == nullptr) wrong_type(*this, key, v, kExpected);
    return *a;
}

}  // namespace moeserve::io
