// Syntax tree of a parsed chat template: expressions and statements. Immutable after parsing,
// so one tree can be rendered from many threads at once.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "moeserve/tokenizer/chat_template/value.h"

namespace moeserve::tokenizer::jinja {

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;

struct Expr {
    enum class Kind {
        kLiteral,    // literal (scalar only)
        kName,       // name
        kList,       // [args...]; name == "tuple" for (a, b)
        kDict,       // {args[0]: args[1], args[2]: args[3], ...}
        kGetAttr,    // args[0].name
        kGetItem,    // args[0][args[1]]
        kSlice,      // args[0][args[1]:args[2]:args[3]], absent parts are nullptr
        kCall,       // args[0](args[1:], kwargs)
        kFilter,     // args[0] | name(args[1:], kwargs)
        kTest,       // args[0] is [not] name(args[1:]); negated
        kUnary,      // name in {"-", "+", "not"}, args[0]
        kBinary,     // args[0] name args[1]; name is an operator, "in", "not in", "and", "or"
        kCondition,  // args[0] if args[1] else args[2] (args[2] may be nullptr)
    };
    Kind kind;
    int line = 0;
    Value literal;
    std::string name;
    bool negated = false;
    std::vector<ExprPtr> args;
    std::vector<std::pair<std::string, ExprPtr>> kwargs;  // kCall / kFilter keyword arguments
};

struct Stmt;
using Body = std::vector<std::unique_ptr<Stmt>>;

struct IfBranch {
    ExprPtr condition;  // nullptr for else
    Body body;
};

struct Stmt {
    enum class Kind {
        kText,       // text
        kOutput,     // {{ expr }}
        kIf,         // branches
        kFor,        // for targets in expr [if filter]: body [else: else_body]
        kSet,        // set targets[0] (or targets[0].attr) = expr
        kSetBlock,   // set targets[0] %} body {% endset
        kMacro,      // macro name(params = defaults): body
        kCallBlock,  // call expr: body (body is caller())
        kBreak,
        kContinue,
        kScope,  // a body rendered as is ({% generation %} of transformers)
    };
    Kind kind;
    int line = 0;
    std::string text;
    ExprPtr expr;
    ExprPtr filter;
    std::vector<std::string> targets;
    std::string attr;
    std::vector<IfBranch> branches;
    Body body;
    Body else_body;
    std::string name;
    std::vector<std::string> params;
    std::vector<ExprPtr> defaults;  // one per param, nullptr where none
};

}  // namespace moeserve::tokenizer::jinja
