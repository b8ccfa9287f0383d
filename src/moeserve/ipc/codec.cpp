// msgpack codec of the ipc messages: each struct lists its fields once (fields()) and generic
// pack/convert adaptors turn that list into an array. msgpack stays inside this file.
#include "moeserve/ipc/codec.h"

#include <msgpack.hpp>

#include <tuple>
#include <type_traits>

#include "moeserve/core/error.h"

namespace moeserve::ipc {
namespace {

// The fields of each message struct, in wire order. Append new fields at the end only (a receiver
// skips trailing fields it does not know). Removing one changes the format for every later field:
// the API server and its engines must then be the same build (#18 removed
// SamplingParams::ignore_eos and AddRequest::arrival_time).
template <typename T>
auto fields(T& v) {
    using S = std::remove_const_t<T>;
    if constexpr (std::is_same_v<S, SamplingParams>) {
        return std::tie(v.temperature, v.top_p, v.top_k, v.min_p, v.presence_penalty, v.frequency_penalty,
                        v.repetition_penalty, v.seed, v.max_tokens, v.min_tokens, v.stop_token_ids, v.logprobs,
                        v.prompt_logprobs, v.grammar, v.grammar_after_token_ids, v.logit_bias, v.allowed_token_ids,
                        v.bad_words_token_ids, v.cache_salt);
    } else if constexpr (std::is_same_v<S, AddRequest>) {
        return std::tie(v.request_id, v.prompt_token_ids, v.sampling, v.priority, v.kv_transfer, v.client_index);
    } else if constexpr (std::is_same_v<S, Shutdown> || std::is_same_v<S, ClientStarted>) {
        return std::tie(v.client_index);
    } else if constexpr (std::is_same_v<S, Abort>) {
        return std::tie(v.request_ids);
    } else if constexpr (std::is_same_v<S, TokenLogprobs>) {
        return std::tie(v.token_id, v.logprob, v.rank, v.top);
    } else if constexpr (std::is_same_v<S, RequestOutput>) {
        return std::tie(v.request_id, v.new_token_ids, v.new_logprobs, v.prompt_logprobs, v.finish_reason,
                        v.stop_token_id, v.num_prompt_tokens, v.num_cached_tokens, v.error, v.queue_seconds,
                        v.kv_transfer_endpoint);
    } else if constexpr (std::is_same_v<S, Stats>) {
        return std::tie(v.engine_index, v.num_running, v.num_waiting, v.kv_cache_usage, v.prefix_cache_queries,
                        v.prefix_cache_hits, v.num_preemptions, v.num_steps, v.num_prefill_steps, v.num_decode_steps,
                        v.num_dummy_steps, v.num_prompt_tokens, v.num_generation_tokens, v.num_dummy_prefill_steps,
                        v.num_dummy_decode_steps, v.num_guard_decode_steps, v.num_decode_requests_stalled,
                        v.dp_control_seconds, v.forward_seconds, v.iteration_token_steps, v.iteration_tokens_sum,
                        v.step_schedule_seconds, v.step_prepare_seconds, v.step_forward_seconds, v.step_sample_seconds,
                        v.step_update_seconds, v.step_output_seconds, v.kv_sent_bytes, v.kv_sent_transfers,
                        v.kv_expired_transfers, v.kv_send_seconds, v.kv_received_bytes, v.kv_received_transfers,
                        v.kv_failed_transfers, v.kv_receive_seconds, v.kv_wait_seconds, v.kv_held_transfers,
                        v.kv_waiting_requests, v.spec_num_drafts, v.spec_num_draft_tokens, v.spec_num_accepted_tokens,
                        v.spec_num_accepted_tokens_per_pos, v.spec_draft_budget, v.eplb_rank_load, v.eplb_imbalance,
                        v.eplb_decisions, v.eplb_rebalances, v.eplb_moved_experts);
    } else if constexpr (std::is_same_v<S, StepOutputs>) {
        return std::tie(v.engine_index, v.outputs, v.stats);
    } else if constexpr (std::is_same_v<S, HealthReply>) {
        return std::tie(v.engine_index, v.healthy, v.detail, v.recovering);
    } else if constexpr (std::is_same_v<S, KvTransferParams>) {
        return std::tie(v.produce, v.remote_endpoint, v.remote_transfer_id);
    } else if constexpr (std::is_same_v<S, KvFetch>) {
        return std::tie(v.fetch, v.transfer_id, v.layout, v.skip_blocks, v.first_part, v.num_parts, v.block_ids,
                        v.generation);
    } else if constexpr (std::is_same_v<S, KvRankSlice>) {
        return std::tie(v.endpoint, v.first_part, v.num_parts);
    } else if constexpr (std::is_same_v<S, KvTransferMeta>) {
        return std::tie(v.fetch, v.transfer_id, v.error, v.layout, v.block_bytes, v.num_blocks, v.prompt_token_ids,
                        v.first_token, v.first_logprobs, v.prompt_logprobs, v.ranks, v.block_ids, v.hold_ms,
                        v.computed_blocks, v.done, v.generation);
    } else if constexpr (std::is_same_v<S, KvBlockChunk>) {
        return std::tie(v.fetch, v.transfer_id, v.first_block, v.num_blocks, v.last);
    } else if constexpr (std::is_same_v<S, KvRelease>) {
        return std::tie(v.transfer_id);
    } else if constexpr (std::is_same_v<S, TpCreateKv>) {
        auto& [num_blocks, block_size] = v;  // the binding fails to build when a field is added
        return std::tie(num_blocks, block_size);
    } else if constexpr (std::is_same_v<S, TpForward>) {
        // A field added to TpForward must be listed here: the binding fails to build otherwise.
        auto& [token_ids, positions, slot_mapping, query_start, seq_lens, seq_ids, table_keep, table_new_count,
               table_new, max_blocks_per_seq, logits_rows, moe_exchange, dummy, hidden_rows, draft_head] = v;
        return std::tie(token_ids, positions, slot_mapping, query_start, seq_lens, seq_ids, table_keep, table_new_count,
                        table_new, max_blocks_per_seq, logits_rows, moe_exchange, dummy, hidden_rows, draft_head);
    } else if constexpr (std::is_same_v<S, TpKvFetchJob>) {
        return std::tie(v.id, v.endpoint, v.remote_id, v.block_ids, v.skip_blocks, v.prompt_token_ids);
    } else if constexpr (std::is_same_v<S, TpKvExchange>) {
        return std::tie(v.generation);
    } else if constexpr (std::is_same_v<S, TpKvFetch>) {
        return std::tie(v.jobs);
    } else if constexpr (std::is_same_v<S, TpKvCancel> || std::is_same_v<S, TpKvPoll>) {
        return std::tie(v.ids);
    } else {
        static_assert(std::is_empty_v<S>, "add the fields of this message");
        return std::tuple<>();
    }
}

template <typename T>
constexpr bool kIsMessage =
    std::is_same_v<T, SamplingParams> || std::is_same_v<T, AddRequest> || std::is_same_v<T, Abort> ||
    std::is_same_v<T, TokenLogprobs> || std::is_same_v<T, RequestOutput> || std::is_same_v<T, Stats> ||
    std::is_same_v<T, StepOutputs> || std::is_same_v<T, HealthReply> || std::is_same_v<T, Shutdown> ||
    std::is_same_v<T, HealthCheck> || std::is_same_v<T, ClientStarted> || std::is_same_v<T, KvTransferParams> ||
    std::is_same_v<T, KvFetch> || std::is_same_v<T, KvRankSlice> || std::is_same_v<T, KvTransferMeta> ||
    std::is_same_v<T, KvBlockChunk> || std::is_same_v<T, KvRelease> || std::is_same_v<T, TpNoop> ||
    std::is_same_v<T, TpCreateKv> || std::is_same_v<T, TpForward> || std::is_same_v<T, TpShutdown> ||
    std::is_same_v<T, TpKvExchange> || std::is_same_v<T, TpKvFetchJob> || std::is_same_v<T, TpKvFetch> ||
    std::is_same_v<T, TpKvCancel> || std::is_same_v<T, TpKvPoll>;

}  // namespace
}  // namespace moeserve::ipc

