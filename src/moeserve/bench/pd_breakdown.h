// `moeserve bench serve --pd-prefill-url/--pd-decode-url`: the TTFT of a PD-disaggregated run
// (through `moeserve proxy`) broken into its parts, from the instances' own /metrics scraped
// before and after the run (means per request over the run):
//   prefill queue   vllm:request_queue_time_seconds of the prefill instances
//   prefill         vllm:request_prefill_time_seconds of the prefill instances
//   KV wait         moeserve:kv_wait_seconds_total of the decode instances: from a request's
//                   admission there to its KV being complete (streamed: overlaps the prefill)
//   KV fetch        moeserve:kv_transfer_seconds_total (consumer): the fetch itself
//   first decode    the decode instances' TTFT minus their KV wait
// plus the KV bytes per request. The client's TTFT also holds the proxy's and HTTP hops.
#pragma once

#include <nlohmann/json.hpp>

#include <map>
#include <string>
#include <vector>

#include "moeserve/bench/serve_bench.h"

namespace moeserve::bench {

// Every sample of the servers' /metrics, summed over them by "name{labels}".
using MetricsSample = std::map<std::string, double>;
MetricsSample scrape_metrics(const std::vector<ServerAddress>& servers, const std::string& api_key);
// The sum over every series of one metric (all label sets).
double metric_total(const MetricsSample& sample, const std::string& name);
// A series by its exact name, or the sum of those whose labels hold label (e.g. role="consumer").
double metric_total(const MetricsSample& sample, const std::string& name, const std::string& label);

struct PdBreakdown {
    int64_t prefills = 0, transfers = 0;
    double prefill_queue_ms = 0, prefill_ms = 0;
    double kv_wait_ms = 0, kv_fetch_ms = 0, kv_bytes = 0;  // per transfer
    double decode_ttft_ms = 0, first_decode_ms = 0;
};
PdBreakdown pd_breakdown(const MetricsSample& prefill_before, const MetricsSample& prefill_after,
                         const MetricsSample& decode_before, const MetricsSample& decode_after);
// The report block (vLLM's row style) and the result JSON's "pd_ttft_breakdown".
std::string format_pd_breakdown(const PdBreakdown& b);
nlohmann::ordered_json pd_breakdown_json(const PdBreakdown& b);

}  // namespace moeserve::bench
