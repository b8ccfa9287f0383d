#include "moeserve/cli/commands.h"
namespace moeserve::cli {
void add_tokenize_command(CLI::App&, Action*) {}
}  // namespace moeserve::cli
