// ReplaceableCommunicator and RegroupableContext (replaceable_comm.h).
#include "moeserve/parallel/replaceable_comm.h"

#include "moeserve/core/error.h"

namespace moeserve::parallel {

ReplaceableCommunicator::ReplaceableCommunicator(std::unique_ptr<Communicator> inner)
    : inner_(std::move(inner)),
      rank_(inner_->rank()),
      size_(inner_->size()),
      name_(inner_->name()),
      timeout_(inner_->timeout()) {}

ReplaceableCommunicator::ReplaceableCommunicator(std::string kind, int rank, int size,
                                                 std::chrono::milliseconds timeout)
    : rank_(rank), size_(size), name_(std::move(kind) + " (not connected yet)"), named_(false), timeout_(timeout) {}

void ReplaceableCommunicator::replace(std::unique_ptr<Communicator> inner) {
    if (!named_ && inner->rank() == rank_ && inner->size() == size_) {
        name_ = inner->name();
        named_ = true;
    }
    if (inner->rank() != rank_ || inner->size() != size_ || inner->name() != name_) {
        raise(ErrorCode::kInvalidArgument, "{}: the re-formed group is {} (rank {} of {}), not rank {} of {}", name_,
              inner->name(), inner->rank(), inner->size(), rank_, size_);
    }
    inner_ = std::move(inner);
}

Communicator& ReplaceableCommunicator::live() {
    if (!inner_) raise(ErrorCode::kUnavailable, "{}: not connected (the group is re-forming)", name_);
    return *inner_;
}

RegroupableContext::RegroupableContext(ParallelContext first) : ctx_(std::move(first)) {
    ctx_.tp = std::make_unique<ReplaceableCommunicator>(std::move(ctx_.tp));
    ctx_.dp = std::make_unique<ReplaceableCommunicator>(std::move(ctx_.dp));
    ctx_.ep = std::make_unique<ReplaceableCommunicator>(std::move(ctx_.ep));
}

RegroupableContext::RegroupableContext(const ParallelSizes& sizes, int rank, std::chrono::milliseconds timeout) {
    ctx_.sizes = sizes;
    ctx_.groups = rank_groups(sizes, rank);
    ctx_.tp = std::make_unique<ReplaceableCommunicator>("tp", ctx_.groups.tp_rank, sizes.tp, timeout);
    // Independent DP groups connect no DP communicator (connect_gloo): a single rank's stands in.
    const bool dp_connected = dp_groups_step_together(sizes);
    ctx_.dp = std::make_unique<ReplaceableCommunicator>("dp", dp_connected ? ctx_.groups.dp_rank : 0,
                                                        dp_connected ? sizes.dp : 1, timeout);
    ctx_.ep = std::make_unique<ReplaceableCommunicator>("ep", ctx_.groups.ep_rank, sizes.ep, timeout);
}

void RegroupableContext::disconnect() {
    as_replaceable(ctx_.tp).disconnect();
    as_replaceable(ctx_.dp).disconnect();
    as_replaceable(ctx_.ep).disconnect();
    ctx_.resources.reset();
}

void RegroupableContext::regroup(ParallelContext next) {
    if (next.sizes.world() != ctx_.sizes.world() || next.groups.tp_rank != ctx_.groups.tp_rank ||
        next.groups.dp_rank != ctx_.groups.dp_rank) {
        raise(ErrorCode::kInvalidArgument, "the re-formed group has another layout than this rank's");
    }
    as_replaceable(ctx_.tp).replace(std::move(next.tp));
    as_replaceable(ctx_.dp).replace(std::move(next.dp));
    as_replaceable(ctx_.ep).replace(std::move(next.ep));
    ctx_.resources = std::move(next.resources);
}

}  // namespace moeserve::parallel
