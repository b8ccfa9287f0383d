// Several API servers over one set of engines (--api-server-count, docs/parallelism.md): every
// engine takes requests from each server and sends each request's outputs back to the server
// that added it (AddRequest::client_index). ClientRouting is an engine's table of request ->
// server. With one client it keeps nothing and every output goes to client 0, so the
// single-server path does no lookups. Engine thread only.
#pragma once

#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "moeserve/ipc/messages.h"

namespace moeserve::ipc {

class ClientRouting {
public:
    explicit ClientRouting(int num_clients);

    int num_clients() const { return num_clients_; }
    // Records who added the request (until its final output). A client_index out of range
    // counts as client 0 (a bad message must not stop the engine).
    void on_add(const AddRequest& request);
    // Records a Shutdown of message.client_index; true once every client has sent one (with one
    // client: at once). An index out of range is ignored.
    bool on_shutdown(const Shutdown& message);
    // A restarted client (ClientStarted): forgets its Shutdown and the requests its dead process
    // added, whose ids are returned (to abort). An index out of range: nothing.
    std::vector<std::string> on_client_started(const ClientStarted& message);
    // One step's outputs split per client (index = client): each output goes to the client that
    // added its request, an unknown request's to client 0; a request whose output is final is
    // forgotten. With one client: outputs unchanged, as the only element.
    std::vector<std::vector<RequestOutput>> split(std::vector<RequestOutput> outputs);
    // Requests whose final output has not been routed yet.
    size_t num_tracked() const { return client_of_.size(); }

private:
    int num_clients_;
    std::unordered_map<std::string, int32_t> client_of_;
    std::vector<bool> shut_down_;
};

}  // namespace moeserve::ipc
