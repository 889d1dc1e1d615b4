// a2a::nccl_ragged between GPUs, one process a GPU:   mpirun -np S polymoe_nccl_bench [options]
//
// On a Qwen3-30B-A3B layer (H=2048, I=768, E=128, k=8; bf16 rows, weights and out; uniform
// random routing), for each batch of T tokens a GPU:
//   - the machine's limits: NCCL's all-to-all (one group of ncclSend/ncclRecv, equal blocks) of
//     the bytes a rank's dispatch sends, its bus bandwidth as nccl-tests defines it (the bytes
//     that leave a rank / time); and the link itself: every rank's copy engines writing as many
//     bytes into the next rank's memory at once (CUDA IPC, no NCCL);
//   - the dispatch, the expert compute and the combine of the EP forward, each timed alone (the
//     ranks start it together and wait for it), with the bandwidth of dispatch + combine (bytes
//     that leave a rank / their time) against the all-to-all's;
//   - the whole EP forward (no waits between the steps; in 1, 2 and 4 micro-batches, each
//     exchanged while the kernel computes the one before; and in 1 through NCCL alone, without
//     the default's direct_combine) against
//     one GPU computing all S·T tokens with all E experts (kernel::cuda's automatic tiles on both).
// Then a2a::nccl_masked (DeepEP's low-latency mode: blocks of a fixed size, max_tokens = T, the
// default capacity) at decode batches (--masked-tokens): its steps alone, its whole forward
// eager and replayed from a CUDA graph, against nccl_ragged's forward and one GPU at the same T.
// Times are medians over --reps repetitions, the slowest rank's.
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <polymoe/codecs/bf16.hpp>
#include <polymoe/nccl.hpp>

#include "cli11_support.hpp"
#include "mpi_ranks.hpp"

using namespace polymoe;
using clk = std::chrono::steady_clock;

