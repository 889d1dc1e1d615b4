#pragma once
// kernel::tiled's and kernel::tiled_amx's instruction-set levels (kernels/tiled/level.hpp): their
// schemes and forwards compiled once per level, the levels a build has (best first), and a
// prepared layer that remembers which level it was prepared for.
//
// A pinned build has one level: `prepared_on<Levels, Q>` is that level's prepared weights and
// run_on calls its forward directly. A build that chooses at run time prepares for the best level
// this CPU runs; its prepared weights are a variant over the levels, and a forward branches once
// on the variant's index before the level's own code runs.
#include <cstddef>
#include <utility>
#include <variant>

#include <boost/mp11/algorithm.hpp>
#include <boost/mp11/list.hpp>

#include <polymoe/core/error.hpp>
#include <polymoe/kernels/tiled/isa.hpp>
#include <polymoe/kernels/tiled/level.hpp>
#include <polymoe/kernels/tiled/phases.hpp>
#include <polymoe/kernels/tiled/tuning.hpp>

#define POLYMOE_TILED_LEVEL_INCLUDE <polymoe/kernel/detail/tiled_amx_schemes.hpp>
#include <polymoe/kernels/tiled/foreach_level.hpp>
#undef POLYMOE_TILED_LEVEL_INCLUDE

namespace polymoe::kernel::tiled_detail {

#if POLYMOE_TILED_DISPATCH
using levels = boost::mp11::mp_list<avx512_zen::level, avx512_vnni_bf16::level, avx512::level, portable::level>;
using amx_levels =
    boost::mp11::mp_list<tiled_amx_detail::avx512_zen::level, tiled_amx_detail::avx512_vnni_bf16::level,
                         tiled_amx_detail::avx512::level, tiled_amx_detail::portable::level>;
#else
using levels = boost::mp11::mp_list<native::level>;
using amx_levels = boost::mp11::mp_list<tiled_amx_detail::native::level>;
#endif

/// Whether Levels lists the levels compiled_levels() names, in its order (best first): the run-time
/// choice walks one list and the variant is built from the other.
template <class Levels>
consteval bool levels_in_compiled_order() {
  constexpr auto want = kernels::tiled::compiled_levels();
  if (boost::mp11::mp_size<Levels>::value != static_cast<std::size_t>(want.size)) return false;
  bool same = true;
  boost::mp11::mp_for_each<boost::mp11::mp_iota<boost::mp11::mp_size<Levels>>>(
      [&](auto I) { same = same && boost::mp11::mp_at_c<Levels, I>::id == want.at[I]; });
  return same;
}
static_assert(levels_in_compiled_order<levels>() && levels_in_compiled_order<amx_levels>(),
              "polymoe: the tiled kernels' level lists differ from kernels::tiled::compiled_levels()");

template <class Levels, class Q>
struct prepared_on_t;
template <class L, class Q>
struct prepared_on_t<boost::mp11::mp_list<L>, Q> {
  using type = typename L::template prepared<Q>;
};
template <class L0, class L1, class... L, class Q>
struct prepared_on_t<boost::mp11::mp_list<L0, L1, L...>, Q> {
  using type = std::variant<typename L0::template prepared<Q>, typename L1::template prepared<Q>,
                            typename L::template prepared<Q>...>;
};
/// A layer's prepared weights for scheme Q on one of Levels.
template <class Levels, class Q>
using prepared_on = typename prepared_on_t<Levels, Q>::type;

/// Index in Levels of the level prepared now: tuning.isa where it names one (an error unless it is
/// compiled in and runs here), else kernels::tiled::level_here(), the best this CPU runs.
template <class Levels>
[[nodiscard]] std::size_t level_index_for(kernels::tiled::isa_level wanted) {
  using kernels::tiled::isa_level;
  const isa_level level = wanted == isa_level::native ? kernels::tiled::level_here() : wanted;
  std::size_t found = boost::mp11::mp_size<Levels>::value;
  boost::mp11::mp_for_each<boost::mp11::mp_iota<boost::mp11::mp_size<Levels>>>([&](auto I) {
    if (boost::mp11::mp_at_c<Levels, I>::id == level) found = I;
  });
  require(found < boost::mp11::mp_size<Levels>::value, "polymoe: tuning isa=", kernels::tiled::level_words(level),
          ": this build pins its instruction set (", kernels::tiled::level_words(isa_level::native),
          "); only isa=best applies");
  require(kernels::tiled::level_runs_here(level), "polymoe: tuning isa: this CPU does not run ",
          kernels::tiled::level_words(level));
  return found;
}

/// The weights prepared for the level tuning.isa picks (level_index_for).
template <class Levels, class Q>
prepared_on<Levels, Q> prepare_on(const kernels::tiled::tuning& t, const typename Q::weights& w) {
  if constexpr (boost::mp11::mp_size<Levels>::value == 1) {
    (void)level_index_for<Levels>(t.isa);
    return boost::mp11::mp_front<Levels>::template prepare<Q>(t, w);
  } else {
    return boost::mp11::mp_with_index<boost::mp11::mp_size<Levels>::value>(
        level_index_for<Levels>(t.isa), [&](auto I) -> prepared_on<Levels, Q> {
          return prepared_on<Levels, Q>(std::in_place_index<I>,
                                        boost::mp11::mp_at_c<Levels, I>::template prepare<Q>(t, w));
        });
  }
}

/// The forward of the level p was prepared for.
template <class Levels, class Q>
void run_on(const kernels::tiled::tuning& t, kernels::tiled::PhaseTimes* phases, const prepared_on<Levels, Q>& p,
            const DispatchOutput<format::standard>& d, const ExpertMlp& mlp, CombineInput<format::standard> c) {
  if constexpr (boost::mp11::mp_size<Levels>::value == 1) {
    boost::mp11::mp_front<Levels>::template run<Q>(t, phases, d, p, mlp, c);
  } else {
    boost::mp11::mp_with_index<boost::mp11::mp_size<Levels>::value>(p.index(), [&](auto I) {
      boost::mp11::mp_at_c<Levels, I>::template run<Q>(t, phases, d, *std::get_if<I>(&p), mlp, c);
    });
  }
}

}  // namespace polymoe::kernel::tiled_detail
