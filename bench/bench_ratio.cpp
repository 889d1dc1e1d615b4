// bench_ratio: int8 W8A8 (or, with --second, DeepSeek-V3's fp8 blocks, MXFP4 or NVFP4) against bf16 on
// kernel::tiled_amx, the two layers' forwards interleaved (the target: int8 >= 2x our bf16).
// Below, "int8" stands for the second format. polymoe_bench times every forward of one layer before
// the next layer's; on a machine whose DRAM and tile rates move by 2x within seconds, the ratio of
// two such medians is as much the machine's as the kernels'. Here each round times `--forwards`
// forwards of bf16, of int8, of int8 and of bf16 again (A B B A: a drift within the round meets
// both), and the round's ratio is bf16's time over int8's (above 1: int8 faster). Reported per
// token count: the median and quartiles of the rounds' ratios, and each format's median time per
// forward. Weights, routing and the cycling of layer copies past the LLC as polymoe_bench.
//
// With --ab KNOB, each format runs as two sets of layers whose kernels differ in one setting of
// their tuning (kernels/tiled/tuning.hpp), "off" and "on"; each round times each format off, on, on,
// off and reports, per format, the time off over the time on, and the bf16 / int8 ratio either
// way. Knobs: y-stream (GEMM 2 stores y with non-temporal stores: tuning::y_stream; off / on at
// every size) and sum-span (the top-k sum reads a token's rows of y in steps: tuning::sum_span; off
// whole rows, on the library's step) and gemm1-by-block (GEMM 1 one task per row block, each
// panel's epilogue inside the next panel's tiles: tuning::gemm1_by_block; off / on at every size)
// and bf16-block-rows (bf16's AMX row-block cut: tuning::bf16_block_rows; off 128, on 256, the
// library's; int8 always cuts at 256) and row-group (E2M1 and E4M3 row blocks of at most 16 rows in
// amx::decoded_row_group: tuning::row_group; off, on the library's; bf16 is the control) and
// one-term (split GEMM 1 inputs whose lo terms are all zero run the hi term alone:
// tuning::one_term; off, on the library's; it acts only with --bf16-inputs 1).
//
// With --tuning KEY=VALUE,... every layer's kernel starts from that tuning instead of the
// defaults (polymoe run --help lists the keys); --ab then changes its one setting on top.
//
// With --bf16-inputs 1 the hidden states are bf16 values (an engine running in bf16), not fp32 ones.
//
// With --phases 1, each format's phase times over all of its timed forwards of the rounds (as
// polymoe_bench --phases prints them): where each format's time goes, measured in the same rounds.
//
//   bench_ratio [--preset qwen3-30b-a3b|deepseek-v3|gpt-oss-20b|tiny] [--experts N]
//               [--second int8_w8a8|int4_w4a8|fp8_block|fp8_block_weight_only|mxfp4|mxfp4_w4a16|nvfp4|
//                         nvfp4_w4a4|nvfp4_w4a16]
//               [--tokens 512,2048] [--threads 16] [--rounds 9] [--forwards 3]
//               [--ab y-stream|sum-span|gemm1-by-block|bf16-block-rows|row-group|one-term] [--phases 1]
//               [--bf16-inputs 1] [--tuning KEY=VALUE,...]
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <boost/mp11/algorithm.hpp>
#include <tbb/global_control.h>

#include <polymoe/polymoe.hpp>

#include "cli11_support.hpp"
#include "polymoe_bench.hpp"

using namespace polymoe;
using namespace polymoe::bench;

namespace {

/// The formats --second selects (by their names): every other scheme the AMX kernel runs.
using second_schemes = boost::mp11::mp_remove<pairing::kernel_schemes<core_table, kernel::tiled_amx>, quant::bf16>;

/// Copies of one layer, cycled so that every timed pass reads its weights from DRAM; their kernel
/// `k` (its tuning, and where it records phase times).
template <class Q>
struct Layers {
  using Layer = MoeLayer<a2a::local, Q, kernel::tiled_amx>;
  std::vector<std::unique_ptr<Layer>> copies;
  std::string note;
  int next = 0;

