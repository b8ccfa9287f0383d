// Chunk timing rules on synthetic arrival times (exact values; no clock involved).
#include "moeserve/bench/stream_reader.h"

#include <gtest/gtest.h>

namespace moeserve::bench {
namespace {

using std::chrono::milliseconds;
using TimePoint = StreamReader::TimePoint;

const TimePoint kStart{};

std::string event(const std::string& json) { return "data: " + json + "\n\n"; }

TEST(StreamReaderTest, CompletionsTimingAndUsage) {
    StreamReader r(Backend::kOpenAiCompletions, kStart);
    r.feed(event(R"({"choices":[{"text":"He"}]})"), kStart + milliseconds(100));
    // Two chunks in one read share its arrival time; an empty text (special token) still counts.
    r.feed(event(R"({"choices":[{"text":"l"}]})") + event(R"({"choices":[{"text":""}]})"), kStart + milliseconds(130));
    r.feed(event(R"({"choices":[{"text":"lo","finish_reason":"length"}]})"), kStart + milliseconds(190));
    r.feed(event(R"({"choices":[],"usage":{"prompt_tokens":3,"completion_tokens":4}})") + "data: [DONE]\n\n",
           kStart + milliseconds(400));
    RequestOutput out;
    r.finish(out);
    EXPECT_TRUE(out.success) << out.error;
    EXPECT_DOUBLE_EQ(out.ttft_s, 0.1);
    ASSERT_EQ(out.itl_s.size(), 3u);
    EXPECT_NEAR(out.itl_s[0], 0.03, 1e-12);
    EXPECT_NEAR(out.itl_s[1], 0.0, 1e-12);
    EXPECT_NEAR(out.itl_s[2], 0.06, 1e-12);
    EXPECT_DOUBLE_EQ(out.latency_s, 0.19);  // last content chunk, not the usage chunk
    EXPECT_EQ(out.generated_text, "Hello");
    EXPECT_EQ(out.output_tokens, 4);
}

TEST(StreamReaderTest, ChatSkipsRoleChunkAndEndsAtLastChunk) {
    StreamReader r(Backend::kOpenAiChat, kStart);
    r.feed(event(R"({"choices":[{"delta":{"role":"assistant","content":""}}]})"), kStart + milliseconds(5));
    r.feed(event(R"({"choices":[{"delta":{"content":"Hi"}}]})"), kStart + milliseconds(50));
    r.feed(event(R"({"choices":[{"delta":{"content":" you"}}]})"), kStart + milliseconds(80));
    r.feed(event(R"({"choices":[{"delta":{},"finish_reason":"stop"}]})"), kStart + milliseconds(90));
    r.feed("data: [DONE]\n\n", kStart + milliseconds(95));
    RequestOutput out;
    r.finish(out);
    EXPECT_TRUE(out.success);
    EXPECT_DOUBLE_EQ(out.ttft_s, 0.05);
    ASSERT_EQ(out.itl_s.size(), 1u);
    EXPECT_NEAR(out.itl_s[0], 0.03, 1e-12);
    EXPECT_DOUBLE_EQ(out.latency_s, 0.09);  // as vLLM's chat client: the last data chunk
    EXPECT_EQ(out.generated_text, "Hi you");
    EXPECT_FALSE(out.output_tokens.has_value());
}

TEST(StreamReaderTest, ErrorChunkAndEmptyStreamFail) {
    {
        StreamReader r(Backend::kOpenAiCompletions, kStart);
        r.feed(event(R"({"choices":[{"text":"a"}]})") + event(R"({"error":{"message":"engine died"}})"),
               kStart + milliseconds(1));
        RequestOutput out;
        r.finish(out);
        EXPECT_FALSE(out.success);
        EXPECT_EQ(out.error, "error chunk in stream: engine died");
    }
    {
        StreamReader r(Backend::kOpenAiCompletions, kStart);
        r.feed("data: [DONE]\n\n", kStart + milliseconds(1));
        RequestOutput out;
        r.finish(out);
        EXPECT_FALSE(out.success);
        EXPECT_NE(out.error.find("Never received a valid chunk"), std::string::npos);
    }
}

}  // namespace
}  // namespace moeserve::bench
