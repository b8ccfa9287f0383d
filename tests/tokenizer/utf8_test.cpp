// UTF-8 helpers: lossy conversion must match Rust's String::from_utf8_lossy, and the incomplete
// tail must be exactly what a streaming decoder can hold back.
#include "moeserve/core/utf8.h"

#include <gtest/gtest.h>

namespace moeserve::tokenizer {
namespace {

std::string lossy(std::string_view bytes) {
    std::string out;
    utf8_append_lossy(bytes, out);
    return out;
}

const std::string kFffd = "\xEF\xBF\xBD";

TEST(Utf8Test, LossyReplacesEachMaximalInvalidSubpartOnce) {
    EXPECT_EQ(lossy("abc"), "abc");
    EXPECT_EQ(lossy("\xE4\xBD\xA0"), "你");
    EXPECT_EQ(lossy("\xE4\xBD"), kFffd);                      // truncated 3-byte sequence
    EXPECT_EQ(lossy("\xE4\xBDx"), kFffd + "x");               // bad continuation
    EXPECT_EQ(lossy("\x80\x80"), kFffd + kFffd);              // lone continuations
    EXPECT_EQ(lossy("\xC0\xAF"), kFffd + kFffd);              // overlong lead is invalid
    EXPECT_EQ(lossy("\xED\xA0\x80"), kFffd + kFffd + kFffd);  // surrogate
    EXPECT_EQ(lossy("\xF0\x9F\x98"), kFffd);                  // truncated emoji
    EXPECT_EQ(lossy("\xF5\x80"), kFffd + kFffd);              // beyond U+10FFFF
}

TEST(Utf8Test, IncompleteTailIsOnlyAValidUnfinishedSequence) {
    EXPECT_EQ(utf8_incomplete_tail("ab"), 0u);
    EXPECT_EQ(utf8_incomplete_tail("a\xE4"), 1u);
    EXPECT_EQ(utf8_incomplete_tail("a\xE4\xBD"), 2u);
    EXPECT_EQ(utf8_incomplete_tail("a\xE4\xBD\xA0"), 0u);
    EXPECT_EQ(utf8_incomplete_tail("\xF0\x9F\x98"), 3u);
    EXPECT_EQ(utf8_incomplete_tail("\xE0\x80"), 0u);  // can never complete: emit now
    EXPECT_EQ(utf8_incomplete_tail("\x80"), 0u);
}

TEST(Utf8Test, SplittingAtTheTailPreservesLossyConversion) {
    const std::string bytes = "a\xE4\xBD\xA0\xE4\xBD\x80\x80\xF0\x9F\x98\x80\xF0\x9F";
    for (size_t cut = 0; cut <= bytes.size(); ++cut) {
        std::string_view prefix(bytes.data(), cut);
        size_t tail = utf8_incomplete_tail(prefix);
        std::string streamed = lossy(prefix.substr(0, cut - tail)) + lossy(std::string_view(bytes).substr(cut - tail));
        EXPECT_EQ(streamed, lossy(bytes)) << "cut " << cut;
    }
}

TEST(Utf8Test, Validation) {
    size_t bad = 0;
    EXPECT_TRUE(utf8_is_valid("héllo 😀"));
    EXPECT_FALSE(utf8_is_valid("ab\xFF", &bad));
    EXPECT_EQ(bad, 2u);
}

}  // namespace
}  // namespace moeserve::tokenizer
