// SSE splitting on every possible fragmentation of a real-looking OpenAI stream.
#include "moeserve/bench/sse_parser.h"

#include <gtest/gtest.h>

namespace moeserve::bench {
namespace {

const std::string kStream =
    ": keep-alive comment\r\n"
    "data: {\"choices\":[{\"text\":\"Hel\"}]}\r\n\r\n"
    "event: message\n"
    "data:{\"choices\":[{\"text\":\"lo\"}]}\n\n"
    "\n"
    "data: {\"choices\":[],\"usage\":{\"completion_tokens\":2}}\n\n"
    "data: [DONE]\n\n";

const std::vector<std::string> kPayloads = {"{\"choices\":[{\"text\":\"Hel\"}]}", "{\"choices\":[{\"text\":\"lo\"}]}",
                                            "{\"choices\":[],\"usage\":{\"completion_tokens\":2}}", "[DONE]"};

TEST(SseParserTest, WholeStream) {
    SseParser p;
    std::vector<std::string> out;
    p.feed(kStream, &out);
    EXPECT_EQ(out, kPayloads);
    EXPECT_TRUE(p.done());
}

TEST(SseParserTest, EverySplitPointGivesTheSamePayloads) {
    for (size_t cut = 0; cut <= kStream.size(); ++cut) {
        SseParser p;
        std::vector<std::string> out;
        p.feed(std::string_view(kStream).substr(0, cut), &out);
        p.feed(std::string_view(kStream).substr(cut), &out);
        EXPECT_EQ(out, kPayloads) << "cut at " << cut;
    }
}

TEST(SseParserTest, OneByteAtATime) {
    SseParser p;
    std::vector<std::string> out;
    for (char c : kStream) p.feed(std::string_view(&c, 1), &out);
    EXPECT_EQ(out, kPayloads);
}

TEST(SseParserTest, LastLineWithoutNewlineNeedsFinish) {
    SseParser p;
    std::vector<std::string> out;
    p.feed("data: {\"a\":1}\ndata: [DONE]", &out);
    EXPECT_EQ(out, std::vector<std::string>{"{\"a\":1}"});
    EXPECT_FALSE(p.done());
    p.finish(&out);
    EXPECT_EQ(out, (std::vector<std::string>{"{\"a\":1}", "[DONE]"}));
    EXPECT_TRUE(p.done());
}

}  // namespace
}  // namespace moeserve::bench
