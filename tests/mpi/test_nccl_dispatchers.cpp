// The NCCL dispatchers under mpirun, one GPU a rank (rank r on device r mod the devices): every
// rank's output bitwise what one GPU computes for its tokens (a2a::local, the same kernel with a
// fixed tile shape) and within the scheme's tolerance of the CPU reference, for every scheme of
// kernel::cuda's row (read from the table), with and without a shared expert, the routing weight
// on the input, hidden rows in fp32 and bf16, a rank with no tokens, all tokens on one rank's
// experts, and micro-batches (nccl_ragged); one rank's bad input is every rank's error; ranks that
// pass different element types, widths or micro-batch counts are refused together. nccl_masked the
// same where it applies, and its own: a capacity overflowed (NaN on every rank, then every rank's
// error), a forward captured in a CUDA graph and replayed on new rows, and what it refuses.
// With fewer GPUs than ranks the program says so and exits 77 (reported as skipped).
#include <cuda_runtime_api.h>

#include <cstdint>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

#include <boost/mp11/algorithm.hpp>

#include <polymoe/codecs/bf16.hpp>
#include <polymoe/nccl.hpp>

#include "test_util.hpp"
#include "mpi_support.hpp"

using namespace polymoe;
using namespace polymoe::mpi_test;

namespace {

kernel::cuda fixed_tiles() {
  kernel::cuda k;
  k.tiles = cuda::TileChoice::small;
  return k;
}

/// This rank's tokens: make_problem's share (the last rank has none), or an even split.
struct Share {
  index_t first = 0, count = 0;
};
Share share_of(const Problem& p, bool even) {
  if (!even) return {p.first, p.count};
  const index_t T = p.hidden.rows(), base = T / size_;
  return {rank_ * base, rank_ == size_ - 1 ? T - rank_ * base : base};
}

bool bitwise_equal(const Matrix& a, const Matrix& b) {
  return a.rows() == b.rows() && a.cols() == b.cols() &&
         std::memcmp(a.data(), b.data(), sizeof(float) * static_cast<std::size_t>(a.size())) == 0;
}

/// bf16 bits of m, and m rounded to bf16.
std::vector<std::uint16_t> bf16_bits(const Matrix& m, Matrix& rounded) {
  rounded = m;
  std::vector<std::uint16_t> b(static_cast<std::size_t>(std::max<index_t>(1, m.size())));
  for (index_t i = 0; i < m.size(); ++i) {
    b[static_cast<std::size_t>(i)] = codecs::float_to_bf16(m.data()[i]);
    rounded.data()[i] = codecs::bf16_to_float(b[static_cast<std::size_t>(i)]);
  }
  return b;
}

Matrix download(const cuda::device_array<float>& d, index_t rows, index_t cols) {
  cuda::synchronize(nullptr);
  Matrix m(rows, cols);
  if (m.size()) d.download({m.data(), static_cast<std::size_t>(m.size())});
  return m;
}

constexpr index_t kMaxTokens = 37;  // every share of make_problem's tokens

/// A dispatcher of type A for hidden rows of `rows` (nccl_ragged takes either), over `comm` when
/// given (a layer's dispatcher's, so that a test's layers share one NCCL communicator);
/// nccl_ragged's combine direct where it can be, or through NCCL.
template <class A>
A make_nccl(element_type rows, std::shared_ptr<const cuda::nccl_comm> comm = nullptr, int micro_batches = 1,
            bool direct = true) {
  if constexpr (std::is_same_v<A, a2a::nccl_masked>) {
    return comm ? A(comm, kMaxTokens, 0, rows) : A(kMaxTokens, 0, rows);
  } else {
    A d = comm ? A(comm) : A();
    d.micro_batches = micro_batches;
    d.direct_combine = direct;
    d.direct_combine_from = 0;  // the test's small batches too
    return d;
  }
}
template <class A>
constexpr bool masked_v = std::is_same_v<A, a2a::nccl_masked>;

template <class Q, class A = a2a::nccl_ragged>
void agreement(Variant v, bool even, int micro_batches = 1, bool direct = true) {
  const Problem p = make_problem(v);
  const Share s = share_of(p, even);
  const Matrix h = p.hidden.middleRows(s.first, s.count), logits = p.logits.middleRows(s.first, s.count);
  const std::string name = std::string(A::name) + "/" + std::string(Q::name) + v.label() +
                           (even ? " even shares" : " last rank without tokens") +
                           (micro_batches > 1 ? ", " + std::to_string(micro_batches) + " micro-batches" : "") +
                           (direct ? "" : ", NCCL combine");
  CudaMoeLayer<a2a::local, Q, kernel::cuda> single(p.cfg, p.w, {}, fixed_tiles());
  NcclMoeLayer<A, Q, kernel::cuda> layer(ep_config(p.cfg), local_share(p),
                                         make_nccl<A>(element_type::f32, nullptr, micro_batches, direct), fixed_tiles());
  if constexpr (!masked_v<A>) {
    static bool said = false;  // which combine the default takes here, once
    if (direct && !said && rank_ == 0)
      std::printf("nccl_ragged's combine: %s\n", layer.dispatcher().combines_directly() ? "direct (CUDA IPC)" : "NCCL");
    said = said || direct;
    if (!direct) check(!layer.dispatcher().combines_directly(), name + ": direct_combine = false keeps NCCL's");
  }
  // fp32 rows (the host conveniences: routing on the device)
  const Matrix got = layer.forward(h, logits), want = single.forward(h, logits);
  check(bitwise_equal(got, want), name + ": bitwise the one-GPU layer");
  if (!v.poison) {
    MoeLayer<a2a::local, Q, kernel::reference> ref(p.cfg, p.w);
    const Matrix r = ref.forward(h, logits);
    const double err = got.rows() ? test::kernel_agreement_error<Q>(got, r) : 0.0;
    char e[64];
    std::snprintf(e, sizeof e, "%.3g of %.3g", err, test::kernel_tolerance<Q>);
    check(err <= test::kernel_tolerance<Q>, name + ": the CPU reference within its tolerance (" + e + ")");
  }
  // bf16 rows on device views, bf16 out (nccl_masked carries one element type: another layer)
  std::optional<NcclMoeLayer<A, Q, kernel::cuda>> bf16_layer;
  if constexpr (masked_v<A>)
    bf16_layer.emplace(ep_config(p.cfg), local_share(p), make_nccl<A>(element_type::bf16, layer.dispatcher().nccl()),
                       fixed_tiles());
  Matrix hr;
  const std::vector<std::uint16_t> hb = bf16_bits(h, hr);
  const int dev = cuda::current_device();
  const index_t T = h.rows(), H = h.cols(), E = p.cfg.num_experts;
  cuda::device_array<std::uint16_t> dh(hb.size()), dout(hb.size());
  cuda::device_array<float> dz(static_cast<std::size_t>(std::max<index_t>(1, T * E))), dref(hb.size());
  dh.upload(hb);
  const Matrix z = logits;
  if (z.size()) dz.upload({z.data(), static_cast<std::size_t>(z.size())});
  (bf16_layer ? *bf16_layer : layer)
      .forward(device_view::of_bf16(dh.data(), T, H, dev), device_view::of(dz.data(), T, E, dev),
               device_view::of_bf16(dout.data(), T, H, dev), nullptr);
  single.forward(device_view::of_bf16(dh.data(), T, H, dev), device_view::of(dz.data(), T, E, dev),
                 device_view::of(dref.data(), T, H, dev), nullptr);
  cuda::synchronize(nullptr);
  std::vector<std::uint16_t> ob(hb.size());
  dout.download(ob);
  const Matrix fr = download(dref, T, H);
  bool same = true;
  for (index_t i = 0; i < T * H; ++i) same &= ob[static_cast<std::size_t>(i)] == codecs::float_to_bf16(fr.data()[i]);
  check(same, name + ": bf16 rows and out, bitwise the one-GPU layer's fp32 out rounded once");
}

/// Every token's slots on rank 0's experts (forward_routed): rank 0 computes them all.
template <class Q, class A = a2a::nccl_ragged>
void all_on_one_rank() {
  const Problem p = make_problem({});
  const Share s = share_of(p, true);
  const index_t k = p.cfg.top_k(), El = E / size_;
  const Matrix h = p.hidden.middleRows(s.first, s.count);
  IdMatrix ids(s.count, k);
  Matrix w(s.count, k);
  for (index_t t = 0; t < s.count; ++t)
    for (index_t j = 0; j < k; ++j) ids(t, j) = static_cast<std::int32_t>((t + j) % El), w(t, j) = 0.25f + 0.1f * j;
  CudaMoeLayer<a2a::local, Q, kernel::cuda> single(p.cfg, p.w, {}, fixed_tiles());
  NcclMoeLayer<A, Q, kernel::cuda> layer(ep_config(p.cfg), local_share(p), make_nccl<A>(element_type::f32),
                                         fixed_tiles());
  const Matrix got = layer.forward_routed(h, ids, w), want = single.forward_routed(h, ids, w);
  const std::string name = std::string(A::name) + "/" + std::string(Q::name);
  check(bitwise_equal(got, want), name + ": all tokens on rank 0's experts, bitwise");
  if constexpr (!masked_v<A>) {
    const std::size_t sent = layer.dispatcher().dispatch_bytes();
    check(rank_ == 0 ? sent == 0 : sent > 0 || s.count == 0,
          name + ": only the other ranks send rows (" + std::to_string(sent) + " bytes)");
  }
}

template <class A>
void bad_input_on_one_rank() {
  const Problem p = make_problem({});
  NcclMoeLayer<A, quant::bf16, kernel::cuda> layer(ep_config(p.cfg), local_share(p), make_nccl<A>(element_type::f32),
                                                   fixed_tiles());
  bad_ids_on_one_rank(layer, std::string(A::name));
}

/// What f() throws (after waiting for the device), or "" when it throws no polymoe::error.
std::string caught(const std::function<void()>& f) {
  try {
    f();
    cuda::synchronize(nullptr);
  } catch (const error& e) {
    return e.what();
  }
  return {};
}

/// Rank 0 passes bf16 rows, the others fp32: every rank refuses, with one message, before any row
/// moves; the layer works afterwards.
void mixed_element_types() {
  if (size_ < 2) return;
  const Problem p = make_problem({});
  NcclMoeLayer<a2a::nccl_ragged, quant::bf16, kernel::cuda> layer(ep_config(p.cfg), local_share(p),
                                                                   a2a::nccl_ragged(), fixed_tiles());
  const int dev = cuda::current_device();
  const index_t T = 4, H = p.cfg.hidden, E = p.cfg.num_experts;
  cuda::device_array<float> dh(static_cast<std::size_t>(T * H)), dz(static_cast<std::size_t>(T * E)),
      dout(static_cast<std::size_t>(T * H));
  const Matrix hz = Matrix::Ones(T, H), z = Matrix::Ones(T, E);
  dh.upload({hz.data(), static_cast<std::size_t>(hz.size())});
  dz.upload({z.data(), static_cast<std::size_t>(z.size())});
  const device_view f32 = device_view::of(dh.data(), T, H, dev);
  const device_view bf16{dh.data(), element_type::bf16, T, H, H, dev};
  const std::string msg = caught([&] {
    layer.forward(rank_ == 0 ? bf16 : f32, device_view::of(dz.data(), T, E, dev), device_view::of(dout.data(), T, H, dev),
                  nullptr);
  });
  check(same_everywhere(msg, "polymoe: nccl: rank 1 passes float32 hidden rows and rank 0 bfloat16; the ranks of an "
                             "expert-parallel layer must pass one element type"),
        "nccl_ragged: ranks passing different element types are refused together ('" + msg + "')");
  bool ok = true;
  try {
    layer.forward(f32, device_view::of(dz.data(), T, E, dev), device_view::of(dout.data(), T, H, dev), nullptr);
    cuda::synchronize(nullptr);
  } catch (const std::exception&) {
    ok = false;
  }
  check(ok, "nccl_ragged: the next forward after a refused exchange works");
}

/// Another count of micro-batches on the last rank: refused on every rank when the layer connects.
void micro_batches_that_differ() {
  if (size_ < 2) return;
  const Problem p = make_problem({});
  const std::string msg = caught([&] {
    NcclMoeLayer<a2a::nccl_ragged, quant::bf16, kernel::cuda> layer(
        ep_config(p.cfg), local_share(p), make_nccl<a2a::nccl_ragged>(element_type::f32, nullptr, rank_ == size_ - 1 ? 2 : 1),
        fixed_tiles());
  });
  check(same_everywhere(msg, "polymoe: nccl_ragged: micro_batches differs between ranks (1 to 2)"),
        "nccl_ragged: micro_batches that differ are refused together ('" + msg + "')");
}

/// One layer's forwards across direct_combine_from: the large ones direct, the small ones through
/// NCCL, in turn; every one bitwise the one-GPU layer's.
void direct_and_nccl_in_turn() {
  const Problem p = make_problem({});
  const Share s = share_of(p, true);
  const index_t T = p.hidden.rows(), k = p.cfg.top_k(), H = p.cfg.hidden;
  a2a::nccl_ragged d = make_nccl<a2a::nccl_ragged>(element_type::f32);
  // between one token a rank and the whole batch: the returned rows' bytes a rank, on average
  d.direct_combine_from = static_cast<std::size_t>((T + size_) * k * H * 4 / (2 * size_));
  CudaMoeLayer<a2a::local, quant::bf16, kernel::cuda> single(p.cfg, p.w, {}, fixed_tiles());
  NcclMoeLayer<a2a::nccl_ragged, quant::bf16, kernel::cuda> layer(ep_config(p.cfg), local_share(p), std::move(d),
                                                                  fixed_tiles());
  for (const index_t n : {s.count, std::min<index_t>(s.count, 1), s.count, std::min<index_t>(s.count, 1), s.count}) {
    const Matrix h = p.hidden.middleRows(s.first, n), z = p.logits.middleRows(s.first, n);
    const std::string name = "nccl_ragged: a forward of " + std::to_string(n) + " tokens a rank, in turn";
    check(bitwise_equal(layer.forward(h, z), single.forward(h, z)), name + " across direct_combine_from, bitwise");
    const bool direct = layer.dispatcher().combines_directly() && n == s.count;
    check(layer.dispatcher().last_combine_direct() == direct, name + (direct ? ": direct" : ": through NCCL"));
  }
}

/// direct_combine off on the last rank only: refused on every rank when the layer connects.
void direct_combine_that_differs() {
  if (size_ < 2) return;
  const Problem p = make_problem({});
  const std::string msg = caught([&] {
    NcclMoeLayer<a2a::nccl_ragged, quant::bf16, kernel::cuda> layer(
        ep_config(p.cfg), local_share(p), make_nccl<a2a::nccl_ragged>(element_type::f32, nullptr, 1, rank_ != size_ - 1),
        fixed_tiles());
  });
  check(same_everywhere(msg, "polymoe: nccl_ragged: direct_combine differs between ranks (0 to 1)"),
        "nccl_ragged: direct_combine that differs is refused together ('" + msg + "')");
}

/// Layers that differ (another top_k on the last rank): refused together when built.
void layers_that_disagree() {
  if (size_ < 2) return;
  const Problem p = make_problem({});
  MoeConfig cfg = ep_config(p.cfg);
  if (rank_ == size_ - 1) cfg.router.top_k = 2;
  const std::string msg = caught([&] {
    NcclMoeLayer<a2a::nccl_ragged, quant::bf16, kernel::cuda> layer(cfg, local_share(p), a2a::nccl_ragged(),
                                                                     fixed_tiles());
  });
  const std::string who = "polymoe: rank " + std::to_string(size_ - 1) + " of " + std::to_string(size_) + ": top_k";
  check(same_everywhere(msg, msg) && msg.rfind(who, 0) == 0,
        "nccl_ragged: layers with different top_k are refused together ('" + msg + "')");
}

// ---- nccl_masked ---------------------------------------------------------------------------

using MaskedLayer = NcclMoeLayer<a2a::nccl_masked, quant::bf16, kernel::cuda>;

/// A capacity below what the routing sends one expert: that forward's output (device views) is NaN
/// on every rank and the next forward is every rank's error naming the rows and the capacity; the
/// host-memory forward, which waits for the device, reports its own overflow at once; a forward
/// routed within the capacity is bitwise the one-GPU layer's again.
void masked_overflow() {
  const Problem p = make_problem({});
  const Share s = share_of(p, true);  // every rank has tokens
  const index_t T = s.count, H = p.cfg.hidden, k = p.cfg.top_k(), cap = size_;
  CudaMoeLayer<a2a::local, quant::bf16, kernel::cuda> single(p.cfg, p.w, {}, fixed_tiles());
  MaskedLayer layer(ep_config(p.cfg), local_share(p), a2a::nccl_masked(kMaxTokens, cap, element_type::f32),
                    fixed_tiles());
  const Matrix h = p.hidden.middleRows(s.first, T);
  IdMatrix ids(T, k);
  Matrix w = Matrix::Constant(T, k, 0.5f);
  for (index_t t = 0; t < T; ++t)
    for (index_t j = 0; j < k; ++j) ids(t, j) = static_cast<std::int32_t>(j);  // every token on experts 0..k-1
  const std::string expected = "polymoe: nccl_masked: 1 forward sent a local expert " +
                               std::to_string(p.hidden.rows()) + " rows (the most), beyond its capacity " +
                               std::to_string(cap) +
                               "; their outputs are NaN. Raise the capacity (nccl_masked(max_tokens, capacity)) or "
                               "use nccl_ragged";
  const int dev = cuda::current_device();
  cuda::device_array<float> dh(static_cast<std::size_t>(T * H)), dw(static_cast<std::size_t>(T * k)),
      dout(static_cast<std::size_t>(T * H));
  cuda::device_array<std::int32_t> di(static_cast<std::size_t>(T * k));
  dh.upload({h.data(), static_cast<std::size_t>(h.size())});
  dw.upload({w.data(), static_cast<std::size_t>(w.size())});
  di.upload({ids.data(), static_cast<std::size_t>(ids.size())});
  const auto forward = [&] {
    layer.forward_routed(device_view::of(dh.data(), T, H, dev), device_view::of(di.data(), T, k, dev),
                         device_view::of(dw.data(), T, k, dev), device_view::of(dout.data(), T, H, dev), nullptr);
  };
  std::string msg = caught(forward);
  const Matrix nan = download(dout, T, H);
  bool all_nan = msg.empty();
  for (index_t i = 0; i < nan.size(); ++i) all_nan &= std::isnan(nan.data()[i]);
  check(all_nan, "nccl_masked: a forward beyond an expert's capacity writes NaN on every rank ('" + msg + "')");
  msg = caught(forward);
  check(same_everywhere(msg, expected), "nccl_masked: the next forward is every rank's error ('" + msg + "')");
  msg = caught([&] { (void)layer.forward_routed(h, ids, w); });
  check(same_everywhere(msg, expected), "nccl_masked: the host-memory forward reports its own overflow ('" + msg + "')");
  // one token a rank on experts 0..k-1: size_ rows each, the capacity
  const Matrix h1 = p.hidden.middleRows(rank_, 1), w1 = w.topRows(1);
  const IdMatrix ids1 = ids.topRows(1);
  const Matrix got = layer.forward_routed(h1, ids1, w1), want = single.forward_routed(h1, ids1, w1);
  check(bitwise_equal(got, want), "nccl_masked: within the capacity again, bitwise the one-GPU layer");
}

/// The forward captured in a CUDA graph (after an eager one: the first call allocates), replayed
/// on new rows: bitwise the one-GPU layer on them.
void masked_graph_replay() {
  const Problem p = make_problem({.shared = true});
  const Share s = share_of(p, true);
  const index_t T = s.count, H = p.cfg.hidden, E = p.cfg.num_experts;
  CudaMoeLayer<a2a::local, quant::bf16, kernel::cuda> single(p.cfg, p.w, {}, fixed_tiles());
  MaskedLayer layer(ep_config(p.cfg), local_share(p), a2a::nccl_masked(kMaxTokens), fixed_tiles());
  const int dev = cuda::current_device();
  Matrix r1, r2;
  const std::vector<std::uint16_t> b1 = bf16_bits(p.hidden.middleRows(s.first, T), r1),
                                   b2 = bf16_bits((p.hidden.middleRows(s.first, T) * -0.5f).eval(), r2);
  const Matrix z = p.logits.middleRows(s.first, T);
  cuda::device_array<std::uint16_t> dh(b1.size());
  cuda::device_array<float> dz(static_cast<std::size_t>(std::max<index_t>(1, T * E))), dout(b1.size()),
      dref(b1.size());
  dh.upload(b1);
  if (z.size()) dz.upload({z.data(), static_cast<std::size_t>(z.size())});
  const device_view x = device_view::of_bf16(dh.data(), T, H, dev), logits = device_view::of(dz.data(), T, E, dev),
                    out = device_view::of(dout.data(), T, H, dev), ref = device_view::of(dref.data(), T, H, dev);
  cudaStream_t stream = nullptr;
  cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking);
  layer.forward(x, logits, out, stream);
  cuda::synchronize(stream);
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  bool captured = cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal) == cudaSuccess;
  layer.forward(x, logits, out, stream);
  captured = cudaStreamEndCapture(stream, &graph) == cudaSuccess && captured;
  captured = captured && cudaGraphInstantiate(&exec, graph, 0) == cudaSuccess;
  check(captured, "nccl_masked: a forward is captured in a CUDA graph");
  if (!captured) return;
  dh.upload(b2);  // new rows, then the graph twice
  for (int i = 0; i < 2; ++i) cudaGraphLaunch(exec, stream);
  cuda::synchronize(stream);
  single.forward(x, logits, ref, nullptr);
  cuda::synchronize(nullptr);
  check(bitwise_equal(download(dout, T, H), download(dref, T, H)),
        "nccl_masked: the graph replayed on new rows is bitwise the one-GPU layer");
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  cudaStreamDestroy(stream);
}

