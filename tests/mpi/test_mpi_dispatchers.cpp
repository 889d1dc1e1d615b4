// Expert parallelism under mpirun (1, 2, 3 and 4 ranks, 12 experts): every MPI dispatcher with
// every kernel it pairs with (fp32 and bf16), and with the schemes whose activations travel
// quantized (fp8, fp8_block, int8_w8a8 on the reference kernel), gives each rank exactly the rows a
// single-process `local` layer gives for its tokens, bitwise (also with an infinite value in a
// token, with the weight on the input, and with a gated shared expert that each rank runs on its
// own tokens while the single process runs it on all); ragged sends each token once per rank and quantized
// rows as codes (counted bytes); bad input on one rank (routing, weights a rank cannot quantize,
// layers that disagree, a top-k width other than the layer's) is the same polymoe::error on every
// rank (test_mpi_fingerprint.cpp: layers that differ in any other way).
// Prints "N passed, M failed" on rank 0; exits non-zero on any failure.
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <type_traits>

#include <boost/mp11/algorithm.hpp>

#include "mpi_support.hpp"

using namespace polymoe;
using namespace polymoe::mpi_test;
namespace mp = boost::mp11;

namespace {

template <class A, class Q, class K>
void agreement(Variant v = {}) {
  const Problem p = make_problem(v);
  const Matrix h = p.hidden.middleRows(p.first, p.count), logits = p.logits.middleRows(p.first, p.count);
  // A single process runs all tokens: the routed experts and the shared expert (with its gate) on
  // the whole batch, where each rank runs the shared expert on its own tokens alone.
  MoeLayer<a2a::local, Q, K> single(p.cfg, p.w);
  const Matrix want = single.forward(p.hidden, p.logits).middleRows(p.first, p.count);
  MpiMoeLayer<A, Q, K> layer(ep_config(p.cfg), local_share(p), make_dispatcher<A>());
  const Matrix got = layer.forward(h, logits);
  const bool same_shape = got.rows() == want.rows() && got.cols() == want.cols();
  // Bits, not values: a token holding an infinity has NaN outputs, which must match too.
  const bool bitwise = same_shape && std::memcmp(got.data(), want.data(), sizeof(float) * got.size()) == 0;
  double err = 0.0;
  if (same_shape && got.size()) err = (got - want).cwiseAbs().maxCoeff() / (1e-30 + want.cwiseAbs().maxCoeff());
  const std::string name = std::string(A::name) + "/" + std::string(Q::name) + "/" + std::string(K::name) +
                           " (wire " + std::string(wire_of<A, Q>::name) + ")" + v.label();
  // Every dispatcher, every kernel: each token's slots are summed in slot order by its owner, and
  // each expert sees the rows a single process gives it, in the same order.
  check(bitwise, name + ": bitwise equal to the single-process layer" +
                     (bitwise ? std::string() : " (relative error " + std::to_string(err) + ")"));
}

/// A layer that one rank cannot build (a NaN in its experts, which the scheme refuses to quantize)
/// is the same error on every rank: the others are not left waiting in the first collective.
template <class A>
void construction_error_on_one_rank() {
  const Problem p = make_problem({});
  MoeWeights w = local_share(p);
  const int bad = size_ - 1;
  if (rank_ == bad) w.experts.w13(2, 5) = std::numeric_limits<float>::quiet_NaN();
  std::string msg;
  try {
    MpiMoeLayer<A, quant::int8_w8a8, kernel::reference> layer(ep_config(p.cfg), w, make_dispatcher<A>());
  } catch (const error& e) {
    msg = e.what();
  }
  const std::string prefix = "polymoe: rank " + std::to_string(bad) + " of " + std::to_string(size_) + ": ";
  check(msg.rfind(prefix, 0) == 0 && msg.find("not finite") != std::string::npos && same_everywhere(msg, msg),
        std::string(A::name) + ": a NaN in rank " + std::to_string(bad) +
            "'s experts is the same error everywhere ('" + msg + "')");
}

/// Ranks whose layers would exchange records of different sizes (another top_k here) refuse to
/// build, all with the same error, before any token moves.
template <class A>
void layers_that_disagree() {
  if (size_ == 1) return;  // one rank cannot disagree with itself
  Problem p = make_problem({});
  if (rank_ == size_ - 1) p.cfg.router.top_k = 2;
  std::string msg;
  try {
    MpiMoeLayer<A, quant::fp32, kernel::reference> layer(ep_config(p.cfg), local_share(p), make_dispatcher<A>());
  } catch (const error& e) {
    msg = e.what();
  }
  check(same_everywhere(msg, "polymoe: rank " + std::to_string(size_ - 1) + " of " + std::to_string(size_) +
                                 ": top_k is 2 here but 3 on rank 0"),
        std::string(A::name) + ": layers with another top_k on one rank are an error everywhere ('" + msg + "')");
}

/// The rank without tokens may pass ids and weights of any width (0 x 0 here) and still takes its
/// part; a rank with tokens must pass the layer's top_k, and another width is everyone's error.
template <class A>
void top_k_width() {
  const Problem p = make_problem({});
  MoeLayer<a2a::local, quant::fp32, kernel::reference> single(p.cfg, p.w);
  const Matrix want = single.forward(p.hidden, p.logits).middleRows(p.first, p.count);
  const IdMatrix ids = single.last_topk_ids().middleRows(p.first, p.count);
  const Matrix w = single.last_topk_weights().middleRows(p.first, p.count);
  MpiMoeLayer<A, quant::fp32, kernel::reference> layer(ep_config(p.cfg), local_share(p), make_dispatcher<A>());
  const Matrix h = p.hidden.middleRows(p.first, p.count);
  const Matrix got = p.count ? layer.forward_routed(h, ids, w) : layer.forward_routed(h, IdMatrix(0, 0), Matrix(0, 0));
  const bool close = got.rows() == want.rows() && got.cols() == want.cols() &&
                     (got.size() == 0 || (got - want).cwiseAbs().maxCoeff() <= 1e-5f * want.cwiseAbs().maxCoeff());
  check(close, std::string(A::name) + ": an empty rank passing 0 x 0 ids gives every rank its single-process rows");
  std::string msg;
  try {
    if (rank_ == 0)
      (void)layer.forward_routed(h, ids.leftCols(2), w.leftCols(2));
    else
      (void)layer.forward_routed(h, ids, w);
  } catch (const error& e) {
    msg = e.what();
  }
  check(same_everywhere(msg, "polymoe: rank 0 of " + std::to_string(size_) +
                                 ": top-k width 2 differs from MoeConfig.router.top_k=3 (" + std::string(A::name) +
                                 " exchanges records of top_k ids between ranks)"),
        std::string(A::name) + ": a top-k width other than top_k on rank 0 is an error everywhere ('" + msg + "')");
}

/// forward_into a view with a row stride wider than H (the left columns of a larger matrix): the
/// rows land in place and the columns beside them keep their values.
template <class A>
void strided_output() {
  const Problem p = make_problem({});
  MoeLayer<a2a::local, quant::fp32, kernel::reference> single(p.cfg, p.w);
  const Matrix want = single.forward(p.hidden, p.logits).middleRows(p.first, p.count);
  MpiMoeLayer<A, quant::fp32, kernel::reference> layer(ep_config(p.cfg), local_share(p), make_dispatcher<A>());
  const index_t H = p.cfg.hidden;
  Matrix big = Matrix::Constant(p.count, H + 5, 7.0f);
  layer.forward_into(p.hidden.middleRows(p.first, p.count), p.logits.middleRows(p.first, p.count), big.leftCols(H));
  const bool close = p.count == 0 || (big.leftCols(H) - want).cwiseAbs().maxCoeff() <= 1e-5f * want.cwiseAbs().maxCoeff();
  const bool beside = (big.rightCols(5).array() == 7.0f).all();
  check(close && beside, std::string(A::name) + ": forward_into a strided view writes its rows in place, nothing beside");
}

template <class A>
void bad_input_on_one_rank() {
  const Problem p = make_problem({});
  MpiMoeLayer<A, quant::fp32, kernel::reference> layer(ep_config(p.cfg), local_share(p), make_dispatcher<A>());
  bad_ids_on_one_rank(layer, std::string(A::name));
}

void masked_capacity() {
  const Problem p = make_problem({});
  MpiMoeLayer<a2a::mpi_masked, quant::fp32, kernel::reference> layer(ep_config(p.cfg), local_share(p),
                                                                   a2a::mpi_masked(2));
  Matrix h = Matrix::Zero(3, 24), w = Matrix::Constant(3, 3, 0.3f);
  IdMatrix ids(3, 3);
  for (index_t t = 0; t < 3; ++t) ids(t, 0) = 0, ids(t, 1) = 1, ids(t, 2) = 2;  // 3 rows per expert per rank
  std::string msg;
  try {
    (void)layer.forward_routed(h, ids, w);
  } catch (const error& e) {
    msg = e.what();
  }
  check(msg.find("received 3") != std::string::npos || msg.find("received " + std::to_string(3 * size_)) != std::string::npos,
        "mpi_masked: capacity overflow is an error on every rank ('" + msg + "')");
  check(msg.find("raise it with mpi_masked(capacity)") != std::string::npos, "mpi_masked: the error names the option");
}

/// What crosses ranks, counted by the dispatcher against what the routing implies: ragged sends a
/// token once per rank that owns one of its experts, masked once per slot; fp8_block rows are
/// records of [flag][k ids][H E4M3 codes][one fp32 amax per 128], fp32 rows [flag][k ids][4H bytes].
template <class A, class Q>
void wire_traffic() {
  const index_t H = 300, k = 3, T = 20, El = E / size_;
  const Problem p = make_problem({.hidden = H});
  MpiMoeLayer<A, Q, kernel::reference> layer(ep_config(p.cfg), local_share(p), make_dispatcher<A>());
  std::mt19937 rng(5 + rank_);
  IdMatrix ids(T, k);
  for (index_t t = 0; t < T; ++t)
    for (index_t j = 0; j < k; ++j) {
      std::int32_t e;
      do e = static_cast<std::int32_t>(rng() % E); while ((ids.row(t).head(j).array() == e).any());
      ids(t, j) = e;
    }
  const Matrix w = Matrix::Constant(T, k, 0.25f);
  (void)layer.forward_routed(p.hidden.topRows(T), ids, w);
  index_t rows = 0;
  for (index_t t = 0; t < T; ++t)
    for (int d = 0; d < size_; ++d) {
      index_t on_d = 0;
      for (index_t j = 0; j < k; ++j) on_d += ids(t, j) / El == d;
      if (d != rank_) rows += std::is_same_v<A, a2a::mpi_ragged> ? (on_d > 0) : on_d;
    }
  const std::size_t payload = std::is_same_v<Q, quant::fp32> ? 4 * H : H + 4 * 3;
  const auto& a = layer.dispatcher();
  check(a.dispatch_rows() == rows && a.dispatch_bytes() == static_cast<std::size_t>(rows) * (4 * (1 + k) + payload),
        std::string(A::name) + "/" + std::string(Q::name) + ": sends " + std::to_string(a.dispatch_rows()) + " rows, " +
            std::to_string(a.dispatch_bytes()) + " bytes (routing implies " + std::to_string(rows) + " rows of " +
            std::to_string(4 * (1 + k) + payload) + " bytes)");
}

void config_mismatch() {
  const Problem p = make_problem({});
  MoeConfig c = ep_config(p.cfg);
  std::string msg;
  try {
    c.ep_rank = (rank_ + 1) % size_;
    if (size_ == 1) c.ep_size = 2;
    MpiMoeLayer<a2a::mpi_ragged, quant::fp32, kernel::reference> layer(c, local_share(p));
  } catch (const error& e) {
    msg = e.what();
  }
  check(!msg.empty() && msg.find("polymoe:") == 0, "a config that does not match the communicator is an error ('" + msg + "')");
}

}  // namespace

