#include "moeserve/ipc/client_routing.h"

#include <algorithm>

namespace moeserve::ipc {

ClientRouting::ClientRouting(int num_clients)
    : num_clients_(std::max(1, num_clients)), shut_down_(static_cast<size_t>(num_clients_), false) {}

void ClientRouting::on_add(const AddRequest& request) {
    if (num_clients_ == 1) return;
    const bool known = request.client_index >= 0 && request.client_index < num_clients_;
    client_of_[request.request_id] = known ? request.client_index : 0;
}

bool ClientRouting::on_shutdown(const Shutdown& message) {
    if (num_clients_ == 1) return true;
    if (message.client_index >= 0 && message.client_index < num_clients_)
        shut_down_[static_cast<size_t>(message.client_index)] = true;
    return std::all_of(shut_down_.begin(), shut_down_.end(), [](bool b) { return b; });
}

std::vector<std::string> ClientRouting::on_client_started(const ClientStarted& message) {
    std::vector<std::string> ids;
    if (message.client_index < 0 || message.client_index >= num_clients_) return ids;
    shut_down_[static_cast<size_t>(message.client_index)] = false;
    for (const auto& [id, client] : client_of_)
        if (client == message.client_index) ids.push_back(id);
    // Kept until their final (abort) outputs, which go to the new process: it ignores ids it
    // never added.
    return ids;
}

std::vector<std::vector<RequestOutput>> ClientRouting::split(std::vector<RequestOutput> outputs) {
    std::vector<std::vector<RequestOutput>> out(static_cast<size_t>(num_clients_));
    if (num_clients_ == 1) {
        out[0] = std::move(outputs);
        return out;
    }
    for (auto& o : outputs) {
        int32_t client = 0;
        if (const auto it = client_of_.find(o.request_id); it != client_of_.end()) {
            client = it->second;
            if (o.finish_reason != FinishReason::kNone) client_of_.erase(it);
        }
        out[static_cast<size_t>(client)].push_back(std::move(o));
    }
    return out;
}

}  // namespace moeserve::ipc
