// Structured outputs on the real Qwen3 vocabulary (151,643 tokens + specials): the cost of one
// step's token mask on a cache miss (a trie walk) at chosen JSON states, on a cache hit (copy +
// applying it to a logits row, what most steps pay), building the vocabulary trie, and compiling
// a large JSON Schema. Compare with a decode step of the bench model (docs/performance.md).
// Usage: structured_bench [--tokenizers DIR]  (default $HOME/.cache/moeserve/tokenizers)
#include <benchmark/benchmark.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "moeserve/engine/sampler.h"
#include "moeserve/structured/convert.h"
#include "moeserve/structured/matcher.h"
#include "moeserve/tokenizer/tokenizer.h"

namespace {

using namespace moeserve;
using Json = nlohmann::ordered_json;

std::filesystem::path g_tokenizers_dir;  // set once in main before any benchmark runs

std::vector<std::string> qwen3_token_bytes() {
    const auto tok = tokenizer::Tokenizer::from_dir(g_tokenizers_dir / "qwen3");
    std::vector<std::string> bytes(151936);
    for (int32_t id = 0; id < tok.vocab_size() && id < 151936; ++id) {
        if (!tok.is_special(id)) tok.append_token_bytes(id, true, false, bytes[static_cast<size_t>(id)]);
    }
    return bytes;
}

const std::shared_ptr<const structured::Vocabulary>& vocab() {
    static const auto v =
        std::make_shared<const structured::Vocabulary>(qwen3_token_bytes(), std::vector<int32_t>{151645});
    return v;
}

const char* kSchema = R"({"type": "object", "properties": {
    "name": {"type": "string", "maxLength": 40}, "age": {"type": "integer", "minimum": 0, "maximum": 150},
    "email": {"type": "string", "format": "email"}, "tags": {"type": "array", "items": {"type": "string"}, "maxItems": 8},
    "address": {"type": "object", "properties": {"street": {"type": "string"}, "zip": {"type": "string", "pattern": "^[0-9]{5}$"}},
                "required": ["street"]},
    "score": {"type": "number"}, "active": {"type": "boolean"}}, "required": ["name", "age", "tags"]})";

std::shared_ptr<const structured::CompiledGrammar> schema_grammar() {
    static structured::GrammarCompiler compiler(vocab());
    return compiler.compile(structured::json_schema_to_gbnf(Json::parse(kSchema), "schema"));
}

// States of a generation: the text generated so far.
const char* kPrefixes[] = {"",
                           "{\"name\":\"",
                           "{\"name\":\"Ann Lee\",\"age\":",
                           "{\"name\":\"A\",\"age\":3,\"tags\":[",
                           "{\"name\":\"A\",\"age\":3,\"tags\":[\"x\"]",
                           "{\"name\":\"A\",\"age\":3,\"tags\":[\"x"};
const char* kStateNames[] = {"start", "in_string_max40", "integer", "array_start", "after_array", "in_string"};

void BM_MaskCacheMiss(benchmark::State& state) {
    const auto g = schema_grammar();
    structured::GrammarMatcher m(g);
    if (!m.accept_bytes(kPrefixes[state.range(0)])) state.SkipWithError("prefix rejected");
    size_t allowed = 0;
    for (auto _ : state) {
        auto mask = g->compute_mask(m.state());
        benchmark::DoNotOptimize(mask.data());
        allowed = 0;
        for (uint32_t w : mask) allowed += static_cast<size_t>(__builtin_popcount(w));
    }
    state.SetLabel(std::string(kStateNames[state.range(0)]) + ", " + std::to_string(allowed) + " tokens allowed");
}
BENCHMARK(BM_MaskCacheMiss)->DenseRange(0, 5)->Unit(benchmark::kMillisecond);

// The same with the request's transition memo warm (a later step of the same request meeting a
// new state: the trie walk alone).
void BM_MaskCacheMissWarmMemo(benchmark::State& state) {
    const auto g = schema_grammar();
    structured::GrammarMatcher m(g);
    if (!m.accept_bytes(kPrefixes[state.range(0)])) state.SkipWithError("prefix rejected");
    structured::TransitionMemo memo;
    g->compute_mask(m.state(), memo);
    for (auto _ : state) {
        auto mask = g->compute_mask(m.state(), memo);
        benchmark::DoNotOptimize(mask.data());
    }
    state.SetLabel(kStateNames[state.range(0)]);
}
BENCHMARK(BM_MaskCacheMissWarmMemo)->DenseRange(0, 5)->Unit(benchmark::kMillisecond);

// What a step pays when the state was seen before: the cached mask applied to a logits row.
void BM_MaskCacheHitApplied(benchmark::State& state) {
    ipc::SamplingParams params;
    engine::Request r("r", {1}, params, 0, 0);
    r.grammar = std::make_unique<structured::GrammarMatcher>(schema_grammar());
    r.grammar->accept_bytes(kPrefixes[1]);
    std::vector<float> logits(151936, 0.5f);
    engine::apply_grammar_mask(logits.data(), 151936, r);  // fills the cache
    for (auto _ : state) {
        engine::apply_grammar_mask(logits.data(), 151936, r);
        benchmark::DoNotOptimize(logits.data());
    }
}
BENCHMARK(BM_MaskCacheHitApplied)->Unit(benchmark::kMicrosecond);

