#include "moeserve/bench/pd_breakdown.h"

#include <fmt/format.h>

#include <sstream>

namespace moeserve::bench {

MetricsSample scrape_metrics(const std::vector<ServerAddress>& servers, const std::string& api_key) {
    MetricsSample out;
    for (const ServerAddress& server : servers) {
        std::istringstream text(http_get(server, "/metrics", api_key));
        for (std::string line; std::getline(text, line);) {
            if (line.empty() || line[0] == '#') continue;
            const size_t space = line.rfind(' ');
            if (space == std::string::npos) continue;
            try {
                out[line.substr(0, space)] += std::stod(line.substr(space + 1));
            } catch (const std::exception&) {
                // not a sample (NaN-free Prometheus text has none such); skipped
            }
        }
    }
    return out;
}

double metric_total(const MetricsSample& sample, const std::string& name) { return metric_total(sample, name, ""); }

double metric_total(const MetricsSample& sample, const std::string& name, const std::string& label) {
    double sum = 0;
    for (auto it = sample.lower_bound(name); it != sample.end() && it->first.rfind(name, 0) == 0; ++it) {
        const std::string& key = it->first;
        const bool series = key.size() == name.size() || key[name.size()] == '{';
        if (series && (label.empty() || key.find(label) != std::string::npos)) sum += it->second;
    }
    return sum;
}

namespace {

// The mean per event of a counter (or histogram _sum) over the run, in milliseconds.
double mean_ms(const MetricsSample& before, const MetricsSample& after, const std::string& sum,
               const std::string& count, const std::string& label = "") {
    const double n = metric_total(after, count, label) - metric_total(before, count, label);
    return n > 0 ? 1000.0 * (metric_total(after, sum, label) - metric_total(before, sum, label)) / n : 0.0;
}

}  // namespace

PdBreakdown pd_breakdown(const MetricsSample& prefill_before, const MetricsSample& prefill_after,
                         const MetricsSample& decode_before, const MetricsSample& decode_after) {
    const std::string consumer = "role=\"consumer\"";
    PdBreakdown b;
    b.prefills = static_cast<int64_t>(metric_total(prefill_after, "vllm:request_prefill_time_seconds_count") -
                                      metric_total(prefill_before, "vllm:request_prefill_time_seconds_count"));
    b.transfers = static_cast<int64_t>(metric_total(decode_after, "moeserve:kv_transfers_total", consumer) -
                                       metric_total(decode_before, "moeserve:kv_transfers_total", consumer));
    b.prefill_queue_ms = mean_ms(prefill_before, prefill_after, "vllm:request_queue_time_seconds_sum",
                                 "vllm:request_queue_time_seconds_count");
    b.prefill_ms = mean_ms(prefill_before, prefill_after, "vllm:request_prefill_time_seconds_sum",
                           "vllm:request_prefill_time_seconds_count");
    b.kv_fetch_ms = mean_ms(decode_before, decode_after, "moeserve:kv_transfer_seconds_total",
                            "moeserve:kv_transfers_total", consumer);
    if (b.transfers > 0) {
        b.kv_wait_ms = 1000.0 *  // a decode instance's own series (no role label)
                       (metric_total(decode_after, "moeserve:kv_wait_seconds_total") -
                        metric_total(decode_before, "moeserve:kv_wait_seconds_total")) /
                       static_cast<double>(b.transfers);
        b.kv_bytes = (metric_total(decode_after, "moeserve:kv_transfer_bytes_total", consumer) -
                      metric_total(decode_before, "moeserve:kv_transfer_bytes_total", consumer)) /
                     static_cast<double>(b.transfers);
    }
    b.decode_ttft_ms = mean_ms(decode_before, decode_after, "vllm:time_to_first_token_seconds_sum",
                               "vllm:time_to_first_token_seconds_count");
    b.first_decode_ms = b.decode_ttft_ms - b.kv_wait_ms;
    return b;
}

std::string format_pd_breakdown(const PdBreakdown& b) {
    const auto row = [](const std::string& name, const std::string& value) {
        return fmt::format("{:<40} {:<10}\n", name, value);
    };
    std::string out = fmt::format("{:-^50}\n", "PD TTFT breakdown (mean per request)");
    out += row("Prefills / KV transfers:", fmt::format("{} / {}", b.prefills, b.transfers));
    out += row("Prefill queue (ms):", fmt::format("{:.2f}", b.prefill_queue_ms));
    out += row("Prefill (ms):", fmt::format("{:.2f}", b.prefill_ms));
    out += row("KV wait at the decode instance (ms):", fmt::format("{:.2f}", b.kv_wait_ms));
    out += row("  of which the KV fetch (ms):", fmt::format("{:.2f}", b.kv_fetch_ms));
    out += row("First decode (ms):", fmt::format("{:.2f}", b.first_decode_ms));
    out += row("Decode instance TTFT (ms):", fmt::format("{:.2f}", b.decode_ttft_ms));
    out += row("KV bytes per transfer:", fmt::format("{:.0f}", b.kv_bytes));
    return out;
}

nlohmann::ordered_json pd_breakdown_json(const PdBreakdown& b) {
    return {{"prefills", b.prefills},
            {"kv_transfers", b.transfers},
            {"prefill_queue_ms", b.prefill_queue_ms},
            {"prefill_ms", b.prefill_ms},
            {"kv_wait_ms", b.kv_wait_ms},
            {"kv_fetch_ms", b.kv_fetch_ms},
            {"first_decode_ms", b.first_decode_ms},
            {"decode_ttft_ms", b.decode_ttft_ms},
            {"kv_bytes_per_transfer", b.kv_bytes}};
}

}  // namespace moeserve::bench
