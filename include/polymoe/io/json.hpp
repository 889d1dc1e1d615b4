#pragma once
// polymoe::io::json — a small, strict JSON (RFC 8259) value, parser and writer.
//
// Enough for config.json files and safetensors headers, and strict about it: no comments, no
// trailing commas, no leading zeros, no unescaped control characters, no lone surrogates, no
// invalid UTF-8, no duplicate keys, nothing after the value, and a nesting limit. Every failure is
// a polymoe::error that names the source, the offset, line and column, and what was expected:
//
//   polymoe: config.json: invalid JSON at offset 17 (line 2, column 5): expected ':' after an
//   object key
//
// Numbers: an integer literal that fits int64 is an integer, anything else (fraction, exponent, or
// an integer out of range) is a double. Objects keep their members sorted by key (so lookup is a
// binary search and output is deterministic).
//
//   const auto cfg = polymoe::io::parse_json(text, "config.json");
//   const std::int64_t e = cfg.at("num_local_experts").as_int();
//   if (const auto* s = cfg.find("routed_scaling_factor")) scale = s->as_double();
#include <algorithm>
#include <charconv>
#include <cmath>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <polymoe/core/error.hpp>
#include <string>
#include <string_view>
#include <system_error>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

namespace polymoe::io {

/// A JSON value: null, boolean, integer (int64), number (double), string (UTF-8), array or object.
class json {
 public:
  enum class kind : std::uint8_t { null, boolean, integer, number, string, array, object };
  using array_t = std::vector<json>;
  using member_t = std::pair<std::string, json>;
  /// Object members, sorted by key, keys unique.
  using object_t = std::vector<member_t>;

  json() noexcept = default;
  json(std::nullptr_t) noexcept {
  }  // NOLINT(google-explicit-constructor): JSON literals read naturally
  json(bool b) noexcept : v_(b) {}  // NOLINT
  template <std::integral I>
  requires(!std::same_as<I, bool>) json(I i) : v_(to_int64(i)) {}  // NOLINT
  json(double d) noexcept : v_(d) {}                               // NOLINT
  json(float f) noexcept : v_(static_cast<double>(f)) {}           // NOLINT
  json(std::string s) noexcept : v_(std::move(s)) {}               // NOLINT
  json(std::string_view s) : v_(std::string(s)) {}                 // NOLINT
  json(const char* s) : v_(std::string(s)) {}                      // NOLINT
  json(array_t a) noexcept : v_(std::move(a)) {}                   // NOLINT

  /// An object from members in any order; throws polymoe::error on a duplicate key.
  [[nodiscard]] static json object(object_t members = {}) {
    std::stable_sort(members.begin(), members.end(),
                     [](const member_t& a, const member_t& b) { return a.first < b.first; });
    for (std::size_t i = 1; i < members.size(); ++i)
      require(members[i - 1].first != members[i].first, "JSON object has a duplicate key \"",
              members[i].first, "\"");
    json j;
    j.v_ = std::move(members);
    return j;
  }
  [[nodiscard]] static json array(array_t elements = {}) { return json(std::move(elements)); }

  [[nodiscard]] kind type() const noexcept { return static_cast<kind>(v_.index()); }
  [[nodiscard]] const char* type_name() const noexcept { return kind_name(type()); }
  [[nodiscard]] static constexpr const char* kind_name(kind k) noexcept {
    constexpr const char* names[] = {"null",     "a boolean", "an integer", "a number",
                                     "a string", "an array",  "an object"};
    return names[static_cast<std::size_t>(k)];
  }

  [[nodiscard]] bool is_null() const noexcept { return type() == kind::null; }
  [[nodiscard]] bool is_bool() const noexcept { return type() == kind::boolean; }
  /// An integer literal that fits int64.
  [[nodiscard]] bool is_int() const noexcept { return type() == kind::integer; }
  /// Any number (integer or double).
  [[nodiscard]] bool is_number() const noexcept {
    return type() == kind::integer || type() == kind::number;
  }
  [[nodiscard]] bool is_string() const noexcept { return type() == kind::string; }
  [[nodiscard]] bool is_array() const noexcept { return type() == kind::array; }
  [[nodiscard]] bool is_object() const noexcept { return type() == kind::object; }

