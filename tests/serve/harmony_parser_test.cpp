// gpt-oss's harmony output through the openai_gptoss reasoning parser and the openai tool parser
// (serve/openai/harmony_parser.h), on crafted outputs: whole, streamed a few bytes at a time, and
// split in two at every byte; reasoning + final, calls with and without reasoning, the commentary
// preamble, recipients before and after the channel, malformed and unterminated outputs. Then
// through the real gpt-oss tokenizer: its markers are special tokens, kept only when the
// detokenizer keeps special tokens.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "moeserve/serve/openai/chat_messages.h"
#include "moeserve/serve/openai/chat_output.h"
#include "moeserve/serve/output_processor.h"
#include "moeserve/tokenizer/tokenizer.h"
#include "test_support.h"

namespace moeserve::serve::openai {
namespace {

using Json = nlohmann::ordered_json;

struct Result {
    std::string reasoning, content;
    std::vector<ToolCall> calls;
    int32_t name_deltas = 0;
    bool calls_made = false;
};

ChatOutputOptions harmony_options(bool reasoning, const ToolRequest* tools) {
    ChatOutputOptions o;
    if (reasoning) o.reasoning = ReasoningParser::Format::kGptOss;
    o.tools = tools;
    o.tool_parser = "openai";
    return o;
}

// Feeds `pieces` in order, then finish(), and folds every delta.
Result run(const ChatOutputOptions& options, const std::vector<std::string_view>& pieces) {
    ChatOutput out(options);
    Result r;
    ToolParseResult folded;
    const auto fold = [&](const ChatDelta& d) {
        r.reasoning += d.reasoning;
        folded.add({d.content, d.tool_calls});
        for (const auto& c : d.tool_calls) {
            if (!c.name) continue;
            ++r.name_deltas;
            EXPECT_TRUE(c.id && c.id->rfind("call_", 0) == 0);
        }
    };
    for (std::string_view piece : pieces) fold(out.push(piece));
    fold(out.finish());
    r.content = folded.content;
    r.calls = folded.calls;
    r.calls_made = out.calls_made();
    return r;
}

void expect_same(const Result& a, const Result& b, const std::string& how) {
    EXPECT_EQ(a.reasoning, b.reasoning) << how;
    EXPECT_EQ(a.content, b.content) << how;
    EXPECT_EQ(a.name_deltas, b.name_deltas) << how;
    ASSERT_EQ(a.calls.size(), b.calls.size()) << how;
    for (size_t i = 0; i < a.calls.size(); ++i) {
        EXPECT_EQ(a.calls[i].name, b.calls[i].name) << how;
        EXPECT_EQ(a.calls[i].arguments, b.calls[i].arguments) << how;
    }
}

// The whole text at once; every split must give the same: pieces of 1, 2, 3, 5 and 7 bytes, and
// two pieces cut at every byte.
Result parse(const ChatOutputOptions& options, const std::string& text, bool well_formed = true) {
    const Result whole = run(options, {text});
    for (size_t step : {1, 2, 3, 5, 7}) {
        std::vector<std::string_view> pieces;
        for (size_t i = 0; i < text.size(); i += step) pieces.push_back(std::string_view(text).substr(i, step));
        expect_same(run(options, pieces), whole, "step " + std::to_string(step));
    }
    for (size_t cut = 1; cut < text.size(); ++cut) {
        const std::string_view t(text);
        expect_same(run(options, {t.substr(0, cut), t.substr(cut)}), whole, "cut at " + std::to_string(cut));
    }
    if (well_formed) {  // no marker reaches the user
        EXPECT_EQ(whole.reasoning.find("<|"), std::string::npos) << whole.reasoning;
        for (const auto& call : whole.calls) EXPECT_EQ(call.arguments.find("<|"), std::string::npos);
    }
    return whole;
}

ToolRequest auto_tools() {
    ToolRequest t;
    t.tools = Json::parse(R"([{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object",
        "properties": {"city": {"type": "string"}}, "required": ["city"]}}}])");
    t.choice = ToolRequest::Choice::kAuto;
    return t;
}

