// OutputProcessor with the real Qwen3 tokenizer: streamed text equals decode(), stop strings cut
// the text (or keep it when asked) and abort the engine request, stop tokens add no text,
// the held-back tail, skip_special_tokens.
#include "moeserve/serve/output_processor.h"

#include <gtest/gtest.h>

#include "test_support.h"

namespace moeserve::serve {
namespace {

class OutputProcessorTest : public ::testing::Test {
protected:
    static void SetUpTestSuite() {
        tok_ = new tokenizer::Tokenizer(tokenizer::Tokenizer::from_dir(test::tokenizer_dir("qwen3")));
    }
    static void TearDownTestSuite() { delete tok_; }

    // Feeds ids one output at a time (the last one finishing with `finish`); returns the deltas.
    static std::vector<TextDelta> feed(OutputProcessor& p, const std::vector<int32_t>& ids,
                                       ipc::FinishReason finish = ipc::FinishReason::kLength,
                                       std::optional<int32_t> stop_token = std::nullopt,
                                       std::vector<std::string>* aborts = nullptr) {
        std::vector<TextDelta> out;
        for (size_t i = 0; i < ids.size(); ++i) {
            ipc::RequestOutput o;
            o.request_id = "r";
            o.new_token_ids = {ids[i]};
            if (i + 1 == ids.size()) {
                o.finish_reason = finish;
                o.stop_token_id = stop_token;
            }
            auto processed = p.process(std::span<const ipc::RequestOutput>(&o, 1));
            for (auto& d : processed.deltas) out.push_back(std::move(d));
            if (aborts) aborts->insert(aborts->end(), processed.engine_aborts.begin(), processed.engine_aborts.end());
        }
        return out;
    }
    static std::string joined(const std::vector<TextDelta>& deltas) {
        std::string s;
        for (const auto& d : deltas) s += d.text;
        return s;
    }

    static tokenizer::Tokenizer* tok_;
};
tokenizer::Tokenizer* OutputProcessorTest::tok_ = nullptr;

TEST_F(OutputProcessorTest, StreamedTextEqualsDecode) {
    const std::string text = "Hello, wörld! 你好 🙂 — done.";
    const auto ids = tok_->encode(text, false);
    OutputProcessor p(*tok_);
    p.add_request("r", {});
    const auto deltas = feed(p, ids);
    EXPECT_EQ(joined(deltas), text);
    EXPECT_TRUE(deltas.back().finished);
    EXPECT_EQ(deltas.back().finish_reason, ipc::FinishReason::kLength);
    EXPECT_FALSE(p.contains("r"));
}

TEST_F(OutputProcessorTest, StopStringCutsTheTextAndAbortsTheEngineRequest) {
    const auto ids = tok_->encode("The answer is 42. END of story", false);
    OutputProcessor p(*tok_);
    p.add_request("r", OutputOptions{.stop = {"END", "never"}});
    std::vector<std::string> aborts;
    const auto deltas = feed(p, ids, ipc::FinishReason::kLength, std::nullopt, &aborts);
    ASSERT_TRUE(deltas.back().finished);
    // The deltas stop at the output that completed "END"; later outputs are ignored.
    EXPECT_EQ(joined(deltas), "The answer is 42. ");
    EXPECT_EQ(deltas.back().finish_reason, ipc::FinishReason::kStop);
    EXPECT_EQ(deltas.back().stop_string, "END");
    EXPECT_EQ(aborts, std::vector<std::string>{"r"});
    EXPECT_LT(deltas.size(), ids.size());
}

TEST_F(OutputProcessorTest, StopStringKeptWhenAsked) {
    const auto ids = tok_->encode("alpha beta gamma", false);
    OutputProcessor p(*tok_);
    p.add_request("r", OutputOptions{.stop = {"eta"}, .include_stop_str_in_output = true});
    EXPECT_EQ(joined(feed(p, ids)), "alpha beta");
}

TEST_F(OutputProcessorTest, TailThatMayStartAStopStringIsHeldBack) {
    const auto ids = tok_->encode("abc def", false);
    OutputProcessor p(*tok_);
    p.add_request("r", OutputOptions{.stop = {"xyz1"}});  // holds back 3 bytes
    std::vector<TextDelta> deltas;
    std::string sent;
    for (size_t i = 0; i < ids.size(); ++i) {
        ipc::RequestOutput o;
        o.request_id = "r";
        o.new_token_ids = {ids[i]};
        for (auto& d : p.process(std::span<const ipc::RequestOutput>(&o, 1)).deltas) sent += d.text;
        const std::string so_far = tok_->decode(std::span<const int32_t>(ids.data(), i + 1));
        EXPECT_EQ(sent, so_far.substr(0, so_far.size() >= 3 ? so_far.size() - 3 : 0));
    }
    ipc::RequestOutput fin;
    fin.request_id = "r";
    fin.finish_reason = ipc::FinishReason::kLength;
    for (auto& d : p.process(std::span<const ipc::RequestOutput>(&fin, 1)).deltas) sent += d.text;
    EXPECT_EQ(sent, "abc def");
}

TEST_F(OutputProcessorTest, StopTokenAddsNoTextUnlessAsked) {
    const int32_t im_end = *tok_->token_to_id("<|im_end|>");
    auto ids = tok_->encode("Hi there", false);
    ids.push_back(im_end);
    {
        OutputProcessor p(*tok_);
        p.add_request("r", OutputOptions{.skip_special_tokens = false});
        const auto deltas = feed(p, ids, ipc::FinishReason::kStop, im_end);
        EXPECT_EQ(joined(deltas), "Hi there");
        EXPECT_EQ(deltas.back().stop_token_id, im_end);
        EXPECT_EQ(deltas.back().token_ids, std::vector<int32_t>{im_end});
    }
    {
        OutputProcessor p(*tok_);
        p.add_request("r", OutputOptions{.include_stop_str_in_output = true, .skip_special_tokens = false});
        EXPECT_EQ(joined(feed(p, ids, ipc::FinishReason::kStop, im_end)), "Hi there<|im_end|>");
    }
}

TEST_F(OutputProcessorTest, SkipSpecialTokens) {
    const int32_t im_start = *tok_->token_to_id("<|im_start|>");
    std::vector<int32_t> ids{im_start};
    for (int32_t t : tok_->encode("ok", false)) ids.push_back(t);
    OutputProcessor keep(*tok_), skip(*tok_);
    keep.add_request("r", OutputOptions{.skip_special_tokens = false});
    skip.add_request("r", OutputOptions{.skip_special_tokens = true});
    EXPECT_EQ(joined(feed(keep, ids)), "<|im_start|>ok");
    EXPECT_EQ(joined(feed(skip, ids)), "ok");
}

TEST_F(OutputProcessorTest, UnknownRequestsAreIgnoredAndErrorsPassThrough) {
    OutputProcessor p(*tok_);
    p.add_request("r", {});
    std::vector<ipc::RequestOutput> outs(2);
    outs[0].request_id = "other";
    outs[1].request_id = "r";
    outs[1].finish_reason = ipc::FinishReason::kError;
    outs[1].error = "too long";
    const auto processed = p.process(outs);
    ASSERT_EQ(processed.deltas.size(), 1u);
    EXPECT_EQ(processed.deltas[0].error, "too long");
    EXPECT_TRUE(processed.deltas[0].finished);
}

}  // namespace
}  // namespace moeserve::serve