  [[nodiscard]] bool as_bool() const { return get<bool>(kind::boolean); }
  /// The integer; a double (even 2.0) is an error: integers in JSON files are written as integers.
  [[nodiscard]] std::int64_t as_int() const { return get<std::int64_t>(kind::integer); }
  /// Any number as a double (an integer converts).
  [[nodiscard]] double as_double() const {
    if (const auto* i = std::get_if<std::int64_t>(&v_)) return static_cast<double>(*i);
    return get<double>(kind::number);
  }
  [[nodiscard]] const std::string& as_string() const { return get<std::string>(kind::string); }
  [[nodiscard]] const array_t& as_array() const { return get<array_t>(kind::array); }
  [[nodiscard]] const object_t& as_object() const { return get<object_t>(kind::object); }

  /// Number of elements of an array or members of an object.
  [[nodiscard]] std::size_t size() const {
    if (const auto* o = std::get_if<object_t>(&v_)) return o->size();
    return as_array().size();
  }

  /// The member `key` of an object, or nullptr when absent (an error when this is not an object).
  [[nodiscard]] const json* find(std::string_view key) const {
    const auto* o = std::get_if<object_t>(&v_);
    require(o != nullptr, "JSON value is ", type_name(), ", expected an object (looking up key \"",
            key, "\")");
    const auto it = lower(*o, key);
    return (it != o->end() && it->first == key) ? &it->second : nullptr;
  }
  [[nodiscard]] bool contains(std::string_view key) const { return find(key) != nullptr; }
  /// The member `key` of an object; polymoe::error naming the key when absent.
  [[nodiscard]] const json& at(std::string_view key) const {
    const json* j = find(key);
    require(j != nullptr, "JSON object has no key \"", key, "\"");
    return *j;
  }
  /// Element i of an array; polymoe::error when out of range.
  [[nodiscard]] const json& at(std::size_t i) const {
    const auto& a = as_array();
    require(i < a.size(), "JSON array index ", i, " is out of range (size ", a.size(), ")");
    return a[i];
  }

  /// Inserts or replaces the member `key` (this must be an object; null becomes an empty object).
  json& set(std::string key, json value) {
    if (is_null()) v_ = object_t{};
    check(kind::object);
    auto& o = std::get<object_t>(v_);
    auto it = lower(o, key);
    if (it != o.end() && it->first == key) {
      it->second = std::move(value);
      return it->second;
    }
    return o.insert(it, member_t(std::move(key), std::move(value)))->second;
  }
  /// Appends to an array (null becomes an empty array).
  json& push_back(json value) {
    if (is_null()) v_ = array_t{};
    check(kind::array);
    auto& a = std::get<array_t>(v_);
    a.push_back(std::move(value));
    return a.back();
  }

  /// Compact JSON text; polymoe::error for a NaN or infinite number (JSON cannot hold them).
  [[nodiscard]] std::string dump() const {
    std::string out;
    dump_to(out);
    return out;
  }
  void dump_to(std::string& out) const;

  friend bool operator==(const json& a, const json& b) { return a.v_ == b.v_; }

 private:
  template <class I>
  static std::int64_t to_int64(I i) {
    if constexpr (std::is_unsigned_v<I> && sizeof(I) >= sizeof(std::int64_t))
      require(i <= static_cast<I>(std::numeric_limits<std::int64_t>::max()), "JSON integer ", i,
              " does not fit int64");
    return static_cast<std::int64_t>(i);
  }
  template <class T>
  const T& get(kind k) const {
    const auto* p = std::get_if<T>(&v_);
    require(p != nullptr, "JSON value is ", type_name(), ", expected ", kind_name(k));
    return *p;
  }
  void check(kind k) const {
    require(type() == k, "JSON value is ", type_name(), ", expected ", kind_name(k));
  }
  template <class Obj>
  static auto lower(Obj& o, std::string_view key) -> decltype(o.begin()) {
    return std::lower_bound(o.begin(), o.end(), key, [](const member_t& m, std::string_view k) {
      return std::string_view(m.first) < k;
    });
  }