// A whole constrained generation as the engine runs it: per step the mask applied to a logits
// row, a token picked among the allowed ones (a fixed pseudo-random rule), accept_token. Time per
// step; warm: the compiled grammar (and its mask cache) is reused across iterations.
void BM_GenerationStep(benchmark::State& state) {
    const bool bounded = state.range(0) != 0, warm = state.range(1) != 0;
    const std::string schema = bounded ? R"({"type": "array", "items": {"type": "string", "maxLength": 200}})"
                                       : R"({"type": "array", "items": {"type": "string"}})";
    const std::string gbnf = structured::json_schema_to_gbnf(Json::parse(schema), "schema");
    auto shared = std::make_shared<const structured::CompiledGrammar>(structured::parse_gbnf(gbnf), vocab());
    std::vector<float> logits(151936);
    constexpr int kSteps = 64;
    const auto generate = [&](const std::shared_ptr<const structured::CompiledGrammar>& g) {
        ipc::SamplingParams params;
        engine::Request r("r", {1}, params, 0, 0);
        r.grammar = std::make_unique<structured::GrammarMatcher>(g);
        uint64_t x = 88172645463325252ull;
        for (int step = 0; step < kSteps; ++step) {
            std::fill(logits.begin(), logits.end(), 0.0f);
            engine::apply_grammar_mask(logits.data(), 151936, r);
            // The k-th allowed token, k pseudo-random: long tokens inside strings, like a model.
            std::vector<int32_t> allowed;
            for (int32_t t = 0; t < 151936; ++t) {
                if (logits[static_cast<size_t>(t)] == 0.0f && t != 151645) allowed.push_back(t);
            }
            if (allowed.empty()) break;
            x ^= x << 13, x ^= x >> 7, x ^= x << 17;
            r.grammar->accept_token(allowed[x % allowed.size()]);
        }
    };
    if (warm) generate(shared);  // the same generation once before: every state is in the cache
    for (auto _ : state) {
        state.PauseTiming();
        auto g =
            warm ? shared : std::make_shared<const structured::CompiledGrammar>(structured::parse_gbnf(gbnf), vocab());
        state.ResumeTiming();
        generate(g);
    }
    state.SetItemsProcessed(state.iterations() * kSteps);
    state.SetLabel(std::string(bounded ? "maxLength 200" : "unbounded") + (warm ? ", warm" : ", cold"));
}
BENCHMARK(BM_GenerationStep)->ArgsProduct({{0, 1}, {0, 1}})->Unit(benchmark::kMillisecond)->Iterations(3);

void BM_BuildVocabularyTrie(benchmark::State& state) {
    const auto bytes = qwen3_token_bytes();
    for (auto _ : state) {
        structured::Vocabulary v(bytes, {151645});
        benchmark::DoNotOptimize(v.nodes().data());
        state.SetLabel(std::to_string(v.nodes().size()) + " trie nodes");
    }
}
BENCHMARK(BM_BuildVocabularyTrie)->Unit(benchmark::kMillisecond);

// A large schema: 200 properties of mixed types, one level of nesting, $defs.
void BM_CompileLargeSchema(benchmark::State& state) {
    Json props = Json::object();
    for (int i = 0; i < 200; ++i) {
        const std::string k = "field_" + std::to_string(i);
        switch (i % 5) {
            case 0:
                props[k] = {{"type", "string"}, {"maxLength", 64}};
                break;
            case 1:
                props[k] = {{"type", "integer"}, {"minimum", -i}, {"maximum", i * 1000}};
                break;
            case 2:
                props[k] = {{"enum", {"a", "b", "c"}}};
                break;
            case 3:
                props[k] = {{"type", "array"}, {"items", {{"$ref", "#/$defs/item"}}}, {"maxItems", 4}};
                break;
            default:
                props[k] = {{"anyOf", {{{"type", "number"}}, {{"type", "null"}}}}};
                break;
        }
    }
    const Json schema = {{"type", "object"},
                         {"properties", props},
                         {"$defs", {{"item", {{"type", "object"}, {"properties", {{"x", {{"type", "integer"}}}}}}}}}};
    size_t bytes = 0;
    for (auto _ : state) {
        const std::string gbnf = structured::json_schema_to_gbnf(schema, "schema");
        structured::CompiledGrammar g(structured::parse_gbnf(gbnf), vocab());
        bytes = gbnf.size();
        benchmark::DoNotOptimize(g.initial().data.data());
    }
    state.SetLabel(std::to_string(bytes) + " bytes of GBNF");
}
BENCHMARK(BM_CompileLargeSchema)->Unit(benchmark::kMillisecond);

}  // namespace

int main(int argc, char** argv) {
    const char* home = std::getenv("HOME");  // env: HOME (default location of the tokenizer cache)
    g_tokenizers_dir = std::filesystem::path(home != nullptr ? home : ".") / ".cache" / "moeserve" / "tokenizers";
    std::vector<char*> args;
    for (int i = 0; i < argc; ++i) {
        if (std::strcmp(argv[i], "--tokenizers") == 0 && i + 1 < argc) {
            g_tokenizers_dir = argv[++i];
        } else {
            args.push_back(argv[i]);
        }
    }
    int num_args = static_cast<int>(args.size());
    benchmark::Initialize(&num_args, args.data());
    benchmark::RunSpecifiedBenchmarks();
    benchmark::Shutdown();
    return 0;
}
