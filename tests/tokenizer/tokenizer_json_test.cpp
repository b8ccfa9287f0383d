// The SAX reader of tokenizer.json: vocab and merges come out in order, the rest stays a tree,
// and malformed vocab/merges are named in the error.
#include "moeserve/tokenizer/tokenizer_json.h"

#include <gtest/gtest.h>

#include "moeserve/core/error.h"

namespace moeserve::tokenizer {
namespace {

TEST(TokenizerJsonTest, StreamsVocabAndMergesAndKeepsTheRest) {
    auto parsed = parse_tokenizer_json(R"({"model": {"type": "BPE", "vocab": {"a": 0, "b": 1,
        "ab": 2}, "merges": ["a b", ["b", "a"]], "unk_token": null},
        "added_tokens": [{"id": 3, "content": "vocab"}], "vocab": {"x": 1}})",
                                       "t.json");
    EXPECT_TRUE(parsed.has_vocab);
    EXPECT_TRUE(parsed.has_merges);
    ASSERT_EQ(parsed.vocab.size(), 3u);
    EXPECT_EQ(parsed.vocab[2], (std::pair<std::string, int64_t>{"ab", 2}));
    ASSERT_EQ(parsed.merges.size(), 2u);
    EXPECT_EQ(parsed.merges[1], (std::pair<std::string, std::string>{"b", "a"}));
    EXPECT_FALSE(parsed.doc["model"].contains("vocab"));
    EXPECT_EQ(parsed.doc["model"]["type"], "BPE");
    EXPECT_TRUE(parsed.doc["model"]["unk_token"].is_null());
    EXPECT_EQ(parsed.doc["added_tokens"][0]["content"], "vocab");
    EXPECT_EQ(parsed.doc["vocab"]["x"], 1);  // only model.vocab is streamed
}

TEST(TokenizerJsonTest, MalformedVocabOrMergesAreNamed) {
    for (const char* text :
         {R"({"model": {"vocab": {"a": 0.5}, "merges": []}})", R"({"model": {"vocab": {}, "merges": ["a  b"]}})",
          R"({"model": {"vocab": {}, "merges": [["a"]]}})", R"({"model": {"vocab": [], "merges": []}})"}) {
        try {
            parse_tokenizer_json(text, "t.json");
            ADD_FAILURE() << "expected an error for " << text;
        } catch (const Error& e) {
            EXPECT_EQ(e.code(), ErrorCode::kInvalidModel);
            EXPECT_NE(std::string(e.what()).find("t.json: model."), std::string::npos) << e.what();
        }
    }
    EXPECT_THROW(parse_tokenizer_json("{\"model\": ", "t.json"), Error);
}

}  // namespace
}  // namespace moeserve::tokenizer
