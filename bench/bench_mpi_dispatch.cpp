// Dispatch and combine throughput of the MPI dispatchers, and an experiment that overlaps the
// token exchange with expert compute.   mpirun -np R bench_mpi_dispatch [--reps N]
//
// Throughput: each dispatcher's dispatch() and combine() alone (no expert compute), on a
// Qwen3-30B-A3B-shaped routing (H=2048, E=128, k=8), for decode-sized (4 tokens per rank) and
// prefill-sized (512 tokens per rank) batches, with fp32 rows and (ragged, masked) with fp8_block's
// quantized wire (E4M3 codes + one amax per 128). MB is what this rank sends to other ranks, as
// the dispatcher counts it (records with ids, codes, amaxes);
// GB/s = those bytes / time, per rank, median over repetitions, slowest rank.
//
// Overlap: per-slot exchange of remote rows with MPI_Ialltoallv while the rows whose expert is on
// this rank are computed, versus the same exchange done first and compute after (smaller shape:
// H=1024, I=512, E=32, k=4, fp32, tbb_grouped kernel, 256 tokens per rank).
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include <boost/mp11/algorithm.hpp>
#include <polymoe/mpi.hpp>

#include "cli11_support.hpp"
#include "mpi_ranks.hpp"

using namespace polymoe;
using clk = std::chrono::steady_clock;