int main(int argc, char** argv) {
  start(argc, argv);
  mp::mp_for_each<mpi_valid_triples>([&]<class A, class Q, class K>(mp::mp_list<A, Q, K>) {
    if constexpr (!std::is_same_v<A, a2a::local> &&
                  (std::is_same_v<Q, quant::fp32> || std::is_same_v<Q, quant::bf16>)) {
      agreement<A, Q, K>();
      agreement<A, Q, K>({.shared = true});
    }
    // Schemes whose activations travel quantized: exact on the reference kernel, with rows of
    // several groups of 128, an infinite value (that row travels in fp32) and the weight on the input.
    if constexpr (!std::is_same_v<A, a2a::local> && std::is_same_v<K, kernel::reference> &&
                  !std::is_same_v<activation_wire_t<Q>, wire::fp32>) {
      static_assert(std::is_same_v<A, a2a::mpi_allgather> || std::is_same_v<wire_of<A, Q>, activation_wire_t<Q>>);
      agreement<A, Q, K>({.hidden = 300});
      if constexpr (std::is_same_v<Q, quant::fp8_block>) {
        agreement<A, Q, K>({.hidden = 300, .weight_on_input = true});
        if constexpr (!std::is_same_v<A, a2a::mpi_allgather>) agreement<A, Q, K>({.hidden = 300, .poison = true});
      }
    }
  });
  wire_traffic<a2a::mpi_ragged, quant::fp8_block>();
  wire_traffic<a2a::mpi_ragged, quant::fp32>();
  wire_traffic<a2a::mpi_masked, quant::fp8_block>();
  masked_capacity();
  config_mismatch();
  mp::mp_for_each<mp::mp_remove<pairing::dispatchers_of<mpi_table>, a2a::local>>([]<class A>(A) {
    bad_input_on_one_rank<A>();
    construction_error_on_one_rank<A>();
    layers_that_disagree<A>();
    top_k_width<A>();
    strided_output<A>();
  });
  return finish();
}
