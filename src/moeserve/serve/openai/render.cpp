// OpenAI response shapes (as api.openai.com and vLLM write them).
#include "moeserve/serve/openai/render.h"

#include <cmath>

namespace moeserve::serve::openai {
namespace {

OJson nullable(const std::optional<std::string>& s) { return s ? OJson(*s) : OJson(nullptr); }

OJson tool_call_json(const ToolCall& c) {
    return {{"id", c.id}, {"type", "function"}, {"function", {{"name", c.name}, {"arguments", c.arguments}}}};
}

OJson tool_call_delta_json(const ToolCallDelta& d) {
    OJson j{{"index", d.index}};
    if (d.id) {
        j["id"] = *d.id;
        j["type"] = "function";
    }
    OJson fn = OJson::object();
    if (d.name) fn["name"] = *d.name;
    fn["arguments"] = d.arguments;
    j["function"] = std::move(fn);
    return j;
}

// JSON has no -inf: clamp as vLLM does (-9999.0).
float finite(float logprob) { return std::isfinite(logprob) ? logprob : -9999.0f; }

OJson completion_logprobs(const ChoiceData& c) {
    if (!c.has_logprobs) return nullptr;
    OJson tokens = OJson::array(), token_logprobs = OJson::array(), top = OJson::array(), offsets = OJson::array();
    int64_t offset = c.text_offset;
    for (const auto& t : c.logprobs) {
        tokens.push_back(t.token);
        if (t.unknown) {
            token_logprobs.push_back(nullptr);
            top.push_back(nullptr);
        } else {
            token_logprobs.push_back(finite(t.logprob));
            OJson m = OJson::object();
            for (const auto& [tok, lp] : t.top) m[tok] = finite(lp);
            top.push_back(std::move(m));
        }
        offsets.push_back(offset);
        offset += utf8_length(t.token);
    }
    return OJson{
        {"text_offset", offsets}, {"token_logprobs", token_logprobs}, {"tokens", tokens}, {"top_logprobs", top}};
}

OJson bytes_of(const std::string& s) {
    OJson b = OJson::array();
    for (unsigned char ch : s) b.push_back(static_cast<int>(ch));
    return b;
}

OJson chat_logprobs(const ChoiceData& c) {
    if (!c.has_logprobs) return nullptr;
    OJson content = OJson::array();
    for (const auto& t : c.logprobs) {
        OJson top = OJson::array();
        for (const auto& [tok, lp] : t.top) {
            top.push_back({{"token", tok}, {"logprob", finite(lp)}, {"bytes", bytes_of(tok)}});
        }
        content.push_back(
            {{"token", t.token}, {"logprob", finite(t.logprob)}, {"bytes", bytes_of(t.token)}, {"top_logprobs", top}});
    }
    return OJson{{"content", content}};
}

OJson head(const ResponseMeta& meta, const char* object) {
    return OJson{{"id", meta.id}, {"object", object}, {"created", meta.created}, {"model", meta.model}};
}

}  // namespace

int64_t utf8_length(std::string_view text) {
    int64_t n = 0;
    for (unsigned char c : text) n += (c & 0xC0) != 0x80;
    return n;
}

std::string error_body(const ApiError& e) {
    OJson err{{"message", e.message()},
              {"type", e.type()},
              {"param", e.param() ? OJson(*e.param()) : OJson(nullptr)},
              {"code", e.code() ? OJson(*e.code()) : OJson(nullptr)}};
    return OJson{{"error", err}}.dump(-1, ' ', false, OJson::error_handler_t::replace);
}

OJson usage_json(const Usage& u) {
    OJson j{{"prompt_tokens", u.prompt_tokens},
            {"total_tokens", u.prompt_tokens + u.completion_tokens},
            {"completion_tokens", u.completion_tokens}};
    if (u.cached_tokens > 0) j["prompt_tokens_details"] = {{"cached_tokens", u.cached_tokens}};
    return j;
}

OJson completion_response(const ResponseMeta& meta, const std::vector<ChoiceData>& choices, const Usage& usage) {
    OJson j = head(meta, "text_completion");
    OJson arr = OJson::array();
    for (const auto& c : choices) {
        OJson choice{{"index", c.index},
                     {"text", c.text},
                     {"logprobs", completion_logprobs(c)},
                     {"finish_reason", nullable(c.finish_reason)},
                     {"stop_reason", c.stop_reason}};
        if (!c.prompt_logprobs.is_null()) choice["prompt_logprobs"] = c.prompt_logprobs;
        arr.push_back(std::move(choice));
    }
    j["choices"] = std::move(arr);
    j["usage"] = usage_json(usage);
    return j;
}

OJson completion_chunk(const ResponseMeta& meta, const ChoiceData& d) {
    OJson j = head(meta, "text_completion");
    OJson choice{{"index", d.index},
                 {"text", d.text},
                 {"logprobs", completion_logprobs(d)},
                 {"finish_reason", nullable(d.finish_reason)},
                 {"stop_reason", d.stop_reason}};
    if (!d.prompt_logprobs.is_null()) choice["prompt_logprobs"] = d.prompt_logprobs;
    j["choices"] = OJson::array({std::move(choice)});
    if (d.usage) j["usage"] = usage_json(*d.usage);
    return j;
}

OJson chat_response(const ResponseMeta& meta, const std::vector<ChoiceData>& choices, const Usage& usage) {
    OJson j = head(meta, "chat.completion");
    OJson arr = OJson::array();
    for (const auto& c : choices) {
        OJson calls = OJson::array();
        for (const auto& call : c.tool_calls) calls.push_back(tool_call_json(call));
        // As OpenAI and vLLM: content is null when the answer is calls or reasoning only.
        const bool no_content = c.text.empty() && (!c.tool_calls.empty() || !c.reasoning.empty());
        OJson message{{"role", "assistant"}, {"content", no_content ? OJson(nullptr) : OJson(c.text)}};
        if (c.has_reasoning) {
            const OJson reasoning = c.reasoning.empty() ? OJson(nullptr) : OJson(c.reasoning);
            message["reasoning_content"] = reasoning;
            message["reasoning"] = reasoning;
        }
        message["tool_calls"] = std::move(calls);
        arr.push_back({{"index", c.index},
                       {"message", std::move(message)},
                       {"logprobs", chat_logprobs(c)},
                       {"finish_reason", nullable(c.finish_reason)},
                       {"stop_reason", c.stop_reason}});
    }
    j["choices"] = std::move(arr);
    if (!choices.empty() && !choices[0].prompt_logprobs.is_null()) j["prompt_logprobs"] = choices[0].prompt_logprobs;
    j["usage"] = usage_json(usage);
    return j;
}

OJson chat_chunk(const ResponseMeta& meta, const ChoiceData& d, bool first) {
    OJson j = head(meta, "chat.completion.chunk");
    OJson delta = OJson::object();
    if (first) delta["role"] = "assistant";
    // Content when there is some, or when the chunk carries nothing else (OpenAI sends "").
    if (!d.text.empty() || (d.reasoning.empty() && d.tool_call_deltas.empty())) delta["content"] = d.text;
    if (!d.reasoning.empty()) {
        delta["reasoning_content"] = d.reasoning;
        delta["reasoning"] = d.reasoning;
    }
    if (!d.tool_call_deltas.empty()) {
        OJson calls = OJson::array();
        for (const auto& c : d.tool_call_deltas) calls.push_back(tool_call_delta_json(c));
        delta["tool_calls"] = std::move(calls);
    }
    j["choices"] = OJson::array({{{"index", d.index},
                                  {"delta", delta},
                                  {"logprobs", chat_logprobs(d)},
                                  {"finish_reason", nullable(d.finish_reason)},
                                  {"stop_reason", d.stop_reason}}});
    if (d.usage) j["usage"] = usage_json(*d.usage);
    return j;
}

OJson usage_chunk(const ResponseMeta& meta, const Usage& usage, bool chat) {
    OJson j = head(meta, chat ? "chat.completion.chunk" : "text_completion");
    j["choices"] = OJson::array();
    j["usage"] = usage_json(usage);
    return j;
}

std::string sse_event(const OJson& json) {
    return "data: " + json.dump(-1, ' ', false, OJson::error_handler_t::replace) + "\n\n";
}

std::string sse_done() { return "data: [DONE]\n\n"; }

}  // namespace moeserve::serve::openai