TEST(HarmonyParserTest, ReasoningThenFinal) {
    const auto o = harmony_options(true, nullptr);
    const std::string text =
        "<|channel|>analysis<|message|>User says hi. Reply.<|end|><|start|>assistant<|channel|>final<|message|>"
        "Hello! How can I help?";
    for (const std::string end : {"", "<|return|>"}) {  // <|return|> is a stop token: usually not in the text
        const Result r = parse(o, text + end);
        EXPECT_EQ(r.reasoning, "User says hi. Reply.");
        EXPECT_EQ(r.content, "Hello! How can I help?");
        EXPECT_TRUE(r.calls.empty());
    }
    // The reasoning parser alone names reasoning_parser_names()'s entry.
    ReasoningParser::Format format{};
    EXPECT_TRUE(reasoning_format_of("openai_gptoss", format));
    EXPECT_EQ(format, ReasoningParser::Format::kGptOss);
    ReasoningParser alone(format, ReasoningParser::Start::kOpen);
    ReasoningDelta d = alone.push(text);
    const ReasoningDelta rest = alone.finish();
    EXPECT_EQ(d.reasoning + rest.reasoning, "User says hi. Reply.");
    EXPECT_EQ(d.content + rest.content, "Hello! How can I help?");
}

TEST(HarmonyParserTest, ToolCallAfterReasoning) {
    const ToolRequest tools = auto_tools();
    const auto o = harmony_options(true, &tools);
    const Result r = parse(o,
                           "<|channel|>analysis<|message|>Need the weather.<|end|><|start|>assistant<|channel|>"
                           "commentary to=functions.get_weather <|constrain|>json<|message|>{\"city\": \"Paris\"}"
                           "<|call|>");
    EXPECT_EQ(r.reasoning, "Need the weather.");
    EXPECT_EQ(r.content, "");
    ASSERT_EQ(r.calls.size(), 1u);
    EXPECT_EQ(r.calls[0].name, "get_weather");
    EXPECT_EQ(r.calls[0].arguments, "{\"city\": \"Paris\"}");
    EXPECT_EQ(r.name_deltas, 1);
    EXPECT_TRUE(r.calls_made);
}

TEST(HarmonyParserTest, RecipientBeforeTheChannelAndWithoutReasoning) {
    const ToolRequest tools = auto_tools();
    for (bool reasoning : {true, false}) {
        const auto o = harmony_options(reasoning, &tools);
        // Right after the prompt's <|start|>assistant, the recipient comes first.
        Result r =
            parse(o, " to=functions.get_weather<|channel|>commentary json<|message|>{\"city\":\"Lima\"}<|call|>");
        ASSERT_EQ(r.calls.size(), 1u);
        EXPECT_EQ(r.calls[0].name, "get_weather");
        EXPECT_EQ(r.calls[0].arguments, "{\"city\":\"Lima\"}");
        EXPECT_EQ(r.content, "");
        EXPECT_EQ(r.reasoning, "");
        // The same after a reasoning message, as a later message.
        r = parse(o,
                  "<|channel|>analysis<|message|>hmm<|end|><|start|>assistant to=functions.get_weather"
                  "<|channel|>commentary <|constrain|>json<|message|>  {\"city\": \"Oslo\"}\n<|call|>");
        ASSERT_EQ(r.calls.size(), 1u);
        EXPECT_EQ(r.calls[0].arguments, "{\"city\": \"Oslo\"}");  // surrounding spaces are not arguments
        EXPECT_EQ(r.reasoning, reasoning ? "hmm" : "");           // the tool parser alone drops analysis
    }
}

TEST(HarmonyParserTest, PreambleThenTwoCalls) {
    const ToolRequest tools = auto_tools();
    const Result r = parse(harmony_options(true, &tools),
                           "<|channel|>analysis<|message|>Two cities.<|end|>"
                           "<|start|>assistant<|channel|>commentary<|message|>Checking both cities.<|end|>"
                           "<|start|>assistant to=functions.get_weather<|channel|>commentary json<|message|>"
                           "{\"city\": \"Paris\"}<|call|>"
                           "<|start|>assistant to=functions.get_weather<|channel|>commentary json<|message|>"
                           "{\"city\": \"Tokyo\"}<|call|>");
    EXPECT_EQ(r.reasoning, "Two cities.");
    EXPECT_EQ(r.content, "Checking both cities.");
    ASSERT_EQ(r.calls.size(), 2u);
    EXPECT_EQ(r.calls[0].arguments, "{\"city\": \"Paris\"}");
    EXPECT_EQ(r.calls[1].arguments, "{\"city\": \"Tokyo\"}");
    EXPECT_EQ(r.name_deltas, 2);
}

