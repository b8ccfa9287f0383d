// tiktoken tokenizers (tokenizer/tiktoken.h): Kimi-K2's pattern in its PCRE2 spelling splits as the
// original does under Python's regex module (tools/goldens/make_kimi_pattern_goldens.py); ranks
// read from a tiktoken file reproduce a real byte-level BPE (Qwen3's vocabulary written as a
// tiktoken file encodes as its tokenizer.json does); a Kimi-style folder (tiktoken.model and a
// tokenizer_config.json naming the class) loads through Tokenizer::from_dir; bad files are one
// line naming the file.
#include "moeserve/tokenizer/tiktoken.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "moeserve/core/base64.h"
#include "moeserve/tokenizer/byte_level.h"
#include "moeserve/tokenizer/chat_prompt.h"
#include "moeserve/tokenizer/regex.h"
#include "moeserve/tokenizer/tokenizer.h"
#include "real_tokenizers.h"
#include "test_support.h"

namespace moeserve::tokenizer {
namespace {

namespace fs = std::filesystem;
using test::error_of;

nlohmann::json read_json(const fs::path& path) {
    std::ifstream in(path);
    EXPECT_TRUE(in.good()) << path;
    return nlohmann::json::parse(in);
}

void write_file(const fs::path& path, const std::string& text) { std::ofstream(path, std::ios::binary) << text; }

std::string base64_encode(std::string_view bytes) {
    static constexpr char kAlphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    std::string out;
    for (size_t i = 0; i < bytes.size(); i += 3) {
        const size_t n = std::min<size_t>(3, bytes.size() - i);
        uint32_t v = 0;
        for (size_t k = 0; k < 3; ++k) v = (v << 8) | (k < n ? static_cast<uint8_t>(bytes[i + k]) : 0U);
        for (size_t k = 0; k < 4; ++k) out += k <= n ? kAlphabet[(v >> (18 - 6 * k)) & 63] : '=';
    }
    return out;
}

TEST(Base64Test, DecodesAndRefusesNonCanonicalText) {
    EXPECT_EQ(base64_decode("aGVsbG8="), "hello");
    EXPECT_EQ(base64_decode("aGk="), "hi");
    EXPECT_EQ(base64_decode("aGV5"), "hey");
    EXPECT_EQ(base64_decode(""), "");
    EXPECT_FALSE(base64_decode("aGk"));   // length
    EXPECT_FALSE(base64_decode("a=Vz"));  // padding inside
    EXPECT_FALSE(base64_decode("aGl="));  // bits left over in the padded quantum
    EXPECT_FALSE(base64_decode("aG!5"));  // outside the alphabet
    for (const std::string s : {"", "a", "ab", "abc", "\xff\x00\x80 bytes"})
        EXPECT_EQ(base64_decode(base64_encode(s)), s);
}

TEST(TiktokenTest, KimiPatternSplitsAsTheOriginal) {
    const auto pattern = tiktoken_pattern("tokenization_kimi.TikTokenTokenizer");
    ASSERT_TRUE(pattern);
    const Regex regex(*pattern, "kimi pattern");
    const auto goldens = read_json(test::data_dir() / "tokenizer" / "kimi_pattern_goldens.json");
    ASSERT_GE(goldens["cases"].size(), 20U);
    for (const auto& c : goldens["cases"]) {
        const std::string text = c["text"];
        std::vector<std::string> pieces;
        for (const auto& [b, e] : regex.find_all(text)) pieces.push_back(text.substr(b, e - b));
        EXPECT_EQ(pieces, c["pieces"].get<std::vector<std::string>>()) << text;
    }
}

// The Kimi-style folder setup.sh derives (scripts/make_kimi_style_tokenizer.py): the ids of
// tiktoken's merge rule written out in Python (the goldens' "ids"), its special tokens, and the
// Kimi-K2 chat format of its template, encoded through the special tokens.
TEST(TiktokenTest, KimiStyleTokenizerEncodesAsTiktoken) {
    const Tokenizer t = Tokenizer::from_dir(test::tokenizer_dir("kimi_k2"));
    EXPECT_EQ(t.vocab_size(), 128256);
    EXPECT_EQ(t.bos_token_id(), 128000);
    EXPECT_EQ(t.eos_token_id(), 128002);
    const auto goldens = read_json(test::data_dir() / "tokenizer" / "kimi_pattern_goldens.json");
    for (const auto& c : goldens["cases"]) {
        const std::string text = c["text"];
        EXPECT_EQ(t.encode(text, false), c["ids"].get<std::vector<TokenId>>()) << text;
        EXPECT_EQ(t.decode(c["ids"].get<std::vector<TokenId>>()), text);
    }
    ASSERT_TRUE(t.chat_template());
    const ChatTemplate tmpl = ChatTemplate::parse(*t.chat_template());
    const nlohmann::ordered_json messages = {{{"role", "user"}, {"content", "Hi"}}};
    const std::string prompt = render_chat_prompt(t, tmpl, messages, /*add_generation_prompt=*/true);
    EXPECT_EQ(prompt,
              "<|im_system|>system<|im_middle|>You are a helpful assistant<|im_end|><|im_user|>user<|im_middle|>Hi"
              "<|im_end|><|im_assistant|>assistant<|im_middle|>");
    const auto ids = encode_chat_prompt(t, tmpl, messages, true);
    EXPECT_EQ(ids.front(), 128010);  // <|im_system|>
    EXPECT_EQ(ids.back(), 128017);   // <|im_middle|>
}

// Qwen3's base vocabulary (ids below its first added token) as tiktoken ranks.
std::vector<std::pair<std::string, int64_t>> qwen3_ranks(const nlohmann::json& tokenizer_json, int64_t end) {
    const ByteLevelAlphabet alphabet;
    std::vector<std::pair<std::string, int64_t>> ranks;
    for (const auto& [token, id] : tokenizer_json["model"]["vocab"].items()) {
        if (id.get<int64_t>() >= end) continue;
        std::string bytes;
        EXPECT_TRUE(alphabet.decode(token, bytes)) << token;
        ranks.emplace_back(bytes, id.get<int64_t>());
    }
    return ranks;
}

TEST(TiktokenTest, RanksReproduceARealByteLevelBpe) {
    // Qwen's tokenizer.json was converted from tiktoken ranks: merging by rank must give its ids.
    const fs::path dir = test::tokenizer_dir("qwen3");
    const nlohmann::json hf = read_json(dir / "tokenizer.json");
    const nlohmann::json config = read_json(dir / "tokenizer_config.json");
    const int64_t first_added = 151643;
    const auto& split = hf["pre_tokenizer"]["pretokenizers"][0];
    ASSERT_EQ(split["type"], "Split");
    const std::string pattern = split["pattern"]["Regex"];
    const TokenizerJson converted =
        tiktoken_tokenizer_json(qwen3_ranks(hf, first_added), pattern, config["added_tokens_decoder"],
                                static_cast<int64_t>(config["added_tokens_decoder"].size()));
    const Tokenizer from_ranks = Tokenizer::from_json(tokenizer_json_text(converted), "", "qwen3 as tiktoken");
    const Tokenizer& reference = real_tokenizer("qwen3");
    const auto goldens = read_json(test::data_dir() / "tokenizer" / "qwen3_goldens.json");
    int compared = 0;
    for (const auto& c : goldens["cases"]) {
        const std::string text = c["text"];
        if (c["decoded"] != text) continue;  // Qwen3's NFC normalizer changed it: tiktoken has none
        EXPECT_EQ(from_ranks.encode(text, false), reference.encode(text, false)) << text;
        ++compared;
    }
    EXPECT_GE(compared, 50);
    EXPECT_EQ(from_ranks.vocab_size(), reference.vocab_size());
}

// A Kimi-style folder: 256 byte tokens and a few merges, [BOS] and <|im_end|> named specials.
fs::path kimi_style_dir(const std::string& name, const std::string& auto_map_class) {
    const fs::path dir = test::scratch_dir(name);
    std::string model;
    int64_t rank = 0;
    for (int b = 0; b < 256; ++b)
        model += base64_encode(std::string(1, static_cast<char>(b))) + " " + std::to_string(rank++) + "\n";
    for (const char* merged : {"he", "ll", "hell", "hello", " w", " wo", "or", " wor", " worl", " world"}) {
        model += base64_encode(merged) + " " + std::to_string(rank++) + "\n";
    }
    write_file(dir / "tiktoken.model", model);
    const nlohmann::json config = {{"auto_map", {{"AutoTokenizer", {auto_map_class, nullptr}}}},
                                   {"tokenizer_class", "TikTokenTokenizer"},
                                   {"bos_token", "[BOS]"},
                                   {"eos_token", "<|im_end|>"},
                                   {"added_tokens_decoder",
                                    {{std::to_string(rank), {{"content", "[BOS]"}, {"special", true}}},
                                     {std::to_string(rank + 2), {{"content", "<|im_end|>"}, {"special", true}}}}}};
    write_file(dir / "tokenizer_config.json", config.dump());
    return dir;
}

TEST(TiktokenTest, KimiStyleFolderLoadsFromDir) {
    const Tokenizer t = Tokenizer::from_dir(kimi_style_dir("tiktoken_kimi", "tokenization_kimi.TikTokenTokenizer"));
    const int32_t base = 266;
    EXPECT_EQ(t.vocab_size(), base + 256);
    EXPECT_EQ(t.bos_token_id(), base);
    EXPECT_EQ(t.eos_token_id(), base + 2);
    EXPECT_EQ(t.id_to_token(base + 1), "<|reserved_token_267|>");
    EXPECT_EQ(t.encode("hello world", false), (std::vector<TokenId>{base - 7, base - 1}));
    EXPECT_EQ(t.encode("[BOS]hello<|im_end|>", false), (std::vector<TokenId>{base, base - 7, base + 2}));
    for (const std::string text : {"hello world", "你好，世界！ Hello World", "tabs\t\n  and 123456", "é😀"}) {
        EXPECT_EQ(t.decode(t.encode(text, false)), text);
    }
    EXPECT_EQ(t.decode(t.encode("[BOS]hi<|im_end|>", false), /*skip_special_tokens=*/true), "hi");
}

TEST(TiktokenTest, BadFilesAreOneLineNamingTheFile) {
    const fs::path unknown = kimi_style_dir("tiktoken_unknown", "tokenization_other.OtherTokenizer");
    const std::string e = error_of([&] { Tokenizer::from_dir(unknown); });
    EXPECT_NE(e.find("tiktoken tokenizer class 'tokenization_other.OtherTokenizer'"), std::string::npos) << e;
    EXPECT_NE(e.find("tokenizer_config.json"), std::string::npos) << e;

    const fs::path bad = kimi_style_dir("tiktoken_bad_line", "tokenization_kimi.TikTokenTokenizer");
    write_file(bad / "tiktoken.model", "YQ== 0\nnot base64! 1\n");
    const std::string line = error_of([&] { Tokenizer::from_dir(bad); });
    EXPECT_NE(line.find("tiktoken.model:2: expected \"BASE64 RANK\""), std::string::npos) << line;

    write_file(bad / "tiktoken.model", "YQ== 0\nYQ== 1\n");
    EXPECT_NE(error_of([&] { Tokenizer::from_dir(bad); }).find("tiktoken.model:2: the token of rank 1 is listed twice"),
              std::string::npos);
    EXPECT_NE(error_of([&] { parse_tiktoken_ranks("", "empty.model"); }).find("empty.model: no tokens"),
              std::string::npos);
    EXPECT_NE(error_of([&] {
                  parse_tiktoken_ranks("YQ== 0\nYg== 2\n", "gap.model");
              }).find("gap.model: rank 2 of 2 tokens; the ranks must be 0..1, each once"),
              std::string::npos);
}

}  // namespace
}  // namespace moeserve::tokenizer
