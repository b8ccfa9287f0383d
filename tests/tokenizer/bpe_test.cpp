// BPE on a tiny hand-written vocabulary: merge order by rank, ignore_merges, unknown characters.
#include "moeserve/tokenizer/bpe.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "moeserve/core/error.h"

namespace moeserve::tokenizer {
namespace {

// a b c ab bc abc; merges: "b c" (rank 0) before "a b" (rank 1), then "a bc".
nlohmann::json tiny_model() {
    return nlohmann::json::parse(R"({
        "type": "BPE", "vocab": {"a": 0, "b": 1, "c": 2, "ab": 3, "bc": 4, "abc": 5, "<unk>": 6},
        "merges": ["b c", "a b", "a bc"]})");
}

std::vector<int32_t> tokenize(const Bpe& bpe, std::string_view word) {
    BpeScratch scratch;
    std::vector<int32_t> ids;
    bpe.tokenize(word, scratch, ids);
    return ids;
}

TEST(BpeTest, LowestRankMergesFirst) {
    auto bpe = Bpe::from_json(tiny_model(), "test");
    EXPECT_EQ(tokenize(bpe, "abc"), (std::vector<int32_t>{5}));  // b c -> bc, a bc -> abc
    EXPECT_EQ(tokenize(bpe, "ab"), (std::vector<int32_t>{3}));
    EXPECT_EQ(tokenize(bpe, "abab"), (std::vector<int32_t>{3, 3}));
    EXPECT_EQ(tokenize(bpe, "cab"), (std::vector<int32_t>{2, 3}));
    EXPECT_EQ(tokenize(bpe, ""), (std::vector<int32_t>{}));
}

TEST(BpeTest, MergesAsListsEqualMergesAsStrings) {
    auto model = tiny_model();
    model["merges"] = nlohmann::json::parse(R"([["b", "c"], ["a", "b"], ["a", "bc"]])");
    auto bpe = Bpe::from_json(model, "test");
    EXPECT_EQ(tokenize(bpe, "abcab"), (std::vector<int32_t>{5, 3}));
}

TEST(BpeTest, WordInVocabShortCircuitsOnlyWithIgnoreMerges) {
    // "ab" then "c": rank order would build "ab"+"c" if "b c" were missing; use a vocab where
    // the whole word exists but no merge path reaches it.
    auto model = nlohmann::json::parse(R"({
        "type": "BPE", "vocab": {"x": 0, "y": 1, "xy": 2, "xyx": 3}, "merges": ["x y"]})");
    EXPECT_EQ(tokenize(Bpe::from_json(model, "test"), "xyx"), (std::vector<int32_t>{2, 0}));
    model["ignore_merges"] = true;
    EXPECT_EQ(tokenize(Bpe::from_json(model, "test"), "xyx"), (std::vector<int32_t>{3}));
}

TEST(BpeTest, UnknownCharactersUseUnkOrAreDropped) {
    auto model = tiny_model();
    // A dropped character leaves its neighbours adjacent, so they can merge.
    EXPECT_EQ(tokenize(Bpe::from_json(model, "test"), "azb"), (std::vector<int32_t>{3}));
    model["unk_token"] = "<unk>";
    EXPECT_EQ(tokenize(Bpe::from_json(model, "test"), "azzb"), (std::vector<int32_t>{0, 6, 6, 1}));
    model["fuse_unk"] = true;
    EXPECT_EQ(tokenize(Bpe::from_json(model, "test"), "azzb"), (std::vector<int32_t>{0, 6, 1}));
}

TEST(BpeTest, LongWordIsNotQuadratic) {
    // 100k identical characters: the heap merge loop finishes quickly and merges pairwise.
    auto bpe = Bpe::from_json(tiny_model(), "test");
    auto ids = tokenize(bpe, std::string(100000, 'a') + "b");
    ASSERT_EQ(ids.size(), 100000u);
    EXPECT_EQ(ids.back(), 3);
}

TEST(BpeTest, MergeOutsideVocabularyIsAnError) {
    auto model = tiny_model();
    model["merges"].push_back("c a");
    try {
        Bpe::from_json(model, "tokenizer.json");
        FAIL() << "expected an error";
    } catch (const Error& e) {
        EXPECT_EQ(e.code(), ErrorCode::kInvalidModel);
        EXPECT_NE(std::string(e.what()).find("merges[3] 'c a'"), std::string::npos) << e.what();
    }
}

}  // namespace
}  // namespace moeserve::tokenizer
