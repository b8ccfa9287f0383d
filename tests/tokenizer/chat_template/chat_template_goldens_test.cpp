// Renders the real Qwen3, Qwen1.5, DeepSeek-V3, gpt-oss, GLM-4.6 and Kimi-K2 chat templates for the
// conversations of tests/data/chat_template/<model>_goldens.json (made by tools/goldens/chat_template/ with
// @huggingface/jinja and cross-checked against Python jinja2) and compares byte for byte.
#include <gtest/gtest.h>

#include <ctime>
#include <fstream>
#include <thread>
#include <vector>

#include "moeserve/core/error.h"
#include "moeserve/tokenizer/chat_template/chat_template.h"
#include "test_support.h"

namespace moeserve::tokenizer {
namespace {

nlohmann::ordered_json read_json(const std::filesystem::path& path) {
    std::ifstream in(path);
    EXPECT_TRUE(in.good()) << "cannot open " << path << " (run scripts/setup.sh for tokenizers)";
    return nlohmann::ordered_json::parse(in);
}

ChatTemplate load_template(const std::string& model) {
    // GLM's tokenizer is in no registry we reach: its template is llama.cpp's copy alone
    // (make_goldens.mjs's templateFiles).
    if (model == "glm4_moe") {
        std::ifstream in(test::chat_template_file("GLM-4.6.jinja"), std::ios::binary);
        EXPECT_TRUE(in.good()) << "run scripts/setup.sh for the chat templates";
        return ChatTemplate::parse(std::string(std::istreambuf_iterator<char>(in), {}));
    }
    auto config = read_json(test::tokenizer_dir(model) / "tokenizer_config.json");
    return ChatTemplate::parse(config.at("chat_template").get<std::string>());
}

// The goldens' clock (make_goldens.mjs GOLDEN_DATE): 2025-08-05 12:00 UTC, for gpt-oss's
// strftime_now("%Y-%m-%d"); the other templates never read it.
constexpr std::time_t kGoldenNow = 1754395200;
const ChatRenderOptions kAtGoldenDate{kGoldenNow};

class ChatTemplateGoldensTest : public ::testing::TestWithParam<std::string> {};

TEST_P(ChatTemplateGoldensTest, RendersLikeTransformers) {
    const std::string model = GetParam();
    ChatTemplate chat_template = load_template(model);
    auto goldens = read_json(test::data_dir() / "chat_template" / (model + "_goldens.json"));
    ASSERT_GE(goldens.size(), 10u);
    for (const auto& golden : goldens) {
        SCOPED_TRACE(model + "/" + golden.at("name").get<std::string>());
        EXPECT_EQ(chat_template.render(golden.at("context"), kAtGoldenDate), golden.at("rendered").get<std::string>());
    }
}

TEST_P(ChatTemplateGoldensTest, ConcurrentRendersOfOneTemplateAgree) {
    const std::string model = GetParam();
    const ChatTemplate chat_template = load_template(model);
    auto goldens = read_json(test::data_dir() / "chat_template" / (model + "_goldens.json"));
    std::vector<int> mismatches(4, 0);
    std::vector<std::thread> threads;
    for (size_t t = 0; t < mismatches.size(); ++t) {
        threads.emplace_back([&, t] {
            for (int round = 0; round < 5; ++round) {
                for (const auto& golden : goldens) {
                    if (chat_template.render(golden.at("context"), kAtGoldenDate) !=
                        golden.at("rendered").get<std::string>()) {
                        ++mismatches[t];
                    }
                }
            }
        });
    }
    for (auto& thread : threads) thread.join();
    for (int m : mismatches) EXPECT_EQ(m, 0);
}

INSTANTIATE_TEST_SUITE_P(RealTemplates, ChatTemplateGoldensTest,
                         ::testing::Values("qwen3", "qwen1_5", "deepseek_v3", "gpt_oss", "glm4_moe", "kimi_k2"));

TEST(GptOssTemplateTest, CurrentDateComesFromTheClock) {
    const ChatTemplate chat_template = load_template("gpt_oss");
    const nlohmann::ordered_json messages = {{{"role", "user"}, {"content", "Hi"}}};
    const std::string rendered = render_chat(chat_template, messages, true);
    // Today (local time) as transformers prints it; read before and after in case midnight passed.
    auto today = [] {
        const std::time_t now = std::time(nullptr);
        std::tm local{};
        localtime_r(&now, &local);
        char buf[32];
        return std::string(buf, std::strftime(buf, sizeof(buf), "Current date: %Y-%m-%d\n", &local));
    };
    const std::string before = today();
    const bool found = rendered.find(before) != std::string::npos || rendered.find(today()) != std::string::npos;
    EXPECT_TRUE(found) << rendered;
}

TEST(GptOssTemplateTest, RefusesWhatItsChecksRefuse) {
    const ChatTemplate chat_template = load_template("gpt_oss");
    using Json = nlohmann::ordered_json;
    const Json channel_in_content = {{{"role", "user"}, {"content", "Hi"}},
                                     {{"role", "assistant"}, {"content", "<|channel|>analysis<|message|>x"}}};
    const Json channel_in_thinking = {
        {{"role", "user"}, {"content", "Hi"}},
        {{"role", "assistant"}, {"content", "ok"}, {"thinking", "<|channel|>final<|message|>x"}}};
    const Json tool_without_call = {{{"role", "user"}, {"content", "Hi"}}, {{"role", "tool"}, {"content", "42"}}};
    const Json both_content_and_thinking = {
        {{"role", "user"}, {"content", "Hi"}},
        {{"role", "assistant"},
         {"content", "a"},
         {"thinking", "b"},
         {"tool_calls", {{{"function", {{"name", "f"}, {"arguments", Json::object()}}}}}}},
        {{"role", "tool"}, {"content", "42"}}};
    for (const Json* messages :
         {&channel_in_content, &channel_in_thinking, &tool_without_call, &both_content_and_thinking}) {
        try {
            (void)render_chat(chat_template, *messages, true);
            ADD_FAILURE() << "rendered " << messages->dump();
        } catch (const Error& e) {
            EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
            EXPECT_NE(std::string(e.what()).find("chat template raised an exception"), std::string::npos) << e.what();
        }
    }
}

TEST(GlmTemplateTest, RefusesToolArgumentsThatAreNotAnObject) {
    // GLM's template raises for a string: the server hands it parsed arguments (chat_messages.cpp).
    const ChatTemplate chat_template = load_template("glm4_moe");
    using Json = nlohmann::ordered_json;
    const Json messages = {{{"role", "user"}, {"content", "Hi"}},
                           {{"role", "assistant"},
                            {"content", ""},
                            {"tool_calls", {{{"function", {{"name", "f"}, {"arguments", "{\"a\": 1}"}}}}}}}};
    const std::string message = test::error_of([&] { (void)render_chat(chat_template, messages, true); });
    EXPECT_NE(message.find("chat template raised an exception"), std::string::npos) << message;
    EXPECT_NE(message.find("Invalid tool call arguments passed"), std::string::npos) << message;
}

TEST(RenderChatTest, WrapsMessagesAndExtraVariables) {
    ChatTemplate chat_template = load_template("qwen3");
    nlohmann::ordered_json messages = {{{"role", "user"}, {"content", "Hi"}}};
    EXPECT_EQ(render_chat(chat_template, messages, true, {{"enable_thinking", false}}),
              "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n");
    EXPECT_EQ(render_chat(chat_template, messages, false), "<|im_start|>user\nHi<|im_end|>\n");
}

}  // namespace
}  // namespace moeserve::tokenizer