/// What nccl_masked refuses, on every rank alike: more tokens than max_tokens on one rank (the
/// layer works afterwards), rows of another element type, max_tokens that differ between ranks,
/// and a layer with the routing weight on its input.
void masked_refusals() {
  const Problem p = make_problem({});
  const index_t H = p.cfg.hidden, k = p.cfg.top_k();
  {
    MaskedLayer layer(ep_config(p.cfg), local_share(p), a2a::nccl_masked(4, 0, element_type::f32), fixed_tiles());
    const index_t T = rank_ == 0 ? 5 : 2;
    IdMatrix ids(T, k);
    for (index_t t = 0; t < T; ++t)
      for (index_t j = 0; j < k; ++j) ids(t, j) = static_cast<std::int32_t>((t * k + j) % E);
    const Matrix h = Matrix::Ones(T, H), w = Matrix::Constant(T, k, 0.5f);
    std::string msg = caught([&] { (void)layer.forward_routed(h, ids, w); });
    check(same_everywhere(msg, "polymoe: rank 0 of " + std::to_string(size_) +
                                   ": nccl_masked: 5 tokens, more than max_tokens=4 (raise it with "
                                   "nccl_masked(max_tokens))"),
          "nccl_masked: more tokens than max_tokens on one rank is every rank's error ('" + msg + "')");
    msg = caught([&] { (void)layer.forward_routed(h.topRows(2), ids.topRows(2), w.topRows(2)); });
    check(msg.empty(), "nccl_masked: the next forward works ('" + msg + "')");
    const int dev = cuda::current_device();
    cuda::device_array<float> dh(static_cast<std::size_t>(2 * H)), dz(static_cast<std::size_t>(2 * E)),
        dout(static_cast<std::size_t>(2 * H));
    msg = caught([&] {
      layer.forward(device_view{dh.data(), element_type::bf16, 2, H, H, dev}, device_view::of(dz.data(), 2, E, dev),
                    device_view::of(dout.data(), 2, H, dev), nullptr);
    });
    check(msg.find("nccl_masked: hidden is bfloat16, the dispatcher carries float32 rows") != std::string::npos &&
              same_everywhere(msg, msg),
          "nccl_masked: rows of another element type are refused ('" + msg + "')");
  }
  if (size_ >= 2) {
    const std::string msg = caught([&] {
      MaskedLayer layer(ep_config(p.cfg), local_share(p), a2a::nccl_masked(rank_ == size_ - 1 ? 9 : 8),
                        fixed_tiles());
    });
    check(same_everywhere(msg, "polymoe: nccl_masked: max_tokens differs between ranks (8 to 9)"),
          "nccl_masked: max_tokens that differ are refused together ('" + msg + "')");
  }
  const Problem q = make_problem({.weight_on_input = true});
  const std::string msg = caught([&] {
    NcclMoeLayer<a2a::nccl_masked, quant::bf16, kernel::cuda> layer(ep_config(q.cfg), local_share(q),
                                                                     a2a::nccl_masked(), fixed_tiles());
  });
  check(same_everywhere(msg, "polymoe: rank 0 of " + std::to_string(size_) +
                                 ": nccl_masked: the masked format computes each row unweighted; a layer with "
                                 "router_weight_on_input needs nccl_ragged"),
        "nccl_masked: a layer with the routing weight on its input is refused ('" + msg + "')");
}

}  // namespace

