#pragma once
// bench_kernel<Kernel>: every selected valid triple (over polymoe::valid_triples) whose kernel is
// Kernel, on one preset, over the thread counts and token counts of the options. Included only by
// polymoe_bench_part.cpp.
#include <memory>
#include <type_traits>

#include <boost/mp11/algorithm.hpp>
#include <tbb/global_control.h>

#include <polymoe/kernels/tiled/phases.hpp>
#include <polymoe/polymoe.hpp>

#include "polymoe_bench.hpp"

namespace polymoe::bench {

template <class A2A, class Q, class Kernel>
void bench_triple(const sweep& s) {
  using Layer = MoeLayer<A2A, Q, Kernel>;
  const preset& p = s.shape;
  const auto t_prep = clock_type::now();
  const MoeConfig cfg = config_of(p);

  const double one_expert = expert_bytes(Q::name, p);
  const double layer_bytes = one_expert * static_cast<double>(p.experts);
  std::string note;
  // footprint: the scheme's store and the kernel's prepared copy
  const int n = instances_for(layer_bytes, 2 * layer_bytes + 1e6, s.llc, note);

  // The kernel: the tiled kernels with --tuning's tuning and, with --phases, recording into
  // `phases` (reset before each point's timed forwards).
  kernels::tiled::PhaseTimes phases;
  Kernel kernel{};
  if constexpr (requires { kernel.tuning = s.opt->tuning; kernel.phases = &phases; }) {
    kernel.tuning = s.opt->tuning;
    if (s.opt->phases) kernel.phases = &phases;
    if (s.opt->tuning != kernels::tiled::tuning{}) note += "; tuning " + kernels::tiled::to_string(s.opt->tuning);
  }
  std::vector<std::unique_ptr<Layer>> layers;
  if constexpr (std::is_same_v<typename Q::weights, ExpertWeights>) {
    MoeWeights w;
    w.experts = *s.fp32;
    for (int i = 0; i < n; ++i) layers.push_back(std::make_unique<Layer>(cfg, w, A2A{}, kernel));
  } else {
    BasicMoeWeights<typename Q::weights> w;
    w.experts = Q::quantize(*s.fp32);
    for (int i = 0; i < n; ++i) layers.push_back(std::make_unique<Layer>(cfg, w, A2A{}, kernel));
  }
  s.info(detail::concat("[", A2A::name, ", ", Q::name, ", ", Kernel::name, "] ", p.name, ": prepared ", n,
                        " layer instance(s) in ", seconds_since(t_prep), " s; ", note));

  for (const int threads : s.opt->threads) {
    tbb::global_control gc(tbb::global_control::max_allowed_parallelism, static_cast<std::size_t>(threads));
    for (const index_t T : s.opt->tokens) {
      const Matrix hidden = random_hidden(T, p.hidden, static_cast<std::uint64_t>(T), s.opt->bf16_inputs);
      const routing_set r = make_routings(T, p.experts, p.top_k, static_cast<std::uint64_t>(T) + 17);
      const auto V = static_cast<int>(r.ids.size());
      record rec;
      rec.a2a = A2A::name;
      rec.quant = Q::name;
      rec.kernel = Kernel::name;
      rec.preset = p.name;
      rec.tokens = T;
      rec.experts = p.experts;
      rec.threads = threads;
      rec.flops = flops_per_forward(p, T);
      rec.weight_bytes = r.distinct * one_expert;
      rec.note = note + "; " + std::to_string(V) + " routing(s) per instance" +
                 (s.opt->bf16_inputs ? "; bf16 inputs" : "");
      // forward f: routing f mod V on instance (f / V) mod n, so a cycle of V·n forwards reads
      // every expert of every instance. The warm-up is one such cycle: every instance has run a
      // forward of this size, so no timed forward grows an instance's workspace (first-touch page
      // faults of hundreds of MB: with two warm-up forwards, the first forward of a second
      // instance fell among the timed ones).
      const int warm = V * n;
      time_reps(s.opt->reps, warm, [&](int f) {
        if (f == warm) phases = {};  // the timed forwards' only
        auto& layer = *layers[static_cast<std::size_t>((f / V) % n)];
        const Matrix out = layer.forward_routed(hidden, r.ids[static_cast<std::size_t>(f % V)], r.weights);
        if (out.size() && out.data()[0] == 12345.678f) std::printf(" ");
      }, rec);
      if (phases.forwards > 0) {
        const std::string line = phase_line(phases);
        rec.note += "; " + line;
        s.info(detail::concat("[", Q::name, ", ", Kernel::name, "] T=", T, ", ", threads, " threads: ", line));
      }
      s.report(std::move(rec));
    }
  }
}

template <class Kernel>
void bench_kernel(const sweep& s) {
  boost::mp11::mp_for_each<valid_triples>([&](auto t) {
    using T = decltype(t);
    using A = boost::mp11::mp_at_c<T, 0>;
    using Q = boost::mp11::mp_at_c<T, 1>;
    using K = boost::mp11::mp_at_c<T, 2>;
    if constexpr (std::is_same_v<K, Kernel>) {
      if (s.selected(A::name, Q::name, K::name)) bench_triple<A, Q, K>(s);
    }
  });
}

}  // namespace polymoe::bench
