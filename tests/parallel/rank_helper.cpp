// One rank process for the multi-process Gloo tests: connects through the rendezvous store, runs
// a scripted sequence of collectives on deterministic data and checks the results itself.
// Exit codes: 0 ok, 1 wrong result, 2 Error kInvalidArgument, 3 Error kUnavailable (printed with
// the elapsed ms), 4 other error. Usage:
//   rank_helper --rank R --world N --store HOST:PORT [--host-store] [--iface IF | --addr A]
//               [--timeout-ms T] [--mode check|die|mismatch|skip|bench] [--fingerprint S]
//               [--skip GROUP:RANK:STEP:INDEX] [--no-guard]
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <string>
#include <unistd.h>
#include <vector>

#include "moeserve/core/error.h"
#include "moeserve/parallel/gather.h"
#include "moeserve/parallel/gloo_comm.h"
#include "moeserve/parallel/moe_exchange.h"
#include "moeserve/parallel/rendezvous.h"
#include "moeserve/testing/gathers.h"

using namespace moeserve;
using namespace moeserve::parallel;
using moeserve::testing::all_gather_rows_v;

namespace {

struct Args {
    int rank = 0, world = 2;
    std::string store_host = "127.0.0.1";
    int store_port = 0;
    bool host_store = false;
    std::string iface, addr = "127.0.0.1", mode = "check", fingerprint = "test";
    int timeout_ms = 10000;
    std::string skip;   // GlooConnectOptions::debug_skip_collective
    bool guard = true;  // GlooConnectOptions::collective_guard
};

Args parse(int argc, char** argv) {
    Args a;
    auto is_switch = [](const char* s) {
        return std::strcmp(s, "--host-store") == 0 || std::strcmp(s, "--no-guard") == 0;
    };
    for (int i = 1; i + 1 < argc || (i < argc && is_switch(argv[i])); ++i) {
        const std::string k = argv[i];
        if (k == "--host-store") {
            a.host_store = true;
            continue;
        }
        if (k == "--no-guard") {
            a.guard = false;
            continue;
        }
        const std::string v = argv[++i];
        if (k == "--rank")
            a.rank = std::stoi(v);
        else if (k == "--world")
            a.world = std::stoi(v);
        else if (k == "--store") {
            a.store_host = v.substr(0, v.rfind(':'));
            a.store_port = std::stoi(v.substr(v.rfind(':') + 1));
        } else if (k == "--iface")
            a.iface = v;
        else if (k == "--addr")
            a.addr = v;
        else if (k == "--timeout-ms")
            a.timeout_ms = std::stoi(v);
        else if (k == "--mode")
            a.mode = v;
        else if (k == "--skip")
            a.skip = v;
        else if (k == "--fingerprint")
            a.fingerprint = v;
    }
    return a;
}

bool near(float a, float b) { return std::fabs(a - b) <= 1e-5f * (1.0f + std::fabs(b)); }

// Collectives on data whose results every rank can compute by itself.
int check(ParallelContext& c, int rank, int world) {
    Communicator& ep = *c.ep;  // the whole world (ep = world)
    std::vector<float> v(1000);
    for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(rank + 1) * static_cast<float>(i);
    ep.all_reduce_sum(std::span<float>(v));
    const float scale = static_cast<float>(world * (world + 1) / 2);
    for (size_t i = 0; i < v.size(); ++i)
        if (!near(v[i], scale * static_cast<float>(i))) return 1;
    std::vector<int64_t> m{rank, -rank};
    ep.all_reduce_max(std::span<int64_t>(m));
    if (m[0] != world - 1 || m[1] != 0) return 1;
    // variable vs padded all-gather: rank r has r rows of width 3
    std::vector<float> rows(static_cast<size_t>(rank * 3), static_cast<float>(rank));
    std::vector<float> a, b;
    PaddedGatherScratch scratch;
    std::vector<int64_t> ca, cb;
    all_gather_rows_padded(ep, rows, 3, a, ca, scratch);
    all_gather_rows_v(ep, rows, 3, b, cb);
    if (a != b || ca != cb || static_cast<int>(a.size()) != 3 * world * (world - 1) / 2) return 1;
    // all-to-all-v: rank r sends (r + 1) values of r*100+dst to each dst
    std::vector<int64_t> send(static_cast<size_t>(world), rank + 1), recv(static_cast<size_t>(world));
    std::vector<int32_t> out_vals, in_vals;
    for (int d = 0; d < world; ++d) {
        recv[static_cast<size_t>(d)] = d + 1;
        for (int j = 0; j <= rank; ++j) out_vals.push_back(rank * 100 + d);
    }
    int64_t total = 0;
    for (int64_t x : recv) total += x;
    in_vals.resize(static_cast<size_t>(total));
    ep.all_to_all_v<int32_t>(out_vals, send, in_vals, recv);
    size_t off = 0;
    for (int s = 0; s < world; ++s) {
        for (int j = 0; j <= s; ++j)
            if (in_vals[off++] != s * 100 + rank) return 1;
    }
    // reduce-scatter and broadcast
    std::vector<float> rs_in(static_cast<size_t>(world * 4), 1.0f), rs_out(4);
    ep.reduce_scatter_sum(rs_in, rs_out);
    for (float x : rs_out)
        if (!near(x, static_cast<float>(world))) return 1;
    std::vector<int32_t> bc(5, rank == 0 ? 42 : 0);
    ep.broadcast<int32_t>(bc, 0);
    for (int32_t x : bc)
        if (x != 42) return 1;
    ep.barrier();
    return 0;
}

// Rank 1 kills itself (SIGKILL) after a few all-reduces; the others keep calling.
int die(ParallelContext& c, int rank) {
    std::vector<float> v(256, 1.0f);
    for (int i = 0; i < 1000; ++i) {
        if (rank == 1 && i == 3) ::raise(SIGKILL);
        c.ep->all_reduce_sum(std::span<float>(v));
    }
    return 0;
}

// Rank 0 dispatches by all-to-all, the others by all-gather: a desynchronized step.
int mismatch(ParallelContext& c, int rank) {
    const int64_t hidden = 8;
    std::vector<float> x(4 * hidden, 1.0f), w(4, 1.0f);
    std::vector<int32_t> ids(4, 0);
    MoeExchange ex;
    const MoeTokens t{x.data(), ids.data(), w.data(), 4, hidden, 1};
    for (int step = 0; step < 4; ++step) {
        ex.dispatch(*c.ep, rank == 0 ? MoeExchangeKind::kAllToAll : MoeExchangeKind::kAllGather, t, 1);
        std::fill(ex.local_out(), ex.local_out() + ex.num_local() * hidden, 0.0f);
        std::vector<float> out(x.size());
        ex.combine(*c.ep, out.data());
    }
    return 0;
}

// Ten steps of four same-sized all-reduces; the test skips one of them on one rank (--skip), so the
// inner collectives still line up and only the desync guard can tell. Returns 0 when this rank
// failed with the guard's message naming both ranks, well before the collective timeout (it prints
// how long it took; about 10 ms here), 1 otherwise.
int skip(ParallelContext& c, int rank) {
    std::vector<float> v(256, 1.0f);
    auto step_start = std::chrono::steady_clock::now();
    try {
        for (int step = 1; step <= 10; ++step) {
            c.ep->begin_step();
            if (step == 3) step_start = std::chrono::steady_clock::now();
            for (int i = 0; i < 4; ++i) c.ep->all_reduce_sum(std::span<float>(v));
        }
    } catch (const Error& e) {
        const auto ms =
            std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - step_start);
        const std::string what = e.what();
        std::fprintf(stderr, "rank %d: failed %ld ms after step 3 began: %s\n", rank, static_cast<long>(ms.count()),
                     what.c_str());
        const bool named = what.find("ranks out of step") != std::string::npos &&
                           what.find("rank 0 ran collective") != std::string::npos &&
                           what.find("rank 1 ran collective") != std::string::npos;
        _exit(named && ms.count() < 10000 ? 0 : 1);  // half the 20 s timeout: the guard ended it, not the timeout
    }
    std::fprintf(stderr, "rank %d: ten steps without an error\n", rank);
    _exit(1);
}