namespace msgpack {
MSGPACK_API_VERSION_NAMESPACE(MSGPACK_DEFAULT_API_NS) {
    namespace adaptor {

    template <typename T>
    struct pack<T, std::enable_if_t<moeserve::ipc::kIsMessage<T>>> {
        template <typename Stream>
        packer<Stream>& operator()(packer<Stream>& o, const T& v) const {
            auto f = moeserve::ipc::fields(v);
            o.pack_array(static_cast<uint32_t>(std::tuple_size_v<decltype(f)>));
            std::apply([&](const auto&... x) { (o.pack(x), ...); }, f);
            return o;
        }
    };

    template <typename T>
    struct convert<T, std::enable_if_t<moeserve::ipc::kIsMessage<T>>> {
        const msgpack::object& operator()(const msgpack::object& o, T& v) const {
            auto f = moeserve::ipc::fields(v);
            constexpr size_t n = std::tuple_size_v<decltype(f)>;
            if (o.type != msgpack::type::ARRAY || o.via.array.size < n) throw msgpack::type_error();
            size_t i = 0;
            std::apply([&](auto&... x) { ((o.via.array.ptr[i++].convert(x)), ...); }, f);
            return o;
        }
    };

    template <>
    struct pack<moeserve::ipc::FinishReason> {
        template <typename Stream>
        packer<Stream>& operator()(packer<Stream>& o, moeserve::ipc::FinishReason v) const {
            o.pack(static_cast<uint8_t>(v));
            return o;
        }
    };

    template <>
    struct convert<moeserve::ipc::FinishReason> {
        const msgpack::object& operator()(const msgpack::object& o, moeserve::ipc::FinishReason& v) const {
            const auto raw = o.as<uint8_t>();
            if (raw > static_cast<uint8_t>(moeserve::ipc::FinishReason::kError)) {
                throw msgpack::type_error();
            }
            v = static_cast<moeserve::ipc::FinishReason>(raw);
            return o;
        }
    };

    }  // namespace adaptor
}
}  // namespace msgpack

