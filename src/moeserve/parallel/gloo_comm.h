// Gloo-backed Communicators for rank processes: connect_gloo() meets the other ranks through the
// head's rendezvous store (rendezvous.h), checks that all ranks agree on the configuration, and
// builds the TP, DP and EP groups over gloo::transport::tcp.
#pragma once

#include <chrono>
#include <string>

#include "moeserve/parallel/groups.h"

namespace moeserve::parallel {

struct GlooConnectOptions {
    ParallelSizes sizes;
    int rank = 0;            // global rank, dp_rank * tp + tp_rank
    std::string store_host;  // the head's --data-parallel-address
    int store_port = 0;      // its rendezvous port (--data-parallel-rpc-port)
    // Transport address of this rank: the interface named by GLOO_SOCKET_IFNAME (read in cli/), or
    // else this hostname/address; both empty: the machine's hostname.
    std::string iface;
    std::string hostname;
    std::chrono::milliseconds timeout{30000};  // every collective (and connecting, once all ranks are there)
    // How long to wait for every rank to arrive at the rendezvous; 0 = `timeout`. A group that
    // re-forms waits longer: its replaced rank is a new process.
    std::chrono::milliseconds arrival_timeout{0};
    // The group's generation: 0 when the deployment starts, one more each time it re-forms after a
    // failure (self-healing, docs/parallelism.md). Its rendezvous keys are apart from the others'.
    int generation = 0;
    // Model + sizes (+ anything all ranks must share). A rank whose fingerprint differs from rank
    // 0's is refused with Error kInvalidArgument naming both, instead of hanging later.
    std::string fingerprint;
    // The desync guard (guarded_comm.h) on every group of more than one rank.
    bool collective_guard = true;
    // Debug only (a test hook, from MOESERVE_DEBUG_SKIP_COLLECTIVE):
    // "<tp|dp|ep>:<global rank>:<step>:<index>" makes that rank leave out that collective of that
    // group (guarded_comm.h SkipCollective). Empty: none.
    std::string debug_skip_collective;
};

// The generation `rank` last joined (or tried to), as the store has it; -1 when it never did. A
// restarted rank joins the one after it, where the survivors of its old group go.
int last_generation(const std::string& store_host, int store_port, int rank, std::chrono::milliseconds timeout);

// Blocks until every rank of the world has connected (bounded by options.timeout). Throws Error
// kUnavailable when the store or a peer cannot be reached in time, kInvalidArgument on a
// fingerprint mismatch or an invalid layout. The returned context owns the transport.
ParallelContext connect_gloo(const GlooConnectOptions& options);

}  // namespace moeserve::parallel
