#pragma once
// polymoe_bench: what the main program (polymoe_bench.cpp) and the parts (polymoe_bench_part.cpp,
// which instantiate bench_kernel<Kernel> for some of the table's kernels) share. No translation
// unit instantiates every layer.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include <tbb/parallel_for.h>

#include <polymoe/core/config.hpp>
#include <polymoe/core/error.hpp>
#include <polymoe/core/expert_weights.hpp>
#include <polymoe/core/types.hpp>
#include <polymoe/codecs/bf16.hpp>
#include <polymoe/kernels/tiled/phases.hpp>
#include <polymoe/kernels/tiled/tuning.hpp>

#include <polymoe/io/model_presets.hpp>

#include "limits.hpp"

namespace polymoe::bench {

struct preset {
  std::string name;
  index_t hidden, intermediate, experts, top_k;
  index_t full_experts = 0;  ///< E before --experts capped it
  std::string from;          ///< where the shape came from (said in the output)
  /// A checkpoint's layer: its config (activation, biases; the bench routes and times the routed
  /// experts alone), and with --checkpoint-weights its weights are the ones timed.
  std::optional<MoeConfig> checkpoint_cfg{};
  std::string checkpoint_dir{};
  index_t checkpoint_layer = -1;
  bool checkpoint_weights = false;
};

/// A model's shapes (io/model_presets.hpp, the list the tool's make-checkpoint uses too).
inline preset preset_of(const io::model_preset& m) {
  return {std::string(m.name), m.hidden, m.intermediate, m.experts, m.top_k, m.experts, "io/model_presets.hpp"};
}

struct options {
  std::vector<std::string> presets{"tiny"}, a2as, quants, kernels;  // empty: all
  bool presets_given = false;
  std::string checkpoint;  // --checkpoint DIR: a shape from its config.json
  index_t layer = -1;      // --layer N of it (-1: its first MoE layer)
  bool checkpoint_weights = false;  // --checkpoint-weights: time its own weights, not random ones
  std::vector<index_t> tokens{1, 16, 64, 512};
  std::vector<int> threads{1};
  index_t max_experts = 0;  // --experts N caps E (0: the preset's own)
  int reps = 10;
  bool phases = false;  // --phases: the tiled kernels' time per phase
  bool baseline = true;  // --no-baseline: skip the Eigen baseline (x base is then empty)
  bool bf16_inputs = false;  // --bf16-inputs: hidden states that are bf16 values
  kernels::tiled::tuning tuning;  // --tuning: the tiled kernels' (the other kernels have none)
};

/// A layer's configuration for a preset: silu-gated experts, no biases, top-k routing; for a
/// checkpoint's layer its activation and biases, its routed experts alone (no shared expert) and
/// softmax top-k routing (the bench passes the routing).
inline MoeConfig config_of(const preset& p) {
  if (p.checkpoint_cfg) {
    MoeConfig cfg = *p.checkpoint_cfg;
    cfg.num_experts = p.experts;
    cfg.router = RouterConfig{};
    cfg.router.top_k = p.top_k;
    cfg.shared_intermediate = 0;
    cfg.shared_expert_gate = false;
    cfg.router_weight_on_input = false;
    cfg.ep_rank = 0;
    cfg.ep_size = 1;
    return cfg;
  }
  MoeConfig cfg;
  cfg.hidden = p.hidden;
  cfg.intermediate = p.intermediate;
  cfg.num_experts = p.experts;
  cfg.router.top_k = p.top_k;
  cfg.activation = Activation::silu_gated;
  return cfg;
}

/// One measured point (a layer, the baseline or the peer).
struct record {
  std::string a2a, quant, kernel, preset;
  index_t tokens = 0, experts = 0;
  int threads = 1;
  double median_s = 0, min_s = 0, max_s = 0, mean_s = 0, stddev_s = 0;
  std::vector<double> samples_s;  // every timed forward, in the order they ran
  double flops = 0;         // per forward: 2·T·k·rows13·H + 2·T·k·H·I
  double weight_bytes = 0;  // per forward: distinct experts touched x one expert's stored bytes
  std::string note;         // how the cache was defeated
  bool gpu = false;         // timed on the GPU: its limits are the device's (copy bandwidth, cuBLAS bf16)
};

/// What one preset's sweep hands a kernel's translation unit.
struct sweep {
  const options* opt = nullptr;
  preset shape;
  const ExpertWeights* fp32 = nullptr;  // random weights of the preset, fp32 canonical layout
  std::size_t llc = 0;
  std::function<bool(std::string_view a2a, std::string_view quant, std::string_view kernel)> selected;
  std::function<void(record)> report;     // one finished point
  std::function<void(std::string)> info;  // a line for the log (stdout)
};

/// Benches every selected valid triple whose kernel is Kernel (explicitly instantiated, one part
/// of the table's kernels per translation unit, in polymoe_bench_part.cpp).
template <class Kernel>
void bench_kernel(const sweep& s);

/// Nominal stored bits per weight of a scheme, scales included (the bytes a forward must read).
inline double bits_per_weight(std::string_view quant, index_t hidden) {
  if (quant == "fp32") return 32;
  if (quant == "bf16") return 16;
  if (quant == "fp8") return 8;
  if (quant == "fp8_block" || quant == "fp8_block_weight_only") return 8 + 32.0 / (128 * 128);
  if (quant == "int8_w8a8") return 8 + 32.0 / static_cast<double>(hidden);  // per output channel scale
  if (quant == "int4_w4a8") return 4 + 32.0 / 32;                             // fp32 scale per 32
  if (quant.starts_with("mxfp4")) return 4 + 8.0 / 32;  // E8M0 scale per 32
  if (quant.starts_with("nvfp4")) return 4 + 8.0 / 16;  // E4M3 scale per 16
  return 32;
}

/// Bytes of one expert (3·H·I weights) in a scheme's storage.
inline double expert_bytes(std::string_view quant, const preset& p) {
  return 3.0 * static_cast<double>(p.hidden) * static_cast<double>(p.intermediate) *
         bits_per_weight(quant, p.hidden) / 8;
}

/// Copies of a layer needed so that one full cycle (all experts of all copies) reads more than
/// 2 x LLC; capped by memory (`cap_note` says so when capped).
inline int instances_for(double layer_bytes, double footprint_per_instance, std::size_t llc, std::string& note) {
  int n = static_cast<int>(2.0 * static_cast<double>(llc) / layer_bytes) + 1;
  const double avail = static_cast<double>(available_memory_bytes());
  if (avail > 0) {
    const int fit = std::max(1, static_cast<int>(0.6 * avail / footprint_per_instance));
    if (fit < n) {
      note = "memory too small: " + std::to_string(fit) + " of " + std::to_string(n) + " instances fit, cycle " +
             std::to_string(static_cast<long>(fit * layer_bytes / 1e6)) + " MB < 2xLLC, partly served from cache";
      return fit;
    }
  }
  note = std::to_string(n) + " instance" + (n > 1 ? "s" : "") + " x " +
         std::to_string(static_cast<long>(layer_bytes / 1e6)) + " MB cycled > 2xLLC " +
         std::to_string(static_cast<long>(2 * static_cast<double>(llc) / 1e6)) + " MB";
  return n;
}

/// Routings for T tokens: when T·k < E, consecutive windows of an expert cursor, so a cycle of
/// ceil(E / (T·k)) forwards walks every expert (disjoint experts from one forward to the next);
/// otherwise 4 random routings (k distinct experts per token). Weights 1/k.
struct routing_set {
  std::vector<IdMatrix> ids;
  Matrix weights;
  double distinct = 0;  // mean distinct experts per forward
};

inline routing_set make_routings(index_t T, index_t E, index_t k, std::uint64_t seed) {
  routing_set r;
  std::uint64_t x = seed * 0x9E3779B97F4A7C15ull + 1;
  const auto next = [&] { return x ^= x << 13, x ^= x >> 7, x ^= x << 17; };
  const bool walk = T * k < E;
  const index_t variants = walk ? (E + T * k - 1) / (T * k) : 4;
  r.weights = Matrix::Constant(T, k, 1.0f / static_cast<float>(k));
  index_t cursor = 0;
  for (index_t v = 0; v < variants; ++v) {
    IdMatrix id(T, k);
    std::vector<std::int32_t> perm(static_cast<std::size_t>(E));
    for (index_t t = 0; t < T; ++t) {
      for (index_t e = 0; e < E; ++e) perm[static_cast<std::size_t>(e)] = static_cast<std::int32_t>(e);
      for (index_t j = 0; j < k; ++j) {
        if (walk) {
          id(t, j) = static_cast<std::int32_t>(cursor++ % E);
        } else {
          const auto pick = static_cast<std::size_t>(j) + next() % static_cast<std::size_t>(E - j);
          std::swap(perm[static_cast<std::size_t>(j)], perm[pick]);
          id(t, j) = perm[static_cast<std::size_t>(j)];
        }
      }
    }
    std::vector<char> used(static_cast<std::size_t>(E), 0);
    for (index_t i = 0; i < id.size(); ++i) used[static_cast<std::size_t>(id.data()[i])] = 1;
    r.distinct += static_cast<double>(std::count(used.begin(), used.end(), 1)) / static_cast<double>(variants);
    r.ids.push_back(std::move(id));
  }
  return r;
}

/// Random fp32 weights of a preset (uniform, scaled by 1.7 / sqrt(fan-in)), the same for every run,
/// of the shape its config says (gated or not, biases or not).
inline ExpertWeights random_weights(const preset& p) {
  const MoeConfig cfg = config_of(p);
  ExpertWeights w(ExpertShape{p.experts, p.hidden, p.intermediate, is_gated(cfg.activation), cfg.expert_bias});
  const auto fill = [](Matrix& m, float scale, std::uint64_t seed) {
    const auto n = static_cast<std::size_t>(m.size());
    const std::size_t chunk = std::size_t{1} << 20;
    tbb::parallel_for(std::size_t{0}, (n + chunk - 1) / chunk, [&](std::size_t c) {
      std::uint64_t x = seed ^ (0x9E3779B97F4A7C15ull * (c + 1));
      for (std::size_t i = c * chunk; i < std::min(n, (c + 1) * chunk); ++i) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        m.data()[i] = (static_cast<float>(x >> 40) * (1.0f / 16777216.0f) * 2.0f - 1.0f) * scale;
      }
    });
  };
  fill(w.w13, 1.7f / std::sqrt(static_cast<float>(p.hidden)), 42);
  fill(w.w2, 1.7f / std::sqrt(static_cast<float>(p.intermediate)), 43);
  if (w.shape.bias) fill(w.b13, 0.1f, 44), fill(w.b2, 0.1f, 45);
  return w;
}

