#pragma once
// What the MPI tests share: a check that every rank takes part in, a problem (config, all experts,
// tokens) that every rank builds alike with each rank's share of the tokens and experts, and a
// comparison of error messages across ranks.
#include <mpi.h>

#include <algorithm>
#include <cstdio>
#include <limits>
#include <random>
#include <string>
#include <type_traits>

#include <polymoe/mpi.hpp>

namespace polymoe::mpi_test {

inline int rank_ = 0, size_ = 1, passed = 0, failed = 0;
constexpr index_t E = 12;  // experts: a multiple of every rank count tested (1, 2, 3, 4)

inline void check(bool ok, const std::string& what) {
  int mine = ok ? 1 : 0, all = 0;
  MPI_Allreduce(&mine, &all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  if (!ok) std::printf("rank %d: FAILED %s\n", rank_, what.c_str());
  if (rank_ == 0) std::printf("[%s] np=%d %s\n", all ? "  OK  " : "FAILED", size_, what.c_str());
  std::fflush(stdout);
  (all ? passed : failed)++;
}

inline Matrix randn(std::mt19937& rng, index_t r, index_t c, float s) {
  std::normal_distribution<float> n(0.0f, s);
  Matrix m(r, c);
  for (index_t i = 0; i < m.size(); ++i) m.data()[i] = n(rng);
  return m;
}

struct Problem {
  MoeConfig cfg;  // global (ep_size = 1)
  MoeWeights w;   // all experts
  Matrix hidden, logits;
  index_t first = 0, count = 0;  // this rank's contiguous share of the tokens
};

/// Variants of the agreement problem: a wider H (several fp8 groups of 128), an infinite value in
/// one token, the routing weight on the input (top-1).
struct Variant {
  bool shared = false;
  index_t hidden = 24;
  bool poison = false;
  bool weight_on_input = false;
  [[nodiscard]] std::string label() const {
    std::string l = shared ? " +shared" : "";
    if (hidden != 24) l += " H=" + std::to_string(hidden);
    if (poison) l += " +inf in a token";
    if (weight_on_input) l += " weight on input";
    return l;
  }
};

inline Problem make_problem(Variant v) {
  Problem p;
  const index_t H = v.hidden;
  p.cfg.hidden = H;
  p.cfg.intermediate = 16;
  p.cfg.num_experts = E;
  p.cfg.router.top_k = v.weight_on_input ? 1 : 3;
  p.cfg.router_weight_on_input = v.weight_on_input;
  p.cfg.shared_intermediate = v.shared ? 12 : 0;
  std::mt19937 rng(2024);  // same on every rank
  p.w.experts = ExpertWeights(ExpertShape{E, H, 16, true, false});
  p.w.experts.w13 = randn(rng, p.w.experts.w13.rows(), H, 0.2f);
  p.w.experts.w2 = randn(rng, p.w.experts.w2.rows(), 16, 0.25f);
  if (v.shared) {
    p.w.shared = ExpertWeights(ExpertShape{1, H, 12, true, false});
    p.w.shared->w13 = randn(rng, 24, H, 0.2f);
    p.w.shared->w2 = randn(rng, H, 12, 0.25f);
    p.cfg.shared_expert_gate = true;  // Qwen2-MoE's sigmoid gate
    p.w.shared_gate = randn(rng, 1, H, 0.3f);
  }
  const index_t T = 37;
  p.hidden = randn(rng, T, H, 1.0f);
  if (v.poison) p.hidden(T / 2, H - 1) = std::numeric_limits<float>::infinity();
  p.logits = randn(rng, T, E, 1.0f);
  // Uneven shares; with several ranks the last one has no tokens at all.
  const index_t active = size_ > 1 ? size_ - 1 : 1;
  const index_t base = T / active;
  p.first = std::min<index_t>(rank_, active) * base;
  p.count = rank_ < active ? (rank_ == active - 1 ? T - p.first : base) : 0;
  return p;
}

inline MoeConfig ep_config(const MoeConfig& g) {
  MoeConfig c = g;
  c.ep_size = size_;
  c.ep_rank = rank_;
  return c;
}

inline MoeWeights local_share(const Problem& p) {
  const index_t El = p.cfg.num_experts / size_, first = rank_ * El;
  MoeWeights w = p.w;
  ExpertShape s = p.w.experts.shape;
  s.experts = El;
  w.experts = ExpertWeights(s);
  w.experts.w13 = p.w.experts.w13.middleRows(first * s.rows13(), El * s.rows13());
  w.experts.w2 = p.w.experts.w2.middleRows(first * s.hidden, El * s.hidden);
  return w;
}

template <class A>
A make_dispatcher() {
  if constexpr (std::is_same_v<A, a2a::mpi_masked>)
    return A(64);
  else
    return A();
}

/// Whether every rank holds `msg` and it is `expect` (lengths and a checksum compared across ranks).
inline bool same_everywhere(const std::string& msg, const std::string& expect) {
  long sig[2] = {static_cast<long>(msg.size()), 0};
  for (char c : msg) sig[1] = sig[1] * 31 + c;
  long lo[2], hi[2];
  MPI_Allreduce(sig, lo, 2, MPI_LONG, MPI_MIN, MPI_COMM_WORLD);
  MPI_Allreduce(sig, hi, 2, MPI_LONG, MPI_MAX, MPI_COMM_WORLD);
  return msg == expect && lo[0] == hi[0] && lo[1] == hi[1];
}

/// The last rank passes an expert id outside [0, E): every rank gets the same error, and the
/// layer's next forward works (no rank is left inside a collective).
template <class Layer>
void bad_ids_on_one_rank(Layer& layer, const std::string& label) {
  const index_t T = 3;
  Matrix h = Matrix::Zero(T, layer.config().hidden), w = Matrix::Constant(T, 3, 0.3f);
  IdMatrix ids(T, 3);
  for (index_t t = 0; t < T; ++t) ids(t, 0) = 0, ids(t, 1) = 1, ids(t, 2) = 2;
  const int bad = size_ - 1;
  if (rank_ == bad) ids(1, 2) = 99;
  std::string msg;
  try {
    (void)layer.forward_routed(h, ids, w);
  } catch (const error& e) {
    msg = e.what();
  }
  check(same_everywhere(msg, "polymoe: rank " + std::to_string(bad) + " of " + std::to_string(size_) +
                                  ": topk_ids[1, 2] = 99 is outside [0, num_experts=" + std::to_string(E) + ")"),
        label + ": bad ids on rank " + std::to_string(bad) + " raise the same error everywhere ('" + msg + "')");
  ids(1, 2) = 2;
  bool ok = true;
  try {
    (void)layer.forward_routed(h, ids, w);
  } catch (const std::exception&) {
    ok = false;
  }
  check(ok, label + ": the next forward after a collective error works");
}

/// MPI_Init, this rank and the rank count.
inline void start(int& argc, char**& argv) {
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
  MPI_Comm_size(MPI_COMM_WORLD, &size_);
}
/// Prints "N passed, M failed" on rank 0, MPI_Finalize; the exit status.
inline int finish() {
  if (rank_ == 0) std::printf("%d passed, %d failed\n", passed, failed);
  MPI_Finalize();
  return failed ? 1 : 0;
}

}  // namespace polymoe::mpi_test
