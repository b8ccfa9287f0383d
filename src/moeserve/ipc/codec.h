// msgpack encoding of the ipc messages (messages.h). Each message is one ZeroMQ frame: a
// two-element array [variant index, payload], every struct an array of its fields in declaration
// order. Decoders accept longer arrays (fields added later) and raise Error on anything else.
#pragma once

#include <string>
#include <string_view>

#include "moeserve/ipc/kv_messages.h"
#include "moeserve/ipc/messages.h"
#include "moeserve/ipc/tp_messages.h"

namespace moeserve::ipc {

// Bytes of message. Thread-safe (no shared state).
std::string encode(const ClientMessage& message);
std::string encode(const EngineMessage& message);
std::string encode(const KvMessage& message);
std::string encode(const TpMessage& message);

// Message of bytes. Raises Error(kInvalidArgument) naming what was malformed when bytes are not
// an encoded message of that direction (truncated, wrong types, unknown variant index).
ClientMessage decode_client_message(std::string_view bytes);
EngineMessage decode_engine_message(std::string_view bytes);
KvMessage decode_kv_message(std::string_view bytes);
TpMessage decode_tp_message(std::string_view bytes);

}  // namespace moeserve::ipc
