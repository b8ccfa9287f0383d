#include "moeserve/cli/json_flag.h"

#include "moeserve/core/error.h"

namespace moeserve::cli {

nlohmann::json parse_json_object_flag(const std::string& flag, const std::string& text) {
    nlohmann::json j;
    try {
        j = nlohmann::json::parse(text);
    } catch (const nlohmann::json::parse_error& e) {
        raise(ErrorCode::kInvalidArgument, "{}: not valid JSON: {}", flag, e.what());
    }
    if (!j.is_object()) raise(ErrorCode::kInvalidArgument, "{}: expected a JSON object", flag);
    return j;
}

}  // namespace moeserve::cli
