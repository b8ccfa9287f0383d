// Structured outputs through EngineCore on the tiny random-weight Qwen3-MoE (whose free output is
// gibberish): every constrained output, greedy and sampled, batched with unconstrained requests
// and under preemption, is a sentence of its grammar when it stops, a prefix of one when it hits
// max_tokens, ends with EOS only where the grammar is complete, and its logprobs are masked.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <regex>

#include "engine/engine_test_util.h"
#include "moeserve/model/registry.h"
#include "moeserve/structured/convert.h"
#include "moeserve/tokenizer/tokenizer.h"

namespace moeserve::engine {
namespace {

using namespace testing;
using Json = nlohmann::ordered_json;

const std::filesystem::path kModelDir = MOESERVE_QWEN3_TINY_DIR;

class StructuredOutputTest : public ::testing::Test {
protected:
    static void SetUpTestSuite() {
        pool_ = new ThreadPool(2);
        model::LoadOptions load;
        load.max_model_len = 512;
        model_ = model::load_model(kModelDir, *pool_, load).release();
        tok_ = new tokenizer::Tokenizer(tokenizer::Tokenizer::from_dir(kModelDir));
        const int64_t vocab = model_->info().vocab_size;
        std::vector<std::string> bytes(static_cast<size_t>(vocab));
        for (int32_t id = 0; id < vocab && id < tok_->vocab_size(); ++id) {
            if (!tok_->is_special(id)) tok_->append_token_bytes(id, true, false, bytes[static_cast<size_t>(id)]);
        }
        vocab_ = new std::shared_ptr<const structured::Vocabulary>(
            std::make_shared<structured::Vocabulary>(std::move(bytes), model_->info().eos_token_ids));
    }
    static void TearDownTestSuite() {
        delete vocab_;
        delete tok_;
        delete model_;
        delete pool_;
    }

    static EngineConfig config(int32_t num_blocks = 2048) {
        EngineConfig c;
        c.max_num_seqs = 64;
        c.max_num_batched_tokens = 512;
        c.max_model_len = 512;
        c.block_size = 8;
        c.num_blocks = num_blocks;
        c.vocabulary = *vocab_;
        return c;
    }

    static ipc::AddRequest add(const std::string& id, const std::string& grammar, float temperature, int32_t max_tokens,
                               uint64_t seed) {
        ipc::AddRequest a;
        a.request_id = id;
        a.prompt_token_ids = tok_->encode("Give me the answer as JSON: " + id, false);
        a.sampling.temperature = temperature;
        a.sampling.seed = seed;
        a.sampling.max_tokens = max_tokens;
        a.sampling.grammar = grammar;
        a.sampling.logprobs = 3;
        a.sampling.stop_token_ids = model_->info().eos_token_ids;  // as ipc::validate_request adds the EOS set
        return a;
    }

    static std::string text_of(const std::vector<int32_t>& ids) {
        std::string out;
        for (int32_t id : ids) {
            if (!tok_->is_special(id)) tok_->append_token_bytes(id, true, false, out);
        }
        return out;
    }

