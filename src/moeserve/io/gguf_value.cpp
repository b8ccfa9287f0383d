// GGUF metadata values (see gguf_value.h).
#include "moeserve/io/gguf_value.h"

#include <fmt/format.h>

#include <cstring>

#include "moeserve/core/error.h"
#include "moeserve/core/escape.h"

namespace moeserve::io {
namespace {

constexpr std::string_view kTypeNames[kNumGgufValueTypes] = {"UINT8",  "INT8",    "UINT16", "INT16",  "UINT32",
                                                             "INT32",  "FLOAT32", "BOOL",   "STRING", "ARRAY",
                                                             "UINT64", "INT64",   "FLOAT64"};

template <typename T>
T load(const char* p) {
    T v;
    std::memcpy(&v, p, sizeof(T));
    return v;
}

// The scalar at `p` as an integer; nullopt for float types and uint64 above INT64_MAX.
std::optional<int64_t> scalar_int(GgufValueType type, const char* p) {
    switch (type) {
        case GgufValueType::kUint8:
            return load<uint8_t>(p);
        case GgufValueType::kInt8:
            return load<int8_t>(p);
        case GgufValueType::kUint16:
            return load<uint16_t>(p);
        case GgufValueType::kInt16:
            return load<int16_t>(p);
        case GgufValueType::kUint32:
            return load<uint32_t>(p);
        case GgufValueType::kInt32:
            return load<int32_t>(p);
        case GgufValueType::kBool:
            return load<uint8_t>(p) != 0 ? 1 : 0;
        case GgufValueType::kInt64:
            return load<int64_t>(p);
        case GgufValueType::kUint64: {
            const auto v = load<uint64_t>(p);
            if (v > static_cast<uint64_t>(INT64_MAX)) return std::nullopt;
            return static_cast<int64_t>(v);
        }
        default:
            return std::nullopt;
    }
}

std::optional<double> scalar_float(GgufValueType type, const char* p) {
    if (type == GgufValueType::kFloat32) return load<float>(p);
    if (type == GgufValueType::kFloat64) return load<double>(p);
    if (type == GgufValueType::kUint64) return static_cast<double>(load<uint64_t>(p));
    if (type == GgufValueType::kBool) return std::nullopt;
    const auto i = scalar_int(type, p);
    if (!i) return std::nullopt;
    return static_cast<double>(*i);
}

}  // namespace

std::string gguf_value_type_name(uint32_t type) {
    if (type < kNumGgufValueTypes) return std::string(kTypeNames[type]);
    return fmt::format("type {}", type);
}

size_t gguf_scalar_size(GgufValueType type) {
    switch (type) {
        case GgufValueType::kUint8:
        case GgufValueType::kInt8:
        case GgufValueType::kBool:
            return 1;
        case GgufValueType::kUint16:
        case GgufValueType::kInt16:
            return 2;
        case GgufValueType::kUint32:
        case GgufValueType::kInt32:
        case GgufValueType::kFloat32:
            return 4;
        case GgufValueType::kUint64:
        case GgufValueType::kInt64:
        case GgufValueType::kFloat64:
            return 8;
        case GgufValueType::kString:
        case GgufValueType::kArray:
            return 0;
    }
    return 0;
}

GgufArray GgufArray::of_scalars(GgufValueType type, std::string bytes) {
    const size_t width = gguf_scalar_size(type);
    MOESERVE_CHECK(width > 0 && bytes.size() % width == 0, "type={} bytes={}", gguf_value_type_name(type),
                   bytes.size());
    GgufArray a;
    a.type_ = type;
    a.size_ = bytes.size() / width;
    a.scalars_ = std::move(bytes);
    return a;
}

GgufArray GgufArray::of_packed_strings(std::string data, std::vector<uint64_t> ends) {
    uint64_t prev = 0;
    for (const uint64_t e : ends) {
        MOESERVE_CHECK(e >= prev && e <= data.size(), "end={} prev={} data={}", e, prev, data.size());
        prev = e;
    }
    GgufArray a;
    a.type_ = GgufValueType::kString;
    a.size_ = ends.size();
    a.string_data_ = std::move(data);
    a.string_ends_ = std::move(ends);
    return a;
}

GgufArray GgufArray::of_strings(const std::vector<std::string>& strings) {
    std::string data;
    std::vector<uint64_t> ends;
    ends.reserve(strings.size());
    for (const std::string& s : strings) {
        data += s;
        ends.push_back(data.size());
    }
    return of_packed_strings(std::move(data), std::move(ends));
}

GgufArray GgufArray::of_arrays(std::vector<GgufArray> arrays) {
    GgufArray a;
    a.type_ = GgufValueType::kArray;
    a.size_ = arrays.size();
    a.arrays_ = std::move(arrays);
    return a;
}

GgufArray GgufArray::of_int32(const std::vector<int32_t>& v) {
    std::string bytes(v.size() * sizeof(int32_t), '\0');
    if (!v.empty()) std::memcpy(bytes.data(), v.data(), bytes.size());
    return of_scalars(GgufValueType::kInt32, std::move(bytes));
}

GgufArray GgufArray::of_float32(const std::vector<float>& v) {
    std::string bytes(v.size() * sizeof(float), '\0');
    if (!v.empty()) std::memcpy(bytes.data(), v.data(), bytes.size());
    return of_scalars(GgufValueType::kFloat32, std::move(bytes));
}

std::optional<int64_t> GgufArray::int_at(size_t i) const {
    MOESERVE_CHECK(i < size_, "i={} size={}", i, size_);
    if (scalars_.empty()) return std::nullopt;
    return scalar_int(type_, scalars_.data() + i * gguf_scalar_size(type_));
}

std::optional<double> GgufArray::float_at(size_t i) const {
    MOESERVE_CHECK(i < size_, "i={} size={}", i, size_);
    if (scalars_.empty()) return std::nullopt;
    return scalar_float(type_, scalars_.data() + i * gguf_scalar_size(type_));
}

std::string_view GgufArray::string_at(size_t i) const {
    MOESERVE_CHECK(type_ == GgufValueType::kString && i < size_, "type={} i={} size={}", gguf_value_type_name(type_), i,
                   size_);
    const uint64_t begin = i == 0 ? 0 : string_ends_[i - 1];
    return std::string_view(string_data_).substr(begin, string_ends_[i] - begin);
}

const GgufArray& GgufArray::array_at(size_t i) const {
    MOESERVE_CHECK(type_ == GgufValueType::kArray && i < size_, "type={} i={} size={}", gguf_value_type_name(type_), i,
                   size_);
    return arrays_[i];
}

std::optional<int64_t> GgufValue::as_int() const {
    return std::visit(
        [](const auto& v) -> std::optional<int64_t> {
            using T = std::decay_t<decltype(v)>;
            if constexpr (std::is_same_v<T, bool>) {
                return v ? 1 : 0;
            } else if constexpr (std::is_same_v<T, uint64_t>) {
                if (v > static_cast<uint64_t>(INT64_MAX)) return std::nullopt;
                return static_cast<int64_t>(v);
            } else if constexpr (std::is_integral_v<T>) {
                return static_cast<int64_t>(v);
            } else {
                return std::nullopt;
            }
        },
        storage_);
}

std::optional<double> GgufValue::as_float() const {
    if (const auto* f = std::get_if<float>(&storage_)) return *f;
    if (const auto* d = std::get_if<double>(&storage_)) return *d;
    if (const auto* u = std::get_if<uint64_t>(&storage_)) return static_cast<double>(*u);
    if (type() == GgufValueType::kBool) return std::nullopt;
    const auto i = as_int();
    if (!i) return std::nullopt;
    return static_cast<double>(*i);
}

std::optional<bool> GgufValue::as_bool() const {
    if (const auto* b = std::get_if<bool>(&storage_)) return *b;
    return std::nullopt;
}

std::string GgufValue::brief() const {
    const std::string type_name = gguf_value_type_name(type());
    if (const auto* s = as_string()) return fmt::format("{} \"{}\"", type_name, gguf_printable(*s));
    if (const auto* a = as_array()) return fmt::format("ARRAY[{}, {}]", gguf_value_type_name(a->type()), a->size());
    if (const auto b = as_bool()) return fmt::format("{} {}", type_name, *b);
    if (const auto i = as_int()) return fmt::format("{} {}", type_name, *i);
    if (const auto* u = std::get_if<uint64_t>(&storage_)) return fmt::format("{} {}", type_name, *u);
    return fmt::format("{} {}", type_name, as_float().value_or(0.0));
}

std::string gguf_printable(std::string_view name) {
    constexpr size_t kMax = 96;
    std::string out;
    append_escaped(name.substr(0, kMax), '\0', out);
    if (name.size() > kMax) out += "...";
    return out;
}

}  // namespace moeserve::io
