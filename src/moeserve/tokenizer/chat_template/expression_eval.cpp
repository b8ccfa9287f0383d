// Expression evaluation with Python semantics: attribute/item lookup falling back to
// Undefined as jinja2 does, slices, arithmetic, comparisons, calls, filters and tests.
#include <cmath>

#include "moeserve/core/error.h"
#include "moeserve/tokenizer/chat_template/builtins.h"
#include "moeserve/tokenizer/chat_template/helpers.h"
#include "moeserve/tokenizer/chat_template/renderer.h"

namespace moeserve::tokenizer::jinja {
namespace {

bool is_numeric(const Value& v) { return v.is_number() || v.is_bool(); }

int64_t as_integer(const Value& v) { return v.is_bool() ? int64_t{v.as_bool()} : v.as_int(); }

[[noreturn]] void raise_operand_error(const std::string& op, const Value& a, const Value& b, int line) {
    raise(ErrorCode::kInvalidArgument, "chat template line {}: unsupported operand type(s) for {}: '{}' and '{}'", line,
          op, a.type_name(), b.type_name());
}

int64_t floor_div(int64_t a, int64_t b) {
    int64_t q = a / b;
    if ((a % b != 0) && ((a < 0) != (b < 0))) --q;
    return q;
}

Value arithmetic(const std::string& op, const Value& a, const Value& b, int line) {
    if (op == "+" && a.is_string() && b.is_string()) return a.as_string() + b.as_string();
    if (op == "+" && a.is_list() && b.is_list()) {
        List out = a.as_list();
        out.insert(out.end(), b.as_list().begin(), b.as_list().end());
        return Value::list(std::move(out));
    }
    if (op == "*" && (a.is_string() || a.is_list()) && (b.is_int() || b.is_bool())) {
        int64_t n = as_integer(b);
        if (a.is_string()) {
            std::string out;
            for (int64_t i = 0; i < n; ++i) out += a.as_string();
            return out;
        }
        List out;
        for (int64_t i = 0; i < n; ++i) out.insert(out.end(), a.as_list().begin(), a.as_list().end());
        return Value::list(std::move(out));
    }
    if (op == "%" && a.is_string()) {
        raise(ErrorCode::kUnsupported,
              "chat template line {}: printf-style string formatting ('...' % x) is not supported", line);
    }
    if (!is_numeric(a) || !is_numeric(b)) raise_operand_error(op, a, b, line);
    bool ints = !a.is_float() && !b.is_float();
    if ((op == "/" || op == "//" || op == "%") && b.to_double() == 0.0) {
        raise(ErrorCode::kInvalidArgument, "chat template line {}: division by zero", line);
    }
    if (ints) {
        int64_t x = as_integer(a);
        int64_t y = as_integer(b);
        if (op == "+") return x + y;
        if (op == "-") return x - y;
        if (op == "*") return x * y;
        if (op == "//") return floor_div(x, y);
        if (op == "%") return x - floor_div(x, y) * y;
        if (op == "**" && y >= 0) {
            int64_t r = 1;
            for (int64_t i = 0; i < y; ++i) r *= x;
            return r;
        }
    }
    double x = a.to_double();
    double y = b.to_double();
    if (op == "+") return x + y;
    if (op == "-") return x - y;
    if (op == "*") return x * y;
    if (op == "/") return x / y;
    if (op == "//") return std::floor(x / y);
    if (op == "%") return x - std::floor(x / y) * y;
    return std::pow(x, y);
}

bool compare_less(const Value& a, const Value& b, const std::string& op, int line) {
    if (is_numeric(a) && is_numeric(b)) return a.to_double() < b.to_double();
    if (a.is_string() && b.is_string()) return a.as_string() < b.as_string();
    raise(ErrorCode::kInvalidArgument, "chat template line {}: '{}' not supported between instances of '{}' and '{}'",
          line, op, a.type_name(), b.type_name());
}

// Python slice index normalization (PySlice_AdjustIndices).
List slice_items(const List& items, const Value& start_v, const Value& stop_v, const Value& step_v, int line) {
    auto n = static_cast<int64_t>(items.size());
    auto opt_int = [&](const Value& v) -> std::optional<int64_t> {
        if (v.is_none() || v.is_undefined()) return std::nullopt;
        if (v.is_int() || v.is_bool()) return as_integer(v);
        raise(ErrorCode::kInvalidArgument, "chat template line {}: slice indices must be integers", line);
    };
    int64_t step = opt_int(step_v).value_or(1);
    if (step == 0) raise(ErrorCode::kInvalidArgument, "chat template line {}: slice step is 0", line);
    auto adjust = [&](std::optional<int64_t> v, int64_t dflt) {
        if (!v) return dflt;
        int64_t i = *v < 0 ? *v + n : *v;
        if (i < 0) return step < 0 ? int64_t{-1} : int64_t{0};
        if (i >= n) return step < 0 ? n - 1 : n;
        return i;
    };
    int64_t start = adjust(opt_int(start_v), step < 0 ? n - 1 : 0);
    int64_t stop = adjust(opt_int(stop_v), step < 0 ? -1 : n);
    List out;
    for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) {
        out.push_back(items[static_cast<size_t>(i)]);
    }
    return out;
}

}  // namespace

