#pragma once
// The tiled kernels' tuning of one test program run: the library's defaults, or what the program
// was given with --tuning KEY=VALUE,... (support/test_main.cpp; the keys of
// kernels::tiled::tuning_keys). tests/tiled.cmake runs the tiled test programs again with y
// streamed at every size and with GEMM 1 by block, and the AMX machine's check (docs/benchmarks.md,
// scripts/device-check.sh) with every row block on the tiles (--tuning amx-min-rows=1): the tests
// build their kernels with make_kernel<K>(), so a whole program runs under the tuning it was given.
#include <polymoe/kernels/tiled/tuning.hpp>

namespace polymoe::test {

/// This run's tuning (set once by test_main before any test runs).
inline kernels::tiled::tuning& tiled_tuning() {
  static kernels::tiled::tuning t;
  return t;
}

/// A kernel as the tests build it: one that carries a tiled tuning gets this run's, others their
/// defaults.
template <class K>
K make_kernel() {
  K k{};
  if constexpr (requires { k.tuning = tiled_tuning(); }) k.tuning = tiled_tuning();
  return k;
}

/// The same with `edit` applied to the tuning (a test that sets one field and keeps the rest).
template <class K, class Edit>
K make_kernel(Edit edit) {
  K k = make_kernel<K>();
  edit(k.tuning);
  return k;
}

}  // namespace polymoe::test
