// GGUF metadata values: the 13 value types of the format, arrays of any of them (nested arrays
// too) and typed access. Arrays of numbers are kept as their little-endian bytes and arrays of
// strings as one buffer plus end offsets, so a value never takes much more memory than its bytes
// in the file (a hostile header cannot turn a small file into a large allocation). Depends on
// core only.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

namespace moeserve::io {

// The numbers are the format's (`enum gguf_type`).
enum class GgufValueType : uint32_t {
    kUint8 = 0,
    kInt8 = 1,
    kUint16 = 2,
    kInt16 = 3,
    kUint32 = 4,
    kInt32 = 5,
    kFloat32 = 6,
    kBool = 7,
    kString = 8,
    kArray = 9,
    kUint64 = 10,
    kInt64 = 11,
    kFloat64 = 12,
};
inline constexpr uint32_t kNumGgufValueTypes = 13;

// "UINT8", "STRING", "ARRAY", ... ("type 77" for a number outside the format).
std::string gguf_value_type_name(uint32_t type);
inline std::string gguf_value_type_name(GgufValueType type) {
    return gguf_value_type_name(static_cast<uint32_t>(type));
}
// Bytes of one scalar of `type` in a file; 0 for kString and kArray (variable length).
size_t gguf_scalar_size(GgufValueType type);

// An array value. Immutable once built; built by the reader or by the `of_*` factories.
class GgufArray {
public:
    GgufArray() = default;
    // An array of scalars of `type` (not kString or kArray) from their little-endian bytes;
    // bytes.size() must be a multiple of gguf_scalar_size(type) (checked).
    static GgufArray of_scalars(GgufValueType type, std::string bytes);
    static GgufArray of_strings(const std::vector<std::string>& strings);
    // Strings back to back in `data`, string i ending at ends[i] (non-decreasing, checked).
    static GgufArray of_packed_strings(std::string data, std::vector<uint64_t> ends);
    static GgufArray of_arrays(std::vector<GgufArray> arrays);
    // Convenience for writers and tests.
    static GgufArray of_int32(const std::vector<int32_t>& v);
    static GgufArray of_float32(const std::vector<float>& v);

    GgufValueType type() const { return type_; }
    size_t size() const { return size_; }

    // Element i (i < size(), checked). int_at: any integer type or kBool (uint64 above INT64_MAX
    // is nullopt); float_at: kFloat32/kFloat64, or an integer type converted; string_at and
    // array_at need that element type (checked: calling them on another type is a bug).
    std::optional<int64_t> int_at(size_t i) const;
    std::optional<double> float_at(size_t i) const;
    std::string_view string_at(size_t i) const;
    const GgufArray& array_at(size_t i) const;

    // The raw element bytes of a scalar array (little-endian, gguf_scalar_size(type()) each).
    std::string_view scalar_bytes() const { return scalars_; }

private:
    GgufValueType type_ = GgufValueType::kUint8;
    size_t size_ = 0;
    std::string scalars_;                // scalar types: size_ * scalar size bytes
    std::string string_data_;            // kString: the strings back to back
    std::vector<uint64_t> string_ends_;  // kString: end of string i in string_data_
    std::vector<GgufArray> arrays_;      // kArray
};

// One metadata value. The variant's index is the GgufValueType number.
class GgufValue {
public:
    using Storage = std::variant<uint8_t, int8_t, uint16_t, int16_t, uint32_t, int32_t, float, bool, std::string,
                                 GgufArray, uint64_t, int64_t, double>;

    GgufValue() = default;
    explicit GgufValue(Storage storage) : storage_(std::move(storage)) {}
    template <GgufValueType T, typename V>
    static GgufValue of(V&& v) {
        return GgufValue(Storage(std::in_place_index<static_cast<size_t>(T)>, std::forward<V>(v)));
    }

    GgufValueType type() const { return static_cast<GgufValueType>(storage_.index()); }
    const Storage& storage() const { return storage_; }

    // Any integer type (and kBool as 0/1); nullopt for other types and for uint64 > INT64_MAX.
    std::optional<int64_t> as_int() const;
    // kFloat32 / kFloat64, or an integer type converted; nullopt otherwise.
    std::optional<double> as_float() const;
    std::optional<bool> as_bool() const;
    const std::string* as_string() const { return std::get_if<std::string>(&storage_); }
    const GgufArray* as_array() const { return std::get_if<GgufArray>(&storage_); }

    // A short rendering for messages: `UINT32 7`, `STRING "llama"`, `ARRAY[STRING, 151936]`.
    std::string brief() const;

private:
    Storage storage_;
};

// A name from a file made safe for a one-line message: escaped as core/escape.h says, cut to
// 96 bytes with "..." appended.
std::string gguf_printable(std::string_view name);

}  // namespace moeserve::io
