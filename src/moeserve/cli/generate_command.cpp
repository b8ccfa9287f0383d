#include "moeserve/cli/commands.h"
namespace moeserve::cli {
void add_generate_command(CLI::App&, Action*) {}
}  // namespace moeserve::cli
