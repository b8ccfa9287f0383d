// Interpreter: statements (output, if, for, set, macro, call) and scoping as jinja2 compiles
// them; expressions are in expression_eval.cpp.
#include "moeserve/tokenizer/chat_template/interpreter.h"

#include "moeserve/core/error.h"
#include "moeserve/tokenizer/chat_template/builtins.h"
#include "moeserve/tokenizer/chat_template/helpers.h"
#include "moeserve/tokenizer/chat_template/renderer.h"

namespace moeserve::tokenizer::jinja {

Renderer::Renderer(const Value& globals) : globals_(globals) { scopes_.emplace_back(); }

Value Renderer::lookup(const std::string& name) const {
    for (auto scope = scopes_.rbegin(); scope != scopes_.rend(); ++scope) {
        for (const auto& [key, value] : *scope) {
            if (key == name) return value;
        }
    }
    if (const Value* found = globals_.find(name)) return *found;
    return lookup_global(name);
}

void Renderer::assign(const std::string& name, Value value) { set_item(scopes_.back(), name, std::move(value)); }

void Renderer::assign_targets(const std::vector<std::string>& targets, const Value& value, int line) {
    if (targets.size() == 1) {
        assign(targets[0], value);
        return;
    }
    List items = iterate(value, line);
    if (items.size() != targets.size()) {
        raise(ErrorCode::kInvalidArgument, "chat template line {}: cannot unpack {} values into {} names", line,
              items.size(), targets.size());
    }
    for (size_t i = 0; i < targets.size(); ++i) assign(targets[i], items[i]);
}

Renderer::Flow Renderer::exec(const Body& body, std::string& out) {
    for (const auto& stmt : body) {
        Flow flow = exec_statement(*stmt, out);
        if (flow != Flow::kNormal) return flow;
    }
    return Flow::kNormal;
}

Renderer::Flow Renderer::exec_statement(const Stmt& s, std::string& out) {
    switch (s.kind) {
        case Stmt::Kind::kText:
            out += s.text;
            return Flow::kNormal;
        case Stmt::Kind::kOutput:
            out += eval(*s.expr).str();
            return Flow::kNormal;
        case Stmt::Kind::kIf:
            for (const IfBranch& branch : s.branches) {
                if (!branch.condition || eval(*branch.condition).truthy()) {
                    return exec(branch.body, out);
                }
            }
            return Flow::kNormal;
        case Stmt::Kind::kFor:
            exec_for(s, out);
            return Flow::kNormal;
        case Stmt::Kind::kSet:
            exec_set(s, eval(*s.expr));
            return Flow::kNormal;
        case Stmt::Kind::kSetBlock: {
            std::string captured;
            exec(s.body, captured);
            exec_set(s, Value(std::move(captured)));
            return Flow::kNormal;
        }
        case Stmt::Kind::kMacro: {
            const Stmt* macro = &s;
            assign(s.name, Value::function(s.name, [this, macro](const CallArgs& a) { return call_macro(*macro, a); }));
            return Flow::kNormal;
        }
        case Stmt::Kind::kCallBlock: {
            const Body* caller_body = &s.body;
            Value caller = Value::function("caller", [this, caller_body](const CallArgs&) {
                std::string text;
                exec(*caller_body, text);
                return Value(std::move(text));
            });
            out += eval_call(*s.expr, caller).str();
            return Flow::kNormal;
        }
        case Stmt::Kind::kBreak:
            return Flow::kBreak;
        case Stmt::Kind::kContinue:
            return Flow::kContinue;
        case Stmt::Kind::kScope:
            return exec(s.body, out);
    }
    return Flow::kNormal;
}

void Renderer::exec_set(const Stmt& s, const Value& value) {
    if (s.attr.empty()) {
        assign_targets(s.targets, value, s.line);
        return;
    }
    Value target = lookup(s.targets[0]);
    if (!target.is_namespace()) {
        raise(ErrorCode::kInvalidArgument,
              "chat template line {}: cannot assign attribute '{}' on '{}', which is a '{}' and "
              "not a namespace()",
              s.line, s.attr, s.targets[0], target.type_name());
    }
    set_item(target.as_namespace(), s.attr, value);
}

Value Renderer::make_loop_object(const List& items, size_t i) const {
    auto n = static_cast<int64_t>(items.size());
    auto k = static_cast<int64_t>(i);
    // depth counts recursive-loop levels in jinja2, so it is 1 for every (non-recursive) loop.
    Dict loop = {{"index", k + 1},  {"index0", k},        {"revindex", n - k}, {"revindex0", n - k - 1},
                 {"first", k == 0}, {"last", k == n - 1}, {"length", n},       {"depth", 1},
                 {"depth0", 0}};
    if (i > 0) loop.emplace_back("previtem", items[i - 1]);
    if (i + 1 < items.size()) loop.emplace_back("nextitem", items[i + 1]);
    loop.emplace_back("cycle", Value::function("loop.cycle", [k](const CallArgs& a) {
                          if (a.positional.empty()) return Value::undefined("cycle");
                          return a.positional[static_cast<size_t>(k) % a.positional.size()];
                      }));
    return Value::dict(std::move(loop));
}

void Renderer::exec_for(const Stmt& s, std::string& out) {
    List items = iterate(eval(*s.expr), s.line);
    if (s.filter) {
        List kept;
        for (const Value& item : items) {
            scopes_.emplace_back();
            assign_targets(s.targets, item, s.line);
            bool keep = eval(*s.filter).truthy();
            scopes_.pop_back();
            if (keep) kept.push_back(item);
        }
        items = std::move(kept);
    }
    // NOTE: jinja2 gives each iteration a fresh scope: a `set` inside the body is gone in the
    // next iteration and after the loop (templates use namespace() to carry state out).
    for (size_t i = 0; i < items.size(); ++i) {
        scopes_.emplace_back();
        assign("loop", make_loop_object(items, i));
        assign_targets(s.targets, items[i], s.line);
        Flow flow = exec(s.body, out);
        scopes_.pop_back();
        if (flow == Flow::kBreak) break;
    }
    if (items.empty() && !s.else_body.empty()) {
        scopes_.emplace_back();
        exec(s.else_body, out);
        scopes_.pop_back();
    }
}

Value Renderer::call_macro(const Stmt& macro, const CallArgs& a) {
    if (a.positional.size() > macro.params.size()) {
        raise(ErrorCode::kInvalidArgument, "chat template line {}: macro '{}' takes {} arguments, got {}", a.line,
              macro.name, macro.params.size(), a.positional.size());
    }
    std::vector<Scope> saved = std::move(scopes_);
    scopes_.clear();
    scopes_.push_back(saved.front());
    scopes_.emplace_back();
    for (const auto& [key, value] : a.keyword) {
        bool known = key == "caller";
        for (const std::string& p : macro.params) known = known || p == key;
        if (!known) {
            scopes_ = std::move(saved);
            raise(ErrorCode::kInvalidArgument, "chat template line {}: macro '{}' has no parameter '{}'", a.line,
                  macro.name, key);
        }
        if (key == "caller") assign(key, value);
    }
    std::string text;
    try {
        for (size_t i = 0; i < macro.params.size(); ++i) {
            Value v = arg(a, i, macro.params[i].c_str());
            if (v.is_undefined() && macro.defaults[i]) v = eval(*macro.defaults[i]);
            assign(macro.params[i], v);
        }
        exec(macro.body, text);
    } catch (...) {
        scopes_ = std::move(saved);
        throw;
    }
    scopes_ = std::move(saved);
    return Value(std::move(text));
}

std::string render_body(const Body& body, const Value& globals) {
    Renderer renderer(globals);
    std::string out;
    renderer.exec(body, out);
    return out;
}

}  // namespace moeserve::tokenizer::jinja
