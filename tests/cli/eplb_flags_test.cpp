// parse_eplb_flags: vLLM's --enable-eplb / --eplb-config, the defaults, and one-sentence refusals
// naming the flag and the field.
#include "moeserve/cli/eplb_flags.h"

#include <gtest/gtest.h>

#include "moeserve/core/error.h"

namespace moeserve::cli {
namespace {

std::string refusal(bool enable, const std::string& text) {
    try {
        parse_eplb_flags(enable, text);
    } catch (const Error& e) {
        return e.what();
    }
    return "";
}

TEST(EplbFlagsTest, DefaultsAreVllms) {
    EXPECT_FALSE(parse_eplb_flags(false, "").enabled);
    const model::EplbConfig c = parse_eplb_flags(true, "");
    EXPECT_TRUE(c.enabled);
    EXPECT_EQ(c.window_size, 1000);
    EXPECT_EQ(c.step_interval, 3000);
    EXPECT_EQ(c.num_redundant_experts, 0);
    EXPECT_FALSE(c.log_balancedness);
}

TEST(EplbFlagsTest, ReadsEveryField) {
    const model::EplbConfig c = parse_eplb_flags(
        true,
        R"({"window_size": 10, "step_interval": 20, "num_redundant_experts": 4, "log_balancedness": true, "use_async": true})");
    EXPECT_EQ(c.window_size, 10);
    EXPECT_EQ(c.step_interval, 20);
    EXPECT_EQ(c.num_redundant_experts, 4);
    EXPECT_TRUE(c.log_balancedness);
}

TEST(EplbFlagsTest, RefusalsNameTheFlagAndField) {
    EXPECT_EQ(refusal(false, "{}"), "--eplb-config: set, but --enable-eplb is not");
    EXPECT_NE(refusal(true, "[1]").find("--eplb-config"), std::string::npos);
    EXPECT_NE(refusal(true, R"({"window_size": 0})").find("'window_size' must be an integer in [1, "),
              std::string::npos);
    EXPECT_NE(refusal(true, R"({"step_interval": "x"})").find("'step_interval'"), std::string::npos);
    EXPECT_NE(refusal(true, R"({"num_redundant_experts": -1})").find("'num_redundant_experts'"), std::string::npos);
    EXPECT_NE(refusal(true, R"({"log_balancedness": 1})").find("'log_balancedness' must be true or false"),
              std::string::npos);
    EXPECT_NE(refusal(true, R"({"policy": "default"})").find("field 'policy' is not supported"), std::string::npos);
}

}  // namespace
}  // namespace moeserve::cli
