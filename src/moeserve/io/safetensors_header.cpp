// Parsing and validation of the safetensors JSON header (see safetensors_header.h).
#include "moeserve/io/safetensors_header.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <limits>
#include <unordered_set>

#include "moeserve/core/error.h"

namespace moeserve::io {
namespace {

// NOTE: ordered_json keeps the header's key order, so names() can report the file's order.
using Json = nlohmann::ordered_json;

// A real header nests three levels (root, tensor, shape). Deeper input is rejected while parsing:
// NOTE: ordered_json copies a nested value whenever an enclosing object grows, recursively, so
// unbounded nesting could exhaust the stack (found by fuzz/safetensors_header_fuzz).
constexpr int kMaxJsonDepth = 32;

constexpr const char* kSupportedDtypes = "F32, F16, BF16, F8_E4M3, I8, U8, I32, I64, BOOL";

// A non-negative JSON integer that fits in uint64, or nullopt (floats, negatives, others).
std::optional<uint64_t> as_uint(const Json& v) {
    if (v.is_number_unsigned()) return v.get<uint64_t>();
    if (v.is_number_integer() && v.get<int64_t>() >= 0) return static_cast<uint64_t>(v.get<int64_t>());
    return std::nullopt;
}

std::string brief_scalar(const Json& v) {
    if (v.is_array()) return v.empty() ? "[]" : "[...]";
    if (v.is_object()) return v.empty() ? "{}" : "{...}";
    std::string s = v.dump(-1, ' ', false, Json::error_handler_t::replace);
    constexpr size_t kMax = 40;
    if (s.size() > kMax) s = s.substr(0, kMax) + "...";
    return s;
}

// Renders a JSON value for an error message, one level deep and shortened, so neither a huge
// nor a deeply nested value can flood the log or exhaust the stack (dump() recurses).
std::string brief(const Json& v) {
    if (!v.is_array()) return brief_scalar(v);
    std::string s = "[";
    size_t i = 0;
    for (const Json& e : v) {
        if (i > 0) s += ",";
        if (i++ == 6) {
            s += "...";
            break;
        }
        s += brief_scalar(e);
    }
    return s + "]";
}

Json parse_json(std::string_view text, const std::string& file) {
    if (text.size() > kMaxSafetensorsHeaderBytes) {
        raise(ErrorCode::kInvalidModel, "{}: safetensors header is {} bytes, more than the {} allowed", file,
              text.size(), kMaxSafetensorsHeaderBytes);
    }
    // A key repeated at the top level would silently hide a tensor; catch it while parsing.
    std::unordered_set<std::string> seen;
    std::string duplicate;
    bool has_duplicate = false;
    auto on_event = [&](int depth, Json::parse_event_t event, Json& parsed) {
        const bool opens = event == Json::parse_event_t::object_start || event == Json::parse_event_t::array_start;
        if (opens && depth >= kMaxJsonDepth) {
            raise(ErrorCode::kInvalidModel, "{}: safetensors header nests deeper than {} levels", file, kMaxJsonDepth);
        }
        if (event == Json::parse_event_t::key && depth == 1 && !has_duplicate && parsed.is_string()) {
            if (!seen.insert(parsed.get_ref<const std::string&>()).second) {
                has_duplicate = true;
                duplicate = parsed.get<std::string>();
            }
        }
        return true;
    };
    Json root;
    try {
        root = Json::parse(text.begin(), text.end(), on_event);
    } catch (const Json::exception& e) {
        raise(ErrorCode::kInvalidModel, "{}: safetensors header is not valid JSON ({})", file, e.what());
    }
    if (!root.is_object()) {
        raise(ErrorCode::kInvalidModel, "{}: safetensors header must be a JSON object, got {}", file, root.type_name());
    }
    if (has_duplicate) {
        raise(ErrorCode::kInvalidModel, "{}: key '{}' appears more than once in the safetensors header", file,
              duplicate);
    }
    return root;
}

std::map<std::string, std::string> parse_metadata(const Json& v, const std::string& file) {
    std::map<std::string, std::string> out;
    if (v.is_null()) return out;
    if (!v.is_object()) {
        raise(ErrorCode::kInvalidModel, "{}: __metadata__ must be an object of strings, got {}", file, v.type_name());
    }
    for (const auto& [key, value] : v.items()) {
        if (!value.is_string()) {
            raise(ErrorCode::kInvalidModel, "{}: __metadata__ value of '{}' must be a string, got {} {}", file, key,
                  value.type_name(), brief(value));
        }
        out[key] = value.get<std::string>();
    }
    return out;
}

const Json& field(const Json& entry, const char* key, const std::string& name, const std::string& file) {
    auto it = entry.find(key);
    if (it == entry.end()) {
        raise(ErrorCode::kInvalidModel, "{}: tensor '{}' has no \"{}\" field", file, name, key);
    }
    return *it;
}

DType parse_dtype(const Json& entry, const std::string& name, const std::string& file) {
    const Json& v = field(entry, "dtype", name, file);
    if (!v.is_string()) {
        raise(ErrorCode::kInvalidModel, "{}: tensor '{}': \"dtype\" must be a string, got {}", file, name, brief(v));
    }
    const std::string& s = v.get_ref<const std::string&>();
    auto dtype = dtype_from_name(s);
    if (!dtype) {
        raise(ErrorCode::kUnsupported, "{}: tensor '{}' has dtype '{}', which is not supported (supported: {})", file,
              name, s, kSupportedDtypes);
    }
    return *dtype;
}

Shape parse_shape(const Json& entry, const std::string& name, const std::string& file) {
    const Json& v = field(entry, "shape", name, file);
    if (!v.is_array()) {
        raise(ErrorCode::kInvalidModel, "{}: tensor '{}': \"shape\" must be an array of integers, got {}", file, name,
              brief(v));
    }
    if (v.size() > static_cast<size_t>(Shape::kMaxDims)) {
        raise(ErrorCode::kUnsupported, "{}: tensor '{}' has {} dims, at most {} are supported", file, name, v.size(),
              Shape::kMaxDims);
    }
    std::vector<int64_t> dims;
    uint64_t numel = 1;
    for (const Json& d : v) {
        auto n = as_uint(d);
        if (!n) {
            raise(ErrorCode::kInvalidModel, "{}: tensor '{}': shape {} must hold non-negative integers, got {}", file,
                  name, brief(v), brief(d));
        }
        if (*n > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) ||
            __builtin_mul_overflow(numel, *n, &numel) ||
            numel > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
            raise(ErrorCode::kInvalidModel, "{}: tensor '{}': shape {} has more elements than fit in 63 bits", file,
                  name, brief(v));
        }
        dims.push_back(static_cast<int64_t>(*n));
    }
    return Shape(std::span<const int64_t>(dims));
}

TensorInfo parse_tensor(const std::string& name, const Json& entry, uint64_t data_size, const std::string& file) {
    if (!entry.is_object()) {
        raise(ErrorCode::kInvalidModel,
              "{}: tensor '{}' must be an object {{\"dtype\", \"shape\", \"data_offsets\"}}, got {}", file, name,
              brief(entry));
    }
    TensorInfo info;
    info.name = name;
    info.dtype = parse_dtype(entry, name, file);
    info.shape = parse_shape(entry, name, file);
    const Json& offsets = field(entry, "data_offsets", name, file);
    std::optional<uint64_t> begin, end;
    if (offsets.is_array() && offsets.size() == 2) {
        begin = as_uint(offsets[0]);
        end = as_uint(offsets[1]);
    }
    if (!begin || !end) {
        raise(ErrorCode::kInvalidModel,
              "{}: tensor '{}': \"data_offsets\" must be [begin, end] with non-negative integers, got {}", file, name,
              brief(offsets));
    }
    if (*end < *begin) {
        raise(ErrorCode::kInvalidModel, "{}: tensor '{}': data_offsets [{}, {}] end before they begin", file, name,
              *begin, *end);
    }
    if (*end > data_size) {
        raise(ErrorCode::kInvalidModel,
              "{}: tensor '{}': data_offsets [{}, {}] run past the end of the data section ({} bytes); "
              "the file may be truncated",
              file, name, *begin, *end, data_size);
    }
    uint64_t nbytes = 0;
    if (__builtin_mul_overflow(static_cast<uint64_t>(info.shape.numel()), dtype_size(info.dtype), &nbytes)) {
        raise(ErrorCode::kInvalidModel, "{}: tensor '{}': {} {} has more bytes than fit in 64 bits", file, name,
              dtype_name(info.dtype), info.shape.str());
    }
    if (nbytes != *end - *begin) {
        raise(ErrorCode::kInvalidModel, "{}: tensor '{}': {} {} needs {} bytes, but data_offsets [{}, {}] hold {}",
              file, name, dtype_name(info.dtype), info.shape.str(), nbytes, *begin, *end, *end - *begin);
    }
    info.data_begin = *begin;
    info.data_end = *end;
    return info;
}

// Tensors may leave gaps, but no byte may belong to two tensors (empty tensors own no bytes).
void check_no_overlap(const std::vector<TensorInfo>& tensors, const std::string& file) {
    std::vector<const TensorInfo*> by_offset;
    for (const TensorInfo& t : tensors) {
        if (t.nbytes() > 0) by_offset.push_back(&t);
    }
    std::sort(by_offset.begin(), by_offset.end(), [](const TensorInfo* a, const TensorInfo* b) {
        return a->data_begin != b->data_begin ? a->data_begin < b->data_begin : a->name < b->name;
    });
    for (size_t i = 1; i < by_offset.size(); ++i) {
        const TensorInfo& prev = *by_offset[i - 1];
        const TensorInfo& cur = *by_offset[i];
        if (cur.data_begin < prev.data_end) {
            raise(ErrorCode::kInvalidModel, "{}: tensors '{}' [{}, {}) and '{}' [{}, {}) overlap", file, prev.name,
                  prev.data_begin, prev.data_end, cur.name, cur.data_begin, cur.data_end);
        }
    }
}

}  // namespace

const TensorInfo* SafetensorsHeader::find(const std::string& name) const {
    auto it = index_of.find(name);
    return it == index_of.end() ? nullptr : &tensors[it->second];
}

SafetensorsHeader parse_safetensors_header(std::string_view header_json, uint64_t data_size,
                                           const std::string& file_label) {
    const Json root = parse_json(header_json, file_label);
    SafetensorsHeader header;
    for (const auto& [key, value] : root.items()) {
        if (key == "__metadata__") {
            header.metadata = parse_metadata(value, file_label);
            continue;
        }
        header.index_of.emplace(key, header.tensors.size());
        header.tensors.push_back(parse_tensor(key, value, data_size, file_label));
    }
    check_no_overlap(header.tensors, file_label);
    return header;
}

}  // namespace moeserve::io
