// The engine's flags, declared once (engine_flags.cpp's table): each row names a flag, its help,
// the EngineOptions field it sets, the commands that take it and whether the ranks of one
// deployment must agree on it. serve, rank and generate register their engine flags from the
// table; the argv serve gives a rank and the deployment fingerprint are read from it, so a new
// engine flag is one row.
#pragma once

#include <CLI/CLI.hpp>

#include <string>
#include <vector>

#include "moeserve/cli/engine_options.h"

namespace moeserve::cli {

enum class EngineCommand {
    kServe,     // `serve` (and `vllm serve`): the model may come first, as a positional
    kRank,      // `rank`: started by serve with rank_engine_argv's flags
    kGenerate,  // `generate`: the engine in-process, one engine (no KV transfer, EPLB or PD hybrid)
};

// The engine options a command starts from: EngineOptions' defaults, except where the command
// differs (generate: --max-model-len 4096, since it resolves no model length of its own).
EngineOptions engine_defaults(EngineCommand command);

// Registers on `sub` every engine flag `command` takes, bound to o's fields (o should hold
// engine_defaults(command), which the help shows).
void add_engine_flags(CLI::App* sub, EngineOptions& o, EngineCommand command);

// The flags that give a rank process `o`: `rank` parsing them yields o again (every flag the
// rank command takes, in table order, --model first).
std::vector<std::string> rank_engine_argv(const EngineOptions& o);

// "name value" for every flag the ranks of one deployment must agree on (the model's shapes
// and what each collective carries), joined by ", ": part of the deployment fingerprint.
std::string engine_flags_fingerprint(const EngineOptions& o);

}  // namespace moeserve::cli
