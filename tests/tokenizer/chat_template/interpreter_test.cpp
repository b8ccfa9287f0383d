// Unit tests of the Jinja interpreter: one small template per feature, expected output made by
// Python jinja2 (tools/goldens/chat_template/make_unit_goldens.py -> unit_goldens.json), plus
// errors: unsupported constructs and syntax errors name the construct and the line.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fstream>

#include "moeserve/core/error.h"
#include "moeserve/tokenizer/chat_template/chat_template.h"
#include "test_support.h"

namespace moeserve::tokenizer {
namespace {

using ::testing::HasSubstr;

std::string render(const std::string& source, const nlohmann::ordered_json& context = {}) {
    nlohmann::ordered_json ctx = context.is_null() ? nlohmann::ordered_json::object() : context;
    return ChatTemplate::parse(source).render(ctx);
}

// Runs `fn`, expects an Error with `code` whose message contains every one of `parts`.
template <typename Fn>
void expect_error(Fn fn, ErrorCode code, const std::vector<std::string>& parts) {
    try {
        fn();
        ADD_FAILURE() << "expected an Error";
    } catch (const Error& e) {
        EXPECT_EQ(e.code(), code) << e.what();
        for (const std::string& part : parts) EXPECT_THAT(e.what(), HasSubstr(part));
    }
}

TEST(InterpreterTest, MatchesPythonJinja2OnFeatureTemplates) {
    std::ifstream in(test::data_dir() / "chat_template" / "unit_goldens.json");
    ASSERT_TRUE(in.good());
    auto cases = nlohmann::ordered_json::parse(in);
    ASSERT_GE(cases.size(), 150u);  // 46 feature cases + 120 whitespace mixes
    for (const auto& c : cases) {
        SCOPED_TRACE(c.at("name").get<std::string>() + ": " + c.at("template").get<std::string>());
        try {
            EXPECT_EQ(render(c.at("template"), c.at("context")), c.at("expected").get<std::string>());
        } catch (const Error& e) {
            ADD_FAILURE() << e.what();
        }
    }
}

TEST(InterpreterTest, GenerationBlockRendersItsBody) {
    // transformers' AssistantTracker extension: {% generation %} only marks a span.
    EXPECT_EQ(render("a{% generation %}b{{ 1 }}{% endgeneration %}c"), "ab1c");
}

TEST(InterpreterTest, RaiseExceptionThrowsWithMessage) {
    expect_error([] { render("{{ raise_exception('Roles must alternate') }}"); }, ErrorCode::kInvalidArgument,
                 {"Roles must alternate"});
}

TEST(InterpreterTest, UnknownFilterIsUnsupportedWithLine) {
    expect_error([] { render("line1\n{{ 'x' | frobnicate }}"); }, ErrorCode::kUnsupported,
                 {"filter 'frobnicate'", "line 2"});
}

TEST(InterpreterTest, UnknownTestIsUnsupportedWithLine) {
    expect_error([] { render("\n\n{% if 1 is prime %}{% endif %}"); }, ErrorCode::kUnsupported,
                 {"test 'prime'", "line 3"});
}

TEST(InterpreterTest, UnknownTagIsUnsupportedAtParse) {
    expect_error([] { ChatTemplate::parse("a\n{% include 'x.j2' %}"); }, ErrorCode::kUnsupported,
                 {"tag 'include'", "line 2"});
}

TEST(InterpreterTest, UnimplementedStringMethodIsUnsupported) {
    expect_error([] { render("{{ '{}'.format(1) }}"); }, ErrorCode::kUnsupported, {"method 'format'", "line 1"});
}

TEST(InterpreterTest, UnknownFunctionIsUnsupported) {
    expect_error([] { render("{{ lipsum(2) }}"); }, ErrorCode::kUnsupported, {"function 'lipsum'", "line 1"});
}

TEST(InterpreterTest, ListMutationIsUnsupported) {
    expect_error([] { render("{% set l = [] %}{{ l.append(1) }}"); }, ErrorCode::kUnsupported,
                 {"list method 'append'"});
}

TEST(InterpreterTest, SyntaxErrorsNameTheLine) {
    expect_error([] { ChatTemplate::parse("ok\n{% if x %}\nno end"); }, ErrorCode::kInvalidArgument,
                 {"line 3", "'endif'"});
    expect_error([] { ChatTemplate::parse("{{ 1 +\n }}"); }, ErrorCode::kInvalidArgument,
                 {"line 2", "expected an expression"});
    expect_error([] { ChatTemplate::parse("a\nb {{ x "); }, ErrorCode::kInvalidArgument, {"line 2", "never closed"});
    expect_error([] { ChatTemplate::parse("{# open comment"); }, ErrorCode::kInvalidArgument, {"comment"});
    expect_error([] { ChatTemplate::parse("{{ 'abc }}"); }, ErrorCode::kInvalidArgument, {"string literal"});
}

TEST(InterpreterTest, UndefinedErrorsOnlyWhereJinja2Raises) {
    // Printing, testing and iterating an undefined value is fine ...
    EXPECT_EQ(render("[{{ nope }}{% for x in nope %}x{% endfor %}{{ nope | length }}]"), "[0]");
    // ... reading an attribute of it, or doing arithmetic with it, is not.
    expect_error([] { render("{{ nope.field }}"); }, ErrorCode::kInvalidArgument, {"'nope' is undefined", "line 1"});
    expect_error([] { render("\n{{ nope + 1 }}"); }, ErrorCode::kInvalidArgument, {"'nope' is undefined", "line 2"});
}

TEST(InterpreterTest, TypeErrorsAreReported) {
    expect_error(
        [] {
            render("{{ x + 'a' }}", {{"x", nullptr}});
        },
        ErrorCode::kInvalidArgument, {"unsupported operand type(s) for +: 'NoneType' and 'str'"});
    expect_error([] { render("{{ 'a' in x }}", {{"x", nullptr}}); }, ErrorCode::kInvalidArgument, {"not iterable"});
    expect_error([] { render("{% set x = 1 %}{% set x.a = 2 %}"); }, ErrorCode::kInvalidArgument, {"namespace"});
}

TEST(InterpreterTest, TojsonKeepsKeyOrderOfOrderedJson) {
    nlohmann::ordered_json ctx = {{"d", {{"b", 1}, {"a", 2}}}};
    EXPECT_EQ(ChatTemplate::parse("{{ d | tojson }}").render(ctx), "{\"b\": 1, \"a\": 2}");
    nlohmann::json sorted_ctx = {{"d", {{"b", 1}, {"a", 2}}}};
    EXPECT_EQ(ChatTemplate::parse("{{ d | tojson }}").render(sorted_ctx), "{\"a\": 2, \"b\": 1}");
}

TEST(InterpreterTest, ParsedTemplateRendersManyTimes) {
    ChatTemplate t = ChatTemplate::parse("{% set ns = namespace(n=0) %}{% set ns.n = ns.n + x %}{{ ns.n }}");
    EXPECT_EQ(t.render(nlohmann::json{{"x", 1}}), "1");
    EXPECT_EQ(t.render(nlohmann::json{{"x", 2}}), "2");
}

TEST(InterpreterTest, StrftimeNowReadsAFixedClockInUtc) {
    const ChatTemplate t = ChatTemplate::parse("{{ strftime_now('%Y-%m-%d %H:%M') }}|{{ strftime_now('%d %B') }}");
    const nlohmann::ordered_json ctx = nlohmann::ordered_json::object();
    EXPECT_EQ(t.render(ctx, ChatRenderOptions{1754395200}), "2025-08-05 12:00|05 August");
    EXPECT_EQ(t.render(ctx, ChatRenderOptions{0}), "1970-01-01 00:00|01 January");
    // Without a fixed clock: now, whatever it is (a 16-character date and time before the bar).
    EXPECT_EQ(t.render(ctx).find('|'), 16u);
    expect_error([] { (void)ChatTemplate::parse("{{ strftime_now(3) }}").render(nlohmann::json::object()); },
                 ErrorCode::kInvalidArgument, {"strftime_now needs a format string", "line 1"});
}

}  // namespace
}  // namespace moeserve::tokenizer
