// Request parsing for the OpenAI routes. Each field is read by a typed getter that raises
// ApiError(400, param=field) for a wrong type; the rules of the HTTP request itself (n, echo,
// stream_options, ...) are checked here, the sampling values and token ids once per engine
// request by ipc::validate_request (generate_route.cpp).
#include "moeserve/serve/openai/parse.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <set>
#include <vector>

#include "moeserve/serve/openai/chat_messages.h"
#include "moeserve/serve/openai/structured_output_parse.h"

namespace moeserve::serve::openai {
namespace {

using Json = nlohmann::ordered_json;

constexpr int kMaxDepth = 64;
constexpr int32_t kMaxObjectKeys = 4096;  // no OpenAI field needs more (logit_bias: 300)
constexpr int32_t kMaxN = 128;

[[noreturn]] void bad(const std::string& param, const std::string& message) {
    throw ApiError(400, message, "invalid_request_error", param);
}

// A body's shape, bounded before the DOM is built: its nesting (the parser recurses), and the
// members of its widest object (an ordered_json object finds each new key by a linear search,
// so 60,000 keys in a 3 MB schema cost 10 s of a worker before anything could refuse them).
// Scans past strings; stops at the first bound passed. Empty when within bounds.
std::string shape_error(std::string_view text) {
    std::vector<int32_t> members;  // per open container: keys so far (-1: an array)
    bool in_string = false;
    for (size_t i = 0; i < text.size(); ++i) {
        const char c = text[i];
        if (in_string) {
            if (c == '\\')
                ++i;
            else if (c == '"')
                in_string = false;
        } else if (c == '"') {
            in_string = true;
        } else if (c == '[' || c == '{') {
            if (members.size() >= static_cast<size_t>(kMaxDepth)) {
                return fmt::format("The JSON body nests deeper than {} levels.", kMaxDepth);
            }
            members.push_back(c == '{' ? 0 : -1);
        } else if (c == ']' || c == '}') {
            if (!members.empty()) members.pop_back();
        } else if (c == ':' && !members.empty() && members.back() >= 0 && ++members.back() > kMaxObjectKeys) {
            return fmt::format("A JSON object in the body has more than {} members.", kMaxObjectKeys);
        }
    }
    return {};
}

const char* type_name(const Json& v) {
    switch (v.type()) {
        case Json::value_t::null:
            return "null";
        case Json::value_t::boolean:
            return "boolean";
        case Json::value_t::string:
            return "string";
        case Json::value_t::array:
            return "array";
        case Json::value_t::object:
            return "object";
        case Json::value_t::number_float:
            return "number";
        default:
            return "integer";
    }
}

// Typed access to optional fields: absent or null leaves the default.
class Fields {
public:
    explicit Fields(const Json& body) : body_(body) {}

    const Json* get(const char* key) {
        seen_.insert(key);
        const auto it = body_.find(key);
        return it == body_.end() || it->is_null() ? nullptr : &*it;
    }
    template <typename T>
    void number(const char* key, T& out) {
        if (const Json* v = get(key)) out = as_number<T>(*v, key);
    }
    template <typename T>
    void number(const char* key, std::optional<T>& out) {
        if (const Json* v = get(key)) out = as_number<T>(*v, key);
    }
    void boolean(const char* key, bool& out) {
        if (const Json* v = get(key)) {
            if (!v->is_boolean()) bad(key, fmt::format("'{}' must be a boolean; got {}", key, type_name(*v)));
            out = v->get<bool>();
        }
    }
    void string(const char* key, std::string& out) {
        if (const Json* v = get(key)) {
            if (!v->is_string()) bad(key, fmt::format("'{}' must be a string; got {}", key, type_name(*v)));
            out = v->get<std::string>();
        }
    }
    // The fields nothing read (besides those listed as known and ignored): vLLM accepts them
    // with a warning, so clients that send extra fields keep working; known fields keep their
    // validation.
    std::vector<std::string> unknown(std::initializer_list<const char*> ignored) {
        for (const char* k : ignored) seen_.insert(k);
        std::vector<std::string> out;
        for (const auto& [key, value] : body_.items()) {
            if (!seen_.count(key)) out.push_back(key);
        }
        return out;
    }
    // Nested objects with a fixed shape (stream_options) stay strict.
    void reject_unknown() {
        for (const auto& key : unknown({})) bad(key, fmt::format("Unrecognized request argument supplied: {}", key));
    }