namespace {
int rank_ = 0, size_ = 1;

using bench::max_over_ranks;
using bench::median;
double sum_over_ranks(double x) {
  double m = 0;
  MPI_Allreduce(&x, &m, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
  return m;
}

Routing random_routing(std::mt19937& rng, index_t T, index_t E, index_t k) {
  Routing r;
  r.ids.resize(T, k);
  r.weights.setConstant(T, k, 1.0f / static_cast<float>(k));
  std::vector<std::int32_t> perm(static_cast<std::size_t>(E));
  for (index_t t = 0; t < T; ++t) {
    std::iota(perm.begin(), perm.end(), 0);
    std::shuffle(perm.begin(), perm.end(), rng);
    for (index_t j = 0; j < k; ++j) r.ids(t, j) = perm[j];
  }
  return r;
}

template <class A>
A make() {
  if constexpr (std::is_same_v<A, a2a::mpi_masked>)
    return A(512);
  else
    return A();
}

template <class A, class Wire = wire::fp32>
void throughput(index_t T, int reps) {
  const index_t H = 2048, E = 128, k = 8;
  MoeConfig cfg;
  cfg.hidden = H;
  cfg.intermediate = 768;
  cfg.num_experts = E;
  cfg.router.top_k = k;
  cfg.ep_size = size_;
  cfg.ep_rank = rank_;
  std::mt19937 rng(100 + rank_);
  const Matrix hidden = Matrix::Random(T, H);
  const Routing r = random_routing(rng, T, E, k);
  A a2a = make<A>();
  a2a.configure(cfg);
  Matrix out(T, H);
  constexpr bool allgather = std::is_same_v<A, a2a::mpi_allgather>;
  double d_bytes = 0, c_bytes = 0;
  std::vector<double> td, tc;
  for (int i = 0; i < reps + 1; ++i) {
    MPI_Barrier(MPI_COMM_WORLD);
    const auto t0 = clk::now();
    auto d = [&] {
      if constexpr (allgather)
        return a2a.dispatch(hidden, r.ids, r.weights, cfg);
      else
        return a2a.dispatch(hidden, r.ids, r.weights, cfg, Wire{});
    }();
    const auto t1 = clk::now();
    auto c = a2a.combine_input(d, out);
    c.out.setZero();
    MPI_Barrier(MPI_COMM_WORLD);
    const auto t2 = clk::now();
    a2a.combine(c, out);
    const auto t3 = clk::now();
    d_bytes = static_cast<double>(a2a.dispatch_bytes());
    c_bytes = static_cast<double>(a2a.combine_bytes());
    if (i == 0) continue;  // warm-up
    td.push_back(std::chrono::duration<double>(t1 - t0).count());
    tc.push_back(std::chrono::duration<double>(t3 - t2).count());
  }
  const double d_s = max_over_ranks(median(td)), c_s = max_over_ranks(median(tc));
  const double d_mean = sum_over_ranks(d_bytes) / size_, c_mean = sum_over_ranks(c_bytes) / size_;
  if (rank_ == 0)
    std::printf("%-13s %-15s ranks=%d tokens/rank=%-4ld dispatch %8.1f us %7.2f MB %6.2f GB/s   combine %8.1f us "
                "%7.2f MB %6.2f GB/s\n",
                std::string(A::name).c_str(), std::string(Wire::name).c_str(), size_, static_cast<long>(T), d_s * 1e6,
                d_mean / 1e6, d_mean / d_s / 1e9, c_s * 1e6, c_mean / 1e6, c_mean / c_s / 1e9);
}

/// Remote rows travel with MPI_Ialltoallv while local rows are computed (overlap), or the exchange
/// completes first (sequential). Both compute exactly the same rows with the same kernel.
void overlap_experiment(int reps) {
  const index_t H = 1024, I = 512, E = 32, k = 4, T = 256, El = E / size_;
  MoeConfig cfg;
  cfg.hidden = H;
  cfg.intermediate = I;
  cfg.num_experts = El;  // the kernel sees local experts only
  cfg.router.top_k = 1;
  std::mt19937 rng(7 + rank_);
  MoeWeights w;
  w.experts = ExpertWeights(ExpertShape{El, H, I, true, false});
  w.experts.w13.setRandom();
  w.experts.w2.setRandom();
  const auto prepared = kernel::tbb_grouped::prepare<quant::fp32>(quant::fp32::quantize(w.experts));
  const ExpertMlp mlp{ActivationParams{}, false};
  const Matrix hidden = Matrix::Random(T, H);
  const Routing r = random_routing(rng, T, E, k);
  // Split this rank's (token, slot) rows into local ones and per-destination remote ones.
  std::vector<std::vector<index_t>> to(static_cast<std::size_t>(size_));
  for (index_t t = 0; t < T; ++t)
    for (index_t j = 0; j < k; ++j) to[r.ids(t, j) / El].push_back(t * k + j);
  std::vector<int> sc(static_cast<std::size_t>(size_)), rc(static_cast<std::size_t>(size_)), sd(sc.size()), rd(sc.size());
  for (int d = 0; d < size_; ++d) sc[d] = d == rank_ ? 0 : static_cast<int>(to[d].size());
  MPI_Alltoall(sc.data(), 1, MPI_INT, rc.data(), 1, MPI_INT, MPI_COMM_WORLD);
  index_t nsend = 0, nrecv = 0;
  for (int d = 0; d < size_; ++d) nsend += sc[d], nrecv += rc[d];
  Matrix send(nsend, H), recv(nrecv, H);
  Matrix local_rows(static_cast<index_t>(to[rank_].size()), H);
  IdMatrix local_ids(local_rows.rows(), 1);
  for (std::size_t i = 0; i < to[rank_].size(); ++i) {
    local_rows.row(static_cast<index_t>(i)) = hidden.row(to[rank_][i] / k);
    local_ids(static_cast<index_t>(i), 0) = r.ids(to[rank_][i] / k, to[rank_][i] % k) % static_cast<std::int32_t>(El);
  }
  index_t p = 0;
  for (int d = 0; d < size_; ++d)
    if (d != rank_)
      for (index_t s : to[d]) send.row(p++) = hidden.row(s / k);
  for (auto* v : {&sc, &rc})
    for (int& c : *v) c *= static_cast<int>(H);
  for (int d = 1; d < size_; ++d) sd[d] = sd[d - 1] + sc[d - 1], rd[d] = rd[d - 1] + rc[d - 1];
  // Remote rows' expert ids are not shipped in this experiment: they are computed as expert 0.
  IdMatrix recv_ids = IdMatrix::Zero(nrecv, 1);
  const Matrix ones_l = Matrix::Ones(local_rows.rows(), 1), ones_r = Matrix::Ones(nrecv, 1);
  Matrix out_l(local_rows.rows(), H), out_r(nrecv, H);
  auto compute_local = [&] {
    kernel::tbb_grouped{}.run<quant::fp32>({local_rows, local_ids, ones_l, El}, prepared, mlp, {out_l});
  };
  auto compute_remote = [&] {
    kernel::tbb_grouped{}.run<quant::fp32>({recv, recv_ids, ones_r, El}, prepared, mlp, {out_r});
  };
  std::vector<double> seq, ovl;
  for (int i = 0; i < reps + 1; ++i) {
    MPI_Barrier(MPI_COMM_WORLD);
    auto t0 = clk::now();
    MPI_Alltoallv(send.data(), sc.data(), sd.data(), MPI_FLOAT, recv.data(), rc.data(), rd.data(), MPI_FLOAT,
                  MPI_COMM_WORLD);
    compute_local();
    compute_remote();
    const double a = std::chrono::duration<double>(clk::now() - t0).count();
    MPI_Barrier(MPI_COMM_WORLD);
    t0 = clk::now();
    MPI_Request req;
    MPI_Ialltoallv(send.data(), sc.data(), sd.data(), MPI_FLOAT, recv.data(), rc.data(), rd.data(), MPI_FLOAT,
                   MPI_COMM_WORLD, &req);
    compute_local();
    MPI_Wait(&req, MPI_STATUS_IGNORE);
    compute_remote();
    const double b = std::chrono::duration<double>(clk::now() - t0).count();
    if (i) seq.push_back(a), ovl.push_back(b);
  }
  const double s = max_over_ranks(median(seq)), o = max_over_ranks(median(ovl));
  if (rank_ == 0)
    std::printf("overlap experiment ranks=%d (H=%ld I=%ld E=%ld k=%ld, %ld tokens/rank): sequential %.2f ms, "
                "overlapped %.2f ms, speed-up %.2fx\n",
                size_, static_cast<long>(H), static_cast<long>(I), static_cast<long>(E), static_cast<long>(k),
                static_cast<long>(T), s * 1e3, o * 1e3, s / o);
}
}  // namespace

int main(int argc, char** argv) {
  int reps = 10;
  CLI::App app("bench_mpi_dispatch: the MPI dispatchers' dispatch and combine throughput, and an overlap "
               "experiment (under mpirun -np R)",
               "bench_mpi_dispatch");
  programs::set_up(app, POLYMOE_VERSION_STRING, POLYMOE_GIT_COMMIT);
  app.add_option("--reps", reps, "repetitions per measurement (default 10; the median is reported)")
      ->type_name("N")
      ->check(CLI::Range(1, 1 << 20));
  // before MPI starts: a bad command line ends every rank alike, none waits for another
  if (const auto status = programs::parse(app, argc, argv, 2)) return *status;
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
  MPI_Comm_size(MPI_COMM_WORLD, &size_);
  for (index_t T : {4, 512}) {
    throughput<a2a::mpi_allgather>(T, reps);
    throughput<a2a::mpi_ragged>(T, reps);
    throughput<a2a::mpi_ragged, activation_wire_t<quant::fp8_block>>(T, reps);
    throughput<a2a::mpi_masked>(T, reps);
    throughput<a2a::mpi_masked, activation_wire_t<quant::fp8_block>>(T, reps);
  }
  overlap_experiment(reps);
  MPI_Finalize();
  return 0;
}