TEST(HarmonyParserTest, CallsWithoutTheToolParserAreNotContent) {
    // --reasoning-parser openai_gptoss alone (or tool_choice none): a call message is neither
    // reasoning nor content; the final answer still is content.
    const Result r = parse(harmony_options(true, nullptr),
                           "<|channel|>commentary to=functions.get_weather json<|message|>{}<|call|>"
                           "<|start|>assistant<|channel|>final<|message|>done");
    EXPECT_TRUE(r.calls.empty());
    EXPECT_EQ(r.content, "done");
    EXPECT_FALSE(r.calls_made);
}

TEST(HarmonyParserTest, BuiltInToolMessagesAreReasoning) {
    const Result r = parse(harmony_options(true, nullptr),
                           "<|channel|>analysis to=browser.search code<|message|>{\"query\": \"x\"}<|call|>");
    EXPECT_EQ(r.reasoning, "{\"query\": \"x\"}");
    EXPECT_EQ(r.content, "");
}

TEST(HarmonyParserTest, MalformedAndUnterminatedOutputs) {
    const ToolRequest tools = auto_tools();
    const auto o = harmony_options(true, &tools);
    // No harmony at all: content.
    EXPECT_EQ(parse(o, "Just text, <| not a marker |>.").content, "Just text, <| not a marker |>.");
    // Cut off inside the reasoning, inside a header, inside the arguments.
    Result r = parse(o, "<|channel|>analysis<|message|>still thinking");
    EXPECT_EQ(r.reasoning, "still thinking");
    EXPECT_EQ(r.content, "");
    r = parse(o, "<|channel|>analysis<|message|>a<|end|><|start|>assistant<|channel|>fin");
    EXPECT_EQ(r.reasoning, "a");
    EXPECT_EQ(r.content, "");
    r = parse(o, "<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{\"city\": \"Pa");
    ASSERT_EQ(r.calls.size(), 1u);
    EXPECT_EQ(r.calls[0].arguments, "{\"city\": \"Pa");  // as far as it went
    // A call without arguments, a call without a name, a header ended without a body.
    r = parse(o, "<|channel|>commentary to=functions.get_weather<|message|><|call|>");
    ASSERT_EQ(r.calls.size(), 1u);
    EXPECT_EQ(r.calls[0].arguments, "{}");
    r = parse(o, "<|channel|>commentary to=functions. json<|message|>{}<|call|>");
    EXPECT_TRUE(r.calls.empty());
    r = parse(o, "<|channel|>analysis<|end|><|start|>assistant<|channel|>final<|message|>ok<|return|>");
    EXPECT_EQ(r.reasoning, "");
    EXPECT_EQ(r.content, "ok");
    // Marker-like text inside a body is text; a new <|start|> ends a body that was not ended.
    r = parse(o,
              "<|channel|>final<|message|>a <| b |> c<|en d<|start|>assistant<|channel|>final<|message|> more"
              "<|return|>");
    EXPECT_EQ(r.content, "a <| b |> c<|en d more");
    // Without the opening channel (lenient): the body is content.
    EXPECT_EQ(parse(o, "<|message|>bare<|end|>").content, "bare");
}

// Random mixes of markers, marker fragments and text (a fixed LCG): no split changes the result,
// and nothing crashes or loops.
TEST(HarmonyParserTest, RandomMixesParseTheSameHoweverSplit) {
    static const std::vector<std::string> kPieces = {"<|start|>",
                                                     "assistant",
                                                     "<|channel|>",
                                                     "analysis",
                                                     "final",
                                                     "commentary",
                                                     " to=functions.f",
                                                     " to=browser.x",
                                                     "<|constrain|>",
                                                     "json",
                                                     "<|message|>",
                                                     "<|end|>",
                                                     "<|call|>",
                                                     "<|return|>",
                                                     "{\"a\": 1}",
                                                     " ",
                                                     "\n",
                                                     "text",
                                                     "<|",
                                                     "|>",
                                                     "<|mess",
                                                     "to=",
                                                     "functions.",
                                                     "é東"};
    const ToolRequest tools = auto_tools();
    uint64_t state = 20250805;
    const auto next = [&state] {
        state = state * 6364136223846793005ULL + 1442695040888963407ULL;
        return static_cast<size_t>(state >> 33);
    };
    for (int i = 0; i < 60; ++i) {
        std::string text;
        const size_t n = 1 + next() % 24;
        for (size_t k = 0; k < n; ++k) text += kPieces[next() % kPieces.size()];
        SCOPED_TRACE(text);
        (void)parse(harmony_options(i % 2 == 0, &tools), text, /*well_formed=*/false);
    }
}