Value Renderer::get_attr(const Value& obj, const std::string& name, int line) {
    if (obj.is_undefined()) raise_undefined(obj, line);
    if (obj.is_dict() || obj.is_string() || obj.is_list()) {
        if (std::optional<Value> method = get_method(obj, name, line)) return *method;
    }
    if (const Value* found = obj.find(name)) return *found;
    return Value::undefined(name);
}

Value Renderer::get_item(const Value& obj, const Value& key, int line) {
    if (obj.is_undefined()) raise_undefined(obj, line);
    if (key.is_string() && (obj.is_dict() || obj.is_namespace())) {
        if (const Value* found = obj.find(key.as_string())) return *found;
        return get_attr(obj, key.as_string(), line);
    }
    if ((obj.is_list() || obj.is_string()) && (key.is_int() || key.is_bool())) {
        List chars;
        const List& items = obj.is_list() ? obj.as_list() : (chars = iterate(obj, line));
        int64_t i = as_integer(key);
        if (i < 0) i += static_cast<int64_t>(items.size());
        if (i >= 0 && i < static_cast<int64_t>(items.size())) return items[static_cast<size_t>(i)];
    }
    return Value::undefined(key.str());
}

Value Renderer::get_slice(const Expr& e) {
    Value obj = eval(*e.args[0]);
    if (obj.is_undefined()) raise_undefined(obj, e.line);
    auto part = [&](size_t i) { return e.args[i] ? eval(*e.args[i]) : Value::none(); };
    Value start = part(1);
    Value stop = part(2);
    Value step = part(3);
    if (obj.is_list()) return Value::list(slice_items(obj.as_list(), start, stop, step, e.line));
    if (obj.is_string()) {
        std::string out;
        for (const Value& ch : slice_items(iterate(obj, e.line), start, stop, step, e.line)) {
            out += ch.as_string();
        }
        return out;
    }
    return Value::undefined("slice");
}

CallArgs Renderer::eval_args(const Expr& e, size_t first_arg) {
    CallArgs a;
    a.line = e.line;
    for (size_t i = first_arg; i < e.args.size(); ++i) a.positional.push_back(eval(*e.args[i]));
    for (const auto& [key, value] : e.kwargs) a.keyword.emplace_back(key, eval(*value));
    return a;
}

Value Renderer::eval_call(const Expr& call, const Value& caller) {
    Value callee = eval(*call.args[0]);
    CallArgs a = eval_args(call, 1);
    if (!caller.is_undefined()) a.keyword.emplace_back("caller", caller);
    if (callee.is_callable()) return callee.call(a);
    std::string what = call.args[0]->kind == Expr::Kind::kName ? call.args[0]->name : callee.undefined_name();
    if (callee.is_undefined()) {
        raise(ErrorCode::kUnsupported, "chat template line {}: the function '{}' is not defined or not supported",
              call.line, what);
    }
    raise(ErrorCode::kInvalidArgument, "chat template line {}: '{}' object is not callable", call.line,
          callee.type_name());
}

