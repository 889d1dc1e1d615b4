// polymoe::io::json: parsing, accessors, the writer, and malformed input.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <polymoe/io/json.hpp>
#include <string>
#include <string_view>

namespace {

using polymoe::io::json;
using polymoe::io::parse_json;

std::string error_of(std::string_view text, std::size_t max_depth = 128) {
  try {
    (void)parse_json(text, "test.json", max_depth);
  } catch (const polymoe::error& e) {
    return e.what();
  } catch (const std::exception& e) {
    return std::string("WRONG EXCEPTION: ") + e.what();
  }
  return "NO ERROR";
}

TEST(json_parse, scalars) {
  EXPECT_TRUE(parse_json("null").is_null());
  EXPECT_TRUE(parse_json(" true ").as_bool());
  EXPECT_FALSE(parse_json("\tfalse\r\n").as_bool());
  EXPECT_EQ(parse_json("0").as_int(), 0);
  EXPECT_EQ(parse_json("-17").as_int(), -17);
  EXPECT_EQ(parse_json("9223372036854775807").as_int(), std::numeric_limits<std::int64_t>::max());
  EXPECT_EQ(parse_json("-9223372036854775808").as_int(), std::numeric_limits<std::int64_t>::min());
  const json big = parse_json("9223372036854775808");  // out of int64: a double
  EXPECT_FALSE(big.is_int());
  EXPECT_EQ(big.as_double(), 9223372036854775808.0);
  EXPECT_EQ(parse_json("1.5").as_double(), 1.5);
  EXPECT_EQ(parse_json("-2.5e3").as_double(), -2500.0);
  EXPECT_EQ(parse_json("1E-2").as_double(), 0.01);
  EXPECT_EQ(parse_json("1e+2").as_double(), 100.0);
  EXPECT_TRUE(parse_json("1.0").type() == json::kind::number);
  EXPECT_EQ(parse_json("7").as_double(), 7.0);  // integers convert to double
  EXPECT_TRUE(std::signbit(parse_json("-0.0").as_double()));
  EXPECT_EQ(parse_json("1e-400").as_double(), 0.0);  // underflow -> 0
  EXPECT_EQ(parse_json("4.9e-324").as_double(), std::numeric_limits<double>::denorm_min());
  EXPECT_EQ(parse_json(R"("abc")").as_string(), "abc");
}

TEST(json_parse, string_escapes) {
  EXPECT_EQ(parse_json(R"("a\"b\\c\/d\b\f\n\r\t")").as_string(), "a\"b\\c/d\b\f\n\r\t");
  EXPECT_EQ(parse_json(R"("\u0041\u00e9\u20AC")").as_string(), "A\xC3\xA9\xE2\x82\xAC");
  EXPECT_EQ(parse_json(R"("\ud83d\ude00")").as_string(), "\xF0\x9F\x98\x80");
  EXPECT_EQ(parse_json(R"("\u0000")").as_string(), std::string(1, '\0'));
  EXPECT_EQ(parse_json("\"caf\xC3\xA9 \xF0\x9F\x98\x80\"").as_string(),
            "caf\xC3\xA9 \xF0\x9F\x98\x80");
}

TEST(json_parse, containers_and_accessors) {
  const json j = parse_json(R"({
    "num_local_experts": 8, "name": "mixtral", "scale": 2.5, "flags": [true, false, null],
    "nested": {"a": {"b": [1, [2, 3]]}}, "empty_o": {}, "empty_a": []
  })",
                            "config.json");
  ASSERT_TRUE(j.is_object());
  EXPECT_EQ(j.size(), 7u);
  EXPECT_EQ(j.at("num_local_experts").as_int(), 8);
  EXPECT_EQ(j.at("name").as_string(), "mixtral");
  EXPECT_EQ(j.at("scale").as_double(), 2.5);
  EXPECT_EQ(j.at("flags").as_array().size(), 3u);
  EXPECT_TRUE(j.at("flags").at(std::size_t{0}).as_bool());
  EXPECT_TRUE(j.at("flags").at(2).is_null());
  EXPECT_EQ(j.at("nested").at("a").at("b").at(1).at(1).as_int(), 3);
  EXPECT_EQ(j.at("empty_o").size(), 0u);
  EXPECT_TRUE(j.at("empty_a").as_array().empty());
  EXPECT_EQ(j.find("missing"), nullptr);
  ASSERT_NE(j.find("scale"), nullptr);
  EXPECT_TRUE(j.contains("name"));
  // members come sorted by key
  std::string prev;
  for (const auto& [k, v] : j.as_object()) {
    EXPECT_LT(prev, k);
    prev = k;
  }
}