namespace {

int rank_ = 0, size_ = 1;

void ck(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw error(polymoe::detail::concat("bench: ", what, ": ", cudaGetErrorName(e)));
}
void nk(ncclResult_t r, const char* what) {
  if (r != ncclSuccess) throw error(polymoe::detail::concat("bench: ", what, ": ", ncclGetErrorString(r)));
}

using bench::max_over_ranks;
using bench::median;

/// Microseconds of body(), the ranks started together, waited for on `s`; median over reps,
/// slowest rank.
template <class F>
double time_us(cudaStream_t s, int reps, F&& body) {
  std::vector<double> t;
  for (int r = 0; r < reps; ++r) {
    MPI_Barrier(MPI_COMM_WORLD);
    const auto a = clk::now();
    body();
    ck(cudaStreamSynchronize(s), "cudaStreamSynchronize");
    t.push_back(std::chrono::duration<double, std::micro>(clk::now() - a).count());
  }
  return max_over_ranks(median(t));
}

/// GB/s of the link: each rank's copy engines write `bytes` into the next rank's memory (a CUDA IPC
/// handle), all ranks at once; the slowest rank's median.
double peer_copy_gbps(std::size_t bytes, cudaStream_t s, int reps) {
  if (size_ < 2) return 0.0;
  cuda::device_memory src(bytes), dst(bytes);
  cudaIpcMemHandle_t mine;
  ck(cudaIpcGetMemHandle(&mine, dst.get()), "cudaIpcGetMemHandle");
  std::vector<cudaIpcMemHandle_t> all(static_cast<std::size_t>(size_));
  MPI_Allgather(&mine, sizeof mine, MPI_BYTE, all.data(), sizeof mine, MPI_BYTE, MPI_COMM_WORLD);
  void* peer = nullptr;
  ck(cudaIpcOpenMemHandle(&peer, all[static_cast<std::size_t>((rank_ + 1) % size_)], cudaIpcMemLazyEnablePeerAccess),
     "cudaIpcOpenMemHandle");
  const auto copy = [&] { ck(cudaMemcpyAsync(peer, src.get(), bytes, cudaMemcpyDeviceToDevice, s), "cudaMemcpyAsync"); };
  copy();
  const double t = time_us(s, reps, copy);
  ck(cudaIpcCloseMemHandle(peer), "cudaIpcCloseMemHandle");
  MPI_Barrier(MPI_COMM_WORLD);  // no rank frees its memory while another has it open
  return static_cast<double>(bytes) / t / 1e3;
}

/// Random bf16 weights of E experts (values of about 1/sqrt(fan-in)), in quant::bf16's store.
quant::bf16::weights random_weights(index_t E, index_t H, index_t I, std::uint32_t seed) {
  quant::bf16::weights w;
  w.shape_ = ExpertShape{E, H, I, true, false};
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<std::uint16_t> table(4096);
  for (auto& v : table) v = codecs::float_to_bf16(nd(rng) / std::sqrt(static_cast<float>(H)));
  std::uint32_t lcg = seed * 2654435761u + 1;
  auto next = [&] { return (lcg = lcg * 1664525u + 1013904223u) >> 8; };
  w.w13.resize(static_cast<std::size_t>(E * 2 * I * H));
  w.w2.resize(static_cast<std::size_t>(E * H * I));
  for (auto& v : w.w13) v = table[next() % 4096];
  for (auto& v : w.w2) v = table[next() % 4096];
  return w;
}

/// ids [T, k] of k distinct experts out of E, uniform; weights 1/k.
void random_routing(std::mt19937& rng, index_t T, index_t E, index_t k, std::vector<std::int32_t>& ids,
                    std::vector<float>& w) {
  ids.resize(static_cast<std::size_t>(T * k));
  w.assign(ids.size(), 1.0f / static_cast<float>(k));
  std::vector<std::int32_t> perm(static_cast<std::size_t>(E));
  for (index_t t = 0; t < T; ++t) {
    for (index_t e = 0; e < E; ++e) perm[static_cast<std::size_t>(e)] = static_cast<std::int32_t>(e);
    for (index_t j = 0; j < k; ++j) {
      std::uniform_int_distribution<index_t> pick(j, E - 1);
      std::swap(perm[static_cast<std::size_t>(j)], perm[static_cast<std::size_t>(pick(rng))]);
      ids[static_cast<std::size_t>(t * k + j)] = perm[static_cast<std::size_t>(j)];
    }
  }
}

/// One batch of T tokens on the device: random bf16 rows, uniform routing, an output.
struct batch {
  std::vector<std::uint16_t> hx;
  std::vector<std::int32_t> hid;
  std::vector<float> hw;
  cuda::device_array<std::uint16_t> x, out;
  cuda::device_array<std::int32_t> ids;
  cuda::device_array<float> w;
  index_t T, H, k;
  int dev;
  batch(std::mt19937& rng, index_t T_, index_t H_, index_t E, index_t k_, int dev_) : T(T_), H(H_), k(k_), dev(dev_) {
    random_routing(rng, T, E, k, hid, hw);
    hx.resize(static_cast<std::size_t>(T * H));
    for (auto& v : hx) v = codecs::float_to_bf16(std::normal_distribution<float>(0.0f, 1.0f)(rng));
    x = cuda::device_array<std::uint16_t>(hx.size());
    out = cuda::device_array<std::uint16_t>(hx.size());
    ids = cuda::device_array<std::int32_t>(hid.size());
    w = cuda::device_array<float>(hw.size());
    x.upload(hx);
    ids.upload(hid);
    w.upload(hw);
  }
  [[nodiscard]] device_view view(const cuda::device_array<std::uint16_t>& a) const {
    return device_view::of_bf16(a.data(), T, H, dev);
  }
  [[nodiscard]] device_view ids_view() const { return device_view::of(ids.data(), T, k, dev); }
  [[nodiscard]] device_view weights_view() const { return device_view::of(w.data(), T, k, dev); }
};

}  // namespace

