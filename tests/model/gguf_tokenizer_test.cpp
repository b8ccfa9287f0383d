// The tokenizer of a GGUF file's metadata (model/formats/gguf_tokenizer.h) against the
// tokenizer.json path: a GGUF whose metadata holds the real Qwen3 or DeepSeek-V3 vocabulary
// (written here from setup.sh's cache, the way llama.cpp's converter lays it out) encodes and
// decodes that tokenizer's goldens exactly as Hugging Face did, and carries the same chat template
// and special tokens. A Kimi-K2 file (tiktoken ranks as byte-level BPE) encodes as the tiktoken
// folder it was written from.
#include <gtest/gtest.h>

#include <fmt/format.h>
#include <unistd.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "moeserve/io/gguf_file.h"
#include "moeserve/io/gguf_writer.h"
#include "moeserve/model/formats/gguf_tokenizer.h"
#include "moeserve/tokenizer/tokenizer.h"
#include "test_support.h"

namespace moeserve::model {
namespace {

std::string read(const std::filesystem::path& p) {
    std::ifstream in(p, std::ios::binary);
    EXPECT_TRUE(in.good()) << p;
    std::ostringstream s;
    s << in.rdbuf();
    return s.str();
}

// A GGUF file holding only the tokenizer of setup.sh's cache folder `name`. The folder is this
// process's own: ctest runs each test case as a process, in parallel, and scratch_dir() empties it.
std::filesystem::path tokenizer_gguf(const std::string& name, int64_t vocab_size) {
    const auto path = test::scratch_dir(fmt::format("gguf_tokenizer_{}_{}", name, ::getpid())) / (name + "_vocab.gguf");
    const auto dir = test::tokenizer_dir(name);
    io::GgufWriter w;
    w.set_string("general.architecture", name == "qwen3" ? "qwen3moe" : "deepseek2");
    set_gguf_tokenizer_metadata(read(dir / "tokenizer.json"), read(dir / "tokenizer_config.json"), vocab_size,
                                dir.string(), w);
    w.write(path);
    return path;
}

class GgufTokenizerTest : public ::testing::Test {
protected:
    static void SetUpTestSuite() { path_ = tokenizer_gguf("qwen3", 151936); }
    static void TearDownTestSuite() { std::filesystem::remove_all(path_.parent_path()); }
    static std::filesystem::path path_;
};
std::filesystem::path GgufTokenizerTest::path_;

TEST_F(GgufTokenizerTest, MetadataIsLaidOutAsLlamaCppWritesIt) {
    const io::GgufCheckpoint f(path_);
    const io::GgufHeader& h = f.metadata();
    EXPECT_EQ(h.get_string("tokenizer.ggml.model"), "gpt2");
    EXPECT_EQ(h.get_string("tokenizer.ggml.pre"), "qwen2");
    EXPECT_EQ(h.get_array("tokenizer.ggml.tokens").size(), 151936u);
    EXPECT_EQ(h.get_array("tokenizer.ggml.tokens").string_at(151643), "<|endoftext|>");
    EXPECT_EQ(h.get_array("tokenizer.ggml.tokens").string_at(151935), "[PAD151935]");
    EXPECT_EQ(h.get_array("tokenizer.ggml.token_type").int_at(151644), 3);  // control
    EXPECT_EQ(h.get_array("tokenizer.ggml.token_type").int_at(151667), 4);  // <think>: user-defined
    EXPECT_EQ(h.get_array("tokenizer.ggml.token_type").int_at(151935), 5);  // unused
    EXPECT_EQ(h.get_int("tokenizer.ggml.eos_token_id"), 151645);
    EXPECT_EQ(h.get_int("tokenizer.ggml.padding_token_id"), 151643);
    EXPECT_EQ(h.find("tokenizer.ggml.bos_token_id"), nullptr);  // Qwen3's bos_token is null
}

// The tokenizer of `gguf` against tokenizer.json of cache folder `name` on its goldens.
void expect_same_as_tokenizer_json(const std::filesystem::path& gguf, const std::string& name) {
    const auto files = gguf_tokenizer_files(io::GgufCheckpoint(gguf).metadata());
    ASSERT_TRUE(files.has_value());
    const auto tok = tokenizer::Tokenizer::from_json(files->tokenizer_json, files->config_json, gguf.string());
    const auto ref = tokenizer::Tokenizer::from_dir(test::tokenizer_dir(name));
    std::ifstream in(test::data_dir() / "tokenizer" / (name + "_goldens.json"));
    const auto goldens = nlohmann::json::parse(in);
    ASSERT_GE(goldens["cases"].size(), 70u);
    for (const auto& c : goldens["cases"]) {
        const auto text = c["text"].get<std::string>();
        const bool special = c["add_special_tokens"].get<bool>();
        const auto ids = tok.encode(text, special);
        EXPECT_EQ(ids, c["ids"].get<std::vector<int32_t>>()) << text;
        EXPECT_EQ(ids, ref.encode(text, special)) << text;
        EXPECT_EQ(tok.decode(ids), c["decoded"].get<std::string>()) << text;
        EXPECT_EQ(tok.decode(ids, true), c["decoded_skip_special"].get<std::string>()) << text;
    }
    EXPECT_EQ(tok.eos_token_id(), ref.eos_token_id());
    EXPECT_EQ(tok.pad_token_id(), ref.pad_token_id());
    EXPECT_EQ(tok.bos_token_id(), ref.bos_token_id());
    ASSERT_TRUE(tok.chat_template().has_value());
    EXPECT_EQ(*tok.chat_template(), *ref.chat_template());
}

TEST_F(GgufTokenizerTest, EncodesAndDecodesTheGoldensLikeTokenizerJson) {
    expect_same_as_tokenizer_json(path_, "qwen3");
}

TEST(GgufDeepseekTokenizer, EncodesAndDecodesTheGoldensLikeTokenizerJson) {
    // llama.cpp's pre-tokenizer name for DeepSeek-V3 / R1's splits, and BOS added as its config says
    const auto path = tokenizer_gguf("deepseek_v3", 129280);
    const io::GgufCheckpoint f(path);
    EXPECT_EQ(f.metadata().get_string("tokenizer.ggml.pre"), "deepseek-v3");
    EXPECT_TRUE(f.metadata().get_bool("tokenizer.ggml.add_bos_token"));
    expect_same_as_tokenizer_json(path, "deepseek_v3");
    std::filesystem::remove_all(path.parent_path());
}

TEST(GgufKimiTokenizer, EncodesAndDecodesLikeTheTiktokenFolder) {
    // The Kimi-style tiktoken folder (setup.sh) as llama.cpp lays out a Kimi-K2 file: byte-level
    // tokens of the ranks, their merges, the reserved specials as control tokens, "kimi-k2".
    const auto dir = test::tokenizer_dir("kimi_k2");
    const auto path = test::scratch_dir(fmt::format("gguf_tokenizer_kimi_{}", ::getpid())) / "kimi_k2_vocab.gguf";
    io::GgufWriter w;
    w.set_string("general.architecture", "deepseek2");
    set_gguf_tokenizer_metadata(tokenizer::tiktoken_folder_tokenizer_json(dir), read(dir / "tokenizer_config.json"),
                                128256, dir.string(), w);
    w.write(path);
    const io::GgufCheckpoint f(path);
    EXPECT_EQ(f.metadata().get_string("tokenizer.ggml.pre"), "kimi-k2");
    EXPECT_EQ(f.metadata().get_array("tokenizer.ggml.token_type").int_at(128017), 3);  // <|im_middle|>: control
    const auto files = gguf_tokenizer_files(f.metadata());
    ASSERT_TRUE(files.has_value());
    const auto tok = tokenizer::Tokenizer::from_json(files->tokenizer_json, files->config_json, path.string());
    const auto ref = tokenizer::Tokenizer::from_dir(dir);
    // Kimi's own split goldens (Han runs, cased words, digits) and DeepSeek's tokenizer goldens.
    std::vector<std::string> texts;
    for (const char* goldens : {"kimi_pattern_goldens.json", "deepseek_v3_goldens.json"}) {
        std::ifstream in(test::data_dir() / "tokenizer" / goldens);
        const nlohmann::json cases = nlohmann::json::parse(in).at("cases");
        for (const auto& c : cases) texts.push_back(c.at("text").get<std::string>());
    }
    ASSERT_GE(texts.size(), 90u);
    for (const std::string& text : texts) {
        for (const bool special : {false, true}) {
            const auto ids = tok.encode(text, special);
            EXPECT_EQ(ids, ref.encode(text, special)) << text;
            EXPECT_EQ(tok.decode(ids), ref.decode(ids)) << text;
        }
    }
    EXPECT_EQ(tok.bos_token_id(), ref.bos_token_id());
    EXPECT_EQ(tok.eos_token_id(), ref.eos_token_id());
    ASSERT_TRUE(tok.chat_template().has_value());
    EXPECT_EQ(*tok.chat_template(), *ref.chat_template());
    std::filesystem::remove_all(path.parent_path());
}

TEST_F(GgufTokenizerTest, RefusesOtherTokenizerModels) {
    io::GgufWriter w;
    w.set_string("tokenizer.ggml.model", "llama");
    const auto p = test::scratch_dir("gguf_tokenizer_bad") / "spm.gguf";
    w.write(p);
    try {
        gguf_tokenizer_files(io::GgufCheckpoint(p).metadata());
        ADD_FAILURE() << "accepted";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("tokenizer.ggml.model 'llama'"), std::string::npos) << e.what();
        EXPECT_NE(std::string(e.what()).find(p.string()), std::string::npos) << e.what();
    }
}

}  // namespace
}  // namespace moeserve::model
