// What a launcher tells the API server(s) when a rank process it started exits (rank_supervisor.h):
// which engines restart, recover, or are lost. Engines are numbered as the API server numbers
// them (0 = its first DP rank). An API server applies the notices to its EngineClient at once;
// the parent of --api-server-count N, which runs the ranks but no EngineClient, appends them to
// the run folder's event log, and each API server replays the log onto its own EngineClient.
// The steady clock is the host's, so a notice that arrives after the engine recovered is known as
// late (EngineClient::mark_recovering).
#pragma once

#include <atomic>
#include <cstdint>
#include <optional>
#include <string>

#include "moeserve/serve/engine_client.h"
#include "moeserve/serve/metrics.h"

namespace moeserve::cli {

class EngineNotices {
public:
    virtual ~EngineNotices() = default;
    // Its process died and a new one comes (EngineClient::mark_restarting). died_ms: when the
    // launcher saw the death (EngineClient::steady_now_ms).
    virtual void restarting(int engine, const std::string& why, int64_t died_ms) = 0;
    // A rank of its group died; the group re-forms (EngineClient::mark_recovering).
    virtual void recovering(int engine, const std::string& why, int64_t died_ms) = 0;
    // Lost for good (EngineClient::mark_dead).
    virtual void dead(int engine, const std::string& why) = 0;
    // A dead rank was started again (moeserve:group_restarts_total).
    virtual void group_restarted() = 0;
    // Whether every engine is healthy again; nullopt where the launcher cannot see it.
    virtual std::optional<bool> all_healthy() const = 0;
};

// An API server's own engines (0 <= engine < num_engines; others are ignored).
class ServerEngineNotices : public EngineNotices {
public:
    ServerEngineNotices(serve::EngineClient& engines, int num_engines, serve::Metrics& metrics)
        : engines_(engines), num_engines_(num_engines), metrics_(metrics) {}
    void restarting(int engine, const std::string& why, int64_t died_ms) override {
        if (known(engine)) engines_.mark_restarting(engine, why, died_ms);
    }
    void recovering(int engine, const std::string& why, int64_t died_ms) override {
        if (known(engine)) engines_.mark_recovering(engine, why, died_ms);
    }
    void dead(int engine, const std::string& why) override {
        if (known(engine)) engines_.mark_dead(engine, why);
    }
    void group_restarted() override { metrics_.on_group_restart(); }
    std::optional<bool> all_healthy() const override { return engines_.healthy(); }

private:
    bool known(int engine) const { return engine >= 0 && engine < num_engines_; }
    serve::EngineClient& engines_;
    const int num_engines_;
    serve::Metrics& metrics_;
};

// The parent of several API servers: one line per notice in the run folder's event log
// (engine_event_log()), written with one append each so a reader never sees a part of one.
class EngineEventLogWriter : public EngineNotices {
public:
    explicit EngineEventLogWriter(std::string path) : path_(std::move(path)) {}
    void restarting(int engine, const std::string& why, int64_t died_ms) override {
        append("restarting", engine, died_ms, why);
    }
    void recovering(int engine, const std::string& why, int64_t died_ms) override {
        append("recovering", engine, died_ms, why);
    }
    void dead(int engine, const std::string& why) override {
        engine_lost_ = true;
        append("dead", engine, -1, why);
    }
    void group_restarted() override { append("group_restarted", -1, -1, ""); }
    std::optional<bool> all_healthy() const override { return std::nullopt; }
    // Whether an engine was lost for good (a `dead` line written).
    bool engine_lost() const { return engine_lost_; }

private:
    void append(const char* kind, int engine, int64_t died_ms, const std::string& why);
    const std::string path_;
    std::atomic<bool> engine_lost_{false};
};

// An API server of several: replays the lines its parent appended since the last call.
class EngineEventLogReader {
public:
    explicit EngineEventLogReader(std::string path) : path_(std::move(path)) {}
    // Applies every complete new line to `to`; returns how many were `dead`. Malformed lines are
    // skipped. Call from one thread.
    int replay(EngineNotices& to);
    // An API server started again in place of a dead one: the engines' past is over (they answer
    // its hello with their state now), so only the restart counts are taken from it.
    void skip_past(EngineNotices& to);

private:
    int apply(const std::string& text, EngineNotices& to, bool counts_only);

    const std::string path_;
    uint64_t offset_ = 0;
};

}  // namespace moeserve::cli
