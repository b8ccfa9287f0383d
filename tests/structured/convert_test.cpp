// The converters (JSON Schema, regex, choices, integer ranges) judged by what the resulting
// grammar accepts and rejects, and the path their errors name.
#include "moeserve/structured/convert.h"

#include <gtest/gtest.h>

#include "moeserve/core/error.h"
#include "moeserve/structured/matcher.h"

namespace moeserve::structured {
namespace {

using Json = nlohmann::ordered_json;

bool accepts(const std::string& gbnf, const std::string& text) {
    static const auto vocab = std::make_shared<Vocabulary>(std::vector<std::string>{"a"}, std::vector<TokenId>{});
    GrammarMatcher m(std::make_shared<CompiledGrammar>(parse_gbnf(gbnf), vocab));
    return m.accept_bytes(text) && m.is_accepting();
}

std::string error_of(const std::function<void()>& f) {
    try {
        f();
    } catch (const Error& e) {
        return e.what();
    }
    return "no error";
}

bool schema_accepts(const char* schema, const std::string& text) {
    return accepts(json_schema_to_gbnf(Json::parse(schema), "schema"), text);
}

TEST(JsonSchemaTest, ObjectRequiredOptionalAndOrder) {
    const char* s = R"({"type": "object", "properties": {"name": {"type": "string", "maxLength": 5},
        "age": {"type": "integer", "minimum": 0, "maximum": 150}, "ok": {"type": "boolean"}},
        "required": ["name", "age"]})";
    EXPECT_TRUE(schema_accepts(s, R"({"name":"bob","age":42})"));
    EXPECT_TRUE(schema_accepts(s, R"({"name":"bob","age":150,"ok":true})"));
    EXPECT_FALSE(schema_accepts(s, R"({"name":"bob","age":151})"));
    EXPECT_FALSE(schema_accepts(s, R"({"name":"bobbie","age":1})"));     // maxLength 5
    EXPECT_FALSE(schema_accepts(s, R"({"age":1,"name":"bob"})"));        // schema order
    EXPECT_FALSE(schema_accepts(s, R"({"name":"bob"})"));                // age required
    EXPECT_FALSE(schema_accepts(s, R"({"name":"bob","age":1,"x":1})"));  // no additional properties
    EXPECT_FALSE(schema_accepts(s, R"({"name":"bob","age":01})"));
}

TEST(JsonSchemaTest, AllOptionalAndAdditional) {
    const char* s =
        R"({"properties": {"a": {"type": "null"}, "b": {"const": "x"}}, "additionalProperties": {"type": "integer"}})";
    EXPECT_TRUE(schema_accepts(s, "{}"));
    EXPECT_TRUE(schema_accepts(s, R"({"b":"x"})"));
    EXPECT_TRUE(schema_accepts(s, R"({"a":null,"b":"x","zz":-3})"));
    EXPECT_TRUE(schema_accepts(s, R"({"zz":3,"y":4})"));
    EXPECT_FALSE(schema_accepts(s, R"({,"b":"x"})"));
    EXPECT_FALSE(schema_accepts(s, R"({"zz":"s"})"));
    EXPECT_TRUE(schema_accepts(R"({"type": "object"})", R"({"k":[1,{"x":null}],"s":"\u00e9\n"})"));
}

