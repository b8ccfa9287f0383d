// SampleRequest: one prompt of a benchmark data set, with its token count and the number of
// tokens to ask for. Shared by the data sets, the client and the report.
#pragma once

#include <cstdint>
#include <string>

namespace moeserve::bench {

struct SampleRequest {
    std::string prompt;
    int64_t prompt_len = 0;           // tokens of prompt without special tokens (vLLM's prompt_len)
    int64_t expected_output_len = 0;  // sent as max_tokens / max_completion_tokens
};

}  // namespace moeserve::bench
