// `moeserve serve`: the API server process plus its rank process(es) (DESIGN.md, Processes),
// with vllm serve's flags; and the hidden `moeserve rank`, the engine process `serve` starts
// (fork + exec of /proc/self/exe) and talks to over ZeroMQ. SIGTERM drains and exits 0.
#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <thread>

#include "moeserve/cli/commands.h"
#include "moeserve/core/error.h"
#include "moeserve/core/log.h"
#include "moeserve/core/thread_pool.h"
#include "moeserve/engine/engine_core.h"
#include "moeserve/engine/engine_proc.h"
#include "moeserve/engine/kv_cache/kv_cache_manager.h"
#include "moeserve/model/registry.h"
#include "moeserve/serve/engine_client.h"
#include "moeserve/serve/http_server.h"
#include "moeserve/serve/metrics.h"
#include "moeserve/serve/routes.h"
#include "moeserve/tokenizer/tokenizer.h"

namespace moeserve::cli {

namespace {

// Options of the engine (shared by `serve`, which forwards them, and `rank`).
struct EngineOptions {
    std::string model;
    int32_t max_num_seqs = 256;
    int32_t max_model_len = 0;  // 0 = min(max_position_embeddings, 4096)
    int32_t max_num_batched_tokens = 2048;
    int32_t block_size = 16;
    double gpu_memory_utilization = 0.9;
    std::string kv_cache_memory;  // bytes, with an optional K/M/G suffix; empty = from utilization
    bool enable_prefix_caching = true;
    uint64_t seed = 0;
    int threads = 0;
    std::string log_level = "info";
};

struct ServeOptions {
    EngineOptions engine;
    std::string served_model_name;
    std::string host = "127.0.0.1";
    int port = 8000;
    std::string api_key;
    bool trust_remote_code = false;
    int data_parallel_size = 1;
    int tensor_parallel_size = 1;
    int http_threads = 1;
    int64_t max_request_body_bytes = 16 << 20;
    double drain_timeout = 30;
    double engine_ready_timeout = 600;
    int heartbeat_timeout_ms = 30000;
};

struct RankOptions {
    EngineOptions engine;
    int32_t engine_index = 0;
    std::string input_address, output_address;
};

int64_t parse_bytes(const std::string& text) {
    size_t used = 0;
    double value = 0;
    try {
        value = std::stod(text, &used);
    } catch (const std::exception&) {
        raise(ErrorCode::kInvalidArgument, "--kv-cache-memory '{}' is not a size like 4G or 512M", text);
    }
    const std::string suffix = text.substr(used);
    double scale = 1;
    if (suffix == "K" || suffix == "KiB" || suffix == "k") scale = 1024.0;
    else if (suffix == "M" || suffix == "MiB") scale = 1024.0 * 1024;
    else if (suffix == "G" || suffix == "GiB") scale = 1024.0 * 1024 * 1024;
    else if (!suffix.empty()) raise(ErrorCode::kInvalidArgument, "--kv-cache-memory '{}': unknown unit '{}' (K, M or G)", text, suffix);
    if (value <= 0) raise(ErrorCode::kInvalidArgument, "--kv-cache-memory must be > 0; got '{}'", text);
    return static_cast<int64_t>(value * scale);
}

nlohmann::json read_model_config(const std::string& dir) {
    std::ifstream in(std::filesystem::path(dir) / "config.json");
    if (!in) raise(ErrorCode::kNotFound, "--model {}: no config.json there", dir);
    nlohmann::json j = nlohmann::json::parse(in, nullptr, false);
    if (!j.is_object()) raise(ErrorCode::kInvalidModel, "{}/config.json is not a JSON object", dir);
    return j;
}

int32_t resolve_max_model_len(const EngineOptions& o, const nlohmann::json& config) {
    const int64_t positions = config.value("max_position_embeddings", int64_t{4096});
    if (o.max_model_len < 0) raise(ErrorCode::kInvalidArgument, "--max-model-len must be > 0; got {}", o.max_model_len);
    if (o.max_model_len == 0) return static_cast<int32_t>(std::min<int64_t>(positions, 4096));
    if (o.max_model_len > positions) {
        raise(ErrorCode::kInvalidArgument, "--max-model-len {} exceeds the model's max_position_embeddings {}", o.max_model_len, positions);
    }
    return o.max_model_len;
}

int64_t total_ram_bytes() {
    const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGE_SIZE);
    return pages > 0 && page > 0 ? static_cast<int64_t>(pages) * page : int64_t{8} << 30;
}

int num_threads(int requested) {
    return requested > 0 ? requested : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
}

// ---- the rank process ----

int run_rank(const RankOptions& o) {
    Logger logger(fmt::format("dp{} tp0", o.engine_index), parse_log_level(o.engine.log_level));
    const auto config = read_model_config(o.engine.model);
    const int32_t max_model_len = resolve_max_model_len(o.engine, config);
    ThreadPool pool(num_threads(o.engine.threads));
    auto model = model::load_model(o.engine.model, pool, model::LoadOptions{.max_model_len = max_model_len});
    const auto& info = model->info();
    // KV blocks: --kv-cache-memory, else the RAM share left after weights, capped at what
    // max_num_seqs full-length sequences can use.
    const int64_t budget = !o.engine.kv_cache_memory.empty()
        ? parse_bytes(o.engine.kv_cache_memory)
        : static_cast<int64_t>(o.engine.gpu_memory_utilization * static_cast<double>(total_ram_bytes())) - info.weight_bytes;
    const int64_t per_seq = (max_model_len + o.engine.block_size - 1) / o.engine.block_size;
    int64_t blocks = engine::num_blocks_for_bytes(budget, info.kv_bytes_per_token, o.engine.block_size);
    blocks = std::min<int64_t>(blocks, per_seq * o.engine.max_num_seqs + 1);
    if (blocks < per_seq + 1) {
        raise(ErrorCode::kInvalidArgument, "the KV cache has room for {} blocks of {} tokens, less than one {}-token sequence needs; "
              "raise --kv-cache-memory / --gpu-memory-utilization or lower --max-model-len", blocks, o.engine.block_size, max_model_len);
    }
    engine::EngineConfig ec;
    ec.max_num_seqs = o.engine.max_num_seqs;
    ec.max_num_batched_tokens = o.engine.max_num_batched_tokens;
    ec.max_model_len = max_model_len;
    ec.block_size = o.engine.block_size;
    ec.num_blocks = static_cast<int32_t>(blocks);
    ec.enable_prefix_caching = o.engine.enable_prefix_caching;
    ec.seed = o.engine.seed;
    ec.engine_index = o.engine_index;
    engine::EngineCore core(*model, pool, ec);
    MOESERVE_LOG_I(logger, "engine", "model %s loaded: %d KV blocks of %d tokens, %d threads",
                   info.model_type.c_str(), ec.num_blocks, ec.block_size, pool.num_threads());
    ipc::EngineChannel channel(o.input_address, o.output_address);
    return engine::run_engine_loop(core, channel, logger, {.engine_index = o.engine_index});
}

void add_engine_options(CLI::App* sub, EngineOptions& o) {
    sub->add_option("--model", o.model, "Hugging Face model directory")->required();
    sub->add_option("--max-num-seqs", o.max_num_seqs, "most sequences in one batch")->capture_default_str();
    sub->add_option("--max-model-len", o.max_model_len, "longest sequence, prompt + output (default: min(max_position_embeddings, 4096))");
    sub->add_option("--max-num-batched-tokens", o.max_num_batched_tokens, "most tokens in one step")->capture_default_str();
    sub->add_option("--block-size", o.block_size, "KV cache block size in tokens")->capture_default_str();
    sub->add_option("--gpu-memory-utilization", o.gpu_memory_utilization, "on CPU: share of RAM for weights + KV cache")->capture_default_str();
    sub->add_option("--kv-cache-memory", o.kv_cache_memory, "KV cache size, e.g. 2G (overrides --gpu-memory-utilization)");
    sub->add_flag("--enable-prefix-caching,!--no-enable-prefix-caching", o.enable_prefix_caching, "reuse KV blocks of shared prompt prefixes (default on)");
    sub->add_option("--seed", o.seed, "seed of requests without their own")->capture_default_str();
    sub->add_option("--threads", o.threads, "compute threads of the rank (default: all cores)");
    sub->add_option("--log-level", o.log_level, "debug | info | warning | error")->capture_default_str();
}

// Arguments that make `moeserve rank` run engine `index` with the serve options.
std::vector<std::string> rank_argv(const ServeOptions& o, int index, const std::string& input,
                                   const std::string& output) {
    const auto& e = o.engine;
    std::vector<std::string> a = {"moeserve", "rank", "--model", e.model, "--engine-index", std::to_string(index),
        "--input-address", input, "--output-address", output,
        "--max-num-seqs", std::to_string(e.max_num_seqs), "--max-model-len", std::to_string(e.max_model_len),
        "--max-num-batched-tokens", std::to_string(e.max_num_batched_tokens),
        "--block-size", std::to_string(e.block_size),
        "--gpu-memory-utilization", fmt::format("{}", e.gpu_memory_utilization),
        "--seed", std::to_string(e.seed), "--threads", std::to_string(e.threads), "--log-level", e.log_level};
    if (!e.kv_cache_memory.empty()) a.insert(a.end(), {"--kv-cache-memory", e.kv_cache_memory});
    if (!e.enable_prefix_caching) a.push_back("--no-enable-prefix-caching");
    return a;
}

// fork + exec of this binary as a rank; the child dies with us (PR_SET_PDEATHSIG).
pid_t spawn_rank(const std::vector<std::string>& args) {
    std::vector<char*> argv;
    for (const auto& s : args) argv.push_back(const_cast<char*>(s.c_str()));
    argv.push_back(nullptr);
    const pid_t parent = getpid();
    const pid_t pid = fork();
    if (pid < 0) raise(ErrorCode::kIo, "fork of the rank process failed: {}", std::strerror(errno));
    if (pid == 0) {
        sigset_t none;
        sigemptyset(&none);
        sigprocmask(SIG_SETMASK, &none, nullptr);
        prctl(PR_SET_PDEATHSIG, SIGTERM);
        if (getppid() != parent) _exit(1);
        execv("/proc/self/exe", argv.data());
        _exit(127);
    }
    return pid;
}

std::string describe_status(int status) {
    if (WIFEXITED(status)) return fmt::format("exited with status {}", WEXITSTATUS(status));
    if (WIFSIGNALED(status)) return fmt::format("was killed by signal {}", WTERMSIG(status));
    return "stopped";
}

// Waits up to timeout_s for pid to exit, then kills it.
void reap(pid_t pid, double timeout_s) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
    int status = 0;
    while (std::chrono::steady_clock::now() < deadline) {
        if (waitpid(pid, &status, WNOHANG) != 0) return;
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    kill(pid, SIGKILL);
    waitpid(pid, &status, 0);
}

// ---- the API server ----

int run_serve(ServeOptions o) {
    if (o.data_parallel_size != 1) raise(ErrorCode::kUnsupported, "--data-parallel-size {}: data parallelism is not built yet (issue: parallelism); use 1", o.data_parallel_size);
    if (o.tensor_parallel_size != 1) raise(ErrorCode::kUnsupported, "--tensor-parallel-size {}: tensor parallelism is not built yet (issue: parallelism); use 1", o.tensor_parallel_size);
    if (o.port < 0 || o.port > 65535) raise(ErrorCode::kInvalidArgument, "--port must be in [0, 65535]; got {}", o.port);
    Logger logger("api", parse_log_level(o.engine.log_level));
    const auto config = read_model_config(o.engine.model);
    o.engine.max_model_len = resolve_max_model_len(o.engine, config);
    const auto tok = tokenizer::Tokenizer::from_dir(o.engine.model);

    serve::RouterConfig rc;
    rc.limits.served_model_name = o.served_model_name.empty() ? o.engine.model : o.served_model_name;
    rc.limits.max_model_len = o.engine.max_model_len;
    rc.limits.vocab_size = static_cast<int32_t>(config.value("vocab_size", int64_t{tok.vocab_size()}));
    rc.api_key = o.api_key;
    rc.model_path = o.engine.model;
    rc.version = MOESERVE_VERSION;
    if (const auto eos = config.find("eos_token_id"); eos != config.end()) {
        if (eos->is_number_integer()) rc.eos_token_ids.push_back(eos->get<int32_t>());
        if (eos->is_array()) for (const auto& e : *eos) if (e.is_number_integer()) rc.eos_token_ids.push_back(e.get<int32_t>());
    }
    if (tok.eos_token_id()) rc.eos_token_ids.push_back(*tok.eos_token_id());

    // Signals go to the signal thread only (blocked everywhere else, before threads start).
    sigset_t signals;
    sigemptyset(&signals);
    sigaddset(&signals, SIGTERM);
    sigaddset(&signals, SIGINT);
    pthread_sigmask(SIG_BLOCK, &signals, nullptr);
    signal(SIGPIPE, SIG_IGN);
    rlimit files{};  // one descriptor per connection: allow as many as the hard limit does
    if (getrlimit(RLIMIT_NOFILE, &files) == 0 && files.rlim_cur < files.rlim_max) {
        files.rlim_cur = files.rlim_max;
        setrlimit(RLIMIT_NOFILE, &files);
    }

    const auto ipc_dir = std::filesystem::temp_directory_path() / fmt::format("moeserve-{}", getpid());
    std::filesystem::create_directories(ipc_dir);
    const std::string output = "ipc://" + (ipc_dir / "out").string();
    const std::string input = "ipc://" + (ipc_dir / "in0").string();
    serve::EngineClient engines({output, {input}, o.heartbeat_timeout_ms}, logger);
    const pid_t rank = spawn_rank(rank_argv(o, 0, input, output));
    MOESERVE_LOG_I(logger, "api", "started rank process %d; loading %s", rank, o.engine.model.c_str());

    // Wait for the engine, but not for a rank that died.
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(o.engine_ready_timeout);
    while (!engines.wait_ready(200)) {
        int status = 0;
        if (waitpid(rank, &status, WNOHANG) == rank) {
            std::filesystem::remove_all(ipc_dir);
            raise(ErrorCode::kUnavailable, "the rank process {} during startup (see its messages above)", describe_status(status));
        }
        if (std::chrono::steady_clock::now() > deadline) {
            kill(rank, SIGKILL);
            reap(rank, 5);
            raise(ErrorCode::kUnavailable, "the engine was not ready within --engine-ready-timeout {} s", o.engine_ready_timeout);
        }
    }
    std::atomic<bool> stopping{false};
    std::thread watcher([&] {  // a rank that exits while we serve fails its requests
        int status = 0;
        if (waitpid(rank, &status, 0) == rank && !stopping) {
            engines.mark_dead(0, fmt::format("rank process {} {}", rank, describe_status(status)));
        }
    });

    serve::Metrics metrics(rc.limits.served_model_name);
    serve::Router router(rc, tok, engines, metrics, logger);
    serve::HttpServer server({.host = o.host, .port = o.port, .num_threads = o.http_threads,
                              .max_body_bytes = static_cast<size_t>(o.max_request_body_bytes)},
                             [&router](serve::HttpRequest r, std::shared_ptr<serve::Responder> s) { router.handle(std::move(r), std::move(s)); });
    MOESERVE_LOG_I(logger, "api", "serving %s on http://%s:%d", rc.limits.served_model_name.c_str(), o.host.c_str(), server.port());
    std::fprintf(stderr, "try: curl http://%s:%d/v1/completions -H 'Content-Type: application/json'%s -d '{\"model\": \"%s\", \"prompt\": \"Hello\", \"max_tokens\": 16}'\n",
                 o.host.c_str(), server.port(), o.api_key.empty() ? "" : " -H 'Authorization: Bearer $MOESERVE_API_KEY'",
                 rc.limits.served_model_name.c_str());

    std::thread signal_thread([&] {
        int sig = 0;
        sigwait(&signals, &sig);
        MOESERVE_LOG_I(logger, "api", "signal %d: draining (up to %.0f s)", sig, o.drain_timeout);
        router.set_draining();
        server.stop_accepting();
        const auto drain_end = std::chrono::steady_clock::now() + std::chrono::duration<double>(o.drain_timeout);
        while (engines.num_in_flight() > 0 && std::chrono::steady_clock::now() < drain_end) {
            std::this_thread::sleep_for(std::chrono::milliseconds(20));
        }
        if (engines.num_in_flight() > 0) {
            MOESERVE_LOG_W(logger, "api", "aborting %d requests still running", engines.num_in_flight());
            engines.abort_all();
            for (int i = 0; i < 100 && engines.num_in_flight() > 0; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(20));
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(100));  // let the last answers go out
        stopping = true;
        engines.shutdown();
        server.stop();
    });
    server.run();
    signal_thread.join();
    reap(rank, 10);
    watcher.join();
    std::filesystem::remove_all(ipc_dir);
    MOESERVE_LOG_I(logger, "api", "stopped");
    return 0;
}

}  // namespace