    static ThreadPool* pool_;
    static model::Model* model_;
    static tokenizer::Tokenizer* tok_;
    static std::shared_ptr<const structured::Vocabulary>* vocab_;
};
ThreadPool* StructuredOutputTest::pool_ = nullptr;
model::Model* StructuredOutputTest::model_ = nullptr;
tokenizer::Tokenizer* StructuredOutputTest::tok_ = nullptr;
std::shared_ptr<const structured::Vocabulary>* StructuredOutputTest::vocab_ = nullptr;

struct Case {
    std::string name;
    std::string grammar;
    std::function<void(const std::string&)> check;  // the text of an output that stopped
};

std::vector<Case> cases() {
    std::vector<Case> out;
    const Json person = Json::parse(R"({"type": "object", "properties": {
        "name": {"type": "string", "maxLength": 8}, "age": {"type": "integer", "minimum": 0, "maximum": 120},
        "tags": {"type": "array", "items": {"enum": ["a", "b", "c"]}, "maxItems": 3}}, "required": ["name", "age"]})");
    out.push_back({"person", structured::json_schema_to_gbnf(person, "schema"), [](const std::string& text) {
                       const Json j = Json::parse(text);
                       EXPECT_TRUE(j["name"].is_string());
                       EXPECT_LE(j["name"].get<std::string>().size(), 8u * 4);
                       EXPECT_TRUE(j["age"].is_number_integer());
                       EXPECT_GE(j["age"].get<int64_t>(), 0);
                       EXPECT_LE(j["age"].get<int64_t>(), 120);
                   }});
    out.push_back(
        {"date", structured::regex_to_gbnf(R"(\d{4}-(0[1-9]|1[0-2])-[0-3]\d)", "regex"), [](const std::string& text) {
             EXPECT_TRUE(std::regex_match(text, std::regex(R"(\d{4}-(0[1-9]|1[0-2])-[0-3]\d)"))) << text;
         }});
    out.push_back({"choice", structured::choices_to_gbnf({"positive", "negative", "neutral"}, "choice"),
                   [](const std::string& text) {
                       EXPECT_TRUE(text == "positive" || text == "negative" || text == "neutral") << text;
                   }});
    out.push_back(
        {"flags",
         structured::json_schema_to_gbnf(
             Json::parse(R"({"type": "array", "items": {"type": "boolean"}, "minItems": 2, "maxItems": 4})"), "schema"),
         [](const std::string& text) {
             const Json j = Json::parse(text);
             EXPECT_TRUE(j.is_array() && j.size() >= 2 && j.size() <= 4) << text;
         }});
    return out;
}

TEST_F(StructuredOutputTest, EveryOutputMatchesItsGrammarBatchedWithFreeRequests) {
    for (const int32_t num_blocks : {2048, 10}) {  // 9 usable blocks of 8: preemptions
        EngineCore engine(*model_, *pool_, config(num_blocks));
        std::map<int, std::vector<ipc::AddRequest>> arrivals;
        std::map<std::string, const Case*> case_of;
        const auto all = cases();
        int n = 0;
        for (const Case& c : all) {
            for (int k = 0; k < 3; ++k) {
                const std::string id = c.name + std::to_string(k);
                arrivals[n % 4].push_back(add(id, c.grammar, k == 0 ? 0.0f : 1.0f, 48, static_cast<uint64_t>(k)));
                case_of[id] = &c;
                ++n;
            }
        }
        arrivals[1].push_back(greedy_add("free", tok_->encode("hello", false), 20));
        const Collected got = run_to_completion(engine, arrivals);
        if (num_blocks == 10) {
            EXPECT_GT(engine.stats().num_preemptions, 0);
        }
        ASSERT_EQ(got.tokens.at("free").size(), 20u);
        const auto& eos = model_->info().eos_token_ids;
        int stopped = 0;
        for (const auto& [id, c] : case_of) {
            const ipc::RequestOutput& last = got.last.at(id);
            ASSERT_NE(last.finish_reason, FinishReason::kError) << id << ": " << last.error;
            std::vector<int32_t> ids = got.tokens.at(id);
            structured::GrammarMatcher m(structured::GrammarCompiler(*vocab_).compile(c->grammar));
            if (last.finish_reason == FinishReason::kStop) {
                ASSERT_TRUE(last.stop_token_id.has_value());
                EXPECT_NE(std::find(eos.begin(), eos.end(), *last.stop_token_id), eos.end()) << id;
                ids.pop_back();  // the EOS
                ++stopped;
            } else {
                EXPECT_EQ(last.finish_reason, FinishReason::kLength) << id;
                EXPECT_EQ(ids.size(), 48u) << id;
            }
            for (int32_t t : ids) ASSERT_TRUE(m.accept_token(t)) << id << ": token " << t << " after " << text_of(ids);
            if (last.finish_reason == FinishReason::kStop) {
                EXPECT_TRUE(m.is_accepting()) << id;
                c->check(text_of(ids));
            }
        }
        // Bounded grammars (choices, dates) always finish within 48 tokens.
        EXPECT_GE(stopped, 6);
    }
}

