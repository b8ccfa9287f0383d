// ChatTemplate facade: lex + parse once, render many times.
#include "moeserve/tokenizer/chat_template/chat_template.h"

#include "moeserve/core/error.h"
#include "moeserve/tokenizer/chat_template/builtins.h"
#include "moeserve/tokenizer/chat_template/helpers.h"
#include "moeserve/tokenizer/chat_template/interpreter.h"
#include "moeserve/tokenizer/chat_template/lexer.h"
#include "moeserve/tokenizer/chat_template/parser.h"

namespace moeserve::tokenizer {

struct ChatTemplate::Impl {
    jinja::Body body;  // immutable after parse
};

ChatTemplate::ChatTemplate(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
ChatTemplate::ChatTemplate(ChatTemplate&&) noexcept = default;
ChatTemplate& ChatTemplate::operator=(ChatTemplate&&) noexcept = default;
ChatTemplate::~ChatTemplate() = default;

ChatTemplate ChatTemplate::parse(const std::string& source) {
    auto impl = std::make_unique<Impl>();
    impl->body = jinja::parse_template(jinja::tokenize(source));
    return ChatTemplate(std::move(impl));
}

namespace {

template <typename Json>
std::string render_json(const jinja::Body& body, const Json& context, const ChatRenderOptions& options = {}) {
    if (!context.is_object()) {
        raise(ErrorCode::kInvalidArgument, "chat template context must be a JSON object of variables, got {}",
              context.type_name());
    }
    jinja::Value globals = jinja::Value::from_json(context);
    // A fixed clock shadows the global strftime_now (variables are looked up before globals).
    if (options.now) jinja::set_item(globals.as_dict(), "strftime_now", jinja::strftime_now_function(options.now));
    return jinja::render_body(body, globals);
}

}  // namespace

std::string ChatTemplate::render(const nlohmann::json& context) const { return render_json(impl_->body, context); }

std::string ChatTemplate::render(const nlohmann::ordered_json& context) const {
    return render_json(impl_->body, context);
}

std::string ChatTemplate::render(const nlohmann::ordered_json& context, const ChatRenderOptions& options) const {
    return render_json(impl_->body, context, options);
}

std::string render_chat(const ChatTemplate& chat_template, const nlohmann::ordered_json& messages,
                        bool add_generation_prompt, const nlohmann::ordered_json& extra) {
    nlohmann::ordered_json context = nlohmann::ordered_json::object();
    context["messages"] = messages;
    context["add_generation_prompt"] = add_generation_prompt;
    if (!extra.is_null()) {
        if (!extra.is_object()) {
            raise(ErrorCode::kInvalidArgument, "render_chat: extra variables must be a JSON object, got {}",
                  extra.type_name());
        }
        for (auto it = extra.begin(); it != extra.end(); ++it) context[it.key()] = it.value();
    }
    return chat_template.render(context);
}

}  // namespace moeserve::tokenizer
