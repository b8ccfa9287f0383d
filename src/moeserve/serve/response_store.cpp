#include "moeserve/serve/response_store.h"

namespace moeserve::serve {

void ResponseStore::put(const std::string& id, Entry entry) {
    if (capacity_ == 0) return;
    std::lock_guard lock(mutex_);
    if (entries_.insert_or_assign(id, std::move(entry)).second) order_.push_back(id);
    while (order_.size() > capacity_) {
        entries_.erase(order_.front());
        order_.pop_front();
    }
}

std::optional<ResponseStore::Entry> ResponseStore::get(const std::string& id) const {
    std::lock_guard lock(mutex_);
    const auto it = entries_.find(id);
    if (it == entries_.end()) return std::nullopt;
    return it->second;
}

}  // namespace moeserve::serve
