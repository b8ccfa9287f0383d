// Renders the real Qwen3 and DeepSeek-V3 chat templates for the conversations of
// tests/data/chat_template/<model>_goldens.json (made by tools/goldens/chat_template/ with
// @huggingface/jinja and cross-checked against Python jinja2) and compares byte for byte.
#include <gtest/gtest.h>

#include <fstream>
#include <thread>
#include <vector>

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
    auto config = read_json(test::tokenizer_dir(model) / "tokenizer_config.json");
    return ChatTemplate::parse(config.at("chat_template").get<std::string>());
}

class ChatTemplateGoldensTest : public ::testing::TestWithParam<std::string> {};

TEST_P(ChatTemplateGoldensTest, RendersLikeTransformers) {
    const std::string model = GetParam();
    ChatTemplate chat_template = load_template(model);
    auto goldens = read_json(test::data_dir() / "chat_template" / (model + "_goldens.json"));
    ASSERT_GE(goldens.size(), 10u);
    for (const auto& golden : goldens) {
        SCOPED_TRACE(model + "/" + golden.at("name").get<std::string>());
        EXPECT_EQ(chat_template.render(golden.at("context")), golden.at("rendered").get<std::string>());
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
                    if (chat_template.render(golden.at("context")) != golden.at("rendered").get<std::string>()) {
                        ++mismatches[t];
                    }
                }
            }
        });
    }
    for (auto& thread : threads) thread.join();
    for (int m : mismatches) EXPECT_EQ(m, 0);
}

INSTANTIATE_TEST_SUITE_P(RealTemplates, ChatTemplateGoldensTest, ::testing::Values("qwen3", "deepseek_v3"));

TEST(RenderChatTest, WrapsMessagesAndExtraVariables) {
    ChatTemplate chat_template = load_template("qwen3");
    nlohmann::ordered_json messages = {{{"role", "user"}, {"content", "Hi"}}};
    EXPECT_EQ(render_chat(chat_template, messages, true, {{"enable_thinking", false}}),
              "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n");
    EXPECT_EQ(render_chat(chat_template, messages, false), "<|im_start|>user\nHi<|im_end|>\n");
}

}  // namespace
}  // namespace moeserve::tokenizer