  std::variant<std::nullptr_t, bool, std::int64_t, double, std::string, array_t, object_t> v_;

  friend class json_parser;
};

/// `s` as a JSON string literal (quotes included; ", \ and control characters escaped, UTF-8 kept).
[[nodiscard]] inline std::string json_quote(std::string_view s) {
  std::string out;
  out.reserve(s.size() + 2);
  out.push_back('"');
  for (const char ch : s) {
    const auto c = static_cast<unsigned char>(ch);
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      default:
        if (c < 0x20) {
          constexpr char hex[] = "0123456789abcdef";
          out += "\\u00";
          out.push_back(hex[c >> 4]);
          out.push_back(hex[c & 0xF]);
        } else {
          out.push_back(ch);
        }
    }
  }
  out.push_back('"');
  return out;
}

inline void json::dump_to(std::string& out) const {
  switch (type()) {
    case kind::null: out += "null"; return;
    case kind::boolean: out += std::get<bool>(v_) ? "true" : "false"; return;
    case kind::integer: out += std::to_string(std::get<std::int64_t>(v_)); return;
    case kind::number: {
      const double d = std::get<double>(v_);
      require(std::isfinite(d), "JSON cannot represent the number ", d,
              " (NaN and infinities have no JSON form)");
      char buf[32];
      const auto [end, ec] = std::to_chars(buf, buf + sizeof buf, d);
      const std::string_view text(buf, static_cast<std::size_t>(end - buf));
      out += text;
      // keep it a double when read back
      if (text.find_first_of(".eE") == std::string_view::npos) out += ".0";
      return;
    }
    case kind::string: out += json_quote(std::get<std::string>(v_)); return;
    case kind::array: {
      out.push_back('[');
      bool first = true;
      for (const auto& e : std::get<array_t>(v_)) {
        if (!first) out.push_back(',');
        first = false;
        e.dump_to(out);
      }
      out.push_back(']');
      return;
    }
    case kind::object: {
      out.push_back('{');
      bool first = true;
      for (const auto& [k, v] : std::get<object_t>(v_)) {
        if (!first) out.push_back(',');
        first = false;
        out += json_quote(k);
        out.push_back(':');
        v.dump_to(out);
      }
      out.push_back('}');
      return;
    }
  }
}

/// The recursive-descent parser behind parse_json.
class json_parser {
 public:
  json_parser(std::string_view text, std::string_view source, std::size_t max_depth)
      : text_(text), source_(source), max_depth_(max_depth) {}

  json parse_document() {
    skip_ws();
    json v = parse_value();
    skip_ws();
    if (pos_ != text_.size()) fail("unexpected ", describe_here(), " after the JSON value");
    return v;
  }

 private:
  template <class... Parts>
  [[noreturn]] void fail(Parts&&... parts) const {
    fail_at(pos_, std::forward<Parts>(parts)...);
  }
  template <class... Parts>
  [[noreturn]] void fail_at(std::size_t at, Parts&&... parts) const {
    std::size_t line = 1, col = 1;
    for (std::size_t i = 0; i < at && i < text_.size(); ++i) {
      if (text_[i] == '\n') {
        ++line;
        col = 1;
      } else {
        ++col;
      }
    }
    throw error(::polymoe::detail::concat(source_, ": invalid JSON at offset ", at, " (line ", line,
                                          ", column ", col, "): ", std::forward<Parts>(parts)...));
  }
  std::string describe_here() const {
    if (pos_ >= text_.size()) return "end of input";
    const auto c = static_cast<unsigned char>(text_[pos_]);
    if (c >= 0x20 && c < 0x7F) return std::string("character '") + static_cast<char>(c) + "'";
    constexpr char hex[] = "0123456789ABCDEF";
    return std::string("byte 0x") + hex[c >> 4] + hex[c & 0xF];
  }