Value Renderer::eval_binary(const Expr& e) {
    const std::string& op = e.name;
    Value lhs = eval(*e.args[0]);
    if (op == "and") return lhs.truthy() ? eval(*e.args[1]) : lhs;
    if (op == "or") return lhs.truthy() ? lhs : eval(*e.args[1]);
    Value rhs = eval(*e.args[1]);
    if (op == "~") return lhs.str() + rhs.str();
    if (op == "==") return lhs.equals(rhs);
    if (op == "!=") return !lhs.equals(rhs);
    if (op == "in") return contains(rhs, lhs, e.line);
    if (op == "not in") return !contains(rhs, lhs, e.line);
    if (lhs.is_undefined()) raise_undefined(lhs, e.line);
    if (rhs.is_undefined()) raise_undefined(rhs, e.line);
    if (op == "<") return compare_less(lhs, rhs, op, e.line);
    if (op == ">") return compare_less(rhs, lhs, op, e.line);
    if (op == "<=") return !compare_less(rhs, lhs, op, e.line);
    if (op == ">=") return !compare_less(lhs, rhs, op, e.line);
    return arithmetic(op, lhs, rhs, e.line);
}

Value Renderer::eval(const Expr& e) {
    switch (e.kind) {
        case Expr::Kind::kLiteral:
            return e.literal;
        case Expr::Kind::kName:
            return lookup(e.name);
        case Expr::Kind::kList: {
            List items;
            for (const auto& item : e.args) items.push_back(eval(*item));
            return e.name == "tuple" ? Value::tuple(std::move(items)) : Value::list(std::move(items));
        }
        case Expr::Kind::kDict: {
            Dict items;
            for (size_t i = 0; i + 1 < e.args.size(); i += 2) {
                Value key = eval(*e.args[i]);
                if (!key.is_string()) {
                    raise(ErrorCode::kUnsupported, "chat template line {}: dict keys must be strings, got '{}'", e.line,
                          key.type_name());
                }
                set_item(items, key.as_string(), eval(*e.args[i + 1]));
            }
            return Value::dict(std::move(items));
        }
        case Expr::Kind::kGetAttr:
            return get_attr(eval(*e.args[0]), e.name, e.line);
        case Expr::Kind::kGetItem:
            return get_item(eval(*e.args[0]), eval(*e.args[1]), e.line);
        case Expr::Kind::kSlice:
            return get_slice(e);
        case Expr::Kind::kCall:
            return eval_call(e, Value::undefined());
        case Expr::Kind::kFilter:
            return apply_filter(e.name, eval(*e.args[0]), eval_args(e, 1));
        case Expr::Kind::kTest: {
            bool result = apply_test(e.name, eval(*e.args[0]), eval_args(e, 1));
            return e.negated ? !result : result;
        }
        case Expr::Kind::kUnary: {
            Value v = eval(*e.args[0]);
            if (e.name == "not") return !v.truthy();
            if (v.is_undefined()) raise_undefined(v, e.line);
            if (!is_numeric(v)) {
                raise(ErrorCode::kInvalidArgument, "chat template line {}: bad operand type for unary {}: '{}'", e.line,
                      e.name, v.type_name());
            }
            if (e.name == "+") return v.is_float() ? v : Value(as_integer(v));
            return v.is_float() ? Value(-v.as_float()) : Value(-as_integer(v));
        }
        case Expr::Kind::kBinary:
            return eval_binary(e);
        case Expr::Kind::kCondition:
            if (eval(*e.args[1]).truthy()) return eval(*e.args[0]);
            return e.args[2] ? eval(*e.args[2]) : Value::undefined();
    }
    return Value::undefined();
}

}  // namespace moeserve::tokenizer::jinja
