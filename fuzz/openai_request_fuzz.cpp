// libFuzzer target: any bytes as the body of /v1/completions, /v1/chat/completions, /tokenize
// and /detokenize. Parsing either succeeds or raises ApiError; nothing else may happen.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "moeserve/serve/openai/parse.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    using namespace moeserve::serve::openai;
    ModelLimits limits;
    limits.served_model_name = "m";
    limits.max_model_len = 4096;
    limits.vocab_size = 151936;
    const std::string_view body(reinterpret_cast<const char*>(data), size);
    try {
        const auto json = parse_body(body);
        try {
            parse_completion_request(json, limits);
        } catch (const ApiError&) {
        }
        try {
            parse_chat_request(json, limits);
        } catch (const ApiError&) {
        }
        try {
            parse_tokenize_request(json, limits);
        } catch (const ApiError&) {
        }
        try {
            const auto r = parse_completion_request(json, limits);
            resolve_max_tokens(static_cast<int64_t>(size), r.params, limits, false);
        } catch (const ApiError&) {
        }
        try {
            parse_detokenize_request(json, limits);
        } catch (const ApiError&) {
        }
    } catch (const ApiError&) {
    }
    return 0;
}