  bool at_end() const { return pos_ >= text_.size(); }
  char peek() const { return at_end() ? '\0' : text_[pos_]; }
  void skip_ws() {
    while (!at_end()) {
      const char c = text_[pos_];
      if (c != ' ' && c != '\t' && c != '\n' && c != '\r') break;
      ++pos_;
    }
  }
  void expect(char c, const char* what) {
    if (peek() != c || at_end()) fail("expected ", what, ", found ", describe_here());
    ++pos_;
  }

  json parse_value() {
    if (at_end()) fail("expected a value, found end of input");
    switch (text_[pos_]) {
      case '{': return parse_object();
      case '[': return parse_array();
      case '"': return json(parse_string());
      case 't': literal("true"); return json(true);
      case 'f': literal("false"); return json(false);
      case 'n': literal("null"); return json(nullptr);
      default:
        if (text_[pos_] == '-' || (text_[pos_] >= '0' && text_[pos_] <= '9')) return parse_number();
        fail("expected a value, found ", describe_here());
    }
  }

  void literal(std::string_view word) {
    if (text_.substr(pos_, word.size()) != word) fail("invalid literal (expected '", word, "')");
    pos_ += word.size();
  }

  void enter() {
    if (++depth_ > max_depth_) fail("nesting is deeper than the limit of ", max_depth_, " levels");
  }

  json parse_array() {
    enter();
    ++pos_;  // '['
    json::array_t elements;
    skip_ws();
    if (peek() == ']' && !at_end()) {
      ++pos_;
    } else {
      for (;;) {
        skip_ws();
        elements.push_back(parse_value());
        skip_ws();
        if (peek() == ',' && !at_end()) {
          ++pos_;
          skip_ws();
          if (peek() == ']') fail("trailing comma in an array");
          continue;
        }
        expect(']', "',' or ']' in an array");
        break;
      }
    }
    --depth_;
    return json(std::move(elements));
  }

