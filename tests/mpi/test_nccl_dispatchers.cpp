// The NCCL dispatchers under mpirun, one GPU a rank (rank r on device r mod the devices): every
// rank's output bitwise what one GPU computes for its tokens (a2a::local, the same kernel with a
// fixed tile shape) and within the scheme's tolerance of the CPU reference, for every scheme of
// kernel::cuda's row (read from the table), with and without a shared expert, the routing weight
// on the input, hidden rows in fp32 and bf16, a rank with no tokens, all tokens on one rank's
// experts, and micro-batches; one rank's bad input is every rank's error; ranks that pass
// different element types, widths or micro-batch counts are refused together.
// With fewer GPUs than ranks the program says so and exits 77 (reported as skipped).
#include <cuda_runtime_api.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
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

a2a::nccl_ragged dispatcher(int micro_batches) {
  a2a::nccl_ragged d;
  d.micro_batches = micro_batches;
  return d;
}

template <class Q>
void agreement(Variant v, bool even, int micro_batches = 1) {
  const Problem p = make_problem(v);
  const Share s = share_of(p, even);
  const Matrix h = p.hidden.middleRows(s.first, s.count), logits = p.logits.middleRows(s.first, s.count);
  const std::string name = std::string(Q::name) + v.label() + (even ? " even shares" : " last rank without tokens") +
                           (micro_batches > 1 ? ", " + std::to_string(micro_batches) + " micro-batches" : "");
  CudaMoeLayer<a2a::local, Q, kernel::cuda> single(p.cfg, p.w, {}, fixed_tiles());
  NcclMoeLayer<a2a::nccl_ragged, Q, kernel::cuda> layer(ep_config(p.cfg), local_share(p), dispatcher(micro_batches),
                                                         fixed_tiles());
  // fp32 rows (the host conveniences: routing on the device)
  const Matrix got = layer.forward(h, logits), want = single.forward(h, logits);
  check(bitwise_equal(got, want), "nccl_ragged/" + name + ": bitwise the one-GPU layer");
  if (!v.poison) {
    MoeLayer<a2a::local, Q, kernel::reference> ref(p.cfg, p.w);
    const Matrix r = ref.forward(h, logits);
    const double err = got.rows() ? test::kernel_agreement_error<Q>(got, r) : 0.0;
    char e[64];
    std::snprintf(e, sizeof e, "%.3g of %.3g", err, test::kernel_tolerance<Q>);
    check(err <= test::kernel_tolerance<Q>, "nccl_ragged/" + name + ": the CPU reference within its tolerance (" + e + ")");
  }
  // bf16 rows on device views, bf16 out
  Matrix hr;
  const std::vector<std::uint16_t> hb = bf16_bits(h, hr);
  const int dev = cuda::current_device();
  const index_t T = h.rows(), H = h.cols(), E = p.cfg.num_experts;
  cuda::device_array<std::uint16_t> dh(hb.size()), dout(hb.size());
  cuda::device_array<float> dz(static_cast<std::size_t>(std::max<index_t>(1, T * E))), dref(hb.size());
  dh.upload(hb);
  const Matrix z = logits;
  if (z.size()) dz.upload({z.data(), static_cast<std::size_t>(z.size())});
  layer.forward(device_view::of_bf16(dh.data(), T, H, dev), device_view::of(dz.data(), T, E, dev),
                device_view::of_bf16(dout.data(), T, H, dev), nullptr);
  single.forward(device_view::of_bf16(dh.data(), T, H, dev), device_view::of(dz.data(), T, E, dev),
                 device_view::of(dref.data(), T, H, dev), nullptr);
  cuda::synchronize(nullptr);
  std::vector<std::uint16_t> ob(hb.size());
  dout.download(ob);
  const Matrix fr = download(dref, T, H);
  bool same = true;
  for (index_t i = 0; i < T * H; ++i) same &= ob[static_cast<std::size_t>(i)] == codecs::float_to_bf16(fr.data()[i]);
  check(same, "nccl_ragged/" + name + ": bf16 rows and out, bitwise the one-GPU layer's fp32 out rounded once");
}

/// Every token's slots on rank 0's experts (forward_routed): rank 0 computes them all.
template <class Q>
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
  NcclMoeLayer<a2a::nccl_ragged, Q, kernel::cuda> layer(ep_config(p.cfg), local_share(p), a2a::nccl_ragged(),
                                                         fixed_tiles());
  const Matrix got = layer.forward_routed(h, ids, w), want = single.forward_routed(h, ids, w);
  check(bitwise_equal(got, want), "nccl_ragged/" + std::string(Q::name) + ": all tokens on rank 0's experts, bitwise");
  const std::size_t sent = layer.dispatcher().dispatch_bytes();
  check(rank_ == 0 ? sent == 0 : sent > 0 || s.count == 0,
        "nccl_ragged: only the other ranks send rows (" + std::to_string(sent) + " bytes)");
}

void bad_input_on_one_rank() {
  const Problem p = make_problem({});
  NcclMoeLayer<a2a::nccl_ragged, quant::bf16, kernel::cuda> layer(ep_config(p.cfg), local_share(p),
                                                                   a2a::nccl_ragged(), fixed_tiles());
  bad_ids_on_one_rank(layer, "nccl_ragged");
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
  std::string msg;
  try {
    layer.forward(rank_ == 0 ? bf16 : f32, device_view::of(dz.data(), T, E, dev), device_view::of(dout.data(), T, H, dev),
                  nullptr);
    cuda::synchronize(nullptr);
  } catch (const error& e) {
    msg = e.what();
  }
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
  std::string msg;
  try {
    NcclMoeLayer<a2a::nccl_ragged, quant::bf16, kernel::cuda> layer(ep_config(p.cfg), local_share(p),
                                                                     dispatcher(rank_ == size_ - 1 ? 2 : 1),
                                                                     fixed_tiles());
  } catch (const error& e) {
    msg = e.what();
  }
  check(same_everywhere(msg, "polymoe: nccl_ragged: micro_batches differs between ranks (1 to 2)"),
        "nccl_ragged: micro_batches that differ are refused together ('" + msg + "')");
}

/// Layers that differ (another top_k on the last rank): refused together when built.
void layers_that_disagree() {
  if (size_ < 2) return;
  const Problem p = make_problem({});
  MoeConfig cfg = ep_config(p.cfg);
  if (rank_ == size_ - 1) cfg.router.top_k = 2;
  std::string msg;
  try {
    NcclMoeLayer<a2a::nccl_ragged, quant::bf16, kernel::cuda> layer(cfg, local_share(p), a2a::nccl_ragged(),
                                                                     fixed_tiles());
  } catch (const error& e) {
    msg = e.what();
  }
  const std::string who = "polymoe: rank " + std::to_string(size_ - 1) + " of " + std::to_string(size_) + ": top_k";
  check(same_everywhere(msg, msg) && msg.rfind(who, 0) == 0,
        "nccl_ragged: layers with different top_k are refused together ('" + msg + "')");
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
  all_on_one_rank<quant::bf16>();
  all_on_one_rank<quant::fp8_block>();
  bad_input_on_one_rank();
  mixed_element_types();
  layers_that_disagree();
  micro_batches_that_differ();
  return finish();
}
