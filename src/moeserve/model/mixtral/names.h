// Mixtral's checkpoint names for what the shared MoE block calls otherwise: the router
// (block_sparse_moe.gate) and the experts' w1 / w3 / w2 (gate / up / down). One table for the
// loader (which reads a checkpoint under the block's names) and the generator (which writes
// Mixtral's).
#pragma once

#include <array>
#include <string>
#include <utility>

namespace moeserve::model::mixtral {

inline constexpr const char* kRouter = "block_sparse_moe.gate";
inline constexpr const char* kExperts = "block_sparse_moe.experts.";

// {Mixtral's projection, the MoE block's}
inline constexpr std::array<std::pair<const char*, const char*>, 3> kExpertProjections = {
    {{"w1", "gate_proj"}, {"w3", "up_proj"}, {"w2", "down_proj"}}};

// `name` with an expert projection's module renamed from -> to (first = Mixtral's, second = the
// block's, or the reverse with to_block false); any other name unchanged.
inline std::string rename_expert_projection(const std::string& name, bool to_block) {
    const size_t at = name.find(std::string(".") + kExperts);
    if (at == std::string::npos) return name;
    for (const auto& [mixtral, block] : kExpertProjections) {
        const std::string from = std::string(".") + (to_block ? mixtral : block) + ".";
        const size_t p = name.find(from, at);
        if (p != std::string::npos) {
            return name.substr(0, p + 1) + (to_block ? block : mixtral) + name.substr(p + from.size() - 1);
        }
    }
    return name;
}

}  // namespace moeserve::model::mixtral