namespace moeserve::ipc {
namespace {

template <typename Variant>
std::string encode_variant(const Variant& message) {
    msgpack::sbuffer buffer;
    msgpack::packer<msgpack::sbuffer> packer(buffer);
    packer.pack_array(2);
    packer.pack(static_cast<uint32_t>(message.index()));
    std::visit([&](const auto& m) { packer.pack(m); }, message);
    return std::string(buffer.data(), buffer.size());
}

// Sets out to alternative `index` converted from payload; false if index is out of range.
template <typename Variant, size_t I = 0>
bool convert_alternative(size_t index, const msgpack::object& payload, Variant& out) {
    if constexpr (I < std::variant_size_v<Variant>) {
        if (index == I) {
            std::variant_alternative_t<I, Variant> value;
            payload.convert(value);
            out = std::move(value);
            return true;
        }
        return convert_alternative<Variant, I + 1>(index, payload, out);
    } else {
        return false;
    }
}

template <typename Variant>
Variant decode_variant(std::string_view bytes, const char* direction) {
    try {
        const msgpack::object_handle handle = msgpack::unpack(bytes.data(), bytes.size());
        const msgpack::object& root = handle.get();
        if (root.type != msgpack::type::ARRAY || root.via.array.size != 2) {
            raise(ErrorCode::kInvalidArgument, "ipc: a {} message must be a msgpack array [kind, payload]", direction);
        }
        const auto index = root.via.array.ptr[0].as<uint32_t>();
        Variant out;
        if (!convert_alternative(index, root.via.array.ptr[1], out)) {
            raise(ErrorCode::kInvalidArgument, "ipc: unknown {} message kind {}", direction, index);
        }
        return out;
    } catch (const Error&) {
        throw;
    } catch (const msgpack::type_error&) {
        raise(ErrorCode::kInvalidArgument, "ipc: malformed {} message ({} bytes): a field has the wrong type",
              direction, bytes.size());
    } catch (const msgpack::unpack_error& e) {
        raise(ErrorCode::kInvalidArgument, "ipc: malformed {} message ({} bytes): {}", direction, bytes.size(),
              e.what());
    } catch (const std::exception& e) {
        raise(ErrorCode::kInvalidArgument, "ipc: malformed {} message ({} bytes): {}", direction, bytes.size(),
              e.what());
    }
}

}  // namespace

std::string encode(const ClientMessage& message) { return encode_variant(message); }
std::string encode(const EngineMessage& message) { return encode_variant(message); }

ClientMessage decode_client_message(std::string_view bytes) { return decode_variant<ClientMessage>(bytes, "client"); }

EngineMessage decode_engine_message(std::string_view bytes) { return decode_variant<EngineMessage>(bytes, "engine"); }

std::string encode(const KvMessage& message) { return encode_variant(message); }

KvMessage decode_kv_message(std::string_view bytes) { return decode_variant<KvMessage>(bytes, "KV transfer"); }

std::string encode(const TpMessage& message) { return encode_variant(message); }

TpMessage decode_tp_message(std::string_view bytes) { return decode_variant<TpMessage>(bytes, "TP"); }

}  // namespace moeserve::ipc
