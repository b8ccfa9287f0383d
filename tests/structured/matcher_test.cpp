// GBNF parsing and the byte-level matcher: accept/reject strings, and the token sets allowed at
// chosen states over a small hand-built vocabulary (expected sets written out by hand).
#include "moeserve/structured/matcher.h"

#include <gtest/gtest.h>

#include <set>

#include "moeserve/core/error.h"

namespace moeserve::structured {
namespace {

std::shared_ptr<const Vocabulary> small_vocab() {
    // id:        0    1    2     3      4    5     6      7    8         9 (special) 10 (eos)
    return std::make_shared<Vocabulary>(
        std::vector<std::string>{"a", "b", "ab", "abc", "{", "\"", "\"a", "}", "\xC3\xA9", "", ""},
        std::vector<TokenId>{10});
}

bool matches(const std::string& gbnf, const std::string& text) {
    auto g = std::make_shared<CompiledGrammar>(parse_gbnf(gbnf), small_vocab());
    GrammarMatcher m(g);
    return m.accept_bytes(text) && m.is_accepting();
}

std::set<TokenId> allowed(const GrammarMatcher& m) {
    std::vector<uint32_t> mask;
    m.fill_next_token_bitmask(mask);
    std::set<TokenId> out;
    for (TokenId t = 0; t < static_cast<TokenId>(mask.size() * 32); ++t) {
        if ((mask[static_cast<size_t>(t >> 5)] >> (t & 31)) & 1) out.insert(t);
    }
    return out;
}

TEST(GbnfTest, LiteralsAlternativesAndRepetition) {
    EXPECT_TRUE(matches(R"(root ::= "ab" | "c")", "ab"));
    EXPECT_TRUE(matches(R"(root ::= "ab" | "c")", "c"));
    EXPECT_FALSE(matches(R"(root ::= "ab" | "c")", "a"));
    EXPECT_FALSE(matches(R"(root ::= "ab" | "c")", "abc"));
    EXPECT_TRUE(matches(R"(root ::= "x"* "y")", "xxxy"));
    EXPECT_TRUE(matches(R"(root ::= "x"* "y")", "y"));
    EXPECT_TRUE(matches(R"(root ::= "x"+ "y")", "xy"));
    EXPECT_FALSE(matches(R"(root ::= "x"+ "y")", "y"));
    EXPECT_TRUE(matches(R"(root ::= [a-c]{2,3})", "abc"));
    EXPECT_TRUE(matches(R"(root ::= [a-c]{2,3})", "ca"));
    EXPECT_FALSE(matches(R"(root ::= [a-c]{2,3})", "c"));
    EXPECT_FALSE(matches(R"(root ::= [a-c]{2,3})", "abca"));
    EXPECT_TRUE(matches(R"(root ::= [a-c]{2,})", "abcabc"));
    EXPECT_TRUE(matches(R"(root ::= ("a" | "b")? "c")", "c"));
    EXPECT_TRUE(matches(R"(root ::= ("a" | "b")? "c")", "bc"));
}

TEST(GbnfTest, RulesCommentsAndMultiLine) {
    const std::string g = R"(# a list of numbers
root ::= "[" num ("," num)* "]"
num  ::= [0-9]+
   | "-" [0-9]+   # negative
)";
    EXPECT_TRUE(matches(g, "[1,-22,333]"));
    EXPECT_FALSE(matches(g, "[1,]"));
    EXPECT_FALSE(matches(g, "[]"));
}

TEST(GbnfTest, UnicodeClassesAreUtf8) {
    EXPECT_TRUE(matches(R"(root ::= [^"]+)", "h\xC3\xA9llo \xE2\x82\xAC \xF0\x9F\x98\x80"));
    EXPECT_FALSE(matches(R"(root ::= [^"]+)", "a\"b"));
    EXPECT_TRUE(matches(R"(root ::= [\u00e0-\u00ff])", "\xC3\xA9"));
    EXPECT_FALSE(matches(R"(root ::= [\u00e0-\u00ff])", "e"));
    EXPECT_TRUE(matches(R"(root ::= "\u00e9\x41")",
                        "\xC3\xA9"
                        "A"));
    // A lone UTF-8 continuation byte is not a character.
    EXPECT_FALSE(matches(R"(root ::= .)", "\x80"));
    EXPECT_TRUE(matches(R"(root ::= .)", "\xF0\x9F\x98\x80"));
}

