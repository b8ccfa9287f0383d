// The engine-flag table: what serve parses reaches a rank unchanged through rank_engine_argv, a
// flag reads the same in every command's help, and the fingerprint holds exactly the agreed flags.
#include "moeserve/cli/engine_flags.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace moeserve::cli {
namespace {

// Parses args (after the command name) as `command`'s engine flags would.
EngineOptions parse(EngineCommand command, std::vector<std::string> args) {
    CLI::App app;
    CLI::App* sub = app.add_subcommand("cmd");
    EngineOptions o = engine_defaults(command);
    add_engine_flags(sub, o, command);
    args.insert(args.begin(), "cmd");
    std::vector<const char*> argv = {"moeserve"};
    for (const auto& a : args) argv.push_back(a.c_str());
    app.parse(static_cast<int>(argv.size()), argv.data());
    return o;
}

// A value other than the default for every flag serve takes.
const std::vector<std::string> kEveryServeFlag = {
    "/models/m",
    "--tokenizer",
    "/tok",
    "--max-num-seqs",
    "7",
    "--max-model-len",
    "333",
    "--max-num-batched-tokens",
    "99",
    "--block-size",
    "32",
    "--gpu-memory-utilization",
    "0.35",
    "--kv-cache-memory",
    "3G",
    "--no-enable-prefix-caching",
    "--seed",
    "18446744073709551615",
    "--threads",
    "3",
    "--log-level",
    "debug",
    "-q",
    "w8a8-all",
    "--scheduling-policy",
    "priority",
    "--kv-cache-dtype",
    "fp8",
    "--dtype",
    "float32",
    "--speculative-config",
    "{\"method\": \"ngram\", \"num_speculative_tokens\": 3}",
    "--kv-transfer-config",
    "{\"kv_role\": \"kv_both\"}",
    "--enable-eplb",
    "--eplb-config",
    "{\"window_size\": 5}",
    "--pd-hybrid",
};

TEST(EngineFlags, EveryServeFlagReachesTheRankUnchanged) {
    const EngineOptions served = parse(EngineCommand::kServe, kEveryServeFlag);
    EXPECT_EQ(served.model, "/models/m");
    EXPECT_EQ(served.max_num_seqs, 7);
    EXPECT_DOUBLE_EQ(served.gpu_memory_utilization, 0.35);
    EXPECT_FALSE(served.enable_prefix_caching);
    EXPECT_EQ(served.seed, UINT64_MAX);
    EXPECT_EQ(served.quantization, "w8a8-all");
    EXPECT_TRUE(served.enable_eplb);
    EXPECT_TRUE(served.pd_hybrid);

    const std::vector<std::string> argv = rank_engine_argv(served);
    const EngineOptions rank = parse(EngineCommand::kRank, argv);
    EXPECT_EQ(rank_engine_argv(rank), argv);
    EXPECT_EQ(rank.tokenizer, "/tok");
    EXPECT_EQ(rank.max_model_len, 333);
    EXPECT_EQ(rank.max_num_batched_tokens, 99);
    EXPECT_EQ(rank.block_size, 32);
    EXPECT_DOUBLE_EQ(rank.gpu_memory_utilization, 0.35);
    EXPECT_EQ(rank.kv_cache_memory, "3G");
    EXPECT_FALSE(rank.enable_prefix_caching);
    EXPECT_EQ(rank.seed, UINT64_MAX);
    EXPECT_EQ(rank.threads, 3);
    EXPECT_EQ(rank.log_level, "debug");
    EXPECT_EQ(rank.scheduling_policy, "priority");
    EXPECT_EQ(rank.kv_cache_dtype, "fp8");
    EXPECT_EQ(rank.dtype, "float32");
    EXPECT_EQ(rank.speculative_config, served.speculative_config);
    EXPECT_EQ(rank.kv_transfer_config, served.kv_transfer_config);
    EXPECT_TRUE(rank.enable_eplb);
    EXPECT_EQ(rank.eplb_config, "{\"window_size\": 5}");
    EXPECT_TRUE(rank.pd_hybrid);
}

TEST(EngineFlags, DefaultsReachTheRankUnchanged) {
    const EngineOptions served = parse(EngineCommand::kServe, {"--model", "/m"});
    const std::vector<std::string> argv = rank_engine_argv(served);
    EXPECT_THAT(argv, testing::Contains("--enable-prefix-caching"));
    EXPECT_THAT(argv, testing::Not(testing::Contains("--pd-hybrid")));
    EXPECT_THAT(argv, testing::Not(testing::Contains("--tokenizer")));  // empty: the model's
    EXPECT_EQ(rank_engine_argv(parse(EngineCommand::kRank, argv)), argv);
}

TEST(EngineFlags, GenerateTakesTheEngineFlagsOfOneEngine) {
    const EngineOptions g = parse(EngineCommand::kGenerate, {"--model", "/m", "--dtype", "float32", "--tokenizer",
                                                             "/tok", "--scheduling-policy", "priority"});
    EXPECT_EQ(g.max_model_len, 4096);  // its own default
    EXPECT_EQ(g.dtype, "float32");
    EXPECT_EQ(g.tokenizer, "/tok");
    EXPECT_THROW(parse(EngineCommand::kGenerate, {"--model", "/m", "--pd-hybrid"}), CLI::ParseError);
    EXPECT_THROW(parse(EngineCommand::kGenerate, {"--model", "/m", "--enable-eplb"}), CLI::ParseError);
    EXPECT_THROW(parse(EngineCommand::kGenerate, {}), CLI::ParseError);  // --model is required
}

TEST(EngineFlags, AFlagReadsTheSameInEveryCommand) {
    CLI::App app;
    EngineOptions serve_options, generate_options;
    add_engine_flags(app.add_subcommand("serve"), serve_options, EngineCommand::kServe);
    add_engine_flags(app.add_subcommand("generate"), generate_options, EngineCommand::kGenerate);
    for (const CLI::Option* option : app.get_subcommand("generate")->get_options()) {
        if (option->get_name().empty() || option->get_name() == "--help") continue;
        const CLI::Option* in_serve = app.get_subcommand("serve")->get_option_no_throw(option->get_name());
        ASSERT_NE(in_serve, nullptr) << option->get_name();
        EXPECT_EQ(in_serve->get_description(), option->get_description()) << option->get_name();
    }
}

TEST(EngineFlags, TheFingerprintHoldsTheAgreedFlagsOnly) {
    const EngineOptions base = parse(EngineCommand::kServe, {"/m"});
    const std::string print = engine_flags_fingerprint(base);
    EXPECT_THAT(print, testing::HasSubstr("--max-model-len '0'"));
    EXPECT_THAT(print, testing::HasSubstr("--pd-hybrid 'off'"));
    for (const auto& agreed : std::vector<std::vector<std::string>>{{"--block-size", "32"},
                                                                    {"--kv-cache-dtype", "fp8"},
                                                                    {"-q", "w8a8"},
                                                                    {"--speculative-config", "{}"},
                                                                    {"--pd-hybrid"}}) {
        std::vector<std::string> args = {"/m"};
        args.insert(args.end(), agreed.begin(), agreed.end());
        EXPECT_NE(engine_flags_fingerprint(parse(EngineCommand::kServe, args)), print) << agreed[0];
    }
    for (const auto& local : std::vector<std::vector<std::string>>{
             {"--threads", "3"}, {"--kv-cache-memory", "1G"}, {"--seed", "5"}, {"--tokenizer", "/t"}}) {
        std::vector<std::string> args = {"/m"};
        args.insert(args.end(), local.begin(), local.end());
        EXPECT_EQ(engine_flags_fingerprint(parse(EngineCommand::kServe, args)), print) << local[0];
    }
}

}  // namespace
}  // namespace moeserve::cli
