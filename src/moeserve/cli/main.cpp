// moeserve: one binary, one subcommand per file in cli/. The CLI is the only place that wires
// the layers together and the outermost error boundary: a user error prints its message, exit 2.
#include <algorithm>
#include <csignal>
#include <cstdio>
#include <exception>
#include <optional>
#include <string>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "moeserve/cli/commands.h"
#include "moeserve/cli/vllm_flags.h"
#include "moeserve/core/error.h"
#include "moeserve/core/log.h"
#include "moeserve/kernels/cpu/isa.h"
#include "moeserve/serve/metrics.h"

namespace {

// `moeserve --version`: the version and the kernels' ISA level (MOESERVE_ISA or the CPU's best),
// the two facts a bug report needs first; `moeserve env` has the rest.
int print_version() {
    try {
        std::printf("moeserve %s (kernels: %s)\n", MOESERVE_VERSION,
                    moeserve::kernels::cpu::isa_name(moeserve::kernels::cpu::active_isa()));
        return 0;
    } catch (const moeserve::Error& e) {
        std::fprintf(stderr, "error: %s\n", e.what());
        return 2;
    }
}

// The first argument names a command: an unknown one is said as such (CLI11 would call it an
// unexpected argument), with the commands there are.
std::optional<std::string> unknown_command(const CLI::App& app, int argc, char** argv) {
    if (argc < 2 || argv[1][0] == '-') return std::nullopt;
    std::vector<std::string> names;
    for (const CLI::App* sub : app.get_subcommands([](const CLI::App*) { return true; })) {
        if (sub->get_name() == argv[1]) return std::nullopt;
        if (!sub->get_group().empty()) names.push_back(sub->get_name());
    }
    return fmt::format("unknown command {} (commands: {})", argv[1], fmt::join(names, ", "));
}

}  // namespace

int main(int argc, char** argv) {
    // Sockets (HTTP clients, ZeroMQ, Gloo peers) report a closed peer as EPIPE; never die of it.
    signal(SIGPIPE, SIG_IGN);
    CLI::App app{"moeserve: a serving engine for Mixture-of-Experts language models"};
    app.require_subcommand(1);
    app.add_flag("--version")->description("print the version and the kernels' ISA level");  // handled before parsing
    moeserve::cli::Action action;
    moeserve::cli::add_make_model_command(app, &action);
    moeserve::cli::add_tokenize_command(app, &action);
    moeserve::cli::add_generate_command(app, &action);
    moeserve::cli::add_serve_command(app, &action);
    moeserve::cli::add_bench_command(app, &action);
    moeserve::cli::add_env_command(app, &action);
    moeserve::cli::add_proxy_command(app, &action);
    moeserve::cli::add_perplexity_command(app, &action);
    if (argc == 2 && std::string(argv[1]) == "--version") return print_version();
    if (const auto unknown = unknown_command(app, argc, argv)) {
        std::fprintf(stderr, "error: %s\n", unknown->c_str());
        return 2;
    }
    try {
        std::vector<std::string> args = moeserve::cli::expand_vllm_short_flags(argc, argv);
        args.erase(args.begin());  // CLI11 takes them without argv[0], last first
        std::reverse(args.begin(), args.end());
        app.parse(std::move(args));
    } catch (const CLI::ParseError& e) {
        return app.exit(e) == 0 ? 0 : 2;
    }
    try {
        // The kernels' ISA is chosen here, once: a bad MOESERVE_ISA fails now, with its reason.
        const auto isa = moeserve::kernels::cpu::active_isa();
        moeserve::kernels::cpu::bf16_round_activations();  // a bad MOESERVE_BF16_ACTIVATIONS fails here too
        moeserve::kernels::cpu::gemv_row_blocks();         // and a bad MOESERVE_GEMV_ROW_BLOCKS
        moeserve::serve::set_kernel_isa_info(moeserve::kernels::cpu::isa_name(isa));
        if (app.got_subcommand("serve") || app.got_subcommand("generate")) {
            moeserve::Logger logger;
            MOESERVE_LOG_I(logger, "kernels", "%s", moeserve::kernels::cpu::isa_summary().c_str());
        }
        return action ? action() : 0;
    } catch (const moeserve::Error& e) {
        std::fprintf(stderr, "error: %s\n", e.what());
        return 2;
    } catch (const std::exception& e) {
        std::fprintf(stderr, "internal error: %s\n", e.what());
        return 1;
    }
}