template <typename F>
double median_us(F&& f, int iters) {
    std::vector<double> t;
    for (int i = 0; i < iters; ++i) {
        const auto t0 = std::chrono::steady_clock::now();
        f();
        t.push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count());
    }
    std::sort(t.begin(), t.end());
    return t[t.size() / 2];
}

// Latencies of the model's collectives (printed by rank 0).
int bench(ParallelContext& c, int rank, int world) {
    Communicator& ep = *c.ep;
    for (int64_t n : {256, 2048 * 16, 2048 * 256}) {
        std::vector<float> v(static_cast<size_t>(n), 1.0f);
        const double us = median_us([&] { ep.all_reduce_sum(std::span<float>(v)); }, 50);
        if (rank == 0) std::printf("all_reduce_sum f32 x %ld (%ld KiB): %.1f us\n", n, n * 4 / 1024, us);
    }
    for (int64_t tokens : {1, 16, 256}) {
        const int64_t hidden = 2048;
        const int k = 8;
        std::vector<float> x(static_cast<size_t>(tokens * hidden), 0.5f), w(static_cast<size_t>(tokens * k), 0.125f);
        std::vector<int32_t> ids(static_cast<size_t>(tokens * k));
        for (size_t i = 0; i < ids.size(); ++i)
            ids[i] = static_cast<int32_t>((i * 7 + static_cast<size_t>(rank)) % 128);
        std::vector<float> out(x.size());
        MoeExchange ex;
        for (MoeExchangeKind kind : {MoeExchangeKind::kAllToAll, MoeExchangeKind::kAllGather}) {
            const double us = median_us(
                [&] {
                    ex.dispatch(ep, kind, {x.data(), ids.data(), w.data(), tokens, hidden, k}, 128 / world);
                    std::copy_n(ex.local_x(), ex.num_local() * hidden, ex.local_out());
                    ex.combine(ep, out.data());
                },
                30);
            if (rank == 0) {
                std::printf("moe dispatch+combine %-10s tokens/rank %3ld hidden %ld top-%d: %.1f us\n",
                            moe_exchange_name(kind), tokens, hidden, k, us);
            }
        }
    }
    std::vector<int64_t> ctl(6, 1), all(static_cast<size_t>(6 * world));
    const double us = median_us([&] { ep.all_gather<int64_t>(ctl, all); }, 100);
    if (rank == 0) std::printf("dp control all_gather (6 x int64): %.1f us\n", us);
    return 0;
}

}  // namespace

