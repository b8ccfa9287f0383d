#include "moeserve/cli/perplexity_remote.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <deque>
#include <exception>
#include <mutex>
#include <thread>

#include "moeserve/bench/serve_bench.h"
#include "moeserve/core/error.h"
#include "moeserve/serve/upstream_call.h"

namespace moeserve::cli {

namespace {

using Json = nlohmann::json;

struct Finished {
    size_t chunk = 0;
    std::vector<ipc::TokenLogprobs> logprobs;
    std::string error;  // set: the chunk failed
};

std::string chunk_body(const std::string& model, const std::vector<int32_t>& chunk, int top) {
    return Json{{"model", model},   {"prompt", chunk},        {"max_tokens", 1},
                {"temperature", 0}, {"prompt_logprobs", top}, {"ignore_eos", true}}
        .dump();
}

// One chunk's request; the answer's logprobs, or why it failed.
Finished run_chunk(const bench::ServerAddress& server, const RemotePerplexityTarget& target, const std::string& model,
                   size_t index, const std::vector<int32_t>& chunk, int top) {
    serve::UpstreamRequest req;
    req.host = server.host;
    req.port = server.port;
    req.target = server.path_prefix + "/v1/completions";
    req.body = chunk_body(model, chunk, top);
    if (!target.api_key.empty()) req.authorization = "Bearer " + target.api_key;
    serve::UpstreamCall call;
    int status = 0;
    std::string answer;
    call.on_head = [&status](int s, const std::string&) { status = s; };
    call.on_body = [&answer](std::string_view bytes) { answer.append(bytes); };
    Finished f{index, {}, call.run(req)};
    if (f.error.empty() && status != 200) f.error = fmt::format("HTTP {}: {}", status, answer.substr(0, 500));
    if (!f.error.empty()) return f;
    try {
        f.logprobs = parse_prompt_logprobs(answer, chunk, top);
    } catch (const Error& e) {
        f.error = e.what();
    }
    return f;
}

}  // namespace

std::vector<ipc::TokenLogprobs> parse_prompt_logprobs(const std::string& answer, const std::vector<int32_t>& prompt,
                                                      int top) {
    const Json j = Json::parse(answer, nullptr, false);
    const Json* lps = nullptr;
    if (j.is_object() && j.contains("choices") && j["choices"].is_array() && !j["choices"].empty() &&
        j["choices"][0].is_object() && j["choices"][0].contains("prompt_logprobs")) {
        lps = &j["choices"][0]["prompt_logprobs"];
    }
    if (!lps || !lps->is_array() || lps->size() != prompt.size()) {
        raise(ErrorCode::kInvalidArgument, "the answer has no prompt_logprobs for the {} prompt tokens: {}",
              prompt.size(), answer.substr(0, 300));
    }
    std::vector<ipc::TokenLogprobs> out(prompt.size() - 1);
    for (size_t p = 1; p < prompt.size(); ++p) {
        const Json& m = (*lps)[p];
        ipc::TokenLogprobs& e = out[p - 1];
        e.token_id = prompt[p];
        const std::string own = std::to_string(e.token_id);
        if (!m.is_object() || !m.contains(own)) {
            raise(ErrorCode::kInvalidArgument, "prompt_logprobs[{}] has no entry for the prompt's token {}", p, own);
        }
        e.logprob = m[own].value("logprob", 0.0f);
        e.rank = m[own].value("rank", 0);
        for (const auto& [id, v] : m.items()) {  // the top k, and the prompt's token only if among them
            if (v.value("rank", top + 1) <= top) e.top.emplace_back(std::stoi(id), v.value("logprob", 0.0f));
        }
        std::sort(e.top.begin(), e.top.end(), [](const auto& a, const auto& b) { return a.second > b.second; });
    }
    return out;
}

void run_remote_chunks(const RemotePerplexityTarget& target, const std::vector<std::vector<int32_t>>& chunks,
                       int parallel, int top,
                       const std::function<void(size_t, std::vector<ipc::TokenLogprobs>)>& on_done) {
    const bench::ServerAddress server = bench::parse_base_url(target.url);
    const std::string model = target.model.empty() ? bench::first_served_model(server, target.api_key) : target.model;
    std::atomic<size_t> next{0};
    std::atomic<bool> stop{false};
    std::mutex mutex;
    std::condition_variable ready;
    std::deque<Finished> finished;
    std::vector<std::thread> workers;
    for (int w = 0; w < std::max(1, parallel); ++w) {
        workers.emplace_back([&] {
            for (size_t i = next++; i < chunks.size() && !stop; i = next++) {
                Finished f = run_chunk(server, target, model, i, chunks[i], top);
                std::lock_guard<std::mutex> lock(mutex);
                finished.push_back(std::move(f));
                ready.notify_one();
            }
        });
    }
    std::exception_ptr failure;
    try {
        for (size_t received = 0; received < chunks.size(); ++received) {
            std::unique_lock<std::mutex> lock(mutex);
            ready.wait(lock, [&] { return !finished.empty(); });
            Finished f = std::move(finished.front());
            finished.pop_front();
            lock.unlock();
            if (!f.error.empty()) raise(ErrorCode::kUnavailable, "chunk {} on {}: {}", f.chunk, target.url, f.error);
            on_done(f.chunk, std::move(f.logprobs));
        }
    } catch (...) {
        failure = std::current_exception();
    }
    stop = true;  // after a failure the workers finish the request they have and take no more
    for (auto& t : workers) t.join();
    if (failure) std::rethrow_exception(failure);
}

}  // namespace moeserve::cli