int main(int argc, char** argv) {
  start(argc, argv);
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess) devices = 0;
  const std::string why = cuda::unavailable_reason();
  if (devices < size_ || !why.empty()) {
    if (rank_ == 0)
      std::printf("SKIPPED: %d ranks need %d GPUs; this machine has %d%s%s\n", size_, size_, devices,
                  why.empty() ? "" : ": ", why.c_str());
    MPI_Finalize();
    return 77;
  }
  cudaSetDevice(rank_ % devices);
  if (rank_ == 0) std::printf("nccl %s, %d ranks on %d GPUs\n", cuda::nccl_version().c_str(), size_, devices);
  // every scheme of kernel::cuda's row in the table (H = 256: several fp8 groups of 128), then
  // the variants
  using schemes = boost::mp11::mp_transform<boost::mp11::mp_identity, pairing::kernel_schemes<nccl_table, kernel::cuda>>;
  for (bool even : {true, false}) {
    boost::mp11::mp_for_each<schemes>([&](auto id) { agreement<typename decltype(id)::type>({.hidden = 256}, even); });
    agreement<quant::bf16>({}, even);
    agreement<quant::bf16>({.shared = true}, even);
    agreement<quant::bf16>({.weight_on_input = true}, even);
    agreement<quant::fp8>({.shared = true, .hidden = 64}, even);
  }
  agreement<quant::bf16>({.poison = true}, true);
  // micro-batches: each exchanged while the kernel computes the one before, the same bits
  agreement<quant::bf16>({.shared = true}, true, 2);
  agreement<quant::bf16>({}, false, 2);
  agreement<quant::fp8_block>({.hidden = 256}, true, 3);
  agreement<quant::mxfp4_w4a16>({.hidden = 64, .weight_on_input = true}, false, 4);
  // the combine through NCCL where the default writes into the peers' memory
  agreement<quant::bf16>({.shared = true}, true, 1, false);
  agreement<quant::bf16>({}, false, 1, false);
  agreement<quant::fp8_block>({.hidden = 256}, true, 2, false);
  all_on_one_rank<quant::bf16>();
  all_on_one_rank<quant::fp8_block>();
  bad_input_on_one_rank<a2a::nccl_ragged>();
  mixed_element_types();
  layers_that_disagree();
  micro_batches_that_differ();
  direct_combine_that_differs();
  direct_and_nccl_in_turn();
  // nccl_masked: every scheme, the variants it takes, T = 0 on a rank, all tokens on one rank's
  // experts, a capacity overflowed, a graph replay, its refusals
  for (bool even : {true, false}) {
    boost::mp11::mp_for_each<schemes>(
        [&](auto id) { agreement<typename decltype(id)::type, a2a::nccl_masked>({.hidden = 256}, even); });
    agreement<quant::bf16, a2a::nccl_masked>({.shared = true}, even);
  }
  agreement<quant::bf16, a2a::nccl_masked>({.poison = true}, true);
  agreement<quant::fp8, a2a::nccl_masked>({.shared = true, .hidden = 64}, false);
  all_on_one_rank<quant::bf16, a2a::nccl_masked>();
  all_on_one_rank<quant::fp8_block, a2a::nccl_masked>();
  bad_input_on_one_rank<a2a::nccl_masked>();
  masked_overflow();
  masked_graph_replay();
  masked_refusals();
  return finish();
}
