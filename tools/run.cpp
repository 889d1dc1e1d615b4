// `polymoe run`: one layer of a checkpoint on an input file, with the selected (a2a, quant, kernel).
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <limits>
#include <memory>

#include <tbb/global_control.h>

#include <polymoe/a2a/fingerprint.hpp>
#include <polymoe/io/safetensors.hpp>
#include <polymoe/kernels/tiled/tuning.hpp>

#include "cli.hpp"
#include "progress.hpp"
#include "run_layer.hpp"
#include "selection.hpp"

#if defined(POLYMOE_WITH_MPI)
#include <mpi.h>

#include <polymoe/a2a/detail/mpi_base.hpp>
#endif

namespace polymoe::cli {
namespace {

/// The scheme a layer stored as `s` (float weights of dtype `d`) runs unless told otherwise: bf16
/// for BF16 weights, fp32 for F32 and F16 (exact), else the one its checkpoint layout names.
std::string default_quant(io::stored_scheme s, io::dtype d) {
  if (s.is_float()) return d == io::dtype::BF16 ? "bf16" : "fp32";
  return std::string(io::with_layout(s, []<class W>(boost::mp11::mp_identity<W>) {
    return quant::checkpoint_layout<W>::scheme::name;
  }));
}

/// Router logits computed row by row (a matrix-vector product per token), so that a token's
/// logits do not depend on how many tokens share the batch (single-process and MPI runs agree).
template <class W>
Matrix compute_logits(const BasicMoeWeights<W>& w, const Matrix& hidden, index_t layer) {
  require(w.router_weight.size() > 0, "run: layer ", layer, " has no router weight to compute router_logits");
  Matrix logits(hidden.rows(), w.router_weight.rows());
  for (index_t t = 0; t < hidden.rows(); ++t) {
    Vector z = w.router_weight * hidden.row(t).transpose();
    if (w.router_bias.size()) z += w.router_bias;
    logits.row(t) = z.transpose();
  }
  return logits;
}

struct mpi_session {
  bool active = false;
  int rank = 0, size = 1;
  int host_rank = 0, host_size = 1;  ///< among the ranks on this host
  /// MPI starts for an mpi_* dispatcher, and in every process an MPI launcher started (mpirun,
  /// mpiexec, srun), whatever its --a2a: each takes part in the ranks' agreement (agree), so a rank
  /// given --a2a local fails with the others instead of leaving them waiting for it.
  explicit mpi_session(bool want, int& argc, char**& argv) {
#if defined(POLYMOE_WITH_MPI)
    if (want || std::getenv("OMPI_COMM_WORLD_SIZE") || std::getenv("PMI_SIZE") || std::getenv("PMIX_RANK")) {
      int provided = 0;
      MPI_Init_thread(&argc, &argv, MPI_THREAD_FUNNELED, &provided);
      MPI_Comm_rank(MPI_COMM_WORLD, &rank);
      MPI_Comm_size(MPI_COMM_WORLD, &size);
      const polymoe::a2a::detail::host_place here = polymoe::a2a::detail::place_on_host(MPI_COMM_WORLD, rank);
      host_rank = here.rank;
      host_size = here.size;
      active = true;
    }
#else
    (void)want, (void)argc, (void)argv;
#endif
  }
  ~mpi_session() {
#if defined(POLYMOE_WITH_MPI)
    if (active) MPI_Finalize();
#endif
  }
  /// After a failure on this rank: with other ranks possibly waiting in a collective, end them all.
  void abort_all() const {
#if defined(POLYMOE_WITH_MPI)
    if (active && size > 1) MPI_Abort(MPI_COMM_WORLD, 1);
#endif
  }
  /// The ranks split one input between them: they must run the same layer on the same tokens.
  /// Compared before the layer is built; a difference is every rank's a2a::collective_error.
  void agree(const a2a::fingerprint& same) const {
#if defined(POLYMOE_WITH_MPI)
    if (active && size > 1) a2a::detail::mpi_base(MPI_COMM_WORLD).agree_fingerprint(same);
#else
    (void)same;
#endif
  }
  void barrier() const {
#if defined(POLYMOE_WITH_MPI)
    if (active) MPI_Barrier(MPI_COMM_WORLD);
#endif
  }
  /// Rows [begin, end) of T for this rank.
  [[nodiscard]] std::pair<index_t, index_t> share(index_t T) const {
    return {T * rank / size, T * (rank + 1) / size};
  }
  /// Rank 0 receives every rank's rows of `local` (same column count), in rank order.
  template <class M>
  M gather_rows(const M& local, index_t total_rows) const {
    if (!active || size == 1) return local;
#if defined(POLYMOE_WITH_MPI)
    using S = typename M::Scalar;
    const MPI_Datatype type = std::is_same_v<S, float> ? MPI_FLOAT : MPI_INT32_T;
    const int mine = static_cast<int>(local.size());
    std::vector<int> counts(static_cast<std::size_t>(size)), displs(static_cast<std::size_t>(size));
    MPI_Allgather(&mine, 1, MPI_INT, counts.data(), 1, MPI_INT, MPI_COMM_WORLD);
    for (int r = 1; r < size; ++r) displs[r] = displs[r - 1] + counts[r - 1];
    // Every row of the output is written, or the run fails (every rank sees the same counts).
    const index_t held = (index_t{displs.back()} + counts.back()) / std::max<index_t>(1, local.cols());
    require(held == total_rows, "run: the ranks hold ", held, " rows of the output, expected ", total_rows);
    M all;
    if (rank == 0) all.resize(total_rows, local.cols());
    MPI_Gatherv(local.data(), mine, type, rank == 0 ? all.data() : nullptr, counts.data(), displs.data(), type, 0,
                MPI_COMM_WORLD);
    return all;
#else
    (void)total_rows;
    return local;
#endif
  }
};

}  // namespace

namespace {

/// `polymoe run`'s settings, as the command line gives them.
struct run_settings {
  std::string checkpoint, input, output, a2a = "local", quant, kernel = "auto", tuning_text;
  index_t layer = 0;
  std::int64_t threads = 0, repeat = 1, capacity = 0;
  bool ignore_input_logits = false;
  progress_flags shown;
  const CLI::Option *quant_given = nullptr, *tuning_given = nullptr, *threads_given = nullptr;
};

int run_layer_command(const run_settings& s, char* argv0);

}  // namespace

command add_run(CLI::App& polymoe, char* argv0) {
  CLI::App* app = polymoe.add_subcommand("run", "run one MoE layer of a checkpoint on an input file");
  auto s = std::make_shared<run_settings>();
  constexpr auto int_max = std::int64_t{std::numeric_limits<int>::max()};
  app->add_option("--checkpoint", s->checkpoint,
                  "a Hugging Face checkpoint (config.json + safetensors, sharded or not)")
      ->type_name("DIR")->required();
  app->add_option("--layer", s->layer, "the MoE layer to run")->type_name("N")->required();
  app->add_option("--input", s->input,
                  "hidden_states [T, H] (F32 or BF16), optionally router_logits [T, E]; without\n"
                  "them (or with --ignore-input-logits) the checkpoint's router computes the logits")
      ->type_name("IN.safetensors")->required();
  app->add_option("--output", s->output, "output [T, H] F32, topk_ids [T, k] I32, topk_weights [T, k] F32")
      ->type_name("OUT.safetensors")->required();
  app->add_option("--a2a", s->a2a,
                  "dispatcher (default local); the mpi_* ones under `mpirun -np R`: each rank takes\n"
                  "a contiguous share of the tokens and holds only its own experts; rank 0 writes\n"
                  "the complete output. The ranks compare their layer, input and options before\n"
                  "the layer runs; any difference fails every rank. The nccl_* ones (--kernel cuda)\n"
                  "the same, one GPU a rank, the rows carried between GPUs by NCCL.")
      ->type_name("NAME")->check(programs::choice(axis_names(&triple_names::a2a), true));
  s->quant_given =
      app->add_option("--quant", s->quant,
                      "scheme (default: the checkpoint's own: bf16 for BF16 weights, fp32 for F32 and\n"
                      "F16, and for quantized weights the scheme of their layout, e.g.\n"
                      "fp8_block_weight_only for DeepSeek FP8 blocks). Float weights are quantized on\n"
                      "load; stored weights of another scheme are dequantized first.")
          ->type_name("NAME")->check(programs::choice(axis_names(&triple_names::quant), true));
  std::vector<std::string> kernels = axis_names(&triple_names::kernel);
  kernels.emplace_back("auto");
  app->add_option("--kernel", s->kernel,
                  "expert kernel, or auto (the default): the fastest that pairs with the dispatcher\n"
                  "and scheme on this machine (tiled_amx where the CPU runs AMX tiles, else tiled, ...)")
      ->type_name("NAME")->check(programs::choice(std::move(kernels), true));
  s->threads_given = app->add_option("--threads", s->threads, "oneTBB threads (default: all)")
                         ->type_name("N")->check(CLI::Range(std::int64_t{1}, int_max));
  app->add_option("--repeat", s->repeat,
                  "forward passes to time (default 1; with more, their mean after one untimed\n"
                  "warm-up call)")
      ->type_name("N")->check(CLI::Range(std::int64_t{1}, int_max));
  app->add_option("--capacity", s->capacity,
                  "mpi_masked and nccl_masked rows per local expert (default: T * top_k for\n"
                  "mpi_masked, ranks * the largest share for nccl_masked, which no batch exceeds)")
      ->type_name("N")->check(CLI::Range(std::int64_t{0}, int_max));
  s->tuning_given = app->add_option("--tuning", s->tuning_text,
                                    "kernels tiled and tiled_amx: settings that differ from the measured\n"
                                    "defaults (docs/decisions.md), comma-separated, applied in order; e.g.\n"
                                    "amx-min-rows=1 puts every row block of tiled_amx on the AMX tiles.\n"
                                    "The keys are listed below.")
                        ->type_name("KEY=VALUE,...");
  app->add_flag("--ignore-input-logits", s->ignore_input_logits,
                "compute the logits with the checkpoint's router even when IN holds router_logits");
  s->shown.add_to(*app);
  app->footer("The --tuning keys:\n" + std::string(kernels::tiled::tuning_keys) +
              "`polymoe list` prints every valid (a2a, quant, kernel) triple.");
  return {app, [s, argv0] { return run_layer_command(*s, argv0); }};
}

namespace {

int run_layer_command(const run_settings& a, char* argv0) {
  const std::string& ckpt_dir = a.checkpoint;
  const std::string& in_path = a.input;
  const std::string& out_path = a.output;
  const index_t layer_n = a.layer;
  const int repeat = static_cast<int>(a.repeat);
  const kernels::tiled::tuning tuning = kernels::tiled::parse_tuning(a.tuning_text);
  std::optional<tbb::global_control> threads;
  if (a.threads_given->count() > 0)
    threads.emplace(tbb::global_control::max_allowed_parallelism, static_cast<std::size_t>(a.threads));

  using clock = std::chrono::steady_clock;
  const auto t_start = clock::now();
  const auto ckpt = io::hf_checkpoint::open(ckpt_dir);
  require_writable_output("run", out_path, ckpt.files(), {in_path});
  const io::stored_scheme stored = ckpt.scheme_of(layer_n);
  // The defaults are the fast choice: the checkpoint's own scheme, the fastest kernel here.
  const std::string& a2a_name = a.a2a;
  const io::dtype float_dtype = stored.is_float() ? ckpt.stored_dtype_of(layer_n) : io::dtype::F32;
  const bool quant_given = a.quant_given->count() > 0, tuning_given = a.tuning_given->count() > 0;
  const std::string quant_name = quant_given ? a.quant : default_quant(stored, float_dtype);
  std::string kernel_name = a.kernel;
  const bool auto_kernel_chosen = normalize_name(kernel_name) == "auto";
  if (auto_kernel_chosen) {
    const std::string_view best = auto_kernel(a2a_name, quant_name);
    // none pairs: select_triple names the dispatcher or scheme at fault
    kernel_name = best.empty() ? std::string(all_triple_names().front().kernel) : std::string(best);
  }
  const triple_variant selected = select_triple(a2a_name, quant_name, kernel_name);
  const triple_names names = names_of(selected);
  std::string chosen;  // what the defaults chose, said in the summary
  if (!quant_given)
    chosen += detail::concat("--quant ", names.quant, " (the checkpoint's ",
                             stored.is_float() ? io::dtype_name(float_dtype) : to_string(stored), " weights)");
  if (auto_kernel_chosen)
    chosen += detail::concat(chosen.empty() ? "" : ", ", "--kernel ", names.kernel, " (auto: the fastest here for ",
                             names.quant, ")");

  int fake_argc = 1;
  char** fake_argv = &argv0;
  mpi_session mpi(names.a2a.starts_with("mpi_") || names.a2a.starts_with("nccl_"), fake_argc, fake_argv);
  try {
    const auto t_open = clock::now();
    // progress on stderr from rank 0 only (the ranks' lines would interleave)
    const progress::mode shown = mpi.rank == 0 ? a.shown.mode() : progress::mode::off;
    io::hf_layer L = [&] {
      progress p(shown, detail::concat("run: loading layer ", layer_n, " of ", ckpt_dir));
      return ckpt.load_layer(layer_n, mpi.rank, mpi.size);
    }();
    const auto t_loaded = clock::now();
    const auto in = io::safetensors_file::open(in_path);
    const Matrix hidden_all = in.matrix("hidden_states");
    const index_t T = hidden_all.rows(), E = L.cfg.num_experts, k = L.cfg.top_k();
    require(hidden_all.cols() == L.cfg.hidden, "run: input '", in_path, "': hidden_states is [", T, ", ",
            hidden_all.cols(), "], expected [T, hidden=", L.cfg.hidden, "]");
    require_finite(hidden_all, "run: input '" + in_path + "'", "hidden_states");
    const auto [b, e] = mpi.share(T);
    run_context ctx;
    ctx.cfg = L.cfg;
    ctx.repeat = repeat;
    ctx.total_tokens = T;
    ctx.ranks = mpi.size;
    ctx.host_rank = mpi.host_rank;
    ctx.host_ranks = mpi.host_size;
    ctx.capacity = a.capacity;
    ctx.tuning = tuning;
    ctx.tuning_given = tuning_given;
    ctx.shown_progress = shown;
    ctx.hidden = hidden_all.middleRows(b, e - b);
    a2a::fingerprint same;  // what every rank must share (the layer adds its own fingerprint)
    same.add("--layer", layer_n).add("--a2a", names.a2a).add("--quant", names.quant).add("--kernel", names.kernel);
    same.add("--repeat", repeat).add("--tuning", kernels::tiled::to_string(tuning));
    same.add("checkpoint family", io::to_string(ckpt.family()));
    same.add("stored scheme", io::to_string(stored)).add("input tokens", T);
    same.add_checksum("input hidden_states", {a2a::fingerprint::values(hidden_all)});
    if (in.contains("router_logits") && !a.ignore_input_logits) {
      const Matrix logits = in.matrix("router_logits");
      require(logits.rows() == T && logits.cols() == E, "run: input '", in_path, "': router_logits is [",
              logits.rows(), ", ", logits.cols(), "], expected [", T, ", num_experts=", E, "]");
      ctx.logits = logits.middleRows(b, e - b);
      same.add_checksum("router_logits", {a2a::fingerprint::values(logits)});
    } else {
      ctx.logits = std::visit([&](const auto& w) { return compute_logits(w, ctx.hidden, layer_n); }, L.weights);
      same.add("router_logits", "computed by the router");
    }
    ctx.weights = std::move(L.weights);
    mpi.agree(same);

    run_selected(selected, ctx);

    const Matrix out = mpi.gather_rows(ctx.out, T);
    const IdMatrix ids = mpi.gather_rows(ctx.topk_ids, T);
    const Matrix wts = mpi.gather_rows(ctx.topk_weights, T);
    if (mpi.rank == 0) {
      require(out.rows() == T && ids.rows() == T && ids.cols() == k, "run: internal error: gathered shapes");
      io::save_safetensors(out_path,
                           {io::tensor_view<float>("output", {T, L.cfg.hidden}, std::span<const float>(out.data(), out.size())),
                            io::tensor_view<std::int32_t>("topk_ids", {T, k}, std::span<const std::int32_t>(ids.data(), ids.size())),
                            io::tensor_view<float>("topk_weights", {T, k}, std::span<const float>(wts.data(), wts.size()))});
      // A maximum skips NaN; the count does not. The file is kept for inspection, the run fails.
      const auto bad = out.size() - out.array().isFinite().count();
      if (!a.shown.quiet) {
        const auto secs = [](auto d) { return std::chrono::duration<double>(d).count(); };
        std::printf("polymoe run: %s layer %lld (%s, stored %s): T=%lld H=%lld I=%lld E=%lld k=%lld%s\n",
                    std::string(io::to_string(ckpt.family())).c_str(), static_cast<long long>(layer_n),
                    ckpt_dir.c_str(), std::string(io::to_string(stored)).c_str(), static_cast<long long>(T),
                    static_cast<long long>(L.cfg.hidden), static_cast<long long>(L.cfg.intermediate),
                    static_cast<long long>(E), static_cast<long long>(k),
                    L.cfg.shared_intermediate ? " +shared expert" : "");
        std::printf("  layer      MoeLayer<%s, %s, %s>%s%s%s%s%s\n", std::string(names.a2a).c_str(),
                    std::string(names.quant).c_str(), std::string(names.kernel).c_str(),
                    mpi.size > 1 ? (" on " + std::to_string(mpi.size) + " ranks").c_str() : "",
                    ctx.runs.empty() ? "" : ("\n  runs       " + ctx.runs).c_str(),
                    tuning_given ? ("\n  tuning     " + kernels::tiled::to_string(tuning)).c_str() : "",
                    chosen.empty() ? "" : ("\n  chosen     " + chosen).c_str(),
                    ctx.note.empty() ? "" : ("\n  weights    " + ctx.note).c_str());
        std::printf("  timing     open %.3f s, load layer %.3f s, quantize+prepare %.3f s, forward %.3f ms (%.1f tokens/s; %s)\n",
                    secs(t_open - t_start), secs(t_loaded - t_open), ctx.prepare_seconds, ctx.forward_seconds * 1e3,
                    ctx.forward_seconds > 0 ? static_cast<double>(e - b) / ctx.forward_seconds : 0.0,
                    repeat > 1 ? ("mean of " + std::to_string(repeat) + " after a warm-up call").c_str() : "one cold call");
        std::printf("  output     %s (output [%lld, %lld], topk_ids, topk_weights); max |output| = %.6g\n",
                    out_path.c_str(), static_cast<long long>(T), static_cast<long long>(L.cfg.hidden),
                    bad ? std::numeric_limits<double>::quiet_NaN()
                        : (T ? static_cast<double>(out.cwiseAbs().maxCoeff()) : 0.0));
      }
      require(bad == 0, "run: the output holds ", bad, " non-finite values of ", out.size(), " (written to '", out_path,
              "' for inspection)");
    }
  } catch (const a2a::collective_error& ex) {  // every rank has it and none waits: rank 0 reports it, all end
    if (mpi.rank == 0) std::cerr << ex.what() << std::endl;
    mpi.barrier();  // no rank ends (which mpirun reports) before rank 0 has written it
    return 1;
  } catch (const std::exception& ex) {
    if (mpi.active && mpi.size > 1) {  // other ranks may be waiting in a collective: end them all
      const std::string what = ex.what();
      std::cerr << (what.rfind("polymoe: ", 0) == 0 ? "" : "polymoe: ") << what << " (rank " << mpi.rank << ")"
                << std::endl;
      mpi.abort_all();
    }
    throw;
  }
  return 0;
}

}  // namespace

}  // namespace polymoe::cli
