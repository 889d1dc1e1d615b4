#pragma once
// a2a::fingerprint: what the ranks of one expert-parallel layer (or of one tool run) must share,
// as named fields that every rank compares with rank 0's before any token moves
// (a2a::detail::mpi_base::agree_fingerprint), and the error type of such agreements. Needs no MPI
// itself.
#include <array>
#include <charconv>
#include <concepts>
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>

#include <polymoe/core/error.hpp>

namespace polymoe::a2a {

/// The error a collective dispatcher's ranks agreed on: every rank of the communicator throws the
/// same one ("rank N of S: ..."), so none is left waiting in a collective and a caller may end
/// normally on every rank.
class collective_error : public error {
 public:
  using error::error;
};

/// Named fields, each a 64-bit hash of its value and a short text that names the value in a
/// message. Fixed-size and trivially copyable: ranks that disagree on anything, even on the
/// dispatcher or on the number of fields, exchange it in one collective of one size.
class fingerprint {
 public:
  static constexpr std::size_t max_fields = 48;

  fingerprint& add(std::string_view name, std::string_view text) {
    return put(name, text, hash_bytes(offset_basis, text.data(), text.size()));
  }
  fingerprint& add(std::string_view name, const char* text) { return add(name, std::string_view(text)); }
  template <class I>
    requires std::integral<I>
  fingerprint& add(std::string_view name, I value) {
    if constexpr (std::is_same_v<I, bool>)
      return add(name, value ? "true" : "false");
    else
      return add(name, std::to_string(value));
  }
  /// The shortest text that reads back as the same float.
  fingerprint& add(std::string_view name, float value) {
    char buf[64];  // 15 would do; this size keeps copy()'s bounds clear to the compiler
    const auto r = std::to_chars(buf, buf + sizeof buf, value);
    return add(name, std::string_view(buf, static_cast<std::size_t>(r.ptr - buf)));
  }
  /// The bits of some float arrays, in order: equal only for the same values (and sizes).
  fingerprint& add_checksum(std::string_view name, std::initializer_list<std::span<const float>> parts) {
    std::uint64_t h = offset_basis;
    std::size_t n = 0;
    for (const auto& p : parts) {
      const std::uint64_t size = p.size();
      h = hash_bytes(h, &size, sizeof size);
      h = hash_floats(h, p);
      n += p.size();
    }
    h ^= h >> 33, h *= 0xff51afd7ed558ccdull, h ^= h >> 33;  // every bit of the text depends on every value
    char hex[17];
    for (int i = 0; i < 16; ++i) hex[i] = "0123456789abcdef"[(h >> (60 - 4 * i)) & 15];
    hex[16] = '\0';
    return put(name, polymoe::detail::concat(n, " values, checksum ", hex), h);
  }
  /// The values of a contiguous matrix or vector (Eigen's Matrix, Vector).
  template <class M>
  static std::span<const float> values(const M& m) {
    return {m.data(), static_cast<std::size_t>(m.size())};
  }

  /// "" when `root` (rank 0's fingerprint) holds the same fields, else the first difference,
  /// worded for the rank that holds this one: "top_k is 2 here but 3 on rank 0".
  [[nodiscard]] std::string difference_from(const fingerprint& root) const {
    for (std::size_t i = 0; i < max_fields; ++i) {
      const field &a = fields_[i], &b = root.fields_[i];
      if (std::strcmp(a.name, b.name) != 0)
        return polymoe::detail::concat("compares ", *a.name ? a.name : "nothing", " where rank 0 compares ",
                                       *b.name ? b.name : "nothing", " (the ranks run different polymoe builds)");
      if (a.hash != b.hash || std::strcmp(a.text, b.text) != 0)
        return polymoe::detail::concat(a.name, " is ", a.text, " here but ", b.text, " on rank 0");
    }
    return {};
  }

 private:
  static constexpr std::size_t name_size = 40, text_size = 48;
  static constexpr std::uint64_t offset_basis = 0xcbf29ce484222325ull, prime = 0x100000001b3ull;
  struct field {
    char name[name_size];
    char text[text_size];
    std::uint64_t hash;
  };

  static std::uint64_t hash_bytes(std::uint64_t h, const void* p, std::size_t n) noexcept {  // FNV-1a
    const auto* c = static_cast<const unsigned char*>(p);
    for (std::size_t i = 0; i < n; ++i) h = (h ^ c[i]) * prime;
    return h;
  }
  /// FNV-1a over 32-bit words (the bits of each float): a weight matrix of 10^8 values in ~0.1 s.
  static std::uint64_t hash_floats(std::uint64_t h, std::span<const float> v) noexcept {
    for (const float x : v) {
      std::uint32_t bits;
      std::memcpy(&bits, &x, 4);
      h = (h ^ bits) * prime;
    }
    return h;
  }
  /// Copies at most size - 1 characters; a longer text ends in "..." (its hash still tells it apart).
  template <std::size_t N>
  static void copy(char (&to)[N], std::string_view from) noexcept {
    std::memset(to, 0, N);
    if (from.size() < N) {
      std::memcpy(to, from.data(), from.size());
    } else {
      std::memcpy(to, from.data(), N - 4);
      std::memcpy(to + N - 4, "...", 3);
    }
  }
  fingerprint& put(std::string_view name, std::string_view text, std::uint64_t hash) {
    require(count_ < max_fields, "a2a::fingerprint holds at most ", max_fields, " fields");
    field& f = fields_[count_++];
    copy(f.name, name);
    copy(f.text, text);
    f.hash = hash;
    return *this;
  }

  std::array<field, max_fields> fields_{};
  std::size_t count_ = 0;
};
static_assert(std::is_trivially_copyable_v<fingerprint>);

}  // namespace polymoe::a2a