void add_serve_command(CLI::App& app, Action* action) {
    auto o = std::make_shared<ServeOptions>();
    CLI::App* sub = app.add_subcommand("serve", "Serve a model over the OpenAI HTTP API");
    add_engine_options(sub, o->engine);
    sub->add_option("--served-model-name", o->served_model_name, "model name in the API (default: --model)");
    sub->add_option("--host", o->host)->capture_default_str();
    sub->add_option("--port", o->port, "0 = any free port")->capture_default_str();
    sub->add_option("--api-key", o->api_key, "require 'Authorization: Bearer KEY' on /v1 (env: MOESERVE_API_KEY)");
    sub->add_flag("--trust-remote-code", o->trust_remote_code, "accepted for vllm compatibility; no effect");
    sub->add_option("--data-parallel-size", o->data_parallel_size)->capture_default_str();
    sub->add_option("--tensor-parallel-size", o->tensor_parallel_size)->capture_default_str();
    sub->add_option("--http-threads", o->http_threads, "I/O threads of the API server")->capture_default_str();
    sub->add_option("--max-request-body-bytes", o->max_request_body_bytes, "larger bodies get 413")->capture_default_str();
    sub->add_option("--drain-timeout", o->drain_timeout, "seconds SIGTERM waits for running requests")->capture_default_str();
    sub->add_option("--engine-ready-timeout", o->engine_ready_timeout, "seconds to wait for the model to load")->capture_default_str();
    sub->add_option("--heartbeat-timeout-ms", o->heartbeat_timeout_ms, "an engine silent this long is declared dead")->capture_default_str();
    sub->callback([o, action] {
        // env: MOESERVE_API_KEY, the API key when --api-key is not given.
        if (o->api_key.empty()) {
            if (const char* key = std::getenv("MOESERVE_API_KEY")) o->api_key = key;
        }
        *action = [o] { return run_serve(*o); };
    });

    auto r = std::make_shared<RankOptions>();
    CLI::App* rank = app.add_subcommand("rank", "")->group("");  // hidden: started by serve
    add_engine_options(rank, r->engine);
    rank->add_option("--engine-index", r->engine_index);
    rank->add_option("--input-address", r->input_address)->required();
    rank->add_option("--output-address", r->output_address)->required();
    rank->callback([r, action] { *action = [r] { return run_rank(*r); }; });
}

}  // namespace moeserve::cli
