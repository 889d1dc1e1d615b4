#pragma once
// polymoe::error — the one exception type polymoe throws for bad input.
//
// Every message starts with "polymoe: " and names what is wrong (the argument, the expected and the
// actual value), so a caller can match it and a person can act on it. polymoe never asserts or
// aborts on input a caller controls.
#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>

namespace polymoe {

class error : public std::runtime_error {
 public:
  explicit error(const std::string& what) : std::runtime_error(prefixed(what)) {}

 private:
  static std::string prefixed(const std::string& what) {
    return what.rfind("polymoe: ", 0) == 0 ? what : "polymoe: " + what;
  }
};

namespace detail {
template <class... Parts>
[[nodiscard]] std::string concat(Parts&&... parts) {
  std::ostringstream os;
  (os << ... << std::forward<Parts>(parts));
  return os.str();
}
}  // namespace detail

/// Throws polymoe::error with the streamed parts when `cond` is false.
template <class... Parts>
inline void require(bool cond, Parts&&... parts) {
  if (!cond) [[unlikely]]
    throw error(detail::concat(std::forward<Parts>(parts)...));
}

}  // namespace polymoe