TEST(json_access, errors_name_the_key_and_the_types) {
  const json j = parse_json(R"({"a": "text", "n": 1.5, "arr": [1]})");
  const auto msg = [](auto f) -> std::string {
    try {
      f();
    } catch (const polymoe::error& e) {
      return e.what();
    }
    return "NO ERROR";
  };
  EXPECT_EQ(msg([&] { (void)j.at("num_experts"); }),
            "polymoe: JSON object has no key \"num_experts\"");
  EXPECT_EQ(msg([&] { (void)j.at("a").as_int(); }),
            "polymoe: JSON value is a string, expected an integer");
  EXPECT_EQ(msg([&] { (void)j.at("n").as_int(); }),
            "polymoe: JSON value is a number, expected an integer");
  EXPECT_EQ(msg([&] { (void)j.at("a").as_bool(); }),
            "polymoe: JSON value is a string, expected a boolean");
  EXPECT_EQ(msg([&] { (void)j.as_array(); }),
            "polymoe: JSON value is an object, expected an array");
  EXPECT_NE(msg([&] { (void)j.at("arr").at(5); }).find("index 5 is out of range (size 1)"),
            std::string::npos);
  EXPECT_NE(msg([&] { (void)j.at("arr").find("x"); }).find("looking up key \"x\""),
            std::string::npos);
}

TEST(json_write, dump_and_round_trip) {
  json j = json::object(
      {{"b", 1}, {"a", "x\"y\\z\n\x01"}, {"c", json::array({1.5, true, nullptr, -3})}});
  j.set("d", json::object());
  j.set("b", 2);  // replace
  const std::string text = j.dump();
  EXPECT_EQ(text, R"({"a":"x\"y\\z\n\u0001","b":2,"c":[1.5,true,null,-3],"d":{}})");
  EXPECT_EQ(parse_json(text), j);
  EXPECT_EQ(json(2.0).dump(), "2.0");  // stays a double when read back
  EXPECT_EQ(parse_json(json(0.1).dump()).as_double(), 0.1);
  EXPECT_EQ(parse_json(json(1e300).dump()).as_double(), 1e300);
  EXPECT_EQ(json(std::numeric_limits<std::int64_t>::min()).dump(), "-9223372036854775808");
  EXPECT_EQ(json("caf\xC3\xA9").dump(), "\"caf\xC3\xA9\"");
  EXPECT_THROW((void)json(std::nan("")).dump(), polymoe::error);
  EXPECT_THROW((void)json(std::numeric_limits<double>::infinity()).dump(), polymoe::error);
  EXPECT_THROW((void)json::object({{"k", 1}, {"k", 2}}), polymoe::error);
  EXPECT_THROW((void)json(std::numeric_limits<std::uint64_t>::max()), polymoe::error);
  json arr;
  arr.push_back(1);
  arr.push_back("two");
  EXPECT_EQ(arr.dump(), R"([1,"two"])");
  EXPECT_EQ(polymoe::io::to_string(arr), arr.dump());
  EXPECT_EQ(polymoe::io::json_quote("\t"), R"("\t")");
}

struct bad_case {
  const char* text;
  const char* says;  // a phrase the message must contain
};