TEST(GbnfTest, ErrorsNameTheProblem) {
    const auto message = [](const std::string& g) {
        try {
            parse_gbnf(g);
        } catch (const Error& e) {
            return std::string(e.what());
        }
        return std::string("no error");
    };
    EXPECT_EQ(message("root ::= foo"), "grammar: line 1 column 10: undefined rule 'foo'");
    EXPECT_EQ(message("x ::= \"a\""), "grammar: no 'root' rule");
    EXPECT_EQ(message("root ::= \"a"), "grammar: line 1 column 12: unterminated string literal");
    EXPECT_NE(message("root ::= root \"a\"").find("rule 'root' can reach itself"), std::string::npos);
    EXPECT_NE(message("root ::= (\"a\"?)*").find("can reach itself"), std::string::npos);
    EXPECT_NE(message("root ::= [a-z]{1,100000}").find("repetition bound over 10000"), std::string::npos);
    EXPECT_NE(message("root ::= \"a\"\nroot ::= \"b\"").find("defined twice"), std::string::npos);
}

TEST(GbnfTest, DeepNestingIsAnErrorNotACrash) {
    const std::string deep = "root ::= " + std::string(100000, '(') + "\"a\"" + std::string(100000, ')');
    EXPECT_THROW(parse_gbnf(deep), Error);
    // A chain of rules, each only naming the next: expansion depth is bounded too.
    std::string chain = "root ::= r0\n";
    for (int i = 0; i < 5000; ++i) chain += "r" + std::to_string(i) + " ::= r" + std::to_string(i + 1) + "\n";
    chain += "r5000 ::= \"x\"\n";
    EXPECT_THROW(CompiledGrammar(parse_gbnf(chain), small_vocab()), Error);
}

TEST(MatcherTest, AnAmbiguousGrammarFailsTheMatcherNotTheProcess) {
    // After n a's, each of the 2^n ways to close them ("b" or "c" each) is a distinct stack.
    auto g = std::make_shared<CompiledGrammar>(parse_gbnf("root ::= x\nx ::= \"a\" x \"b\" | \"a\" x \"c\" | \"d\"\n"),
                                               small_vocab());
    GrammarMatcher m(g);
    bool ok = true;
    for (int i = 0; i < 40 && ok; ++i) ok = m.accept_bytes("a");
    EXPECT_FALSE(ok);
    EXPECT_NE(m.error().find("too ambiguous"), std::string::npos) << m.error();
    std::vector<uint32_t> mask;
    m.fill_next_token_bitmask(mask);
    EXPECT_EQ(allowed(m), (std::set<TokenId>{}));
    EXPECT_FALSE(m.accept_token(0));
}

TEST(GbnfTest, GeneratedNamesDoNotCollideWithUserNames) {
    EXPECT_TRUE(matches("root ::= (\"a\" | \"b\")+ root_1\nroot_1 ::= \"c\"", "abc"));
}