TEST(JsonSchemaTest, ArraysEnumsAnyOfRefs) {
    const char* arr = R"({"type": "array", "items": {"enum": ["red", "green", 3]}, "minItems": 1, "maxItems": 3})";
    EXPECT_TRUE(schema_accepts(arr, R"(["red"])"));
    EXPECT_TRUE(schema_accepts(arr, R"(["red",3,"green"])"));
    EXPECT_FALSE(schema_accepts(arr, "[]"));
    EXPECT_FALSE(schema_accepts(arr, R"(["red",3,"green",3])"));
    EXPECT_FALSE(schema_accepts(arr, R"(["blue"])"));
    const char* tree = R"({"$defs": {"node": {"type": "object", "properties": {"v": {"type": "integer"},
        "kids": {"type": "array", "items": {"$ref": "#/$defs/node"}}}, "required": ["v"]}}, "$ref": "#/$defs/node"})";
    EXPECT_TRUE(schema_accepts(tree, R"({"v":1,"kids":[{"v":2},{"v":3,"kids":[]}]})"));
    EXPECT_FALSE(schema_accepts(tree, R"({"v":1,"kids":[{"w":2}]})"));
    const char* any =
        R"({"anyOf": [{"type": "string", "format": "date"}, {"type": "null"}, {"type": "number", "minimum": -2, "maximum": 5}]})";
    EXPECT_TRUE(schema_accepts(any, R"("2024-02-29")"));
    EXPECT_TRUE(schema_accepts(any, "null"));
    EXPECT_TRUE(schema_accepts(any, "-2"));
    EXPECT_TRUE(schema_accepts(any, "4.75"));
    EXPECT_TRUE(schema_accepts(any, "5"));
    EXPECT_FALSE(schema_accepts(any, "5.5"));
    EXPECT_FALSE(schema_accepts(any, "-3"));
    EXPECT_FALSE(schema_accepts(any, R"("2024-13-01")"));
    const char* tuple =
        R"({"type": "array", "prefixItems": [{"type": "integer"}, {"type": "string", "pattern": "^[a-z]+\\d$"}]})";
    EXPECT_TRUE(schema_accepts(tuple, R"([1,"ab7"])"));
    EXPECT_FALSE(schema_accepts(tuple, R"([1,"ab"])"));
    EXPECT_FALSE(schema_accepts(tuple, R"([1,"ab7",2])"));
}

TEST(JsonSchemaTest, ErrorsNameThePath) {
    const auto err = [](const char* schema) {
        return error_of([&] { json_schema_to_gbnf(Json::parse(schema), "response_format.json_schema.schema"); });
    };
    EXPECT_EQ(
        err(R"({"properties": {"age": {"type": "foo"}}})"),
        "response_format.json_schema.schema.properties.age: unsupported type 'foo' (expected object, array, string, "
        "integer, number, boolean or null)");
    EXPECT_EQ(err(R"({"type": "array", "items": {"not": {}}})"),
              "response_format.json_schema.schema.items.not: the keyword 'not' is not supported");
    EXPECT_EQ(err(R"({"$ref": "#/$defs/missing"})"),
              "response_format.json_schema.schema.$ref: $ref '#/$defs/missing' does not point into the schema");
    EXPECT_EQ(err(R"({"type": "integer", "minimum": 5, "maximum": 1})"),
              "response_format.json_schema.schema: no integer lies within the bounds (minimum 5 > maximum 1)");
    EXPECT_NE(err(R"({"type": "string", "pattern": "(a)\\1"})")
                  .find("schema.pattern: invalid or unsupported regular expression"),
              std::string::npos);
}

TEST(JsonSchemaTest, RulesComposeIntoALargerGrammar) {
    // What tool calling needs: one of several functions, each with its arguments' schema.
    const std::string weather = json_schema_to_gbnf_rules(
        Json::parse(R"({"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]})"),
        "tools[0]", "weather-args");
    const std::string add = json_schema_to_gbnf_rules(
        Json::parse(
            R"({"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}}, "required": ["a", "b"]})"),
        "tools[1]", "add-args");
    const std::string g = merge_gbnf(
        {R"(root ::= "{\"name\":\"weather\",\"arguments\":" weather-args "}" | "{\"name\":\"add\",\"arguments\":" add-args "}")",
         weather, add});
    EXPECT_TRUE(accepts(g, R"({"name":"weather","arguments":{"city":"Oslo"}})"));
    EXPECT_TRUE(accepts(g, R"({"name":"add","arguments":{"a":1,"b":-2}})"));
    EXPECT_FALSE(accepts(g, R"({"name":"add","arguments":{"city":"Oslo"}})"));
    EXPECT_NE(error_of([] {
                  merge_gbnf({"x ::= \"a\"\n", "x ::= \"b\"\n"});
              }).find("defined twice"),
              std::string::npos);
    EXPECT_NE(error_of([] { json_schema_to_gbnf_rules(Json::object(), "p", "json-x"); }).find("bad rule name"),
              std::string::npos);
}

