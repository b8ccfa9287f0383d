// Renderer: the state of one render (scopes, loop depth) and its statement/expression
// evaluation. Internal to chat_template/; one Renderer per render call, never shared.
#pragma once

#include <string>
#include <vector>

#include "moeserve/tokenizer/chat_template/ast.h"
#include "moeserve/tokenizer/chat_template/value.h"

namespace moeserve::tokenizer::jinja {

class Renderer {
public:
    enum class Flow { kNormal, kBreak, kContinue };

    explicit Renderer(const Value& globals);

    // Appends the output of `body` to `out`; returns how a loop body ended.
    Flow exec(const Body& body, std::string& out);
    Value eval(const Expr& e);

private:
    using Scope = Dict;

    Flow exec_statement(const Stmt& s, std::string& out);
    void exec_for(const Stmt& s, std::string& out);
    void exec_set(const Stmt& s, const Value& value);
    Value call_macro(const Stmt& macro, const CallArgs& a);
    Value make_loop_object(const List& items, size_t i) const;

    Value lookup(const std::string& name) const;
    void assign(const std::string& name, Value value);
    void assign_targets(const std::vector<std::string>& targets, const Value& value, int line);

    // Expression helpers (expression_eval.cpp).
    Value eval_call(const Expr& call, const Value& caller);
    CallArgs eval_args(const Expr& e, size_t first_arg);
    Value eval_binary(const Expr& e);
    Value get_attr(const Value& obj, const std::string& name, int line);
    Value get_item(const Value& obj, const Value& key, int line);
    Value get_slice(const Expr& e);

    Value globals_;
    std::vector<Scope> scopes_;  // innermost last; [0] is the template's top level
};

}  // namespace moeserve::tokenizer::jinja
