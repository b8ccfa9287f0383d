#include "moeserve/cli/eplb_flags.h"

#include <nlohmann/json.hpp>

#include "moeserve/cli/json_flag.h"
#include "moeserve/core/error.h"

namespace moeserve::cli {

namespace {

using Json = nlohmann::json;

[[noreturn]] void bad(const std::string& what) { raise(ErrorCode::kInvalidArgument, "--eplb-config: {}", what); }

void int_field(const Json& o, const char* key, int64_t min, int64_t& out) {
    const auto it = o.find(key);
    if (it == o.end() || it->is_null()) return;
    // forwards counted in int32 per expert and a window of them held per MoE layer: keep both sane
    constexpr int64_t kMax = 1'000'000;
    if (!it->is_number_integer() || it->get<int64_t>() < min || it->get<int64_t>() > kMax)
        bad(fmt::format("'{}' must be an integer in [{}, {}]; got {}", key, min, kMax, it->dump()));
    out = it->get<int64_t>();
}

}  // namespace

model::EplbConfig parse_eplb_flags(bool enable_eplb, const std::string& eplb_config) {
    model::EplbConfig c;
    if (!enable_eplb) {
        if (!eplb_config.empty()) bad("set, but --enable-eplb is not");
        return c;
    }
    c.enabled = true;
    if (eplb_config.empty()) return c;
    const Json j = parse_json_object_flag("--eplb-config", eplb_config);
    for (const auto& [key, value] : j.items()) {
        // use_async: vLLM's switch for moving in the background, which moeserve always does
        if (key != "window_size" && key != "step_interval" && key != "num_redundant_experts" &&
            key != "log_balancedness" && key != "use_async") {
            bad(
                fmt::format("field '{}' is not supported (known: window_size, step_interval, num_redundant_experts, "
                            "log_balancedness, use_async)",
                            key));
        }
        if ((key == "log_balancedness" || key == "use_async") && !value.is_boolean())
            bad(fmt::format("'{}' must be true or false; got {}", key, value.dump()));
    }
    int_field(j, "window_size", 1, c.window_size);
    int_field(j, "step_interval", 1, c.step_interval);
    int_field(j, "num_redundant_experts", 0, c.num_redundant_experts);
    if (const auto it = j.find("log_balancedness"); it != j.end()) c.log_balancedness = it->get<bool>();
    return c;
}

}  // namespace moeserve::cli
