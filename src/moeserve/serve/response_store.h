// The stored Responses (POST /v1/responses with store, the default): each response's object (GET
// /v1/responses/{id}) and its conversation as chat messages (what previous_response_id continues).
// Bounded: past --responses-store-size entries the oldest is evicted, and a request naming it gets
// a 404 that says so. In memory only; a restart forgets everything. Thread-safe.
#pragma once

#include <nlohmann/json.hpp>

#include <cstddef>
#include <deque>
#include <map>
#include <mutex>
#include <optional>
#include <string>

namespace moeserve::serve {

class ResponseStore {
public:
    struct Entry {
        nlohmann::ordered_json response;      // the Response object
        nlohmann::ordered_json conversation;  // chat messages: the history, the input, the output
    };

    explicit ResponseStore(size_t capacity) : capacity_(capacity) {}

    // Stores id (capacity 0: nothing is stored), evicting the oldest entry when full.
    void put(const std::string& id, Entry entry);
    std::optional<Entry> get(const std::string& id) const;

private:
    size_t capacity_;
    mutable std::mutex mutex_;
    std::map<std::string, Entry> entries_;
    std::deque<std::string> order_;  // oldest first
};

}  // namespace moeserve::serve
