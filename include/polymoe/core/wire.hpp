#pragma once
// Activation wire formats: how a GEMM input row travels between ranks.
//
// A quant scheme whose kernels quantize activations names the form they take
// (`using activation_wire = polymoe::wire::e4m3<128>;`); a scheme that says nothing keeps fp32
// activations. A dispatcher that can carry quantized rows lists the wire formats it encodes
// (`using wires = boost::mp11::mp_list<...>;`). MoeLayer<A2A, Quant, Kernel> sends quantized rows
// when the dispatcher carries the scheme's wire format, fp32 rows otherwise, chosen at compile time
// (polymoe::wire_of). Every wire format is exact for the scheme that names it: the kernel's own
// activation quantization of a received row gives the codes and scale the sender computed, so a
// layer's result does not depend on whether its rows travelled quantized.
#include <string_view>

#include <boost/mp11/algorithm.hpp>
#include <boost/mp11/list.hpp>
#include <boost/mp11/utility.hpp>

#include <polymoe/core/types.hpp>

namespace polymoe {

namespace wire {

/// Rows as fp32 values (4 bytes per element): every scheme, and the only form for weight-only ones.
struct fp32 {
  static constexpr std::string_view name = "fp32";
};

/// E4M3FN codes (1 byte per element) and one fp32 amax per group of `Group` consecutive elements
/// (0: one group per row), the dynamic activation quantization of quant::fp8_block (Group 128) and
/// quant::fp8 (per token).
template <index_t Group>
struct e4m3 {
  static_assert(Group >= 0, "polymoe: wire::e4m3<Group>: the group size cannot be negative");
  static constexpr index_t group = Group;
  static constexpr std::string_view name = Group == 0 ? "e4m3 per token" : "e4m3 per group";
};

/// int8 codes (1 byte per element) and one fp32 amax per row, quant::int8_w8a8's activations.
struct int8_rows {
  static constexpr std::string_view name = "int8 per token";
};

}  // namespace wire

namespace detail {
template <class Q>
struct activation_wire_of {
  using type = wire::fp32;
};
template <class Q>
  requires requires { typename Q::activation_wire; }
struct activation_wire_of<Q> {
  using type = typename Q::activation_wire;
};
template <class A>
struct carried_wires_of {
  using type = boost::mp11::mp_list<>;
};
template <class A>
  requires requires { typename A::wires; }
struct carried_wires_of<A> {
  using type = typename A::wires;
};
}  // namespace detail

/// The wire format of scheme Q's activations (wire::fp32 when Q does not quantize them).
template <class Q>
using activation_wire_t = typename detail::activation_wire_of<Q>::type;

/// The wire formats dispatcher A can carry besides fp32 (none for dispatchers that do not say).
template <class A>
using carried_wires_t = typename detail::carried_wires_of<A>::type;

/// What MoeLayer<A2A, Quant, ...> sends: Quant's activation wire if A2A carries it, else fp32.
template <class A2A, class Quant>
using wire_of = boost::mp11::mp_if<boost::mp11::mp_contains<carried_wires_t<A2A>, activation_wire_t<Quant>>,
                                   activation_wire_t<Quant>, wire::fp32>;

}  // namespace polymoe
