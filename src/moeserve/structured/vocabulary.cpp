#include "moeserve/structured/vocabulary.h"

#include <algorithm>
#include <numeric>

namespace moeserve::structured {

Vocabulary::Vocabulary(std::vector<std::string> token_bytes, std::vector<TokenId> eos_token_ids)
    : bytes_(std::move(token_bytes)), eos_(std::move(eos_token_ids)) {
    std::vector<TokenId> ids;
    for (size_t i = 0; i < bytes_.size(); ++i) {
        if (!bytes_[i].empty()) ids.push_back(static_cast<TokenId>(i));
    }
    std::sort(ids.begin(), ids.end(),
              [&](TokenId a, TokenId b) { return bytes(a) < bytes(b) || (bytes(a) == bytes(b) && a < b); });
    nodes_.reserve(ids.size() * 2);
    build(ids, 0, ids.size(), 0);
    // Children come after their parent (preorder): fill the byte sets bottom-up.
    below_.assign(nodes_.size() * 4, 0);
    for (size_t n = nodes_.size(); n-- > 0;) {
        const Node& node = nodes_[n];
        for (uint32_t e = node.first_edge; e < node.first_edge + node.num_edges; ++e) {
            const Edge& edge = edges_[e];
            below_[n * 4 + (edge.byte >> 6)] |= uint64_t{1} << (edge.byte & 63);
            for (size_t w = 0; w < 4; ++w) below_[n * 4 + w] |= below_[static_cast<size_t>(edge.child) * 4 + w];
        }
    }
}

// Builds the node of the common prefix of sorted[begin, end) (length depth) and its subtree;
// the tokens equal to the prefix come first in sorted order.
uint32_t Vocabulary::build(const std::vector<TokenId>& sorted, size_t begin, size_t end, size_t depth) {
    const auto id = static_cast<uint32_t>(nodes_.size());
    nodes_.emplace_back();
    size_t i = begin;
    const auto first_token = static_cast<uint32_t>(node_tokens_.size());
    while (i < end && bytes(sorted[i]).size() == depth) node_tokens_.push_back(sorted[i++]);
    nodes_[id].tokens_begin = first_token;
    nodes_[id].tokens_end = static_cast<uint32_t>(node_tokens_.size());
    // Children: runs of the same byte at position depth; their edges are contiguous.
    std::vector<std::pair<size_t, size_t>> runs;
    while (i < end) {
        const char b = bytes(sorted[i])[depth];
        size_t j = i;
        while (j < end && bytes(sorted[j])[depth] == b) ++j;
        runs.emplace_back(i, j);
        i = j;
    }
    const auto first_edge = static_cast<uint32_t>(edges_.size());
    nodes_[id].first_edge = first_edge;
    nodes_[id].num_edges = static_cast<uint32_t>(runs.size());
    edges_.resize(edges_.size() + runs.size());
    for (size_t k = 0; k < runs.size(); ++k) {
        const auto b = static_cast<uint8_t>(bytes(sorted[runs[k].first])[depth]);
        const uint32_t child = build(sorted, runs[k].first, runs[k].second, depth + 1);
        edges_[first_edge + k] = Edge{b, child};
    }
    nodes_[id].subtree_end = static_cast<uint32_t>(node_tokens_.size());
    return id;
}

}  // namespace moeserve::structured
