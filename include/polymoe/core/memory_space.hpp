#pragma once
// Memory spaces: where a kernel computes, and where a dispatcher's buffers may live. A kernel
// declares the one it computes in, a dispatcher the ones it carries:
//
//   struct my_gpu_kernel { ...; using memory_space = polymoe::space::cuda; };          // none: host
//   struct local { ...; using memory_spaces = boost::mp11::mp_list<polymoe::space::host,
//                                                                  polymoe::space::cuda>; };  // none: host
//
// A triple whose kernel computes in a space its dispatcher does not carry is invalid: the pairing
// resolution (pairing.hpp) names both and the dispatchers that carry the kernel's space.
#include <string_view>

#include <boost/mp11/list.hpp>

namespace polymoe {

namespace space {
struct host {
  static constexpr std::string_view name = "host";
};
struct cuda {
  static constexpr std::string_view name = "cuda";
};
}  // namespace space

namespace detail {
template <class K>
struct kernel_space {
  using type = space::host;
};
template <class K>
  requires requires { typename K::memory_space; }
struct kernel_space<K> {
  using type = typename K::memory_space;
};
template <class A>
struct dispatcher_spaces {
  using type = boost::mp11::mp_list<space::host>;
};
template <class A>
  requires requires { typename A::memory_spaces; }
struct dispatcher_spaces<A> {
  using type = typename A::memory_spaces;
};
}  // namespace detail

/// The space kernel K computes in (space::host unless it says otherwise).
template <class K>
using kernel_memory_space = typename detail::kernel_space<K>::type;
/// The spaces dispatcher A carries, an mp_list (space::host alone unless it says otherwise).
template <class A>
using dispatcher_memory_spaces = typename detail::dispatcher_spaces<A>::type;

}  // namespace polymoe
