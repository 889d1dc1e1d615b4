#pragma once
// Collective decisions. A dispatcher that communicates has agree(failure): every rank calls it
// with its own failure ("" if none), and if any rank failed every rank throws the same error. Local
// dispatchers have none; an error there is simply thrown.
#include <exception>
#include <string>

namespace polymoe::detail {

/// Dispatchers that communicate are collective: every rank must take part in every forward, and
/// bad input on one rank must become the same error on all (dispatcher::agree).
template <class A2A>
inline constexpr bool is_collective = requires(A2A& a, const std::string& e) { a.agree(e); };

/// Runs `check`, which must not itself communicate. With a collective dispatcher, whatever it
/// throws (a polymoe::error, or e.g. std::bad_alloc) becomes a collective decision: every rank
/// throws the failing rank's message, none is left waiting in the next collective.
template <class A2A, class Check>
void agree_on(A2A& a2a, Check&& check) {
  if constexpr (!is_collective<A2A>) {
    check();
  } else {
    std::string failure;
    try {
      check();
    } catch (const std::exception& e) {
      failure = *e.what() ? e.what() : "unknown error";
    }
    a2a.agree(failure);
  }
}

}  // namespace polymoe::detail
