// The --enable-log-requests line: vLLM's fields, the prompt and its ids cut to --max-log-len
// (by code point, as vLLM cuts a Python str), the text escaped onto one line.
#include "moeserve/serve/request_log.h"

#include <gtest/gtest.h>

#include <vector>

namespace moeserve::serve {
namespace {

TEST(RequestLogTest, WholePromptIdsAndParams) {
    openai::GenerationParams p;
    p.temperature = 0.5f;
    p.seed = 7;
    p.stop = {"END"};
    const std::vector<openai::TokenId> ids = {1, 2, 3};
    const std::string line = request_log_line("cmpl-x-0", std::string("a \"b\"\nc"), ids, p, 16, -1);
    EXPECT_EQ(line.rfind("received request cmpl-x-0: prompt: \"a \\\"b\\\"\\nc\", params: SamplingParams(n=1, ", 0), 0u)
        << line;
    EXPECT_NE(line.find("temperature=0.5,"), std::string::npos) << line;
    EXPECT_NE(line.find("seed=7,"), std::string::npos) << line;
    EXPECT_NE(line.find("stop=[\"END\"],"), std::string::npos) << line;
    EXPECT_NE(line.find("max_tokens=16,"), std::string::npos) << line;
    EXPECT_NE(line.find("top_k=-1,"), std::string::npos) << line;
    EXPECT_EQ(line.substr(line.size() - 27), "prompt_token_ids: [1, 2, 3]") << line;
    EXPECT_EQ(line.find('\n'), std::string::npos);
}

TEST(RequestLogTest, MaxLogLenCutsCodePointsAndIds) {
    const std::vector<openai::TokenId> ids = {5, 6, 7, 8};
    // "héllo": 'é' is two bytes; 2 code points keep "hé" whole
    const std::string line = request_log_line("r", std::string("h\xC3\xA9llo"), ids, {}, 1, 2);
    EXPECT_NE(line.find("prompt: \"h\xC3\xA9\","), std::string::npos) << line;
    EXPECT_EQ(line.substr(line.size() - 24), "prompt_token_ids: [5, 6]") << line;
    const std::string none = request_log_line("r", std::nullopt, ids, {}, 1, 0);
    EXPECT_NE(none.find("prompt: null,"), std::string::npos) << none;
    EXPECT_EQ(none.substr(none.size() - 20), "prompt_token_ids: []") << none;
}

}  // namespace
}  // namespace moeserve::serve