TEST(json_malformed, each_gives_a_positioned_error) {
  const bad_case cases[] = {
      {"", "expected a value, found end of input"},
      {"   ", "expected a value"},
      {"{", "expected a string key"},
      {"{\"a\"", "expected ':'"},
      {"{\"a\":", "expected a value"},
      {"{\"a\":1", "expected ',' or '}'"},
      {"{\"a\":1,}", "trailing comma"},
      {"[1,]", "trailing comma"},
      {"[1 2]", "expected ',' or ']'"},
      {"[", "expected a value"},
      {"{a:1}", "expected a string key"},
      {"{'a':1}", "expected a string key"},
      {"{\"a\" 1}", "expected ':'"},
      {"tru", "invalid literal"},
      {"nul", "invalid literal"},
      {"True", "expected a value"},
      {"01", "leading zeros"},
      {"-", "expected a digit"},
      {"1.", "expected a digit after the decimal point"},
      {".5", "expected a value"},
      {"1e", "expected a digit in the exponent"},
      {"+1", "expected a value"},
      {"1e999", "out of the range"},
      {"NaN", "expected a value"},
      {"\"abc", "unterminated string"},
      {"\"a\\", "unterminated string"},
      {"\"\\x\"", "invalid escape"},
      {"\"\\u12x4\"", "invalid hex digit"},
      {"\"\\u12", "truncated \\u escape"},
      {"\"\\ud800\"", "not followed by a low surrogate"},
      {"\"\\ud800\\u0041\"", "not followed by a low surrogate"},
      {"\"\\udc00\"", "lone low surrogate"},
      {"\"a\nb\"", "unescaped control character"},
      {"\"\xC3\"", "invalid UTF-8"},
      {"\"\xC0\xAF\"", "invalid UTF-8"},
      {"\"\xED\xA0\x80\"", "invalid UTF-8"},
      {"\"\xFF\"", "invalid UTF-8"},
      {"\"\xE2\x82\"", "UTF-8"},
      {"{} x", "after the JSON value"},
      {"1 2", "after the JSON value"},
      {"{\"a\":1,\"a\":2}", "duplicate key \"a\""},
      {"/* c */ 1", "expected a value"},
  };
  for (const auto& c : cases) {
    const std::string msg = error_of(c.text);
    SCOPED_TRACE(std::string("input: ") + c.text);
    EXPECT_EQ(msg.rfind("polymoe: test.json: invalid JSON at offset ", 0), 0u) << msg;
    EXPECT_NE(msg.find("line "), std::string::npos) << msg;
    EXPECT_NE(msg.find(c.says), std::string::npos) << msg;
  }
}

TEST(json_malformed, embedded_nul_is_not_the_end) {
  const std::string text("[1]\0", 4);
  EXPECT_NE(error_of(text).find("unexpected byte 0x00 after the JSON value"), std::string::npos)
      << error_of(text);
  const std::string in_string("\"a\0b\"", 5);
  EXPECT_NE(error_of(in_string).find("unescaped control character"), std::string::npos);
}

TEST(json_malformed, position_is_line_and_column) {
  const std::string msg = error_of("{\n  \"a\": 1,\n  \"b\" 2\n}");
  EXPECT_NE(msg.find("offset 18 (line 3, column 7)"), std::string::npos) << msg;
  const std::string dup = error_of("{\"k\": 1,\n \"k\": 2}");
  EXPECT_NE(dup.find("line 2, column 2"), std::string::npos) << dup;
}

TEST(json_malformed, depth_limit) {
  const std::string deep_ok = std::string(10, '[') + std::string(10, ']');
  EXPECT_NO_THROW((void)parse_json(deep_ok, "t", 10));
  EXPECT_NE(
      error_of(std::string(11, '[') + std::string(11, ']'), 10).find("deeper than the limit of 10"),
      std::string::npos);
  // default limit holds off a stack-exhausting document
  const std::string bomb(100000, '[');
  EXPECT_NE(error_of(bomb).find("nesting is deeper"), std::string::npos);
  const std::string obj_bomb = [] {
    std::string s;
    for (int i = 0; i < 100000; ++i) s += "{\"a\":";
    return s;
  }();
  EXPECT_NE(error_of(obj_bomb).find("nesting is deeper"), std::string::npos);
}

}  // namespace
