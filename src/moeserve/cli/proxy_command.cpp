// `moeserve proxy`: the front of a PD-disaggregated deployment (serve/pd_proxy.h): clients talk
// to it as to one OpenAI server; it sends each request's prefill to a prefill instance and its
// decode to a decode instance. SIGINT / SIGTERM stop it (requests in flight are cancelled).
#include <signal.h>

#include <cstdio>
#include <thread>

#include "moeserve/cli/access_flags.h"
#include "moeserve/cli/commands.h"
#include "moeserve/core/error.h"
#include "moeserve/core/log.h"
#include "moeserve/serve/http_server.h"
#include "moeserve/serve/pd_proxy.h"

namespace moeserve::cli {

namespace {

struct ProxyOptions {
    std::string host = "127.0.0.1";
    int port = 8000;
    serve::PdProxyOptions proxy;
    std::string log_level = "info";
};

int run_proxy(const ProxyOptions& o) {
    sigset_t signals;
    sigemptyset(&signals);
    sigaddset(&signals, SIGINT);
    sigaddset(&signals, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &signals, nullptr);  // before any thread starts: only sigwait takes them
    signal(SIGPIPE, SIG_IGN);
    Logger logger("proxy", parse_log_level(o.log_level));
    serve::PdProxyOptions options = o.proxy;
    options.access.loopback_only = serve::is_loopback_host(o.host);
    serve::PdProxy proxy(options, logger);
    serve::HttpServer server(
        {.host = o.host,
         .port = o.port,
         .num_threads = 2,
         .logger = &logger,
         .header_check = [&proxy](const serve::HttpRequest& head) { return proxy.check_head(head); }},
        [&proxy](serve::HttpRequest r, std::shared_ptr<serve::Responder> responder) {
            proxy.handle(std::move(r), std::move(responder));
        });
    std::thread http([&server] { server.run(); });
    MOESERVE_LOG_I(logger, "proxy", "listening on http://%s:%d (%zu prefill, %zu decode instances)", o.host.c_str(),
                   server.port(), o.proxy.prefill_urls.size(), o.proxy.decode_urls.size());
    int sig = 0;
    sigwait(&signals, &sig);
    MOESERVE_LOG_I(logger, "proxy", "signal %d: stopping", sig);
    server.stop();
    http.join();
    return 0;
}

}  // namespace

void add_proxy_command(CLI::App& app, Action* action) {
    auto o = std::make_shared<ProxyOptions>();
    CLI::App* cmd =
        app.add_subcommand("proxy", "PD disaggregation: one OpenAI endpoint in front of prefill and decode instances");
    cmd->add_option("--host", o->host, "address to listen on")->capture_default_str();
    cmd->add_option("--port", o->port, "port to listen on (0 = any free port)")->capture_default_str();
    cmd->add_option("--prefill", o->proxy.prefill_urls,
                    "prefill instances, http://HOST:PORT (moeserve serve --kv-transfer-config with kv_producer)")
        ->required();
    cmd->add_option("--decode", o->proxy.decode_urls,
                    "decode instances, http://HOST:PORT (moeserve serve --kv-transfer-config with kv_consumer)")
        ->required();
    cmd->add_option("--connect-timeout-ms", o->proxy.connect_timeout_ms, "connecting to an instance")
        ->capture_default_str();
    cmd->add_option("--idle-timeout-ms", o->proxy.idle_timeout_ms, "an instance silent this long fails the request")
        ->capture_default_str();
    cmd->add_option("--down-ms", o->proxy.down_ms, "an unreachable instance is skipped this long")
        ->capture_default_str();
    cmd->add_option("--max-in-flight", o->proxy.max_in_flight, "requests at once; more get 503")->capture_default_str();
    cmd->add_option("--kv-streaming", o->proxy.stream_kv,
                    "start the decode half as soon as the prefill instance names the KV transfer, so the transfer "
                    "follows the prefill (false: after the prefill has finished)")
        ->capture_default_str();
    cmd->add_option("--log-level", o->log_level, "debug | info | warning | error")->capture_default_str();
    add_access_flags(cmd, o->proxy.access);
    cmd->callback([o, action] {
        resolve_api_keys(o->proxy.access.api_keys);
        *action = [o] { return run_proxy(*o); };
    });
}

}  // namespace moeserve::cli