int main(int argc, char** argv) {
    // A write to a peer that died must be an error (EPIPE -> Error kUnavailable), not a kill.
    signal(SIGPIPE, SIG_IGN);
    const Args a = parse(argc, argv);
    const auto t0 = std::chrono::steady_clock::now();
    try {
        std::unique_ptr<TcpStoreServer> server;
        if (a.host_store) server = TcpStoreServer::start(a.store_host, a.store_port);
        GlooConnectOptions o;
        o.sizes = {a.world, 1, a.world};
        o.rank = a.rank;
        o.store_host = a.store_host;
        o.store_port = a.store_port;
        o.iface = a.iface;
        o.hostname = a.addr;
        o.timeout = std::chrono::milliseconds(a.timeout_ms);
        o.fingerprint = a.fingerprint;
        o.collective_guard = a.guard;
        o.debug_skip_collective = a.skip;
        ParallelContext c = connect_gloo(o);
        int rc = 0;
        if (a.mode == "check")
            rc = check(c, a.rank, a.world);
        else if (a.mode == "die")
            rc = die(c, a.rank);
        else if (a.mode == "mismatch")
            rc = mismatch(c, a.rank);
        else if (a.mode == "skip")
            rc = skip(c, a.rank);
        else if (a.mode == "bench")
            rc = bench(c, a.rank, a.world);
        // Keep the store up until every rank is done with it.
        c.ep->barrier();
        std::fflush(stdout);
        return rc;
    } catch (const Error& e) {
        const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - t0);
        std::fprintf(stderr, "rank %d: %s error after %ld ms: %s\n", a.rank, error_code_name(e.code()),
                     static_cast<long>(ms.count()), e.what());
        std::fflush(stderr);
        // NOTE: _exit skips destructors that might block on a broken transport.
        _exit(e.code() == ErrorCode::kInvalidArgument ? 2 : e.code() == ErrorCode::kUnavailable ? 3 : 4);
    } catch (const std::exception& e) {
        std::fprintf(stderr, "rank %d: %s\n", a.rank, e.what());
        _exit(4);
    }
}
