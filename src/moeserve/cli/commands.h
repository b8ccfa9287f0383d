// The subcommands of the `moeserve` binary. Each add_*_command registers its flags on `app`
// and, when chosen on the command line, stores the function to run in *action.
#pragma once

#include <CLI/CLI.hpp>

#include <functional>

namespace moeserve::cli {

using Action = std::function<int()>;

void add_make_model_command(CLI::App& app, Action* action);
void add_tokenize_command(CLI::App& app, Action* action);
void add_generate_command(CLI::App& app, Action* action);
void add_serve_command(CLI::App& app, Action* action);
void add_bench_command(CLI::App& app, Action* action);
void add_env_command(CLI::App& app, Action* action);
void add_proxy_command(CLI::App& app, Action* action);
void add_perplexity_command(CLI::App& app, Action* action);

}  // namespace moeserve::cli