  Layers(const preset& p, const ExpertWeights& fp32, std::size_t llc, const kernel::tiled_amx& k) {
    const MoeConfig cfg = config_of(p);
    const double layer_bytes = expert_bytes(Q::name, p) * static_cast<double>(p.experts);
    const int n = instances_for(layer_bytes, 2 * layer_bytes + 1e6, llc, note);
    BasicMoeWeights<typename Q::weights> w;
    w.experts = Q::quantize(fp32);
    for (int i = 0; i < n; ++i) copies.push_back(std::make_unique<Layer>(cfg, w, a2a::local{}, k));
  }

  /// Seconds for `count` forwards, each on the next copy and the next routing.
  double time(const Matrix& hidden, const routing_set& r, int count) {
    const auto t0 = clock_type::now();
    for (int i = 0; i < count; ++i, ++next) {
      const auto V = static_cast<int>(r.ids.size());
      auto& layer = *copies[static_cast<std::size_t>((next / V) % static_cast<int>(copies.size()))];
      const Matrix out = layer.forward_routed(hidden, r.ids[static_cast<std::size_t>(next % V)], r.weights);
      if (out.size() && out.data()[0] == 12345.678f) std::printf(" ");
    }
    return seconds_since(t0);
  }
};

/// The tunings of --ab KNOB, off and on, each `base` but for the knob's setting; nothing for a knob
/// it does not know.
std::optional<std::pair<kernels::tiled::tuning, kernels::tiled::tuning>> ab_tunings(const std::string& knob,
                                                                                   const kernels::tiled::tuning& base) {
  using kernels::tiled::mode;
  kernels::tiled::tuning off = base, on = base;
  if (knob == "y-stream")
    off.y_stream = mode::off, on.y_stream = mode::on;
  else if (knob == "sum-span")
    off.sum_span = index_t{1} << 30, on.sum_span = kernels::tiled::tuning{}.sum_span;
  else if (knob == "gemm1-by-block")
    off.gemm1_by_block = mode::off, on.gemm1_by_block = mode::on;
  else if (knob == "bf16-block-rows")
    off.bf16_block_rows = 128, on.bf16_block_rows = 256;
  else if (knob == "row-group")
    off.row_group = false, on.row_group = true;
  else if (knob == "one-term")
    off.one_term = false, on.one_term = true;
  else
    return std::nullopt;
  return std::pair{off, on};
}

}  // namespace