// The markers are special tokens of the gpt-oss tokenizer: the output path must keep special
// tokens (skip_special_tokens false) for the parsers to see them; the stop token (<|call|>,
// <|return|>) adds no text.
TEST(HarmonyParserTest, ThroughTheGptOssTokenizer) {
    const auto tokenizer = tokenizer::Tokenizer::from_dir(test::tokenizer_dir("gpt_oss"));
    const std::string output =
        "<|channel|>analysis<|message|>Weather in 東京?<|end|><|start|>assistant<|channel|>commentary "
        "to=functions.get_weather <|constrain|>json<|message|>{\"city\": \"東京\"}<|call|>";
    std::vector<int32_t> ids = tokenizer.encode(output, false);
    ASSERT_EQ(ids.back(), 200012);  // <|call|>
    for (bool skip : {false, true}) {
        OutputProcessor processor(tokenizer);
        processor.add_request("r", OutputOptions{.skip_special_tokens = skip});
        const ToolRequest tools = auto_tools();
        ChatOutput chat(harmony_options(true, &tools));
        std::string reasoning, content;
        ToolParseResult calls;
        for (size_t i = 0; i < ids.size(); ++i) {  // one token per engine step
            ipc::RequestOutput o;
            o.request_id = "r";
            o.new_token_ids = {ids[i]};
            if (i + 1 == ids.size()) {
                o.finish_reason = ipc::FinishReason::kStop;
                o.stop_token_id = ids[i];
            }
            const std::vector<ipc::RequestOutput> step{o};
            const OutputProcessor::Processed processed = processor.process(step);
            for (const TextDelta& d : processed.deltas) {
                ChatDelta c = chat.push(d.text);
                if (d.finished) {
                    const ChatDelta last = chat.finish();
                    c.reasoning += last.reasoning;
                    c.content += last.content;
                    c.tool_calls.insert(c.tool_calls.end(), last.tool_calls.begin(), last.tool_calls.end());
                }
                reasoning += c.reasoning;
                calls.add({c.content, c.tool_calls});
            }
        }
        if (!skip) {
            EXPECT_EQ(reasoning, "Weather in 東京?");
            EXPECT_EQ(calls.content, "");
            ASSERT_EQ(calls.calls.size(), 1u);
            EXPECT_EQ(calls.calls[0].name, "get_weather");
            EXPECT_EQ(calls.calls[0].arguments, "{\"city\": \"東京\"}");
        } else {
            // Markers gone: the text reads as plain content, and no call is found.
            EXPECT_TRUE(calls.calls.empty());
            EXPECT_EQ(calls.content,
                      "analysisWeather in 東京?assistantcommentary to=functions.get_weather json{\"city\": \"東京\"}");
        }
    }
}

// gpt-oss's and Kimi-K2's templates print arguments|tojson (Kimi's, as released, without a
// string check): they get objects; the others keep JSON text.
TEST(HarmonyParserTest, OnlyTojsonTemplatesGetArgumentObjects) {
    for (const char* model : {"gpt_oss", "qwen3", "deepseek_v3", "kimi_k2"}) {
        const auto tokenizer = tokenizer::Tokenizer::from_dir(test::tokenizer_dir(model));
        ASSERT_TRUE(tokenizer.chat_template().has_value()) << model;
        const bool tojson = std::string(model) == "gpt_oss" || std::string(model) == "kimi_k2";
        EXPECT_EQ(template_wants_argument_objects(*tokenizer.chat_template()), tojson) << model;
    }
    EXPECT_TRUE(tool_parser_reads_special_tokens("openai"));
    EXPECT_TRUE(tool_parser_reads_special_tokens("kimi_k2"));
    EXPECT_FALSE(tool_parser_reads_special_tokens("hermes"));
}

}  // namespace
}  // namespace moeserve::serve::openai
