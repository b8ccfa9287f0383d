// The Host policy behind a proxy (issue 34): X-Forwarded-Host is checked instead of Host only
// when the peer is one of --forwarded-allow-ips, so a loopback proxy cannot carry a rebinding
// page's Host past the check, and a stranger cannot pick the host that is checked.
#include "moeserve/serve/access_policy.h"

#include <gtest/gtest.h>

#include "moeserve/serve/openai/protocol.h"

namespace moeserve::serve {
namespace {

int status_of(const AccessPolicy& policy, const HttpRequest& request) {
    try {
        policy.check(request, "/v1/models");
    } catch (const openai::ApiError& e) {
        return e.status();
    }
    return 200;
}

HttpRequest via(const std::string& peer, const std::string& host, const std::string& forwarded_host) {
    HttpRequest r;
    r.host = host;
    r.forwarded_host = forwarded_host;
    r.peer_address = peer;
    r.peer_port = 4000;
    return r;
}

TEST(AccessPolicyTest, ForwardedHostFromATrustedProxyIsTheHostChecked) {
    AccessPolicyConfig config;  // loopback server, default --forwarded-allow-ips 127.0.0.1 ::1
    config.allowed_hosts = {"api.example.com"};
    const AccessPolicy policy(config);
    // nginx on this host: Host is its upstream (loopback), X-Forwarded-Host what the client asked for.
    EXPECT_EQ(status_of(policy, via("127.0.0.1", "127.0.0.1:8000", "api.example.com")), 200);
    EXPECT_EQ(status_of(policy, via("127.0.0.1", "127.0.0.1:8000", "evil.example")), 403);  // rebinding via the proxy
    EXPECT_EQ(status_of(policy, via("::ffff:127.0.0.1", "localhost", "evil.example, api.example.com")), 403);
    EXPECT_EQ(status_of(policy, via("::1", "localhost", "api.example.com:443")), 200);
    // Not from a trusted proxy: the header is ignored, Host decides.
    EXPECT_EQ(status_of(policy, via("10.0.0.7", "localhost", "evil.example")), 200);
    EXPECT_EQ(status_of(policy, via("10.0.0.7", "evil.example", "api.example.com")), 403);
}

TEST(AccessPolicyTest, ForwardAllowIpsListAndStar) {
    AccessPolicyConfig config;
    config.forwarded_allow_ips = {"10.0.0.7"};
    const AccessPolicy policy(config);
    EXPECT_EQ(status_of(policy, via("10.0.0.7", "localhost", "evil.example")), 403);
    EXPECT_EQ(status_of(policy, via("127.0.0.1", "localhost", "evil.example")), 200);  // no longer trusted
    config.forwarded_allow_ips = {"*"};
    EXPECT_EQ(status_of(AccessPolicy(config), via("192.0.2.1", "localhost", "evil.example")), 403);
    config.forwarded_allow_ips = {};
    EXPECT_EQ(status_of(AccessPolicy(config), via("127.0.0.1", "localhost", "evil.example")), 200);
}

TEST(AccessPolicyTest, ClientAndDescription) {
    AccessPolicyConfig config;
    const AccessPolicy policy(config);
    HttpRequest r = via("127.0.0.1", "localhost", "");
    r.forwarded_for = "203.0.113.9, 127.0.0.1";
    EXPECT_EQ(policy.client(r), "203.0.113.9");
    r.peer_address = "10.1.1.1";
    EXPECT_EQ(policy.client(r), "10.1.1.1:4000");
    r.peer_address = "::2";
    EXPECT_EQ(policy.client(r), "[::2]:4000");
    EXPECT_EQ(policy.describe(),
              "Host: loopback names only (--allowed-hosts adds others); X-Forwarded-Host believed from 127.0.0.1, ::1");
    config.allowed_hosts = {"api.example.com"};
    config.loopback_only = false;
    EXPECT_EQ(AccessPolicy(config).describe(),
              "Host: api.example.com only; X-Forwarded-Host believed from 127.0.0.1, ::1");
}

}  // namespace
}  // namespace moeserve::serve