int main(int argc, char** argv) try {
  // the shapes --preset takes (the first is the default)
  const std::vector<preset> presets{{"qwen3-30b-a3b", 2048, 768, 128, 8, 128, "bench_ratio"},
                                    {"deepseek-v3", 7168, 2048, 256, 8, 256, "bench_ratio"},
                                    {"gpt-oss-20b", 2880, 2880, 32, 4, 32, "bench_ratio"},
                                    {"tiny", 256, 128, 16, 4, 16, "bench_ratio"}};
  std::vector<std::string> preset_names, seconds, knobs;
  for (const auto& q : presets) preset_names.push_back(q.name);
  boost::mp11::mp_for_each<second_schemes>([&]<class Q>(Q) { seconds.emplace_back(Q::name); });
  for (const char* k : {"y-stream", "sum-span", "gemm1-by-block", "bf16-block-rows", "row-group", "one-term"})
    knobs.emplace_back(k);  // ab_tunings' knobs
  std::string preset_name = presets.front().name;
  std::vector<long> tokens = {512, 2048};
  int threads = 16, rounds = 9, forwards = 3;
  bool phases = false, bf16_inputs = false;
  std::string tuning_text;
  std::string ab_name, second = "int8_w8a8";  // ab_name: the knob of --ab ("": none)
  long max_experts = 0;

  CLI::App app("bench_ratio: a second format against bf16 on kernel::tiled_amx, forwards interleaved",
               "bench_ratio");
  programs::set_up(app, POLYMOE_VERSION_STRING, POLYMOE_GIT_COMMIT);
  app.add_option("--preset", preset_name, "the layer's shape (default qwen3-30b-a3b)")
      ->type_name("NAME")
      ->check(programs::choice(preset_names));
  app.add_option("--experts", max_experts, "cap the number of experts E")->type_name("N")->check(CLI::Range(1L, 1L << 30));
  app.add_option("--second", second, "the format against bf16 (default int8_w8a8)")
      ->type_name("NAME")
      ->check(programs::choice(seconds, true));
  app.add_option("--tokens", tokens, "token counts (default 512,2048)")
      ->delimiter(',')
      ->type_name("LIST")
      ->check(CLI::Range(1L, 1L << 30));
  app.add_option("--threads", threads, "threads (default 16)")->type_name("N")->check(CLI::Range(1, 1 << 16));
  app.add_option("--rounds", rounds, "rounds (default 9)")->type_name("N")->check(CLI::Range(1, 1 << 20));
  app.add_option("--forwards", forwards, "forwards per format and round (default 3)")
      ->type_name("N")
      ->check(CLI::Range(1, 1 << 20));
  app.add_option("--ab", ab_name, "two sets of layers whose kernels differ in this knob of their tuning")
      ->type_name("KNOB")
      ->check(programs::choice(knobs));
  app.add_option("--phases", phases, "1: each format's phase times over its timed forwards (default 0)")
      ->type_name("0|1");
  app.add_option("--bf16-inputs", bf16_inputs, "1: hidden states that are bf16 values (default 0)")->type_name("0|1");
  app.add_option("--tuning", tuning_text, "every layer's kernel starts from this tuning (polymoe run --help)")
      ->type_name("KEY=VALUE,...");
  app.footer("The comment at the top of bench/bench_ratio.cpp says what is measured and what each knob does.");
  if (const auto status = programs::parse(app, argc, argv, 2)) return *status;
  preset p = *std::find_if(presets.begin(), presets.end(), [&](const preset& q) { return q.name == preset_name; });
  const kernels::tiled::tuning base = kernels::tiled::parse_tuning(tuning_text);
  if (const char* why = kernels::tiled::amx_unavailable_reason())
    std::printf("bench_ratio: AMX cannot run here (%s): both layers run their AVX-512 fallback\n", why);

  const std::size_t llc = llc_bytes();
  Limits lim;
  lim.threads = threads;
  lim.dram_bytes = std::max<std::size_t>(std::size_t{1} << 30, 4 * llc);
  if (max_experts > 0 && max_experts < p.experts) p.experts = max_experts;
  const ExpertWeights fp32 = random_weights(p);
  const auto body = [&]<class Q2>() {
    // with --phases (and no --ab), each format's kernels record into these (reset after each warm-up)
    kernels::tiled::PhaseTimes p_bf16, p_int8;
    const auto kernel_of = [&](const kernels::tiled::tuning& t, kernels::tiled::PhaseTimes& sink) {
      return kernel::tiled_amx{t, phases && ab_name.empty() ? &sink : nullptr};
    };
    // the layers with the base tuning, or with --ab the knob off; with --ab a second set with it on
    const auto [off, on] = ab_name.empty() ? std::pair{base, base} : *ab_tunings(ab_name, base);
    Layers<quant::bf16> bf16(p, fp32, llc, kernel_of(off, p_bf16));
    Layers<Q2> int8(p, fp32, llc, kernel_of(off, p_int8));
    std::optional<Layers<quant::bf16>> bf16_on;
    std::optional<Layers<Q2>> int8_on;
    if (!ab_name.empty()) {
      bf16_on.emplace(p, fp32, llc, kernel_of(on, p_bf16));
      int8_on.emplace(p, fp32, llc, kernel_of(on, p_int8));
    }
    const char* const name2 = Q2::name.data();
    std::printf("bench_ratio: %s (H=%ld I=%ld E=%ld k=%ld), %d threads, %d rounds of %d forwards each way; bf16 %s; "
                "%s %s%s\n",
                p.name.c_str(), static_cast<long>(p.hidden), static_cast<long>(p.intermediate),
                static_cast<long>(p.experts), static_cast<long>(p.top_k), threads, rounds, forwards, bf16.note.c_str(),
                name2, int8.note.c_str(),
                base == kernels::tiled::tuning{} ? "" : ("; tuning " + kernels::tiled::to_string(base)).c_str());
    tbb::global_control gc(tbb::global_control::max_allowed_parallelism, static_cast<std::size_t>(threads));
    for (const long T : tokens) {
      const Matrix hidden = random_hidden(T, p.hidden, static_cast<std::uint64_t>(T), bf16_inputs);
      const routing_set r = make_routings(T, p.experts, p.top_k, static_cast<std::uint64_t>(T) + 17);
      const int warm = static_cast<int>(r.ids.size()) * static_cast<int>(std::max(bf16.copies.size(), int8.copies.size()));
      bf16.time(hidden, r, warm);
      int8.time(hidden, r, warm);
      if (bf16_on) bf16_on->time(hidden, r, warm), int8_on->time(hidden, r, warm);
      p_bf16 = {}, p_int8 = {};  // the timed forwards' only
      const double dram_before = lim.dram(), amx_before = lim.amx();
      if (!ab_name.empty()) {
        std::vector<double> gain_bf16, gain_int8, ratio_off, ratio_on;
        const auto pair = [&](auto& off_layers, auto& on_layers, double& off, double& on) {
          off = off_layers.time(hidden, r, forwards);
          on = on_layers.time(hidden, r, forwards);
          on += on_layers.time(hidden, r, forwards);
          off += off_layers.time(hidden, r, forwards);
        };
        for (int round = 0; round < rounds; ++round) {
          double b_off = 0, b_on = 0, i_off = 0, i_on = 0;
          pair(bf16, *bf16_on, b_off, b_on);
          pair(int8, *int8_on, i_off, i_on);
          gain_bf16.push_back(b_off / b_on);
          gain_int8.push_back(i_off / i_on);
          ratio_off.push_back(b_off / i_off);
          ratio_on.push_back(b_on / i_on);
        }
        const auto med = [](const std::vector<double>& v) {
          char line[64];
          std::snprintf(line, sizeof line, "%.3f (quartiles %.3f-%.3f)", quantile(v, 0.5), quantile(v, 0.25),
                        quantile(v, 0.75));
          return std::string(line);
        };
        std::printf("T=%5ld: %s, time off / time on: bf16 %s, %s %s; time bf16 / time %s: off %s, on %s; DRAM "
                    "%.1f GB/s, AMX bf16 peak %.0f GFLOP/s before\n",
                    T, ab_name.c_str(), med(gain_bf16).c_str(), name2, med(gain_int8).c_str(), name2,
                    med(ratio_off).c_str(), med(ratio_on).c_str(), dram_before, amx_before);
        std::fflush(stdout);
        continue;
      }
      std::vector<double> ratio, t_bf16, t_int8;
      for (int round = 0; round < rounds; ++round) {
        const double b1 = bf16.time(hidden, r, forwards), i1 = int8.time(hidden, r, forwards);
        const double i2 = int8.time(hidden, r, forwards), b2 = bf16.time(hidden, r, forwards);
        ratio.push_back((b1 + b2) / (i1 + i2));
        t_bf16.push_back((b1 + b2) / (2 * forwards));
        t_int8.push_back((i1 + i2) / (2 * forwards));
      }
      Limits after;
      after.threads = threads;
      after.dram_bytes = lim.dram_bytes;
      const double dram_after = after.dram(), amx_after = after.amx();
      std::printf("T=%5ld: time bf16 / time %s median %.3f, quartiles %.3f-%.3f, range %.3f-%.3f; median ms per "
                  "forward bf16 %.3f, %s %.3f; DRAM %.1f / %.1f GB/s and AMX bf16 peak %.0f / %.0f GFLOP/s "
                  "before / after\n",
                  T, name2, quantile(ratio, 0.5), quantile(ratio, 0.25), quantile(ratio, 0.75), quantile(ratio, 0.0),
                  quantile(ratio, 1.0), 1e3 * quantile(t_bf16, 0.5), name2, 1e3 * quantile(t_int8, 0.5), dram_before,
                  dram_after, amx_before, amx_after);
      std::printf("  rounds:");
      for (const double x : ratio) std::printf(" %.3f", x);
      std::printf("\n");
      if (phases)
        std::printf("  bf16 %s\n  %s %s\n", phase_line(p_bf16).c_str(), name2, phase_line(p_int8).c_str());
      std::fflush(stdout);
    }
  };
  boost::mp11::mp_for_each<second_schemes>([&]<class Q>(Q) {
    if (Q::name == second) body.template operator()<Q>();
  });
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "bench_ratio: %s\n", e.what());
  return 1;
}