/// Hidden states in [-1, 1); `bf16_values`: rounded to bf16 values (the inputs of an engine that
/// runs in bf16).
inline Matrix random_hidden(index_t T, index_t H, std::uint64_t seed, bool bf16_values = false) {
  Matrix m(T, H);
  std::uint64_t x = seed * 0x9E3779B97F4A7C15ull + 7;
  for (index_t i = 0; i < m.size(); ++i) {
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    m.data()[i] = static_cast<float>(static_cast<double>(x >> 11) / 9007199254740992.0 * 2 - 1);
    if (bf16_values) m.data()[i] = codecs::bf16_to_float(codecs::float_to_bf16(m.data()[i]));
  }
  return m;
}

/// Fills a record's samples, median, min, max, mean and sample standard deviation from timings (s).
inline void summarize(std::vector<double> t, record& r) {
  r.samples_s = t;
  double sum = 0, sq = 0;
  for (const double x : t) sum += x;
  r.mean_s = sum / static_cast<double>(t.size());
  for (const double x : t) sq += (x - r.mean_s) * (x - r.mean_s);
  r.stddev_s = t.size() > 1 ? std::sqrt(sq / static_cast<double>(t.size() - 1)) : 0.0;  // sample stddev
  std::sort(t.begin(), t.end());
  r.min_s = t.front();
  r.max_s = t.back();
  r.median_s = t.size() % 2 ? t[t.size() / 2] : 0.5 * (t[t.size() / 2 - 1] + t[t.size() / 2]);
}