TEST(RegexTest, WholeOutputMatches) {
    const auto re = [](const char* r, const std::string& text) {
        return accepts(regex_to_gbnf(r, "guided_regex"), text);
    };
    EXPECT_TRUE(re(R"(\d{4}-\d{2}-\d{2})", "2024-01-31"));
    EXPECT_FALSE(re(R"(\d{4}-\d{2}-\d{2})", "2024-1-31"));
    EXPECT_TRUE(re(R"([A-Za-z_][A-Za-z0-9_]*)", "_id9"));
    EXPECT_FALSE(re(R"([A-Za-z_][A-Za-z0-9_]*)", "9id"));
    EXPECT_TRUE(re(R"((cat|dog)s?)", "dogs"));
    EXPECT_FALSE(re(R"((cat|dog)s?)", "cow"));
    EXPECT_TRUE(re(R"(^a.c$)",
                   "a\xC3\xA9"
                   "c"));
    EXPECT_FALSE(re(R"(a.c)", "a\nc"));
    EXPECT_TRUE(re(R"([^a-c]+)", "xyz"));
    EXPECT_FALSE(re(R"([^a-c]+)", "xbz"));
    EXPECT_TRUE(re(R"(a{2,}?b)", "aaab"));
    EXPECT_TRUE(re(R"((?:ab)+|\.)", "."));
    EXPECT_TRUE(re(R"(\w+@\w+\.com)", "me@x.com"));
    EXPECT_NE(error_of([] {
                  regex_to_gbnf("a(?=b)", "guided_regex");
              }).find("guided_regex: invalid or unsupported regular expression at offset 2"),
              std::string::npos);
    EXPECT_NE(error_of([] { regex_to_gbnf("*a", "guided_regex"); }).find("nothing to repeat"), std::string::npos);
}

TEST(ConvertTest, DeepNestingIsAnErrorNotACrash) {
    EXPECT_NE(error_of([] {
                  regex_to_gbnf(std::string(50000, '(') + "a" + std::string(50000, ')'), "guided_regex");
              }).find("nest deeper"),
              std::string::npos);
    Json defs = Json::object();
    for (int i = 0; i < 2000; ++i) defs["d" + std::to_string(i)] = {{"$ref", "#/$defs/d" + std::to_string(i + 1)}};
    defs["d2000"] = {{"type", "null"}};
    const Json schema = {{"$defs", defs}, {"$ref", "#/$defs/d0"}};
    EXPECT_NE(error_of([&] { json_schema_to_gbnf(schema, "s"); }).find("deeper than 256"), std::string::npos);
}

TEST(RegexTest, InsideJsonStringsEscapes) {
    const std::string g = "root ::= \"\\\"\" " + regex_expression(R"(a"b\\.)", true, "p") + " \"\\\"\"\n";
    EXPECT_TRUE(accepts(g, R"("a\"b\\x")"));
    EXPECT_FALSE(accepts(g, R"("a"b\x")"));
    const std::string cls = "root ::= " + regex_expression(R"([^x]+)", true, "p") + "\n";
    EXPECT_TRUE(accepts(cls, "ab"));
    EXPECT_FALSE(accepts(cls, "a\"b"));  // '"' left out of classes in JSON strings
}

TEST(IntegerRangeTest, ExactlyTheRange) {
    for (auto [lo, hi] :
         std::vector<std::pair<int64_t, int64_t>>{{0, 0}, {3, 17}, {-25, 7}, {-300, -12}, {99, 1001}, {0, 150}}) {
        const std::string g = "root ::= " + integer_range_expression(lo, hi) + "\n";
        for (int64_t v = lo - 30; v <= hi + 30; ++v) {
            EXPECT_EQ(accepts(g, std::to_string(v)), v >= lo && v <= hi) << lo << ".." << hi << " value " << v;
        }
        EXPECT_FALSE(accepts(g, "-0"));
        EXPECT_FALSE(accepts(g, "007"));
    }
}

TEST(ChoiceTest, ExactlyOne) {
    const std::string g = choices_to_gbnf({"yes", "no", "say \"hi\""}, "guided_choice");
    EXPECT_TRUE(accepts(g, "no"));
    EXPECT_TRUE(accepts(g, "say \"hi\""));
    EXPECT_FALSE(accepts(g, "yesno"));
    EXPECT_EQ(error_of([] { choices_to_gbnf({}, "guided_choice"); }), "guided_choice: the list of choices is empty");
}

}  // namespace
}  // namespace moeserve::structured
