// The Tokenizer facade: config metadata of the real files, added-token flags on a tiny
// tokenizer, errors for unsupported components and bad input, and streaming detokenization.
#include "moeserve/tokenizer/tokenizer.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <thread>

#include "moeserve/core/error.h"
#include "moeserve/tokenizer/detokenizer.h"
#include "moeserve/core/utf8.h"
#include "test_support.h"

namespace moeserve::tokenizer {
namespace {

// A byte-level tokenizer over a few letters, with added tokens exercising each flag.
nlohmann::json tiny_tokenizer() {
    auto doc = nlohmann::json::parse(R"({
      "version": "1.0", "normalizer": null,
      "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": false, "use_regex": true},
      "decoder": {"type": "ByteLevel"}, "post_processor": null,
      "model": {"type": "BPE", "vocab": {"a": 0, "b": 1, "Ġ": 2, "Ġa": 3}, "merges": ["Ġ a"]},
      "added_tokens": [
        {"id": 4, "content": "<s>", "special": true, "normalized": false,
         "lstrip": false, "rstrip": false, "single_word": false},
        {"id": 5, "content": "<L>", "special": false, "normalized": false,
         "lstrip": true, "rstrip": false, "single_word": false},
        {"id": 6, "content": "<R>", "special": false, "normalized": false,
         "lstrip": false, "rstrip": true, "single_word": false},
        {"id": 7, "content": "ab", "special": false, "normalized": false,
         "lstrip": false, "rstrip": false, "single_word": true},
        {"id": 8, "content": "<s>x", "special": false, "normalized": true,
         "lstrip": false, "rstrip": false, "single_word": false}]})");
    return doc;
}

Tokenizer make_tiny(const nlohmann::json& doc) { return Tokenizer::from_json(doc.dump(), ""); }

using Ids = std::vector<int32_t>;

TEST(TokenizerTest, AddedTokenFlagsFollowHuggingFace) {
    auto tokenizer = make_tiny(tiny_tokenizer());
    // Expected ids checked with HF tokenizers (Tokenizer.fromString of the same JSON).
    EXPECT_EQ(tokenizer.encode("a<s>a"), (Ids{0, 4, 0}));
    EXPECT_EQ(tokenizer.encode("a <L>"), (Ids{0, 5}));  // lstrip swallows the space
    EXPECT_EQ(tokenizer.encode("<R> a"), (Ids{6, 0}));  // rstrip swallows the space
    EXPECT_EQ(tokenizer.encode("<R>  a"), (Ids{6, 0}));
    EXPECT_EQ(tokenizer.encode("a ab b"), (Ids{0, 2, 7, 2, 1}));  // single word: matches
    EXPECT_EQ(tokenizer.encode("aab"), (Ids{0, 0, 1}));           // inside a word: no match
    // Leftmost-longest between the raw "<s>" and the normalized "<s>x": raw tokens go first.
    EXPECT_EQ(tokenizer.encode("<s>x"), (Ids{4}));
}

TEST(TokenizerTest, AddedTokenIdsFollowHuggingFaceNotTheFile) {
    // HF ignores an added token's "id" and numbers new contents after the vocabulary.
    auto doc = tiny_tokenizer();
    for (size_t i = 0; i < doc["added_tokens"].size(); ++i) {
        doc["added_tokens"][i]["id"] = 10 + static_cast<int>(i);
    }
    doc["added_tokens"].push_back(nlohmann::json::parse(R"({"id": 99, "content": "Ġa",
        "special": true, "normalized": false})"));
    auto tokenizer = make_tiny(doc);
    EXPECT_EQ(tokenizer.encode("a<s>a"), (Ids{0, 4, 0}));
    EXPECT_EQ(tokenizer.token_to_id("<R>"), 6);
    EXPECT_EQ(tokenizer.token_to_id("Ġa"), 3);  // already in the vocabulary: keeps its id
    EXPECT_TRUE(tokenizer.is_special(3));
    EXPECT_EQ(tokenizer.decode(Ids{3, 0}, true), "a");
}