/// Times `reps` calls of fn(f) (f = 0, 1, ...) after `warm` untimed ones (summarize).
template <class Fn>
void time_reps(int reps, int warm, Fn fn, record& r) {
  int f = 0;
  for (; f < warm; ++f) fn(f);
  std::vector<double> t;
  for (int i = 0; i < reps; ++i, ++f) {
    const auto t0 = clock_type::now();
    fn(f);
    t.push_back(seconds_since(t0));
  }
  summarize(std::move(t), r);
}

/// A tiled forward's phase times as one line: mean ms per forward of each phase, and (pipelined
/// kernels) the pipeline workers' thread-ms per forward of each kind of task.
inline std::string phase_line(const kernels::tiled::PhaseTimes& phases) {
  using kernels::tiled::PhaseTimes;
  const double forwards = static_cast<double>(std::max(1L, phases.forwards));
  std::string line = "phases, mean ms per forward:";
  for (int i = 0; i < PhaseTimes::count; ++i)
    line += detail::concat(" ", PhaseTimes::names[static_cast<std::size_t>(i)], " ",
                           1e3 * phases.seconds[static_cast<std::size_t>(i)] / forwards);
  if (phases.worker_seconds > 0) {
    line += "; pipeline thread-ms per forward:";
    for (int i = 0; i < PhaseTimes::task_kinds; ++i)
      line += detail::concat(" ", PhaseTimes::task_names[static_cast<std::size_t>(i)], " ",
                             1e3 * phases.task_seconds[static_cast<std::size_t>(i)] / forwards);
    line += detail::concat("; workers x gemms ", 1e3 * phases.worker_seconds / forwards);
  }
  return line;
}

inline double flops_per_forward(const preset& p, index_t T) {
  const double tk = static_cast<double>(T) * static_cast<double>(p.top_k);
  const double H = static_cast<double>(p.hidden), I = static_cast<double>(p.intermediate);
  return 2 * tk * (2 * I) * H + 2 * tk * H * I;
}

}  // namespace polymoe::bench
