// Argument access, Python iteration and dict updates for the interpreter and built-ins.
#include "moeserve/tokenizer/chat_template/helpers.h"

#include "moeserve/core/error.h"
#include "moeserve/tokenizer/chat_template/builtins.h"

namespace moeserve::tokenizer::jinja {

Value arg(const CallArgs& a, size_t pos, const char* name, Value fallback) {
    if (pos < a.positional.size()) return a.positional[pos];
    for (const auto& [key, value] : a.keyword) {
        if (key == name) return value;
    }
    return fallback;
}

int64_t int_arg(const CallArgs& a, size_t pos, const char* name, int64_t fallback) {
    Value v = arg(a, pos, name);
    if (v.is_undefined() || v.is_none()) return fallback;
    if (v.is_int()) return v.as_int();
    if (v.is_bool()) return v.as_bool() ? 1 : 0;
    raise(ErrorCode::kInvalidArgument, "chat template line {}: argument '{}' must be an integer, got '{}'", a.line,
          name, v.type_name());
}

List iterate(const Value& v, int line) {
    if (v.is_list()) return v.as_list();
    if (v.is_undefined()) return {};
    List out;
    if (v.is_dict()) {
        for (const auto& kv : v.as_dict()) out.emplace_back(kv.first);
        return out;
    }
    if (v.is_string()) {
        for (std::string& ch : utf8_chars(v.as_string())) out.emplace_back(std::move(ch));
        return out;
    }
    raise(ErrorCode::kInvalidArgument, "chat template line {}: '{}' object is not iterable", line, v.type_name());
}

bool contains(const Value& container, const Value& item, int line) {
    if (container.is_string()) {
        if (!item.is_string()) {
            raise(ErrorCode::kInvalidArgument,
                  "chat template line {}: 'in <string>' requires string as left operand, not '{}'", line,
                  item.type_name());
        }
        return container.as_string().find(item.as_string()) != std::string::npos;
    }
    if (container.is_dict()) {
        return item.is_string() && container.find(item.as_string()) != nullptr;
    }
    if (container.is_list()) {
        for (const Value& v : container.as_list()) {
            if (v.equals(item)) return true;
        }
        return false;
    }
    if (container.is_undefined()) return false;
    raise(ErrorCode::kInvalidArgument, "chat template line {}: argument of type '{}' is not iterable", line,
          container.type_name());
}

void set_item(Dict& d, const std::string& key, Value value) {
    for (auto& kv : d) {
        if (kv.first == key) {
            kv.second = std::move(value);
            return;
        }
    }
    d.emplace_back(key, std::move(value));
}

}  // namespace moeserve::tokenizer::jinja
