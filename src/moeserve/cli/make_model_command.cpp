// Placeholder registration replaced by the model generator (issue 2).
#include "moeserve/cli/commands.h"
namespace moeserve::cli {
void add_make_model_command(CLI::App&, Action*) {}
}  // namespace moeserve::cli