    template <typename T>
    static T as_number(const Json& v, const char* key) {
        if constexpr (std::is_integral_v<T>) {
            // Integers, or floats with an integral value (Python clients send 16.0 sometimes).
            double d = 0;
            if (v.is_number_integer()) {
                if (v.is_number_unsigned()) {
                    const auto u = v.get<uint64_t>();
                    if (u > static_cast<uint64_t>(std::numeric_limits<T>::max())) {
                        bad(key, fmt::format("'{}' is too large: {}", key, u));
                    }
                    return static_cast<T>(u);
                }
                const auto i = v.get<int64_t>();
                if (i < static_cast<int64_t>(std::numeric_limits<T>::min()) ||
                    (i > 0 && static_cast<uint64_t>(i) > static_cast<uint64_t>(std::numeric_limits<T>::max()))) {
                    bad(key, fmt::format("'{}' is out of range: {}", key, i));
                }
                return static_cast<T>(i);
            }
            if (v.is_number_float())
                d = v.get<double>();
            else
                bad(key, fmt::format("'{}' must be an integer; got {}", key, type_name(v)));
            if (!std::isfinite(d) || d != std::floor(d) || d < static_cast<double>(std::numeric_limits<T>::min()) ||
                d > static_cast<double>(std::numeric_limits<T>::max())) {
                bad(key, fmt::format("'{}' must be an integer; got {}", key, d));
            }
            return static_cast<T>(d);
        } else {
            if (!v.is_number()) bad(key, fmt::format("'{}' must be a number; got {}", key, type_name(v)));
            const double d = v.get<double>();
            if (!std::isfinite(d)) bad(key, fmt::format("'{}' must be finite", key));
            return static_cast<T>(d);
        }
    }

private:
    const Json& body_;
    std::set<std::string> seen_;
};

void check(bool ok, const char* param, const std::string& message) {
    if (!ok) bad(param, message);
}

// Integers that fit a token id; whether they are in the vocabulary is ipc::validate_request's rule.
std::vector<TokenId> token_ids(const Json& v, const char* param) {
    std::vector<TokenId> ids;
    ids.reserve(v.size());
    for (const Json& x : v) {
        if (!x.is_number_integer())
            bad(param, fmt::format("'{}' token ids must be integers; got {}", param, type_name(x)));
        const uint64_t big = static_cast<uint64_t>(std::numeric_limits<int64_t>::max());
        const int64_t id =
            x.is_number_unsigned() ? static_cast<int64_t>(std::min(x.get<uint64_t>(), big)) : x.get<int64_t>();
        if (id < 0 || id > std::numeric_limits<TokenId>::max())
            bad(param, fmt::format("'{}': token id {} is out of range", param, id));
        ids.push_back(static_cast<TokenId>(id));
    }
    return ids;
}

void check_model(Fields& f, const ModelLimits& limits, std::string& model) {
    f.string("model", model);
    const auto& aliases = limits.model_aliases;
    if (!model.empty() && model != limits.served_model_name &&
        std::find(aliases.begin(), aliases.end(), model) == aliases.end()) {
        throw ApiError(404, fmt::format("The model `{}` does not exist.", model), "invalid_request_error", "model",
                       "model_not_found");
    }
    if (model.empty()) model = limits.served_model_name;
}

std::vector<std::string> stop_strings(const Json* v) {
    std::vector<std::string> out;
    if (!v) return out;
    if (v->is_string()) {
        out.push_back(v->get<std::string>());
    } else if (v->is_array()) {
        for (const Json& s : *v) {
            if (!s.is_string()) bad("stop", "'stop' must be a string or a list of strings");
            out.push_back(s.get<std::string>());
        }
    } else {
        bad("stop", fmt::format("'stop' must be a string or a list of strings; got {}", type_name(*v)));
    }
    for (const auto& s : out) check(!s.empty(), "stop", "'stop' strings must not be empty");
    return out;
}

// vLLM request fields that change the output when honoured and are not run here: true is a 400
// naming the field (ignoring it would answer something other than what was asked); false or
// absent changes nothing.
void refuse_unsupported_switches(Fields& f) {
    static const std::pair<const char*, const char*> kSwitches[] = {
        {"use_beam_search", "beam search is not run here; sample several choices with 'n' instead"},
        {"return_tokens_as_token_ids", "logprobs name tokens by their text here, never as 'token_id:N'"},
    };
    for (const auto& [key, why] : kSwitches) {
        bool on = false;
        f.boolean(key, on);
        if (on) bad(key, fmt::format("'{}' is not supported: {}", key, why));
    }
}

// The fields both endpoints share, max_tokens included (chat also reads max_completion_tokens
// after this).
void read_generation(Fields& f, GenerationParams& p) {
    refuse_unsupported_switches(f);
    f.number("n", p.n);
    f.number("max_tokens", p.max_tokens);
    f.number("temperature", p.temperature);
    f.number("top_p", p.top_p);
    f.number("top_k", p.top_k);
    f.number("min_p", p.min_p);
    f.number("presence_penalty", p.presence_penalty);
    f.number("frequency_penalty", p.frequency_penalty);
    f.number("repetition_penalty", p.repetition_penalty);
    if (const Json* v = f.get("seed")) p.seed = static_cast<uint64_t>(Fields::as_number<int64_t>(*v, "seed"));
    p.stop = stop_strings(f.get("stop"));
    if (const Json* v = f.get("stop_token_ids")) {
        check(v->is_array(), "stop_token_ids", "'stop_token_ids' must be a list of integers");
        p.stop_token_ids = token_ids(*v, "stop_token_ids");
    }
    f.boolean("ignore_eos", p.ignore_eos);
    f.number("min_tokens", p.min_tokens);
    f.boolean("skip_special_tokens", p.skip_special_tokens);
    f.boolean("include_stop_str_in_output", p.include_stop_str_in_output);
    f.boolean("stream", p.stream);
    if (const Json* v = f.get("stream_options")) {
        check(v->is_object(), "stream_options", "'stream_options' must be an object");
        Fields so(*v);
        so.boolean("include_usage", p.include_usage);
        so.boolean("continuous_usage_stats", p.continuous_usage_stats);
        so.reject_unknown();
        check(p.stream, "stream_options", "'stream_options' is only allowed when 'stream' is true");
    }
    if (const Json* v = f.get("best_of")) {
        check(Fields::as_number<int32_t>(*v, "best_of") == p.n, "best_of", "'best_of' other than n is not supported");
    }
    f.number("prompt_logprobs", p.prompt_logprobs);
    if (const Json* v = f.get("logit_bias")) {
        check(v->is_object(), "logit_bias", "'logit_bias' must be an object mapping token ids to biases");
        for (const auto& [key, bias] : v->items()) {
            char* end = nullptr;
            const long long id = std::strtoll(key.c_str(), &end, 10);
            check(!key.empty() && *end == '\0', "logit_bias",
                  fmt::format("'logit_bias' key '{}' is not a token id", key));
            check(id >= 0 && id <= std::numeric_limits<TokenId>::max(), "logit_bias",
                  fmt::format("'logit_bias' token id {} is out of range", id));
            const float b = Fields::as_number<float>(bias, "logit_bias");
            p.logit_bias.emplace_back(static_cast<TokenId>(id), std::clamp(b, -100.0f, 100.0f));
        }
    }
    if (const Json* v = f.get("allowed_token_ids")) {
        check(v->is_array() && !v->empty(), "allowed_token_ids",
              "'allowed_token_ids' must be a non-empty list of token ids");
        p.allowed_token_ids = token_ids(*v, "allowed_token_ids");
    }
    if (const Json* v = f.get("bad_words")) {
        check(v->is_array(), "bad_words", "'bad_words' must be a list of strings");
        for (const Json& w : *v) {
            check(w.is_string() && !w.get<std::string>().empty(), "bad_words",
                  "'bad_words' must be a list of non-empty strings");
            p.bad_words.push_back(w.get<std::string>());
        }
    }
    if (const Json* v = f.get("truncate_prompt_tokens")) {
        const auto k = Fields::as_number<int32_t>(*v, "truncate_prompt_tokens");
        check(k >= 1 || k == -1, "truncate_prompt_tokens",
              fmt::format("'truncate_prompt_tokens' must be >= 1 or -1; got {}", k));
        if (k >= 1) p.truncate_prompt_tokens = k;
    }
    f.string("cache_salt", p.cache_salt);
    if (f.get("cache_salt") != nullptr) check(!p.cache_salt.empty(), "cache_salt", "'cache_salt' must not be empty");
    f.string("request_id", p.request_id);
    f.number("priority", p.priority);
    if (const Json* v = f.get("kv_transfer_params"); v && !v->is_null()) {
        check(v->is_object(), "kv_transfer_params", "'kv_transfer_params' must be an object");
        p.kv_transfer.produce = v->value("do_remote_decode", false);
        if (v->value("do_remote_prefill", false)) {
            const auto t = v->find("transfers");
            check(t != v->end() && t->is_array() && !t->empty(), "kv_transfer_params",
                  "'kv_transfer_params' with do_remote_prefill needs 'transfers': the prefill instance's answer");
            const auto text = [](const Json& e, const char* key) {
                const auto it = e.find(key);
                return it != e.end() && it->is_string();
            };
            for (const Json& e : *t) {
                check(e.is_object() && text(e, "endpoint") && text(e, "id") && text(e, "token"), "kv_transfer_params",
                      "each of 'kv_transfer_params.transfers' needs an 'endpoint', an 'id' and a 'token' (pass the "
                      "prefill instance's answer unchanged)");
                p.kv_transfer.transfers.push_back(
                    {e["endpoint"].get<std::string>(), e["id"].get<std::string>(), e["token"].get<std::string>()});
            }
        }
        check(!(p.kv_transfer.produce && !p.kv_transfer.transfers.empty()), "kv_transfer_params",
              "'kv_transfer_params' cannot ask for both do_remote_decode and do_remote_prefill");
    }
}

// The rules of the HTTP fields that never reach the engine as such; the sampling values are
// ipc::validate_request's.
void validate(const GenerationParams& p) {
    check(p.n >= 1 && p.n <= kMaxN, "n", fmt::format("'n' must be in [1, {}]; got {}", kMaxN, p.n));
    if (p.max_tokens) {  // absent = a default (resolve_max_tokens); 0 only with echo (the caller's case)
        check(*p.max_tokens >= 1, "max_tokens", fmt::format("'max_tokens' must be at least 1; got {}", *p.max_tokens));
    }
}

std::vector<PromptInput> read_prompts(const Json* v) {
    if (!v) bad("prompt", "'prompt' is required");
    std::vector<PromptInput> out;
    const auto text = [](const Json& s) { return PromptInput{s.get<std::string>(), {}}; };
    if (v->is_string()) {
        out.push_back(text(*v));
    } else if (v->is_array() && !v->empty() && (*v)[0].is_string()) {
        for (const Json& s : *v) {
            if (!s.is_string()) bad("prompt", "'prompt' list items must all be strings");
            out.push_back(text(s));
        }
    } else if (v->is_array() && !v->empty() && (*v)[0].is_array()) {
        for (const Json& ids : *v) {
            if (!ids.is_array()) bad("prompt", "'prompt' lists of token ids must all be lists");
            out.push_back(PromptInput{std::nullopt, token_ids(ids, "prompt")});
        }
    } else if (v->is_array() && !v->empty()) {
        out.push_back(PromptInput{std::nullopt, token_ids(*v, "prompt")});
    } else {
        bad("prompt",
            "'prompt' must be a string, a list of strings, a list of token ids or a list "
            "of lists of token ids, and not empty");
    }
    for (const auto& p : out) {
        check(p.text ? !p.text->empty() : !p.token_ids.empty(), "prompt", "'prompt' must not be empty");
    }
    return out;
}

Json object_or_empty(const Json* v, const char* param) {
    if (!v) return Json::object();
    check(v->is_object(), param, fmt::format("'{}' must be an object", param));
    return *v;
}

// OpenAI's reasoning_effort (low / medium / high), as vLLM passes it: a chat template variable
// (gpt-oss's template writes "Reasoning: EFFORT"), unless chat_template_kwargs sets it already.
void add_reasoning_effort(const Json* v, Json& kwargs) {
    if (!v || v->is_null()) return;
    const bool known = v->is_string() && (*v == "low" || *v == "medium" || *v == "high");
    check(known, "reasoning_effort", "'reasoning_effort' must be one of \"low\", \"medium\", \"high\"");
    if (!kwargs.contains("reasoning_effort")) kwargs["reasoning_effort"] = *v;
}

}  // namespace

Json parse_body(std::string_view body) {
    if (const std::string error = shape_error(body); !error.empty()) throw ApiError(400, error);
    Json j = Json::parse(body, nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded()) {
        throw ApiError(400,
                       "We could not parse the JSON body of your request. (HINT: This likely "
                       "means you aren't using your HTTP library correctly. The OpenAI API "
                       "expects a JSON payload, but what was sent was not valid JSON.)");
    }
    if (!j.is_object())
        throw ApiError(400, fmt::format("The request body must be a JSON object; got {}", type_name(j)));
    return j;
}

CompletionRequest parse_completion_request(const Json& body, const ModelLimits& limits) {
    Fields f(body);
    CompletionRequest r;
    check_model(f, limits, r.model);
    r.prompts = read_prompts(f.get("prompt"));
    read_generation(f, r.params);
    f.boolean("echo", r.echo);
    f.number("logprobs", r.params.logprobs);
    if (f.get("suffix") != nullptr) bad("suffix", "'suffix' is not supported");
    for (const char* k : kStructuredOutputFields) f.get(k);
    r.unknown_fields = f.unknown({"user", "service_tier", "metadata", "store"});
    r.params.grammar = parse_structured_output(body);
    // max_tokens 0 with echo: the prompt's logprobs only (lm-eval's loglikelihood requests).
    const bool echo_only = r.echo && r.params.max_tokens && *r.params.max_tokens == 0;
    if (echo_only) r.params.max_tokens = 1;
    validate(r.params);
    if (echo_only) r.params.max_tokens = 0;
    return r;
}

ChatCompletionRequest parse_chat_request(const Json& body, const ModelLimits& limits) {
    Fields f(body);
    ChatCompletionRequest r;
    check_model(f, limits, r.model);
    (void)prepare_chat_messages(f.get("messages"));  // validates; the route prepares them for its template
    r.messages = *f.get("messages");
    read_generation(f, r.params);
    if (const Json* v = f.get("max_completion_tokens")) {
        r.params.max_tokens = Fields::as_number<int32_t>(*v, "max_completion_tokens");
    }
    bool logprobs = false;
    std::optional<int32_t> top_logprobs;
    f.boolean("logprobs", logprobs);
    f.number("top_logprobs", top_logprobs);
    if (top_logprobs && !logprobs) bad("top_logprobs", "'top_logprobs' requires 'logprobs' to be true");
    if (logprobs) r.params.logprobs = top_logprobs.value_or(0);
    f.boolean("add_generation_prompt", r.add_generation_prompt);
    f.boolean("continue_final_message", r.continue_final_message);
    if (r.continue_final_message && r.add_generation_prompt && body.contains("add_generation_prompt")) {
        bad("continue_final_message", "'continue_final_message' and 'add_generation_prompt' cannot both be true");
    }
    if (r.continue_final_message) r.add_generation_prompt = false;
    f.get("tools");
    f.get("tool_choice");
    f.get("parallel_tool_calls");
    r.tools = parse_tool_request(body);
    f.boolean("add_special_tokens", r.add_special_tokens);
    f.boolean("echo", r.echo);
    f.string("chat_template", r.chat_template);
    r.chat_template_kwargs = object_or_empty(f.get("chat_template_kwargs"), "chat_template_kwargs");
    add_reasoning_effort(f.get("reasoning_effort"), r.chat_template_kwargs);
    for (const char* k : kStructuredOutputFields) f.get(k);
    // Known to OpenAI or vLLM and without effect here (docs/serving.md lists them).
    r.unknown_fields =
        f.unknown({"user", "service_tier", "metadata", "store", "modalities", "audio", "prediction",
                   "web_search_options", "documents", "mm_processor_kwargs", "vllm_xargs", "length_penalty",
                   "spaces_between_special_tokens", "guided_decoding_backend", "chat_template_content_format"});
    r.params.grammar = parse_structured_output(body);
    if (r.tools.forced()) {
        if (!r.params.grammar.empty()) {
            bad("tool_choice",
                "a forced 'tool_choice' (required or a named function) cannot be combined with a structured output");
        }
        r.params.grammar = forced_tool_grammar(r.tools);
    }
    validate(r.params);
    return r;
}

TokenizeRequest parse_tokenize_request(const Json& body, const ModelLimits& limits) {
    Fields f(body);
    TokenizeRequest r;
    std::string model;
    check_model(f, limits, model);
    if (const Json* v = f.get("prompt")) {
        check(v->is_string(), "prompt", "'prompt' must be a string");
        r.prompt = v->get<std::string>();
    } else {
        (void)prepare_chat_messages(f.get("messages"));  // validates, as for chat
        r.messages = *f.get("messages");
        if (const Json* tools = f.get("tools")) {
            check(tools->is_array(), "tools", "'tools' must be a list");
            r.tools = *tools;
        }
    }
    f.boolean("add_special_tokens", r.add_special_tokens);
    f.boolean("add_generation_prompt", r.add_generation_prompt);
    f.boolean("continue_final_message", r.continue_final_message);
    if (r.continue_final_message) r.add_generation_prompt = false;
    r.chat_template_kwargs = object_or_empty(f.get("chat_template_kwargs"), "chat_template_kwargs");
    f.boolean("return_token_strs", r.return_token_strs);
    r.unknown_fields = f.unknown({});
    return r;
}

DetokenizeRequest parse_detokenize_request(const Json& body, const ModelLimits& limits) {
    Fields f(body);
    std::string model;
    check_model(f, limits, model);
    const Json* v = f.get("tokens");
    if (!v || !v->is_array()) bad("tokens", "'tokens' must be a list of token ids");
    DetokenizeRequest r{token_ids(*v, "tokens")};
    for (const TokenId t : r.tokens) {
        check(t < limits.vocab_size, "tokens",
              fmt::format("token id {} is out of vocabulary (0..{})", t, limits.vocab_size - 1));
    }
    (void)f.unknown({});  // vLLM ignores extra fields here too
    return r;
}

int32_t resolve_max_tokens(int64_t num_prompt_tokens, const GenerationParams& params, const ModelLimits& limits,
                           bool chat) {
    if (params.max_tokens) return *params.max_tokens;
    if (!chat) return 16;
    const int64_t room = limits.max_model_len - num_prompt_tokens;
    return static_cast<int32_t>(std::clamp<int64_t>(room, 1, std::numeric_limits<int32_t>::max()));
}

}  // namespace moeserve::serve::openai