  json parse_object() {
    enter();
    ++pos_;  // '{'
    json::object_t members;
    std::vector<std::size_t> key_pos;
    skip_ws();
    if (peek() == '}' && !at_end()) {
      ++pos_;
    } else {
      for (;;) {
        skip_ws();
        if (peek() != '"' || at_end())
          fail("expected a string key in an object, found ", describe_here());
        key_pos.push_back(pos_);
        std::string key = parse_string();
        skip_ws();
        expect(':', "':' after an object key");
        skip_ws();
        members.emplace_back(std::move(key), parse_value());
        skip_ws();
        if (peek() == ',' && !at_end()) {
          ++pos_;
          skip_ws();
          if (peek() == '}') fail("trailing comma in an object");
          continue;
        }
        expect('}', "',' or '}' in an object");
        break;
      }
    }
    --depth_;
    // sort (keeping document order among equals) and reject duplicates at the later occurrence
    std::vector<std::size_t> order(members.size());
    for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
    std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
      return members[a].first < members[b].first;
    });
    json::object_t sorted;
    sorted.reserve(members.size());
    for (std::size_t i = 0; i < order.size(); ++i) {
      if (i > 0 && members[order[i]].first == sorted.back().first)
        fail_at(key_pos[order[i]], "duplicate key \"", members[order[i]].first, "\" in an object");
      sorted.push_back(std::move(members[order[i]]));
    }
    json j;
    j.v_ = std::move(sorted);
    return j;
  }

  static int hex_digit(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  }
  std::uint32_t parse_hex4() {
    if (text_.size() - pos_ < 4) fail("truncated \\u escape (expected 4 hex digits)");
    std::uint32_t v = 0;
    for (int i = 0; i < 4; ++i) {
      const int d = hex_digit(text_[pos_]);
      if (d < 0) fail("invalid hex digit in a \\u escape: ", describe_here());
      v = v * 16 + static_cast<std::uint32_t>(d);
      ++pos_;
    }
    return v;
  }
  static void put_utf8(std::string& out, std::uint32_t cp) {
    if (cp < 0x80) {
      out.push_back(static_cast<char>(cp));
    } else if (cp < 0x800) {
      out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
      out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    } else if (cp < 0x10000) {
      out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
      out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
      out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    } else {
      out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
      out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
      out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
      out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    }
  }
  // Validates one raw UTF-8 sequence starting at pos_ (lead byte >= 0x80) and copies it.
  void copy_utf8(std::string& out) {
    const auto byte = [&](std::size_t i) { return static_cast<unsigned char>(text_[pos_ + i]); };
    const unsigned char b0 = byte(0);
    std::size_t len = 0;
    std::uint32_t cp = 0, min = 0;
    if (b0 >= 0xC2 && b0 <= 0xDF) {
      len = 2, cp = b0 & 0x1Fu, min = 0x80;
    } else if (b0 >= 0xE0 && b0 <= 0xEF) {
      len = 3, cp = b0 & 0x0Fu, min = 0x800;
    } else if (b0 >= 0xF0 && b0 <= 0xF4) {
      len = 4, cp = b0 & 0x07u, min = 0x10000;
    } else {
      fail("invalid UTF-8 in a string (", describe_here(), ")");
    }
    if (text_.size() - pos_ < len) fail("truncated UTF-8 sequence in a string");
    for (std::size_t i = 1; i < len; ++i) {
      if ((byte(i) & 0xC0u) != 0x80u) fail("invalid UTF-8 continuation byte in a string");
      cp = (cp << 6) | (byte(i) & 0x3Fu);
    }
    if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))
      fail("invalid UTF-8 in a string (overlong, surrogate or out-of-range code point)");
    out.append(text_.substr(pos_, len));
    pos_ += len;
  }

  std::string parse_string() {
    const std::size_t start = pos_;
    ++pos_;  // '"'
    std::string out;
    for (;;) {
      if (at_end()) fail_at(start, "unterminated string");
      const auto c = static_cast<unsigned char>(text_[pos_]);
      if (c == '"') {
        ++pos_;
        return out;
      }
      if (c < 0x20) fail("unescaped control character (", describe_here(), ") in a string");
      if (c >= 0x80) {
        copy_utf8(out);
        continue;
      }
      if (c != '\\') {
        out.push_back(static_cast<char>(c));
        ++pos_;
        continue;
      }
      ++pos_;
      if (at_end()) fail_at(start, "unterminated string");
      const char e = text_[pos_];
      switch (e) {
        case '"': out.push_back('"'); break;
        case '\\': out.push_back('\\'); break;
        case '/': out.push_back('/'); break;
        case 'b': out.push_back('\b'); break;
        case 'f': out.push_back('\f'); break;
        case 'n': out.push_back('\n'); break;
        case 'r': out.push_back('\r'); break;
        case 't': out.push_back('\t'); break;
        case 'u': {
          const std::size_t esc = pos_ - 1;
          ++pos_;
          std::uint32_t cp = parse_hex4();
          if (cp >= 0xDC00 && cp <= 0xDFFF) fail_at(esc, "lone low surrogate in a \\u escape");
          if (cp >= 0xD800 && cp <= 0xDBFF) {
            if (text_.substr(pos_, 2) != "\\u")
              fail_at(esc, "high surrogate in a \\u escape is not followed by a low surrogate");
            pos_ += 2;
            const std::uint32_t lo = parse_hex4();
            if (lo < 0xDC00 || lo > 0xDFFF)
              fail_at(esc, "high surrogate in a \\u escape is not followed by a low surrogate");
            cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
          }
          put_utf8(out, cp);
          continue;  // pos_ already past the escape
        }
        default: fail("invalid escape '\\", describe_here(), "' in a string");
      }
      ++pos_;
    }
  }

  // floor(log10(|x|)) of a well-formed JSON number literal, saturated; only its sign matters.
  static std::int64_t decimal_magnitude(std::string_view sv) {
    const std::size_t epos = sv.find_first_of("eE");
    std::string_view mant = sv.substr(0, epos);
    if (!mant.empty() && mant[0] == '-') mant.remove_prefix(1);
    std::int64_t mag = 0;
    const std::size_t dot = mant.find('.');
    const std::string_view ip = mant.substr(0, dot);
    const std::size_t nz = ip.find_first_not_of('0');
    if (nz != std::string_view::npos) {
      mag = static_cast<std::int64_t>(ip.size() - nz) - 1;
    } else if (dot != std::string_view::npos) {
      const std::string_view fp = mant.substr(dot + 1);
      const std::size_t fnz = fp.find_first_not_of('0');
      if (fnz == std::string_view::npos) return -1;  // zero
      mag = -static_cast<std::int64_t>(fnz) - 1;
    } else {
      return -1;  // zero
    }
    if (epos == std::string_view::npos) return mag;
    std::string_view ep = sv.substr(epos + 1);
    const bool eneg = !ep.empty() && ep[0] == '-';
    if (!ep.empty() && (ep[0] == '+' || ep[0] == '-')) ep.remove_prefix(1);
    std::int64_t e = 0;
    const auto r = std::from_chars(ep.data(), ep.data() + ep.size(), e);
    if (r.ec != std::errc{} || e > (std::int64_t{1} << 40)) e = std::int64_t{1} << 40;  // saturate
    return eneg ? mag - e : mag + e;
  }

  json parse_number() {
    const std::size_t start = pos_;
    const auto digit = [&] { return !at_end() && text_[pos_] >= '0' && text_[pos_] <= '9'; };
    if (peek() == '-') ++pos_;
    if (!digit()) fail("expected a digit in a number, found ", describe_here());
    if (text_[pos_] == '0') {
      ++pos_;
      if (digit()) fail_at(start, "leading zeros are not allowed in a number");
    } else {
      while (digit()) ++pos_;
    }
    bool integral = true;
    if (peek() == '.' && !at_end()) {
      integral = false;
      ++pos_;
      if (!digit()) fail("expected a digit after the decimal point, found ", describe_here());
      while (digit()) ++pos_;
    }
    if ((peek() == 'e' || peek() == 'E') && !at_end()) {
      integral = false;
      ++pos_;
      if (peek() == '+' || peek() == '-') ++pos_;
      if (!digit()) fail("expected a digit in the exponent, found ", describe_here());
      while (digit()) ++pos_;
    }
    const char* first = text_.data() + start;
    const char* last = text_.data() + pos_;
    if (integral) {
      std::int64_t i = 0;
      const auto r = std::from_chars(first, last, i);
      if (r.ec == std::errc{} && r.ptr == last) return json(i);
      // out of int64 range: keep it as a double
    }
    double d = 0;
    const auto r = std::from_chars(first, last, d);
    if (r.ec == std::errc::result_out_of_range) {
      // from_chars leaves d untouched: decide underflow (-> signed zero) from the decimal magnitude
      const std::string_view sv(first, static_cast<std::size_t>(last - first));
      if (decimal_magnitude(sv) < 0) return json(sv[0] == '-' ? -0.0 : 0.0);
      fail_at(start, "number '", sv, "' is out of the range of a double");
    }
    if (r.ec != std::errc{} || r.ptr != last) fail_at(start, "malformed number");
    return json(d);
  }

  std::string_view text_;
  std::string_view source_;
  std::size_t max_depth_;
  std::size_t pos_ = 0;
  std::size_t depth_ = 0;
};

/// Parses one JSON document. `source` names the text in error messages (a file name, "safetensors
/// header of model.safetensors"); `max_depth` bounds array/object nesting.
[[nodiscard]] inline json parse_json(std::string_view text, std::string_view source = "JSON text",
                                     std::size_t max_depth = 128) {
  return json_parser(text, source, max_depth).parse_document();
}

/// Compact JSON text of `v` (same as v.dump()).
[[nodiscard]] inline std::string to_string(const json& v) { return v.dump(); }

}  // namespace polymoe::io
