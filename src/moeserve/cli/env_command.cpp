// `moeserve env`: what this binary will run with on this machine: version, the CPU and the ISA
// level of the kernels (MOESERVE_ISA or the best the CPU and OS support), one fact per line.
#include <cstdio>
#include <thread>

#include "moeserve/cli/commands.h"
#include "moeserve/kernels/cpu/isa.h"

namespace moeserve::cli {

void add_env_command(CLI::App& app, Action* action) {
    CLI::App* cmd = app.add_subcommand("env", "Print the version, the CPU and the kernels' ISA level");
    cmd->callback([action] {
        *action = [] {
            namespace k = kernels::cpu;
            const k::CpuFeatures& f = k::cpu_features();
            std::printf("version: %s\n", MOESERVE_VERSION);
            std::printf("cpu: %s (%u hardware threads)\n", f.brand.empty() ? "unknown" : f.brand.c_str(),
                        std::thread::hardware_concurrency());
            std::printf("kernels isa: %s (best %s)\n", k::isa_name(k::active_isa()), k::isa_name(k::best_isa()));
            for (k::Isa isa : {k::Isa::kRef, k::Isa::kAvx2, k::Isa::kAvx512, k::Isa::kAmx}) {
                const std::string why = k::isa_missing(isa);
                std::printf("  %-7s %s\n", k::isa_name(isa), why.empty() ? "supported" : ("no: " + why).c_str());
            }
            return 0;
        };
    });
}

}  // namespace moeserve::cli