TEST(MatcherTest, AllowedTokensAtChosenStates) {
    // root ::= "{" ( "\"a\"" | "b" )* "}"
    auto g = std::make_shared<CompiledGrammar>(parse_gbnf(R"(root ::= "{" ("\"a\"" | "b")* "}")"), small_vocab());
    GrammarMatcher m(g);
    EXPECT_EQ(allowed(m), (std::set<TokenId>{4}));  // only "{"
    ASSERT_TRUE(m.accept_token(4));
    // After "{": "b", "\"", "\"a", "}" (not "a", "ab", "abc", the special token or EOS).
    EXPECT_EQ(allowed(m), (std::set<TokenId>{1, 5, 6, 7}));
    ASSERT_TRUE(m.accept_token(6));                 // "\"a"
    EXPECT_EQ(allowed(m), (std::set<TokenId>{5}));  // the closing quote only
    EXPECT_FALSE(m.accept_token(1));
    ASSERT_TRUE(m.accept_token(5));
    EXPECT_FALSE(m.is_accepting());
    EXPECT_FALSE(m.accept_token(10));  // EOS before the end
    ASSERT_TRUE(m.accept_token(7));
    EXPECT_TRUE(m.is_accepting());
    EXPECT_TRUE(m.is_terminated());
    EXPECT_EQ(allowed(m), (std::set<TokenId>{10}));  // EOS only
    EXPECT_TRUE(m.accept_token(10));
}

TEST(MatcherTest, MultiByteTokensAndCache) {
    auto g = std::make_shared<CompiledGrammar>(parse_gbnf(R"(root ::= [a-c]* "\u00e9"?)"), small_vocab());
    GrammarMatcher m(g);
    EXPECT_EQ(allowed(m), (std::set<TokenId>{0, 1, 2, 3, 8, 10}));
    const int64_t computed = g->num_mask_computations();
    ASSERT_TRUE(m.accept_token(3));
    EXPECT_EQ(allowed(m), (std::set<TokenId>{0, 1, 2, 3, 8, 10}));
    EXPECT_EQ(g->num_mask_computations(), computed);  // the same state: served from the cache
    ASSERT_TRUE(m.accept_token(8));
    EXPECT_EQ(allowed(m), (std::set<TokenId>{10}));
}

TEST(MatcherTest, RejectedTokenLeavesStateUnchanged) {
    auto g = std::make_shared<CompiledGrammar>(parse_gbnf(R"(root ::= "ab" "c")"), small_vocab());
    GrammarMatcher m(g);
    EXPECT_FALSE(m.accept_token(3 + 1));  // "{"
    EXPECT_FALSE(m.accept_token(9));      // special: no bytes
    ASSERT_TRUE(m.accept_token(2));
    EXPECT_EQ(allowed(m), (std::set<TokenId>{}));  // "c" is not a token of this vocabulary
    EXPECT_TRUE(m.accept_bytes("c"));
    EXPECT_TRUE(m.is_terminated());
}

TEST(MatcherTest, CompilerCachesByText) {
    GrammarCompiler c(small_vocab(), 2);
    auto a = c.compile("root ::= \"a\"");
    EXPECT_EQ(c.compile("root ::= \"a\""), a);
    c.compile("root ::= \"b\"");
    c.compile("root ::= \"c\"");  // evicts the least recently used ("a")
    EXPECT_NE(c.compile("root ::= \"a\""), a);
    EXPECT_THROW(c.compile("root ::= ("), Error);
    EXPECT_EQ(c.cached("root ::= \"b\""), nullptr);  // evicted by "a"
    EXPECT_NE(c.cached("root ::= \"c\""), nullptr);
}

TEST(MatcherTest, CompilerCacheIsBoundedByBytes) {
    // Each grammar's rules take some hundreds of bytes; a budget of about two grammars keeps two,
    // however many entries are allowed.
    GrammarCompiler probe(small_vocab());
    const size_t one = probe.compile("root ::= \"a\" [b-c]*")->memory_bytes() + 20;
    GrammarCompiler c(small_vocab(), 64, 2 * one + one / 2);
    for (const char* g : {"root ::= \"a\" [b-c]*", "root ::= \"b\" [b-c]*", "root ::= \"c\" [b-c]*"}) {
        c.compile(g);
        EXPECT_LE(c.cached_bytes(), 2 * one + one / 2);
    }
    EXPECT_EQ(c.num_cached(), 2u);
    EXPECT_EQ(c.cached("root ::= \"a\" [b-c]*"), nullptr);  // the least recently used went first
    // Masks count: walking a grammar grows what it holds.
    auto g = c.compile("root ::= \"b\" [b-c]*");
    const size_t before = g->memory_bytes();
    GrammarMatcher m(g);
    std::vector<uint32_t> mask;
    m.fill_next_token_bitmask(mask);
    EXPECT_GT(g->memory_bytes(), before);
}

}  // namespace
}  // namespace moeserve::structured