// Speculative decoding: each drafted position is masked by the grammar state its drafts reach
// (Sampler::sample_drafts), so constrained requests draft and their outputs, greedy and seeded,
// are token for token those of a run without drafts.
TEST_F(StructuredOutputTest, DraftsAreMaskedByTheGrammarStateTheyReach) {
    std::map<int, std::vector<ipc::AddRequest>> arrivals;
    int n = 0;
    for (const Case& c : cases()) {
        for (int k = 0; k < 2; ++k) {
            arrivals[n++ % 3].push_back(
                add(c.name + std::to_string(k), c.grammar, k == 0 ? 0.0f : 1.0f, 48, static_cast<uint64_t>(k)));
        }
    }
    EngineConfig plain_config = config();
    EngineCore plain(*model_, *pool_, plain_config);
    const Collected expected = run_to_completion(plain, arrivals);
    EngineConfig spec_config = config();
    spec_config.speculative = {SpeculativeConfig::Method::kNgram, 4, 3, 1};
    EngineCore spec(*model_, *pool_, spec_config);
    const Collected got = run_to_completion(spec, arrivals);
    for (const auto& [id, tokens] : expected.tokens) {
        EXPECT_EQ(got.tokens.at(id), tokens) << id;
        EXPECT_EQ(got.last.at(id).finish_reason, expected.last.at(id).finish_reason) << id;
    }
    EXPECT_GT(spec.stats().spec_num_accepted_tokens, 0);
    std::printf("constrained drafts: %lld of %lld accepted\n",
                static_cast<long long>(spec.stats().spec_num_accepted_tokens),
                static_cast<long long>(spec.stats().spec_num_draft_tokens));
}

TEST_F(StructuredOutputTest, LogprobsAreReportedAfterMasking) {
    EngineCore engine(*model_, *pool_, config());
    const std::string g = structured::choices_to_gbnf({"yes", "no"}, "choice");
    engine.add_request(add("c", g, 1.0f, 8, 5));
    std::vector<ipc::TokenLogprobs> lps;
    while (engine.has_unfinished_requests()) {
        for (auto& o : engine.step().outputs) lps.insert(lps.end(), o.new_logprobs.begin(), o.new_logprobs.end());
    }
    ASSERT_FALSE(lps.empty());
    // The first step allows only tokens that start "yes" or "no": every reported token is one.
    for (const auto& [t, lp] : lps[0].top) {
        if (lp == -std::numeric_limits<float>::infinity()) continue;
        const std::string b = (*vocab_)->bytes(t);
        EXPECT_TRUE(std::string("yes").rfind(b, 0) == 0 || std::string("no").rfind(b, 0) == 0) << "'" << b << "'";
    }
    EXPECT_GT(lps[0].logprob, -std::numeric_limits<float>::infinity());
}

TEST_F(StructuredOutputTest, CompleteGrammarEndsEvenBeforeMinTokens) {
    EngineCore engine(*model_, *pool_, config());
    ipc::AddRequest a = add("m", structured::choices_to_gbnf({"ok"}, "choice"), 1.0f, 20, 1);
    a.sampling.min_tokens = 8;
    engine.add_request(a);
    const Collected got = run_to_completion(engine);
    const auto& last = got.last.at("m");
    ASSERT_EQ(last.finish_reason, FinishReason::kStop) << last.error;
    EXPECT_EQ(text_of(got.tokens.at("m")), "ok");
}

// A reasoning model's grammar starts after its end-of-thinking tokens: here the greedy first
// token of the unconstrained run stands in for `</think>`; the grammar then forces "ok".
TEST_F(StructuredOutputTest, GrammarStartsAfterItsTokens) {
    EngineCore free_run(*model_, *pool_, config());
    free_run.add_request(add("f", "", 0.0f, 1, 0));
    const TokenId first = run_to_completion(free_run).tokens.at("f").at(0);

    EngineCore engine(*model_, *pool_, config());
    ipc::AddRequest a = add("f", structured::choices_to_gbnf({"ok"}, "choice"), 0.0f, 20, 0);
    a.sampling.grammar_after_token_ids = {first};
    engine.add_request(a);
    const Collected got = run_to_completion(engine);
    ASSERT_EQ(got.last.at("f").finish_reason, FinishReason::kStop) << got.last.at("f").error;
    const auto& tokens = got.tokens.at("f");
    ASSERT_GE(tokens.size(), 2u);
    EXPECT_EQ(tokens[0], first);
    EXPECT_EQ(text_of(std::vector<int32_t>(tokens.begin() + 1, tokens.end())), "ok");
}