int main(int argc, char** argv) try {
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
  MPI_Comm_size(MPI_COMM_WORLD, &size_);
  index_t H = 2048, I = 768, E = 128, k = 8;
  std::vector<index_t> tokens{4096, 8192}, masked_tokens{1, 16, 128};
  int reps = 10;
  CLI::App app("polymoe_nccl_bench: a2a::nccl_ragged's dispatch, compute and combine, against NCCL's all-to-all and "
               "one GPU",
               "polymoe_nccl_bench");
  programs::set_up(app, POLYMOE_VERSION_STRING, POLYMOE_GIT_COMMIT);
  const auto positive = CLI::Range(index_t{1}, index_t{1} << 30);
  app.add_option("--hidden", H, "H (default 2048)")->type_name("N")->check(positive);
  app.add_option("--inter", I, "I (default 768)")->type_name("N")->check(positive);
  app.add_option("--experts", E, "E, a multiple of the ranks (default 128)")->type_name("N")->check(positive);
  app.add_option("--top-k", k, "k (default 8)")->type_name("N")->check(positive);
  app.add_option("--tokens", tokens, "tokens a GPU (default 4096,8192)")->delimiter(',')->type_name("LIST")->check(positive);
  app.add_option("--masked-tokens", masked_tokens, "tokens a GPU of the nccl_masked table (default 1,16,128)")
      ->delimiter(',')
      ->type_name("LIST")
      ->check(positive);
  app.add_option("--reps", reps, "repetitions a timing (default 10)")->type_name("N")->check(CLI::Range(1, 1000));
  if (const auto status = programs::parse(app, argc, argv, 2)) {
    MPI_Finalize();
    return *status;
  }
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices < size_) {
    if (rank_ == 0) std::printf("polymoe_nccl_bench: skipped: %d ranks need %d GPUs, this machine has %d\n", size_, size_, devices);
    MPI_Finalize();
    return 0;
  }
  require(E % size_ == 0 && k <= E, "--experts ", E, " must be a multiple of the ", size_, " ranks and >= top-k");
  ck(cudaSetDevice(rank_ % devices), "cudaSetDevice");
  const int dev = cuda::current_device();
  cudaStream_t s;
  ck(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreate");
  if (rank_ == 0)
    std::printf("%d ranks, one %s each; nccl %s\nlayer: H=%lld I=%lld E=%lld k=%lld, bf16 rows, weights and out\n",
                size_, cuda::device_name(dev).c_str(), cuda::nccl_version().c_str(), (long long)H, (long long)I,
                (long long)E, (long long)k);

  const index_t El = E / size_;
  MoeConfig cfg;
  cfg.hidden = H;
  cfg.intermediate = I;
  cfg.num_experts = E;
  cfg.router.top_k = k;
  cfg.ep_size = size_;
  cfg.ep_rank = rank_;
  a2a::nccl_ragged ep;
  ep.configure(cfg);
  ep.connect(dev);
  a2a::nccl_ragged ep2(ep.nccl()), ep4(ep.nccl()), epn(ep.nccl());  // the same communicator
  ep2.micro_batches = 2;  // in micro-batches
  ep4.micro_batches = 4;
  epn.direct_combine = false;  // every combine through NCCL
  for (a2a::nccl_ragged* e : {&ep2, &ep4, &epn}) {
    e->configure(cfg);
    e->connect(dev);
  }
  if (rank_ == 0)
    std::printf("nccl_ragged's direct_combine: %s\n",
                ep.combines_directly() ? "on (each rank's copy engines into the others' memory, CUDA IPC)"
                                        : "off (the ranks are not on one host, or cannot map each other's memory)");
  const ExpertMlp mlp{};
  cuda::Experts mine(random_weights(El, H, I, 7u + static_cast<std::uint32_t>(rank_)), mlp);
  std::optional<cuda::Experts> all;  // rank 0: one GPU with every expert
  if (rank_ == 0) all.emplace(random_weights(E, H, I, 99u), mlp);
  const auto comm = static_cast<ncclComm_t>(ep.nccl()->get());

  std::mt19937 rng(1234u + static_cast<unsigned>(rank_));
  // rank 0: one GPU computing the S·T tokens of a batch with all E experts
  const auto one_gpu = [&](index_t T, const std::vector<std::uint16_t>& hx) {
    if (rank_ != 0) return 0.0;
    const index_t Ta = T * size_;
    std::vector<std::int32_t> aid;
    std::vector<float> aw;
    random_routing(rng, Ta, E, k, aid, aw);
    cuda::device_array<std::uint16_t> ax(static_cast<std::size_t>(Ta * H)), aout(static_cast<std::size_t>(Ta * H));
    cuda::device_array<std::int32_t> ai(aid.size());
    cuda::device_array<float> awd(aw.size());
    std::vector<std::uint16_t> hax(static_cast<std::size_t>(Ta * H));
    for (std::size_t i = 0; i < hax.size(); ++i) hax[i] = hx[i % hx.size()];
    ax.upload(hax);
    ai.upload(aid);
    awd.upload(aw);
    const cuda::routed_call call{device_view::of_bf16(ax.data(), Ta, H, dev), device_view::of(ai.data(), Ta, k, dev),
                                 device_view::of(awd.data(), Ta, k, dev), device_view::of_bf16(aout.data(), Ta, H, dev)};
    all->run(call, mlp, s);
    std::vector<double> t;
    for (int r = 0; r < reps; ++r) {
      const auto a = clk::now();
      all->run(call, mlp, s);
      ck(cudaStreamSynchronize(s), "cudaStreamSynchronize");
      t.push_back(std::chrono::duration<double, std::micro>(clk::now() - a).count());
    }
    return median(t);
  };
  // the kernel step on the format a dispatcher hands over (ragged: each slot's row where it
  // returns; masked: each valid row's own), on the dispatch output's stream
  const kernel::cuda kernel;
  const auto compute = [&](const auto& d, auto& c) { kernel.run<quant::bf16>(d, mine, mlp, c); };
  if (rank_ == 0)
    std::printf("\n  T/GPU  all-to-all MB  busbw GB/s  link GB/s | dispatch us  compute us  combine us  d+c GB/s  of a2a  of link |"
                "  EP fwd us: 1 batch  2 batches  4 batches  through NCCL | 1-GPU us (S*T)  speedup\n");
  for (const index_t T : tokens) {
    const batch b(rng, T, H, E, k, dev);
    const std::vector<std::uint16_t>& hx = b.hx;
    const device_view xv = b.view(b.x), ov = b.view(b.out), iv = b.ids_view(), wv = b.weights_view();
    ep.reserve(T);
    for (int i = 0; i < 2; ++i) ep.forward(xv, iv, wv, cfg, ov, s, compute);  // sizes the buffers
    ck(cudaStreamSynchronize(s), "cudaStreamSynchronize");

    // the steps alone
    DispatchOutput<format::ragged, space::cuda> d{};
    CombineInput<format::ragged, space::cuda> c{};
    std::vector<double> td, tc, tm;
    for (int r = 0; r < reps; ++r) {
      td.push_back(time_us(s, 1, [&] { d = ep.dispatch(xv, iv, wv, cfg, s); }));
      c = ep.combine_input(d, ov);
      tm.push_back(time_us(s, 1, [&] { compute(d, c); }));
      tc.push_back(time_us(s, 1, [&] { ep.combine(c, ov); }));
    }
    const double t_d = median(td), t_m = median(tm), t_c = median(tc);
    const double bytes_d = max_over_ranks(static_cast<double>(ep.dispatch_bytes()));
    const double bytes_c = max_over_ranks(static_cast<double>(ep.combine_bytes()));

    // NCCL's all-to-all of the dispatch's bytes: equal blocks to every peer
    const std::size_t block = static_cast<std::size_t>(bytes_d / std::max(1, size_ - 1)) / 16 * 16 + 16;
    cuda::device_memory a2a_send(block * static_cast<std::size_t>(size_)), a2a_recv(block * static_cast<std::size_t>(size_));
    auto alltoall = [&] {
      nk(ncclGroupStart(), "ncclGroupStart");
      for (int p = 0; p < size_; ++p) {
        nk(ncclSend(static_cast<char*>(a2a_send.get()) + block * p, block, ncclUint8, p, comm, s),
           "ncclSend");
        nk(ncclRecv(static_cast<char*>(a2a_recv.get()) + block * p, block, ncclUint8, p, comm, s),
           "ncclRecv");
      }
      nk(ncclGroupEnd(), "ncclGroupEnd");
    };
    alltoall();
    const double t_a = time_us(s, reps, alltoall);
    const double busbw = static_cast<double>(block) * (size_ - 1) / t_a / 1e3;
    const double link = peer_copy_gbps(block * static_cast<std::size_t>(size_ - 1), s, reps);
    const double dcbw = (bytes_d + bytes_c) / (t_d + t_c) / 1e3;

    // the whole forward (in 1, 2 and 4 micro-batches), and one GPU with S·T tokens
    double t_ep[4];
    for (int v = 0; v < 4; ++v) {
      a2a::nccl_ragged& e = v == 0 ? ep : v == 1 ? ep2 : v == 2 ? ep4 : epn;
      const auto run = [&] { e.forward(xv, iv, wv, cfg, ov, s, compute); };
      e.reserve(T);
      run();
      t_ep[v] = time_us(s, reps, run);
    }
    const double t_one = one_gpu(T, hx);
    if (rank_ == 0)
      std::printf("%7lld  %13.1f  %10.1f  %9.1f | %11.0f  %10.0f  %10.0f  %8.1f  %5.0f%%  %6.0f%% | %19.0f  %9.0f  %9.0f  "
                  "%12.0f | %14.0f  %6.2fx\n",
                  (long long)T, static_cast<double>(block) * size_ / 1e6, busbw, link, t_d, t_m, t_c, dcbw,
                  100.0 * dcbw / busbw, 100.0 * dcbw / link, t_ep[0], t_ep[1], t_ep[2], t_ep[3], t_one,
                  t_one / std::min({t_ep[0], t_ep[1], t_ep[2], t_ep[3]}));
  }
  if (rank_ == 0)
    std::printf("(MB: what a rank sends in the all-to-all; GB/s: bytes that leave a rank / time; d+c: the dispatch's "
                "records and the combine's fp32 rows)\n");
  if (rank_ == 0)
    std::printf("\n  nccl_masked (max_tokens = T, capacity ranks*T)\n  T/GPU  dispatch us  compute us  combine us |"
                "  fwd us  graph us | nccl_ragged fwd us | 1-GPU us (S*T)\n");
  for (const index_t T : masked_tokens) {
    const batch b(rng, T, H, E, k, dev);
    const std::vector<std::uint16_t>& hx = b.hx;
    const device_view xv = b.view(b.x), ov = b.view(b.out), iv = b.ids_view(), wv = b.weights_view();
    a2a::nccl_masked mk(ep.nccl(), T);
    mk.configure(cfg);
    mk.connect(dev);
    DispatchOutput<format::masked, space::cuda> d{};
    CombineInput<format::masked, space::cuda> c{};
    const auto forward = [&] {
      d = mk.dispatch(xv, iv, wv, cfg, s);
      c = mk.combine_input(d, ov);
      compute(d, c);
      mk.combine(c, ov);
    };
    for (int i = 0; i < 2; ++i) forward();  // the kernel's workspace
    ck(cudaStreamSynchronize(s), "cudaStreamSynchronize");
    std::vector<double> td, tc, tm;
    for (int r = 0; r < reps; ++r) {
      td.push_back(time_us(s, 1, [&] { d = mk.dispatch(xv, iv, wv, cfg, s); }));
      c = mk.combine_input(d, ov);
      tm.push_back(time_us(s, 1, [&] { compute(d, c); }));
      tc.push_back(time_us(s, 1, [&] { mk.combine(c, ov); }));
    }
    const double t_fwd = time_us(s, reps, forward);
    cudaGraph_t graph = nullptr;
    cudaGraphExec_t exec = nullptr;
    ck(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal), "cudaStreamBeginCapture");
    forward();
    ck(cudaStreamEndCapture(s, &graph), "cudaStreamEndCapture");
    ck(cudaGraphInstantiate(&exec, graph, 0), "cudaGraphInstantiate");
    ck(cudaGraphLaunch(exec, s), "cudaGraphLaunch");
    const double t_graph = time_us(s, reps, [&] { ck(cudaGraphLaunch(exec, s), "cudaGraphLaunch"); });
    cudaGraphExecDestroy(exec);
    cudaGraphDestroy(graph);
    const auto ragged = [&] { ep.forward(xv, iv, wv, cfg, ov, s, compute); };
    ep.reserve(T);
    ragged();
    const double t_ragged = time_us(s, reps, ragged);
    const double t_one = one_gpu(T, hx);
    if (rank_ == 0)
      std::printf("%7lld  %11.0f  %10.0f  %10.0f | %7.0f  %8.0f | %18.0f | %14.0f\n", (long long)T, median(td),
                  median(tm), median(tc), t_fwd, t_graph, t_ragged, t_one);
  }
  all.reset();
  MPI_Finalize();
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "polymoe_nccl_bench: rank %d: %s\n", rank_, e.what());
  MPI_Abort(MPI_COMM_WORLD, 1);
  return 1;
}
