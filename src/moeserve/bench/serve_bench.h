// The serving benchmark client: sends a data set's prompts to an OpenAI-compatible server as
// streaming requests (Poisson/gamma arrivals, optional concurrency cap) and records per-request
// timings as vLLM's benchmarks/backend_request_func.py does. Asynchronous (Boost.Asio + Beast,
// C++20 coroutines) on one thread: thousands of open streams cost no threads. HTTP/1.1 over TCP,
// keep-alive connections reused; no TLS. Depends on core only (the report counts tokens).
#pragma once

#include <cstdint>
#include <functional>
#include <limits>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "moeserve/bench/report.h"
#include "moeserve/bench/sample_request.h"

namespace moeserve::bench {

enum class Backend {
    kOpenAiCompletions,  // --backend openai (or vllm): POST {"prompt": ...}, chunks' choices[0].text
    kOpenAiChat,         // --backend openai-chat: POST {"messages": ...}, choices[0].delta.content
};

// "openai" | "vllm" | "openai-chat"; Error kInvalidArgument naming the choices otherwise.
Backend parse_backend(std::string_view name);

// Where the server is: host, port and a path prefix ("" or e.g. "/proxy").
struct ServerAddress {
    std::string host = "127.0.0.1";
    uint16_t port = 8000;
    std::string path_prefix;
};

// Parses --base-url "http://host[:port][/prefix]" (port 80 by default). Error kUnsupported for
// https (no TLS), kInvalidArgument for anything else that is not such a URL.
ServerAddress parse_base_url(std::string_view url);

struct ServeBenchOptions {
    Backend backend = Backend::kOpenAiCompletions;
    ServerAddress server;
    std::string endpoint = "/v1/completions";
    std::string model;    // the "model" field of every request
    std::string api_key;  // sent as "Authorization: Bearer KEY" when not empty
    double request_rate = std::numeric_limits<double>::infinity();  // requests/s; inf: all at t=0
    double burstiness = 1.0;                                        // gamma shape of the gaps (1: Poisson)
    std::optional<int> max_concurrency;                             // requests in flight at most; nullopt: unlimited
    bool ignore_eos = false;                                        // sends vLLM's extra parameter "ignore_eos": true
    uint64_t seed = 0;                                              // of the arrival times
    double request_timeout_s = 6 * 3600.0;                          // per request, as vLLM's AIOHTTP_TIMEOUT
    // Called on the client thread after each request finishes: (finished, total).
    std::function<void(int64_t, int64_t)> on_progress;
};

struct BenchRun {
    std::vector<RequestOutput> outputs;  // outputs[i] is requests[i]
    double duration_s = 0.0;             // first send -> last request finished
};

// Sends every request at its arrival time, at most max_concurrency at once (FIFO), and waits for
// all. A failure (refused connection, HTTP status != 200, an "error" chunk, a stream without any
// content chunk, a timeout) is recorded in that request's output, never thrown. Blocking;
// runs its own event loop on the calling thread.
BenchRun run_benchmark_requests(const ServeBenchOptions& options, std::span<const SampleRequest> requests);

// Arrival offsets in seconds from the start, vLLM's get_request: request 0 at 0, then gaps drawn
// from Gamma(shape = burstiness, scale = 1 / (rate * burstiness)); all 0 for rate = inf.
// Error kInvalidArgument for rate <= 0 or burstiness <= 0.
std::vector<double> arrival_offsets(int64_t num_requests, double request_rate, double burstiness, uint64_t seed);

// The JSON body of one streaming request (stream_options.include_usage set, temperature 0).
std::string request_body(const ServeBenchOptions& options, const SampleRequest& request);

// The body of GET path on server (200 only); Error kUnavailable naming the URL otherwise.
std::string http_get(const ServerAddress& server, const std::string& path, const std::string& api_key,
                     double timeout_s = 30.0);
// The id of the first model of GET {prefix}/v1/models. Error kUnavailable if the server cannot
// be reached or answers with an error, kInvalidArgument if the answer lists no model.
std::string first_served_model(const ServerAddress& server, const std::string& api_key, double timeout_s = 30.0);

}  // namespace moeserve::bench