TEST_F(StructuredOutputTest, BadGrammarFailsOnlyThatRequest) {
    EngineCore engine(*model_, *pool_, config());
    engine.add_request(add("bad", "root ::= nope", 0.0f, 8, 0));
    engine.add_request(greedy_add("ok", tok_->encode("hi", false), 4));
    const Collected got = run_to_completion(engine);
    EXPECT_EQ(got.last.at("bad").finish_reason, FinishReason::kError);
    EXPECT_NE(got.last.at("bad").error.find("undefined rule 'nope'"), std::string::npos) << got.last.at("bad").error;
    EXPECT_EQ(got.tokens.at("ok").size(), 4u);

    EngineConfig no_vocab = config();
    no_vocab.vocabulary = nullptr;
    EngineCore plain(*model_, *pool_, no_vocab);
    plain.add_request(add("g", "root ::= \"a\"", 0.0f, 8, 0));
    const Collected c = run_to_completion(plain);
    EXPECT_EQ(c.last.at("g").finish_reason, FinishReason::kError);
}

// A grammar not compiled yet is compiled off the step path: the request waits outside the
// scheduler (counted as waiting) while the others step; a second request with the same grammar
// takes the cached one at once.
TEST_F(StructuredOutputTest, GrammarsCompileOffTheStepPath) {
    EngineCore engine(*model_, *pool_, config());
    engine.add_request(greedy_add("free", tok_->encode("hi", false), 6));
    const std::string grammar = structured::choices_to_gbnf({"yes", "no"}, "choice");
    engine.add_request(add("g1", grammar, 0.0f, 8, 0));
    EXPECT_TRUE(engine.has_compiling_grammars());
    EXPECT_EQ(engine.scheduler().num_waiting(), 1);  // only "free": "g1" is compiling
    EXPECT_EQ(engine.stats().num_waiting, 2);
    const Collected first = run_to_completion(engine);
    EXPECT_FALSE(engine.has_compiling_grammars());
    ASSERT_EQ(first.last.at("g1").finish_reason, FinishReason::kStop) << first.last.at("g1").error;
    const std::string text = text_of(first.tokens.at("g1"));
    EXPECT_TRUE(text == "yes" || text == "no") << text;
    EXPECT_EQ(first.tokens.at("free").size(), 6u);

    engine.add_request(add("g2", grammar, 0.0f, 8, 0));
    EXPECT_FALSE(engine.has_compiling_grammars());  // cached
    EXPECT_EQ(text_of(run_to_completion(engine).tokens.at("g2")), text);
}

TEST_F(StructuredOutputTest, AbortWhileCompilingEndsTheRequest) {
    EngineCore engine(*model_, *pool_, config());
    engine.add_request(add("a", structured::choices_to_gbnf({"left", "right"}, "choice"), 0.0f, 8, 0));
    ASSERT_TRUE(engine.has_compiling_grammars());
    engine.abort(ipc::Abort{{"a"}});
    EXPECT_FALSE(engine.has_compiling_grammars());
    const Collected got = run_to_completion(engine);
    EXPECT_EQ(got.last.at("a").finish_reason, FinishReason::kAbort);
    EXPECT_TRUE(got.tokens.at("a").empty());
    // The same id again, while the aborted compile may still be finishing: a request of its own.
    engine.add_request(add("a", structured::choices_to_gbnf({"up", "down"}, "choice"), 0.0f, 8, 0));
    const Collected again = run_to_completion(engine);
    ASSERT_EQ(again.last.at("a").finish_reason, FinishReason::kStop) << again.last.at("a").error;
    const std::string text = text_of(again.tokens.at("a"));
    EXPECT_TRUE(text == "up" || text == "down") << text;
}

}  // namespace
}  // namespace moeserve::engine
