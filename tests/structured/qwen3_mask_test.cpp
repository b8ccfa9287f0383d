// The trie walk (with its memo and bulk acceptance) against brute force on the real Qwen3
// vocabulary: at chosen states of JSON-schema, regex and GBNF grammars, the mask must equal
// "accept_token succeeds" checked token by token.
#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>

#include "moeserve/structured/convert.h"
#include "moeserve/structured/matcher.h"
#include "moeserve/tokenizer/tokenizer.h"

namespace moeserve::structured {
namespace {

std::shared_ptr<const Vocabulary> qwen3_vocab() {
    const auto tok = tokenizer::Tokenizer::from_dir(std::filesystem::path(MOESERVE_CACHE_DIR) / "tokenizers" / "qwen3");
    std::vector<std::string> bytes(static_cast<size_t>(tok.vocab_size()));
    for (int32_t id = 0; id < tok.vocab_size(); ++id) {
        if (!tok.is_special(id)) tok.append_token_bytes(id, true, false, bytes[static_cast<size_t>(id)]);
    }
    return std::make_shared<Vocabulary>(std::move(bytes), std::vector<TokenId>{151645});
}

void expect_mask_is_brute_force(const std::shared_ptr<const CompiledGrammar>& g, const std::string& prefix) {
    GrammarMatcher m(g);
    ASSERT_TRUE(m.accept_bytes(prefix)) << prefix;
    std::vector<uint32_t> mask;
    m.fill_next_token_bitmask(mask);
    int64_t allowed = 0;
    StackSet cur, next;
    std::vector<int32_t> scratch;
    for (TokenId t = 0; t < g->vocabulary().size(); ++t) {
        // Brute force: the token's bytes through advance() one by one.
        const std::string& bytes = g->vocabulary().bytes(t);
        bool ok = !bytes.empty();
        cur = m.state();
        for (size_t i = 0; ok && i < bytes.size(); ++i) {
            g->advance(cur, static_cast<uint8_t>(bytes[i]), next, scratch);
            ok = !next.empty();
            std::swap(cur, next);
        }
        const bool bit = (mask[static_cast<size_t>(t >> 5)] >> (t & 31)) & 1;
        ASSERT_EQ(bit, ok) << "token " << t << " '" << g->vocabulary().bytes(t) << "' after '" << prefix << "'";
        allowed += ok;
    }
    EXPECT_GT(allowed, 0) << prefix;
}

TEST(Qwen3MaskTest, TrieWalkEqualsBruteForce) {
    const auto vocab = qwen3_vocab();
    GrammarCompiler compiler(vocab);
    const auto schema = compiler.compile(json_schema_to_gbnf(nlohmann::ordered_json::parse(R"({"type": "object",
        "properties": {"name": {"type": "string", "maxLength": 5}, "bio": {"type": "string"},
        "n": {"type": "integer", "minimum": -20, "maximum": 300}, "xs": {"type": "array", "items": {"type": "number"}}},
        "required": ["name", "bio", "n", "xs"]})"),
                                                             "schema"));
    for (const char* p :
         {"", "{\"name\":\"", "{\"name\":\"ab\xC3", "{\"name\":\"abcd", "{\"name\":\"a\",\"bio\":\"",
          "{\"name\":\"a\",\"bio\":\"x\\", "{\"name\":\"a\",\"bio\":\"x\",\"n\":-",
          "{\"name\":\"a\",\"bio\":\"x\",\"n\":3", "{\"name\":\"a\",\"bio\":\"x\",\"n\":3,\"xs\":[1.5"}) {
        expect_mask_is_brute_force(schema, p);
    }
    expect_mask_is_brute_force(compiler.compile(regex_to_gbnf(R"([a-z ]{3,20}(\.|!))", "regex")), "ab");
    expect_mask_is_brute_force(compiler.compile("root ::= (\"SELECT \" [a-z]+ (\", \" [a-z]+)* \" FROM t\")+\n"),
                               "SELECT a");
}

}  // namespace
}  // namespace moeserve::structured
