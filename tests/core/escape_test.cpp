// The one escaper: what each user relies on (Python's repr escapes, a grammar literal that reads
// back, a file's name kept on one line) and that UTF-8 text passes through.
#include "moeserve/core/escape.h"

#include <gtest/gtest.h>

namespace moeserve {
namespace {

TEST(Escape, NamedControlsHexForTheRestAndTheQuote) {
    EXPECT_EQ(quote_escaped("a'b\"c\\d", '\''), R"('a\'b"c\\d')");
    EXPECT_EQ(quote_escaped("a'b\"c", '"'), R"("a'b\"c")");
    EXPECT_EQ(quote_escaped(std::string("\n\r\t\x01\x1f\x7f", 6), '\''), R"('\n\r\t\x01\x1f\x7f')");
    EXPECT_EQ(quote_escaped(std::string("nul\0end", 7), '"'), R"("nul\x00end")");
}

TEST(Escape, Utf8PassesThroughAndNoQuoteMeansNoneEscaped) {
    EXPECT_EQ(quote_escaped("héllo ✓ 😀", '"'), "\"héllo ✓ 😀\"");
    std::string out = "name: ";
    append_escaped("a\"b'c\nd", '\0', out);
    EXPECT_EQ(out, R"(name: a"b'c\nd)");
}

}  // namespace
}  // namespace moeserve