TEST(TokenizerTest, NormalizedAddedTokensMatchNormalizedText) {
    // The token is written decomposed; with NFC both it and the text are composed before matching.
    auto doc = tiny_tokenizer();
    doc["normalizer"] = nlohmann::json{{"type", "NFC"}};
    doc["added_tokens"].push_back(nlohmann::json::parse(R"({"id": 9, "content": "<e\u0301>",
        "special": false, "normalized": true, "lstrip": false, "rstrip": false,
        "single_word": false})"));
    auto tokenizer = make_tiny(doc);
    EXPECT_EQ(tokenizer.encode("a<\u00e9>"), (Ids{0, 9}));
    EXPECT_EQ(tokenizer.encode("a<e\u0301>"), (Ids{0, 9}));
}

TEST(TokenizerTest, DecodeSkipsSpecialTokensOnRequest) {
    auto tokenizer = make_tiny(tiny_tokenizer());
    EXPECT_EQ(tokenizer.decode(Ids{4, 3, 5}), "<s> a<L>");
    EXPECT_EQ(tokenizer.decode(Ids{4, 3, 5}, true), " a<L>");
    EXPECT_EQ(tokenizer.decode(Ids{3, 999}), " a");  // unknown ids are skipped, as in HF
    EXPECT_TRUE(tokenizer.is_special(4));
    EXPECT_FALSE(tokenizer.is_special(5));
    EXPECT_EQ(tokenizer.vocab_size(), 9);
}

TEST(TokenizerTest, UnsupportedComponentsAreNamed) {
    const std::pair<const char*, nlohmann::json> cases[] = {
        {"normalizer", nlohmann::json::parse(R"({"type": "Lowercase"})")},
        {"pre_tokenizer", nlohmann::json::parse(R"({"type": "Whitespace"})")},
        {"decoder", nlohmann::json::parse(R"({"type": "WordPiece"})")},
        {"post_processor", nlohmann::json::parse(R"({"type": "BertProcessing"})")},
    };
    for (const auto& [field, spec] : cases) {
        auto doc = tiny_tokenizer();
        doc[field] = spec;
        try {
            make_tiny(doc);
            ADD_FAILURE() << field << ": expected an error";
        } catch (const Error& e) {
            EXPECT_EQ(e.code(), ErrorCode::kUnsupported) << e.what();
            EXPECT_NE(std::string(e.what()).find(spec["type"].get<std::string>()), std::string::npos) << e.what();
            EXPECT_NE(std::string(e.what()).find("tokenizer.json"), std::string::npos) << e.what();
        }
    }
    auto doc = tiny_tokenizer();
    doc["model"]["type"] = "Unigram";
    EXPECT_THROW(make_tiny(doc), Error);
}

// A value of the wrong type anywhere in tokenizer.json is an Error naming the file and the
// top-level field (it was nlohmann's type_error, reported as "internal error").
TEST(TokenizerTest, WrongTypesNameTheFileAndField) {
    const std::vector<std::pair<std::string, nlohmann::json>> cases = {
        {"/normalizer", 5},
        {"/pre_tokenizer", nlohmann::json::array({1, 2})},
        {"/decoder", "ByteLevel"},
        {"/post_processor", 7},
        {"/model/type", 3},
        {"/added_tokens", nlohmann::json::object({{"x", 1}})},
        {"/added_tokens/0/special", "yes"},
        {"/pre_tokenizer/add_prefix_space", "yes"},
    };
    for (const auto& [pointer, value] : cases) {
        auto doc = tiny_tokenizer();
        doc[nlohmann::json::json_pointer(pointer)] = value;
        try {
            (void)Tokenizer::from_json(doc.dump(), "", "/models/x/tokenizer.json");
            ADD_FAILURE() << pointer << ": expected an error";
        } catch (const Error& e) {
            const std::string what = e.what();
            const std::string field = pointer.substr(1, pointer.find('/', 1) - 1);
            EXPECT_NE(what.find("/models/x/tokenizer.json"), std::string::npos) << pointer << ": " << what;
            EXPECT_NE(what.find(field), std::string::npos) << pointer << ": " << what;
        } catch (const std::exception& e) {
            ADD_FAILURE() << pointer << ": not an Error: " << e.what();
        }
    }
}

TEST(TokenizerTest, InvalidInputIsAUserError) {
    auto tokenizer = make_tiny(tiny_tokenizer());
    try {
        tokenizer.encode("ab\xC3");
        FAIL() << "expected an error";
    } catch (const Error& e) {
        EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    }
    EXPECT_THROW(Tokenizer::from_dir(test::scratch_dir("tokenizer_missing")), Error);
    EXPECT_THROW(Tokenizer::from_json("{not json", ""), Error);
}

