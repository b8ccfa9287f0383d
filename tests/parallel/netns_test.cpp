// Gloo between two emulated hosts: two network namespaces joined by a veth pair (10.200.x.1 and
// 10.200.x.2, addresses inside namespaces this test creates). Rank 0 hosts the rendezvous store
// and binds its address; rank 1 binds by interface name (GLOO_SOCKET_IFNAME's path). Skipped when
// `ip netns add` is not permitted; the namespaces are always deleted.
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <string>

#include "parallel/process_util.h"

namespace moeserve::parallel {
namespace {

using namespace std::chrono_literals;

int sh(const std::string& cmd) { return std::system((cmd + " >/dev/null 2>&1").c_str()); }

// Two namespaces and a veth pair; deleted on destruction.
struct NetnsPair {
    std::string a, b, veth_a, veth_b, addr_a, addr_b;
    bool ok = false;

    NetnsPair() {
        const int id = static_cast<int>(getpid() % 200) + 20;
        a = "msp_a_" + std::to_string(getpid());
        b = "msp_b_" + std::to_string(getpid());
        veth_a = "mspa" + std::to_string(getpid() % 100000);
        veth_b = "mspb" + std::to_string(getpid() % 100000);
        addr_a = "10.200." + std::to_string(id) + ".1";
        addr_b = "10.200." + std::to_string(id) + ".2";
        if (sh("ip netns add " + a) != 0) return;
        if (sh("ip netns add " + b) != 0) return;
        ok = sh("ip link add " + veth_a + " type veth peer name " + veth_b) == 0 &&
             sh("ip link set " + veth_a + " netns " + a) == 0 && sh("ip link set " + veth_b + " netns " + b) == 0 &&
             sh("ip -n " + a + " addr add " + addr_a + "/24 dev " + veth_a) == 0 &&
             sh("ip -n " + b + " addr add " + addr_b + "/24 dev " + veth_b) == 0 &&
             sh("ip -n " + a + " link set " + veth_a + " up") == 0 &&
             sh("ip -n " + b + " link set " + veth_b + " up") == 0 && sh("ip -n " + a + " link set lo up") == 0 &&
             sh("ip -n " + b + " link set lo up") == 0;
    }
    ~NetnsPair() {
        sh("ip netns del " + a);
        sh("ip netns del " + b);
    }
};

TEST(NetnsTest, GlooAcrossTwoEmulatedHosts) {
    NetnsPair ns;
    if (!ns.ok) GTEST_SKIP() << "cannot create network namespaces and a veth pair here (needs root / CAP_NET_ADMIN)";
    const std::string store = ns.addr_a + ":29517";
    const std::string helper = MOESERVE_PARALLEL_RANK_HELPER;
    std::vector<pid_t> pids;
    pids.push_back(moeserve::testing::spawn_process({"/usr/sbin/ip", "netns", "exec", ns.a, helper, "--rank", "0",
                                                     "--world", "2", "--store", store, "--host-store", "--addr",
                                                     ns.addr_a, "--timeout-ms", "8000"}));
    pids.push_back(
        moeserve::testing::spawn_process({"/usr/sbin/ip", "netns", "exec", ns.b, helper, "--rank", "1", "--world", "2",
                                          "--store", store, "--iface", ns.veth_b, "--timeout-ms", "8000"}));
    const auto st = moeserve::testing::wait_all(pids, std::chrono::steady_clock::now() + 20s);
    for (size_t r = 0; r < st.size(); ++r) {
        EXPECT_FALSE(st[r].timed_out) << "rank " << r;
        EXPECT_EQ(st[r].code, 0) << "rank " << r;
    }
}

}  // namespace
}  // namespace moeserve::parallel