TEST(TokenizerTest, RealTokenizerMetadata) {
    auto qwen = Tokenizer::from_dir(test::tokenizer_dir("qwen3"));
    EXPECT_EQ(qwen.bos_token_id(), std::nullopt);
    EXPECT_EQ(qwen.eos_token(), "<|im_end|>");
    EXPECT_EQ(qwen.eos_token_id(), 151645);
    EXPECT_EQ(qwen.pad_token_id(), 151643);
    EXPECT_FALSE(qwen.adds_bos_token());
    EXPECT_EQ(qwen.added_tokens().size(), 26u);
    ASSERT_TRUE(qwen.chat_template().has_value());
    EXPECT_NE(qwen.chat_template()->find("<|im_start|>"), std::string::npos);
    EXPECT_EQ(qwen.token_to_id("<think>"), 151667);
    EXPECT_EQ(qwen.id_to_token(9707), "Hello");

    auto deepseek = Tokenizer::from_dir(test::tokenizer_dir("deepseek_v3"));
    EXPECT_EQ(deepseek.bos_token(), "<｜begin▁of▁sentence｜>");
    EXPECT_EQ(deepseek.bos_token_id(), 0);
    EXPECT_EQ(deepseek.eos_token_id(), 1);
    EXPECT_EQ(deepseek.pad_token_id(), 1);
    EXPECT_TRUE(deepseek.adds_bos_token());
    EXPECT_EQ(deepseek.added_tokens().size(), 818u);
    EXPECT_TRUE(deepseek.chat_template().has_value());
    EXPECT_EQ(deepseek.encode("").size(), 1u);
}

TEST(TokenizerTest, ConcurrentEncodesAgree) {
    auto tokenizer = Tokenizer::from_dir(test::tokenizer_dir("deepseek_v3"));
    std::string text;
    for (int i = 0; i < 200; ++i) text += "Thread " + std::to_string(i) + " 说：héllo wörld! ";
    const auto expected = tokenizer.encode(text);
    std::vector<std::vector<int32_t>> results(4);
    std::vector<std::thread> threads;
    for (auto& result : results) {
        threads.emplace_back([&tokenizer, &text, &result] { result = tokenizer.encode(text); });
    }
    for (auto& thread : threads) thread.join();
    for (const auto& result : results) EXPECT_EQ(result, expected);
}

TEST(DetokenizerTest, HoldsBackPartialCharactersTokenByToken) {
    auto tokenizer = Tokenizer::from_dir(test::tokenizer_dir("qwen3"));
    const std::string text = "家族👨‍👩‍👧‍👦 国旗🇯🇵 肌色👍🏽 한국어 ひらがな";
    const auto ids = tokenizer.encode(text, false);
    IncrementalDetokenizer detokenizer(tokenizer);
    std::string streamed;
    int num_empty = 0;
    for (int32_t id : ids) {
        std::string piece = detokenizer.push(id);
        EXPECT_TRUE(utf8_is_valid(piece));
        // Never a replacement character: every piece is whole characters of the input.
        EXPECT_EQ(piece.find("\xEF\xBF\xBD"), std::string::npos);
        num_empty += piece.empty() ? 1 : 0;
        streamed += piece;
    }
    streamed += detokenizer.flush();
    EXPECT_EQ(streamed, text);
    EXPECT_GT(num_empty, 0) << "some emoji tokens should be partial characters";
}

TEST(DetokenizerTest, FlushEmitsAnUnfinishedCharacterAsReplacement) {
    auto tokenizer = Tokenizer::from_dir(test::tokenizer_dir("qwen3"));
    auto ids = tokenizer.encode("🫠", false);  // three byte-level tokens in Qwen3
    ASSERT_GT(ids.size(), 1u);
    IncrementalDetokenizer detokenizer(tokenizer);
    EXPECT_EQ(detokenizer.push(ids[0]), "");
    EXPECT_EQ(detokenizer.flush(), tokenizer.decode(std::span<const int32_t>(ids.data(), 1)));
}

}  // namespace
}  // namespace moeserve::tokenizer
