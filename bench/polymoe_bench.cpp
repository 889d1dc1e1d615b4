// polymoe_bench: microbenchmark of instantiated layers. Sweeps the valid (a2a, quant,
// kernel) triples of polymoe::valid_triples (all local ones or those named), shape presets, token
// counts and thread counts; reports per point the median / min / max time, tokens/s, GFLOP/s,
// effective weight GB/s and the ratios to this machine's limits measured in the same run (fp32 FMA
// peak, int8 VNNI peak, DRAM read bandwidth) and to an in-run baseline (a per-expert Eigen loop in
// fp32, as a user would write it without polymoe); optionally the PyTorch peer (bench/peer_torch.py)
// on the same shapes. Where the CUDA component is built (POLYMOE_BENCH_CUDA), kernel::cuda's triple
// too, against the GPU's own limits, and the GPU peers (bench/peer_torch_gpu.py). Run with --help;
// --version names the commit and the ISA paths compiled in.
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <limits>
#include <map>
#include <set>
#include <sstream>
#include <thread>

#include <boost/mp11/algorithm.hpp>
#include <tbb/global_control.h>
#include <tbb/parallel_for.h>

#include <polymoe/io/file_io.hpp>
#include <polymoe/io/hf_checkpoint.hpp>
#include <polymoe/io/json.hpp>
#include <polymoe/kernels/tiled/isa.hpp>
#include <polymoe/polymoe.hpp>

#include "cli11_support.hpp"
#include "polymoe_bench.hpp"
#ifdef POLYMOE_BENCH_CUDA
#include <polymoe/cuda_table.hpp>

#include "polymoe_bench_cuda.hpp"
#endif

#ifndef POLYMOE_SOURCE_DIR
#define POLYMOE_SOURCE_DIR "."
#endif

using namespace polymoe;
using namespace polymoe::bench;

namespace {

[[noreturn]] void fail(const std::string& m) {
  std::fprintf(stderr, "polymoe_bench: %s\n", m.c_str());
  std::exit(2);
}

bool in(const std::vector<std::string>& list, std::string_view x) {
  return list.empty() || std::find(list.begin(), list.end(), x) != list.end();
}

// ---------------------------------------------------------------- the baseline (no polymoe)
// What a user writes with Eigen alone: per expert, gather its rows, x·Wgᵀ, x·Wuᵀ, silu(g)·u, ·Wdᵀ,
// weighted scatter-add. fp32 weights in the canonical layout.
Matrix baseline_forward(const ExpertWeights& w, const Matrix& x, const IdMatrix& ids, const Matrix& wt) {
  const index_t T = x.rows(), k = ids.cols(), E = w.shape.experts, I = w.shape.intermediate;
  Matrix out = Matrix::Zero(T, x.cols());
  std::vector<std::vector<std::pair<index_t, index_t>>> rows(static_cast<std::size_t>(E));
  for (index_t t = 0; t < T; ++t)
    for (index_t j = 0; j < k; ++j) rows[static_cast<std::size_t>(ids(t, j))].emplace_back(t, j);
  for (index_t e = 0; e < E; ++e) {
    const auto& r = rows[static_cast<std::size_t>(e)];
    if (r.empty()) continue;
    Matrix xs(static_cast<index_t>(r.size()), x.cols());
    for (std::size_t i = 0; i < r.size(); ++i) xs.row(static_cast<index_t>(i)) = x.row(r[i].first);
    const auto w13 = w.w13_of(e);
    const Matrix g = xs * w13.topRows(I).transpose();
    const Matrix u = xs * w13.bottomRows(I).transpose();
    const Matrix h = (g.array() / (1.0f + (-g.array()).exp()) * u.array()).matrix();
    const Matrix y = h * w.w2_of(e).transpose();
    for (std::size_t i = 0; i < r.size(); ++i)
      out.row(r[i].first) += wt(r[i].first, r[i].second) * y.row(static_cast<index_t>(i));
  }
  return out;
}

// ---------------------------------------------------------------- progress bar (stderr)
struct progress {
  int total = 0, done = 0;
  clock_type::time_point t0 = clock_type::now();
  bool drawn = false;
  void clear() {
    if (drawn) std::fprintf(stderr, "\r%-78s\r", "");
    drawn = false;
  }
  void draw(const std::string& what) {
    const double el = seconds_since(t0);
    if (el < 3 || !isatty(STDERR_FILENO)) return;  // short sweeps, or stderr not a terminal: no bar
    const int width = 30, fill = total ? width * done / total : width;
    std::fprintf(stderr, "\r[%s%s] %d/%d %4.0f s %-28.28s", std::string(static_cast<std::size_t>(fill), '#').c_str(),
                 std::string(static_cast<std::size_t>(width - fill), '.').c_str(), done, total, el, what.c_str());
    std::fflush(stderr);
    drawn = true;
  }
};

std::string num(double v, int prec = 6) {
  if (!std::isfinite(v)) return "null";
  std::ostringstream s;
  s.precision(prec);
  s << v;
  return s.str();
}

struct row {
  record r;
  Limits lim;
  double baseline_s = 0;
  [[nodiscard]] double gflops() const { return r.flops / r.median_s / 1e9; }
  [[nodiscard]] double gbps() const { return r.weight_bytes / r.median_s / 1e9; }
  [[nodiscard]] double base_ratio() const { return baseline_s > 0 ? baseline_s / r.median_s : NAN; }
  /// The bandwidth a point's weight GB/s is compared with: DRAM read, or the GPU's copy bandwidth.
  [[nodiscard]] double bandwidth() const { return r.gpu ? lim.gpu_copy_gbs : lim.dram_gbs; }
};

/// The compute limit a point is measured against: the peak of the instruction its path runs (AMX
/// tiles for tiled_amx where they run, vpdpbusd for int8, vdpbf16ps for bf16 where kernel::tiled
/// runs bf16 pairs, fp32 FMA otherwise), by name and value.
struct peak_ref {
  const char* name;
  double value;
};
peak_ref applicable_peak(const row& w) {
  const auto& r = w.r;
  if (r.gpu) return {"cuBLAS bf16", w.lim.gpu_bf16_gflops};
  const bool int8 = r.quant == "int8_w8a8" || r.quant == "int4_w4a8";  // int4 runs the int8 products
  if (r.kernel == "tiled_amx" && r.quant != "fp32" && w.lim.amx_bf16_gflops > 0)
    return int8 ? peak_ref{"AMX int8", w.lim.amx_int8_gops} : peak_ref{"AMX bf16", w.lim.amx_bf16_gflops};
  if (int8 && (r.kernel == "tiled" || r.kernel == "tiled_amx") && w.lim.vnni_gops > 0)
    return {"VNNI int8", w.lim.vnni_gops};
  if (r.quant == "bf16" && (r.kernel == "tiled" || r.kernel == "tiled_amx") && POLYMOE_TILED_DPBF16 &&
      w.lim.bf16_dot_gflops > 0)
    return {"bf16 dot", w.lim.bf16_dot_gflops};
  return {"fp32 FMA", w.lim.peak_gflops};
}

/// The share of the roofline a point reaches: the roofline time of a forward is the larger of its
/// bytes over the bandwidth and its FLOPs over the peak of its path, both measured in this run, so
/// the share is the larger of the two shares (NaN where a limit was not measured).
double roofline_ratio(const row& w) {
  const double peak = applicable_peak(w).value, bw = w.bandwidth();
  if (!(peak > 0) || !(bw > 0)) return NAN;
  return std::max(w.gbps() / bw, w.gflops() / peak);
}
/// Which limit the roofline is: "bytes" or "compute".
const char* roofline_bound(const row& w) {
  return w.gbps() / w.bandwidth() >= w.gflops() / applicable_peak(w).value ? "bytes" : "compute";
}

/// The table's format: a markdown table (the default on a terminal) or aligned text.
bool markdown = false;

void print_cells(const std::vector<std::string>& cells, const std::vector<int>& widths) {
  std::string line = markdown ? "|" : "";
  for (std::size_t i = 0; i < cells.size(); ++i) {
    const int w = widths[i];
    const bool left = i < 4 || i == 12;  // names left, numbers right
    char buf[64];
    std::snprintf(buf, sizeof buf, left ? "%-*s" : "%*s", w, cells[i].c_str());
    line += markdown ? std::string(" ") + buf + " |" : (i ? " " : "") + std::string(buf);
  }
  std::printf("%s\n", line.c_str());
}
const std::vector<int> table_widths{9, 21, 13, 13, 5, 3, 10, 10, 10, 10, 9, 8, 9, 6, 6, 6, 7};

void print_header() {
  print_cells({"a2a", "quant", "kernel", "preset", "T", "thr", "median ms", "min ms", "max ms", "tok/s", "GFLOP/s",
               "wGB/s", "peak", "%peak", "%DRAM", "%roof", "x base"},
              table_widths);
  if (markdown) {
    std::string sep = "|";
    for (std::size_t i = 0; i < table_widths.size(); ++i)
      sep += (i < 4 || i == 12 ? " :" : " ") + std::string(static_cast<std::size_t>(table_widths[i] - 1), '-') +
             (i < 4 || i == 12 ? " |" : ": |");
    std::printf("%s\n", sep.c_str());
  }
}

std::string fixed(double v, int digits) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.*f", digits, v);
  return buf;
}

void print_row(const row& w) {
  const auto& r = w.r;
  const peak_ref peak = applicable_peak(w);
  print_cells({r.a2a, r.quant, r.kernel, r.preset, std::to_string(r.tokens), std::to_string(r.threads),
               fixed(r.median_s * 1e3, 3), fixed(r.min_s * 1e3, 3), fixed(r.max_s * 1e3, 3),
               fixed(static_cast<double>(r.tokens) / r.median_s, 1), fixed(w.gflops(), 2), fixed(w.gbps(), 2), peak.name,
               peak.value > 0 ? fixed(100 * w.gflops() / peak.value, 1) : "n/a", fixed(100 * w.gbps() / w.bandwidth(), 1),
               std::isfinite(roofline_ratio(w)) ? fixed(100 * roofline_ratio(w), 1) : "n/a",
               w.baseline_s > 0 ? fixed(w.base_ratio(), 2) : "-"},
              table_widths);
  std::fflush(stdout);
}

polymoe::io::json num_or_null(double v) { return std::isfinite(v) ? polymoe::io::json(v) : polymoe::io::json(nullptr); }

/// The CPU's model name (/proc/cpuinfo), or "unknown".
std::string cpu_model() {
  std::ifstream f("/proc/cpuinfo");
  for (std::string line; std::getline(f, line);)
    if (line.rfind("model name", 0) == 0 && line.find(':') != std::string::npos) {
      std::string v = line.substr(line.find(':') + 1);
      return v.erase(0, v.find_first_not_of(' '));
    }
  return "unknown";
}

/// The run's context: what was built from which commit with which compiler and flags, on which
/// machine and when, with the limits measured per thread count (the records hold them too).
polymoe::io::json context(const std::vector<row>& rows) {
  using polymoe::io::json;
  char date[32] = "";
  const std::time_t now = std::time(nullptr);
  std::tm utc{};
  if (gmtime_r(&now, &utc)) std::strftime(date, sizeof date, "%Y-%m-%dT%H:%M:%SZ", &utc);
  json limits = json::object();
  for (const auto& w : rows)
    limits.set(std::to_string(w.r.threads),
               json::object({{"dram_read_gbps", num_or_null(w.lim.dram_gbs)},
                             {"fma_peak_gflops", num_or_null(w.lim.peak_gflops)},
                             {"vnni_peak_gops", w.lim.vnni_gops > 0 ? json(w.lim.vnni_gops) : json(nullptr)},
                             {"bf16_dot_peak_gflops", w.lim.bf16_dot_gflops > 0 ? json(w.lim.bf16_dot_gflops) : json(nullptr)},
                             {"amx_bf16_peak_gflops", w.lim.amx_bf16_gflops > 0 ? json(w.lim.amx_bf16_gflops) : json(nullptr)},
                             {"amx_int8_peak_gops", w.lim.amx_int8_gops > 0 ? json(w.lim.amx_int8_gops) : json(nullptr)}}));
  return json::object({{"program", "polymoe_bench"},
                       {"version", POLYMOE_VERSION_STRING},
                       {"commit", POLYMOE_GIT_COMMIT},
                       {"date", std::string(date)},
                       {"cpu", cpu_model()},
                       {"cores", static_cast<std::int64_t>(std::thread::hardware_concurrency())},
                       {"isa_compiled", kernels::tiled::compiled_paths()},
                       {"isa_this_machine", kernels::tiled::machine_paths()},
                       {"compiler", "g++ " __VERSION__},
                       {"flags", POLYMOE_BUILD_FLAGS},
                       {"limits_by_threads", std::move(limits)}});
}

/// {"context": ..., "records": [...]}: one record per point, with every timed forward's seconds
/// and their median, min, max, mean and sample standard deviation.
void write_json(const std::string& file, const std::vector<row>& rows) {
  using polymoe::io::json;
  json records = json::array();
  for (const auto& w : rows) {
    const auto& r = w.r;
    const peak_ref peak = applicable_peak(w);
    json samples = json::array();
    for (const double x : r.samples_s) samples.push_back(json(x));
    records.push_back(json::object(
        {{"a2a", r.a2a}, {"quant", r.quant}, {"kernel", r.kernel}, {"preset", r.preset},
         {"experts", static_cast<std::int64_t>(r.experts)}, {"tokens", static_cast<std::int64_t>(r.tokens)},
         {"threads", r.threads}, {"median_s", num_or_null(r.median_s)}, {"min_s", num_or_null(r.min_s)},
         {"max_s", num_or_null(r.max_s)}, {"mean_s", num_or_null(r.mean_s)}, {"stddev_s", num_or_null(r.stddev_s)},
         {"samples_s", std::move(samples)},
         {"tokens_per_s", num_or_null(static_cast<double>(r.tokens) / r.median_s)},
         {"gflops", num_or_null(w.gflops())}, {"weight_gbps", num_or_null(w.gbps())},
         {"fma_peak_gflops", num_or_null(w.lim.peak_gflops)},
         {"vnni_peak_gops", w.lim.vnni_gops > 0 ? json(w.lim.vnni_gops) : json(nullptr)},
         {"amx_bf16_peak_gflops", w.lim.amx_bf16_gflops > 0 ? json(w.lim.amx_bf16_gflops) : json(nullptr)},
         {"amx_int8_peak_gops", w.lim.amx_int8_gops > 0 ? json(w.lim.amx_int8_gops) : json(nullptr)},
         {"dram_read_gbps", num_or_null(w.lim.dram_gbs)}, {"fma_ratio", num_or_null(w.gflops() / w.lim.peak_gflops)},
         {"vnni_ratio", w.lim.vnni_gops > 0 ? num_or_null(w.gflops() / w.lim.vnni_gops) : json(nullptr)},
         {"dram_ratio", num_or_null(w.gbps() / w.lim.dram_gbs)}, {"baseline_ratio", num_or_null(w.base_ratio())},
         {"gpu", r.gpu}, {"gpu_copy_gbps", r.gpu ? num_or_null(w.lim.gpu_copy_gbs) : json(nullptr)},
         {"gpu_bf16_matmul_gflops", r.gpu ? num_or_null(w.lim.gpu_bf16_gflops) : json(nullptr)},
         {"bandwidth_ratio", num_or_null(w.gbps() / w.bandwidth())},
         {"bf16_dot_peak_gflops", w.lim.bf16_dot_gflops > 0 ? json(w.lim.bf16_dot_gflops) : json(nullptr)},
         {"peak", peak.name}, {"peak_value", num_or_null(peak.value)},
         {"peak_ratio", num_or_null(w.gflops() / peak.value)}, {"roofline_ratio", num_or_null(roofline_ratio(w))},
         {"roofline_bound", roofline_bound(w)}, {"note", r.note}}));
  }
  polymoe::io::write_text_file(file, json::object({{"context", context(rows)}, {"records", std::move(records)}}).dump() + "\n");
}

void write_csv(const std::string& file, const std::vector<row>& rows) {
  std::ofstream f(file);
  if (!f) fail("cannot write " + file);
  f << "a2a,quant,kernel,preset,experts,tokens,threads,median_s,min_s,max_s,tokens_per_s,gflops,weight_gbps,"
       "fma_peak_gflops,vnni_peak_gops,dram_read_gbps,baseline_ratio,amx_bf16_peak_gflops,amx_int8_peak_gops,"
       "mean_s,stddev_s,peak,peak_value,peak_ratio,roofline_ratio\n";
  for (const auto& w : rows) {
    const auto& r = w.r;
    const peak_ref peak = applicable_peak(w);
    f << r.a2a << ',' << r.quant << ',' << r.kernel << ',' << r.preset << ',' << r.experts << ',' << r.tokens << ','
      << r.threads << ',' << num(r.median_s) << ',' << num(r.min_s) << ',' << num(r.max_s) << ','
      << num(static_cast<double>(r.tokens) / r.median_s) << ',' << num(w.gflops()) << ',' << num(w.gbps()) << ','
      << num(w.lim.peak_gflops) << ',' << (w.lim.vnni_gops > 0 ? num(w.lim.vnni_gops) : "") << ','
      << num(w.lim.dram_gbs) << ',' << (w.baseline_s > 0 ? num(w.base_ratio()) : "") << ','
      << (w.lim.amx_bf16_gflops > 0 ? num(w.lim.amx_bf16_gflops) : "") << ','
      << (w.lim.amx_int8_gops > 0 ? num(w.lim.amx_int8_gops) : "") << ',' << num(r.mean_s) << ','
      << num(r.stddev_s) << ',' << peak.name << ',' << num(peak.value) << ',' << num(w.gflops() / peak.value) << ','
      << num(roofline_ratio(w)) << '\n';
  }
}

// Throughput against tokens, one line per (a2a, quant, kernel), for the first preset and the
// largest thread count, each point with bars from the slowest to the fastest timed forward; the
// compute peaks of the paths plotted and the DRAM bandwidth as horizontal lines. With several
// thread counts, a third panel: each series' speed-up over its fewest threads at the largest T.
// gnuplot reads a generated script.
void plot(const std::string& png, const std::vector<row>& rows, const std::string& title) {
  if (std::system("command -v gnuplot > /dev/null 2>&1") != 0)
    fail("--plot needs gnuplot, which is not installed (Debian: apt-get install gnuplot-nox)");
  const std::string preset0 = rows.front().r.preset;
  std::set<int> thread_counts;
  index_t t_max = 0;
  for (const auto& w : rows)
    if (w.r.preset == preset0) thread_counts.insert(w.r.threads), t_max = std::max(t_max, w.r.tokens);
  const int thr = *thread_counts.rbegin();
  const auto name_of = [](const row& w) {
    return w.r.a2a == "local" ? w.r.quant + " / " + w.r.kernel : w.r.a2a + " " + w.r.quant + " / " + w.r.kernel;
  };
  std::map<std::string, std::vector<const row*>> series, scaling;
  std::map<std::string, double> peaks;  // the peaks of the paths plotted, by name
  const Limits* lim = nullptr;
  for (const auto& w : rows) {
    if (w.r.preset != preset0) continue;
    if (w.r.threads == thr) {
      series[name_of(w)].push_back(&w);
      lim = &w.lim;
      const peak_ref pk = applicable_peak(w);
      if (pk.value > 0) peaks[pk.name] = pk.value;
    }
    if (w.r.tokens == t_max) scaling[name_of(w)].push_back(&w);
  }
  const std::string gp = png + ".gp";
  std::ofstream f(gp);
  if (!f) fail("cannot write " + gp);
  int i = 0;
  for (auto& [name, v] : series) {  // tokens, GFLOP/s (median, slowest, fastest), GB/s (the same)
    std::sort(v.begin(), v.end(), [](const row* a, const row* b) { return a->r.tokens < b->r.tokens; });
    f << "$d" << i++ << " << EOD\n";
    for (const row* w : v) {
      const double per_s = w->r.median_s;
      f << w->r.tokens << ' ' << num(w->gflops()) << ' ' << num(w->gflops() * per_s / w->r.max_s) << ' '
        << num(w->gflops() * per_s / w->r.min_s) << ' ' << num(w->gbps()) << ' ' << num(w->gbps() * per_s / w->r.max_s)
        << ' ' << num(w->gbps() * per_s / w->r.min_s) << '\n';
    }
    f << "EOD\n";
  }
  const bool threads_panel = thread_counts.size() > 1;
  i = 0;
  for (auto& [name, v] : scaling) {  // threads, speed-up over the fewest
    std::sort(v.begin(), v.end(), [](const row* a, const row* b) { return a->r.threads < b->r.threads; });
    f << "$s" << i++ << " << EOD\n";
    for (const row* w : v) f << w->r.threads << ' ' << num(v.front()->r.median_s / w->r.median_s) << '\n';
    f << "EOD\n";
  }
  f << "set terminal pngcairo size " << (threads_panel ? 2100 : 1500) << ",640 font 'sans,10' noenhanced\n"
    << "set output '" << png << "'\n"
    << "set multiplot layout 1," << (threads_panel ? 3 : 2) << " title \"" << title << "\"\n"
    << "set logscale xy 2\nset format y '%g'\nset grid\nset xlabel 'tokens per forward'\nset bars small\n";
  const auto lines = [&](int col) {
    std::string s;
    int k = 0;
    for (const auto& [name, v] : series) {
      s += (s.empty() ? "plot " : ", ") + std::string("$d") + std::to_string(k) + " using 1:" + std::to_string(col) +
           ":" + std::to_string(col + 1) + ":" + std::to_string(col + 2) + " with yerrorlines lw 2 pt " +
           std::to_string(k % 13 + 1) + " dt " + std::to_string(k / 8 % 3 + 1) + " title '" + name + "'";
      ++k;
    }
    return s;
  };
  // left: GFLOP/s with the peaks of the paths plotted (labelled on the lines); middle: weight GB/s
  // with DRAM
  double top = 0;
  for (const auto& [name, v] : peaks) top = std::max(top, v);
  f << "set title 'throughput (GFLOP/s), bars: slowest to fastest forward'\nset ylabel 'GFLOP/s'\nunset key\n"
    << "set yrange [*:" << num(2.5 * top) << "]\n";
  int label = 1;
  for (const auto& [name, v] : peaks)
    f << "set label " << label++ << " '" << name << " peak " << num(v, 4) << "' at graph 0.02, first " << num(v * 1.15)
      << "\n";
  f << lines(2);
  for (const auto& [name, v] : peaks) f << ", " << num(v) << " with lines dt 2 lw 2 lc rgb 'black' notitle";
  f << "\nunset label\nset yrange [*:" << num(2.5 * lim->dram_gbs) << "]\nset title 'effective weight GB/s (distinct experts touched x stored bytes / time)'\n"
    << "set ylabel 'GB/s'\nset key outside right top vertical font 'sans,9'\n"
    << "set label 1 'DRAM read " << num(lim->dram_gbs, 3) << " GB/s' at graph 0.5, first " << num(lim->dram_gbs * 1.15)
    << "\n"
    << lines(5) << ", " << num(lim->dram_gbs) << " with lines dt 2 lw 2 lc rgb 'black' notitle\n";
  if (threads_panel) {
    f << "unset label\nunset key\nset yrange [*:*]\nset title 'thread scaling at T=" << t_max
      << " (speed-up over " << *thread_counts.begin() << " thread(s); dashed: ideal)'\nset xlabel 'threads'\n"
      << "set ylabel 'speed-up'\n";
    int k = 0;
    for (const auto& [name, v] : scaling) {
      f << (k ? ", " : "plot ") << "$s" << k << " using 1:2 with linespoints lw 2 pt " << k % 13 + 1 << " title '"
        << name << "'";
      ++k;
    }
    f << ", x / " << *thread_counts.begin() << " with lines dt 2 lc rgb 'black' notitle\n";
  }
  f << "unset multiplot\n";
  f.close();
  if (std::system(("gnuplot '" + gp + "'").c_str()) != 0) fail("gnuplot failed on " + gp);
  std::printf("plot: %s (gnuplot script %s; preset %s, %d threads)\n", png.c_str(), gp.c_str(), preset0.c_str(), thr);
}

/// Runs a peer script on the preset's shape and the options' token counts (`command`, then the
/// shape, --tokens and --records FILE, then `tail`) and returns the lines it recorded, one per
/// point. When it fails it says so; its lines are kept only with `keep_partial` (a script that
/// records each point as it goes).
std::vector<std::string> run_peer_script(const std::string& command, const preset& p, const options& o,
                                         const std::string& tail, bool keep_partial) {
  char tmp[] = "/tmp/polymoe_peer_XXXXXX";
  const int fd = mkstemp(tmp);
  if (fd < 0) fail("mkstemp failed");
  close(fd);
  std::string tokens;
  for (const auto t : o.tokens) tokens += (tokens.empty() ? "" : ",") + std::to_string(t);
  std::ostringstream c;  // (a stream: GCC 12 reports a false -Wrestrict on a chain of string +)
  c << command << " --hidden " << p.hidden << " --intermediate " << p.intermediate << " --experts " << p.experts
    << " --topk " << p.top_k << " --tokens " << tokens << " --records " << tmp << tail;
  const std::string cmd = c.str();
  std::vector<std::string> lines;
  const bool ok = std::system(cmd.c_str()) == 0;
  if (!ok) std::fprintf(stderr, "polymoe_bench: the peer failed (%s)\n", cmd.c_str());
  if (ok || keep_partial) {
    std::ifstream f(tmp);
    for (std::string line; std::getline(f, line);) lines.push_back(line);
  }
  std::remove(tmp);
  return lines;
}

/// A peer's point: T tokens, `distinct` experts a forward on average, weights in `quant`.
record peer_record(const preset& p, long t, double distinct, const std::string& quant, int threads) {
  record r;
  r.a2a = "peer";
  r.quant = quant;
  r.preset = p.name;
  r.tokens = t;
  r.experts = p.experts;
  r.threads = threads;
  r.flops = flops_per_forward(p, t);
  r.weight_bytes = distinct * expert_bytes(quant, p);
  return r;
}

// The peer: bench/peer_torch.py on the same shape; its records.
std::vector<record> run_peer(const preset& p, const options& o, const std::string& dtype, int reps, int threads) {
  std::vector<record> out;
  const std::string tail = detail::concat(" --threads ", threads, " --dtype ", dtype, " --reps ", reps, " > /dev/null");
  // one record per line: tokens median min max distinct
  for (const std::string& line :
       run_peer_script(std::string("/usr/bin/python3 ") + POLYMOE_SOURCE_DIR + "/bench/peer_torch.py", p, o, tail, false)) {
    std::istringstream l(line);
    double median = 0, lo = 0, hi = 0, distinct = 0;
    long t = 0;
    if (!(l >> t >> median >> lo >> hi >> distinct)) continue;
    record r = peer_record(p, t, distinct, dtype, threads);
    r.kernel = "torch-hf-loop";
    r.median_s = median, r.min_s = lo, r.max_s = hi;
    r.note = "peer_torch.py walks all experts of one copy for decode";
    out.push_back(std::move(r));
  }
  return out;
}

#ifdef POLYMOE_BENCH_CUDA
/// The triples the bench offers: the core table's and kernel::cuda's.
using bench_triples = pairing::valid_triples_of<cuda_table>;

// The GPU peers: bench/peer_torch_gpu.py (the python3 on PATH, PyTorch with CUDA) on the same shape.
std::vector<record> run_gpu_peers(const preset& p, const options& o, int threads) {
  std::vector<record> out;
  // one record per line: peer tokens median min max distinct (a line per point as it is timed)
  for (const std::string& line : run_peer_script(std::string("python3 ") + POLYMOE_SOURCE_DIR + "/bench/peer_torch_gpu.py",
                                                 p, o, detail::concat(" --reps ", o.reps), true)) {
    std::istringstream l(line);
    std::string kernel;
    double median = 0, lo = 0, hi = 0, distinct = 0;
    long t = 0;
    if (!(l >> kernel >> t >> median >> lo >> hi >> distinct)) continue;
    record r = peer_record(p, t, distinct, "bf16", threads);
    r.kernel = kernel;
    r.gpu = true;
    r.median_s = median, r.min_s = lo, r.max_s = hi;
    r.note = "peer_torch_gpu.py, CUDA events, eager";
    out.push_back(std::move(r));
  }
  return out;
}
#else
using bench_triples = valid_triples;
#endif

}  // namespace

int main(int argc, char** argv) try {
  options o;
  std::string json, csv, png, peer, peer_dtype = "bf16", format;
  std::vector<std::string> tunings;
  std::int64_t peer_reps = 3;
  bool no_baseline = false;
  markdown = isatty(STDOUT_FILENO) != 0;

  // the valid triples: the choices of --a2a, --quant and --kernel, and what a selection is checked against
  struct names { std::string_view a, q, k; };
  std::vector<names> valid;
  boost::mp11::mp_for_each<bench_triples>([&](auto t) {
    using T = decltype(t);
    valid.push_back({boost::mp11::mp_at_c<T, 0>::name, boost::mp11::mp_at_c<T, 1>::name,
                     boost::mp11::mp_at_c<T, 2>::name});
  });
  const auto axis = [&](std::string_view names::*field) {
    std::vector<std::string> v;
    for (const auto& n : valid) v.emplace_back(n.*field);
    return programs::choice(std::move(v), true);  // "-" and "_" are the same in policy names
  };
  std::vector<std::string> preset_names;
  for (const auto& m : io::model_presets) preset_names.emplace_back(m.name);

  CLI::App app("polymoe_bench: microbenchmark of the instantiated layers", "polymoe_bench");
  programs::set_up(app, POLYMOE_VERSION_STRING, POLYMOE_GIT_COMMIT);
  constexpr auto int_max = std::numeric_limits<int>::max();
  const auto list = [](CLI::Option* opt) { return opt->delimiter(',')->type_name("LIST"); };
  const CLI::Option* presets_given =
      list(app.add_option("--preset", o.presets,
                          "shapes of io/model_presets.hpp (default tiny): real H/I/E/k, silu-gated, no\n"
                          "biases, random weights"))
          ->check(programs::choice(preset_names));
  CLI::Option* checkpoint =
      app.add_option("--checkpoint", o.checkpoint,
                     "a Hugging Face checkpoint's shape instead of (or, with --preset, besides) the\n"
                     "presets: H/I/E/k of its config.json for --layer N (default: its first MoE\n"
                     "layer); the weights timed are random, as for the presets")
          ->type_name("DIR");
  app.add_flag("--checkpoint-weights", o.checkpoint_weights,
               "time --checkpoint's own weights (its routed experts, dequantized to fp32 when stored\n"
               "quantized, then brought into each scheme as a layer would), not random ones")
      ->needs(checkpoint);
  app.add_option("--layer", o.layer, "the layer of --checkpoint")
      ->type_name("N")
      ->needs(checkpoint)
      ->check(CLI::Range(index_t{0}, std::numeric_limits<index_t>::max(), "N >= 0"));
  app.add_option("--experts", o.max_experts, "cap the number of experts E (quick runs; said in the output)")
      ->type_name("N")
      ->check(CLI::Range(index_t{1}, std::numeric_limits<index_t>::max(), "POSITIVE"));
  list(app.add_option("--tokens", o.tokens, "token counts (default 1,16,64,512)"))
      ->check(CLI::Range(index_t{1}, std::numeric_limits<index_t>::max(), "POSITIVE"));
  list(app.add_option("--threads", o.threads, "TBB threads (tbb::global_control), default 1"))
      ->check(CLI::Range(1, int_max));
  list(app.add_option("--a2a", o.a2as, "dispatchers (default: local)"))->check(axis(&names::a));
  list(app.add_option("--quant", o.quants, "schemes (default: every one)"))->check(axis(&names::q));
  list(app.add_option("--kernel", o.kernels, "kernels (default: every one)"))->check(axis(&names::k));
  app.add_option("--reps", o.reps, "timed forwards per point (default 10; median, min, max)")
      ->type_name("N")
      ->check(CLI::Range(1, int_max));
  app.add_flag("--phases", o.phases,
               "kernels tiled and tiled_amx: also the mean time per phase of the timed\n"
               "forwards (sort, inputs, gemm1, act, gemm2 or gemms, sum), in the log and the note");
  app.add_flag("--no-baseline", no_baseline, "skip the fp32 Eigen baseline (its column is then empty)");
  app.add_flag("--bf16-inputs", o.bf16_inputs,
               "hidden states that are bf16 values (an engine running in bf16), not fp32 ones");
  app.add_option("--json", json,
                 "write the records: {\"context\": build, commit, CPU, ISA paths, compiler and\n"
                 "flags, date, limits per thread count; \"records\": one per point with every\n"
                 "timed forward's seconds, median, min, max, mean, stddev}")
      ->type_name("FILE");
  app.add_option("--csv", csv, "write the records' columns without the samples")->type_name("FILE");
  app.add_option("--format", format,
                 "the tables as markdown (the default on a terminal) or aligned text (elsewhere);\n"
                 "columns: median/min/max ms, tok/s, GFLOP/s, weight GB/s, the compute peak of the\n"
                 "instruction the path runs (fp32 FMA, bf16 dot, VNNI int8, AMX bf16 / int8) and\n"
                 "the share of it, the share of DRAM bandwidth, the share of the roofline (the\n"
                 "larger of those two: a forward's time bound by its bytes or its FLOPs), x the fp32\n"
                 "Eigen baseline")
      ->type_name("FORMAT")
      ->check(programs::choice({"md", "text"}));
  app.add_option("--plot", png, "GFLOP/s and weight GB/s against tokens with the limit lines (gnuplot)")
      ->type_name("FILE.png");
  app.add_option("--peer", peer,
                 "torch: also run bench/peer_torch.py (/usr/bin/python3, Debian python3-torch) on the\n"
                 "same shapes: rows with a2a=peer, kernel=torch-hf-loop; torch-gpu (a build with the\n"
                 "CUDA component): bench/peer_torch_gpu.py, PyTorch's grouped_mm and the HF loop on\n"
                 "the GPU, rows with a2a=peer, kernel=torch-grouped-mm / torch-hf-loop")
      ->type_name("NAME")
      ->check(programs::choice({"torch", "torch-gpu"}));
  app.add_option("--peer-dtype", peer_dtype, "the peer's dtype (default bf16)")
      ->type_name("DTYPE")
      ->check(programs::choice({"bf16", "fp32"}));
  app.add_option("--peer-reps", peer_reps, "the peer's timed forwards (default 3)")
      ->type_name("N")
      ->check(CLI::Range(std::int64_t{1}, std::int64_t{int_max}));
  app.add_option("--tuning", tunings,
                 "kernels tiled and tiled_amx: settings that differ from the measured defaults\n"
                 "(docs/decisions.md), KEY=VALUE separated by commas, applied in order (the\n"
                 "other kernels have none; the records' note says the tuning). The keys are below.")
      ->type_name("KEY=VALUE,...")
      ->expected(1)
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  app.footer("Sweeps the valid (a2a, quant, kernel) triples (every local one, or those selected), the\n"
             "presets, token counts and thread counts; reports per point the median / min / max time,\n"
             "tokens/s, GFLOP/s, effective weight GB/s and the ratios to this machine's limits measured in\n"
             "the same run, and to an in-run fp32 Eigen baseline.\nThe --tuning keys:\n" +
             std::string(kernels::tiled::tuning_keys));
  if (const auto status = programs::parse(app, argc, argv, 2)) return *status;
  o.presets_given = presets_given->count() > 0;
  o.baseline = !no_baseline;
  if (!format.empty()) markdown = format == "md";
  for (const auto& t : tunings) o.tuning = kernels::tiled::parse_tuning(t, o.tuning);

  const auto selected = [&](std::string_view a, std::string_view q, std::string_view k) {
    return (o.a2as.empty() ? a == "local" : in(o.a2as, a)) && in(o.quants, q) && in(o.kernels, k);
  };
  std::vector<names> chosen;
  for (const auto& n : valid)
    if (selected(n.a, n.q, n.k)) chosen.push_back(n);
  if (chosen.empty()) {
    std::string all;
    for (const auto& n : valid)
      all += (all.empty() ? "" : ", ") + std::string(n.a) + "/" + std::string(n.q) + "/" + std::string(n.k);
    fail("no valid triple matches the selection; valid (a2a/quant/kernel): " + all);
  }
  if (!png.empty() && std::system("command -v gnuplot > /dev/null 2>&1") != 0)
    fail("--plot needs gnuplot, which is not installed (Debian: apt-get install gnuplot-nox)");
  std::vector<preset> shapes;
  if (!o.checkpoint.empty()) {  // a checkpoint's shape (its weights stay on disk: random ones are timed)
    const auto ckpt = io::hf_checkpoint::open(o.checkpoint);
    const auto moe = ckpt.moe_layers();
    if (moe.empty()) fail("--checkpoint " + o.checkpoint + ": no MoE layer in its files");
    const index_t n = o.layer >= 0 ? o.layer : moe.front();
    const MoeConfig c = ckpt.moe_config(n);
    preset cp{std::filesystem::path(o.checkpoint).filename().string() + "-layer" + std::to_string(n), c.hidden,
              c.intermediate, c.num_experts, c.top_k(), c.num_experts,
              o.checkpoint + "/config.json, layer " + std::to_string(n)};
    cp.checkpoint_cfg = c;
    cp.checkpoint_dir = o.checkpoint;
    cp.checkpoint_layer = n;
    cp.checkpoint_weights = o.checkpoint_weights;
    shapes.push_back(std::move(cp));
    if (!o.presets_given) o.presets.clear();
  }
  for (auto& p : shapes)
    if (o.max_experts > 0 && o.max_experts < p.experts) p.experts = std::max(o.max_experts, p.top_k);
  for (const auto& name : o.presets) {
    const io::model_preset* m = io::find_model_preset(name);
    if (m == nullptr) fail("--preset: unknown '" + name + "'; valid: " + io::model_preset_names());
    preset p = preset_of(*m);
    if (o.max_experts > 0 && o.max_experts < p.experts) p.experts = std::max(o.max_experts, p.top_k);
    shapes.push_back(p);
  }

  const std::size_t llc = llc_bytes();
  std::printf("polymoe_bench: %zu triple(s), %zu preset(s), tokens", chosen.size(), shapes.size());
  for (auto t : o.tokens) std::printf(" %ld", static_cast<long>(t));
  std::printf(", threads");
  for (auto t : o.threads) std::printf(" %d", t);
  std::printf(", %d reps; LLC %.1f MB, Eigen threads %d\n", o.reps, static_cast<double>(llc) / 1e6, Eigen::nbThreads());
  for (const auto& p : shapes)
    std::printf("preset %s: H=%ld I=%ld E=%ld%s k=%ld, %s, %s (shape from %s)\n",
                p.name.c_str(), static_cast<long>(p.hidden), static_cast<long>(p.intermediate),
                static_cast<long>(p.experts),
                p.experts != p.full_experts ? (" (capped by --experts from " + std::to_string(p.full_experts) + ")").c_str()
                                            : "",
                static_cast<long>(p.top_k), std::string(to_string(config_of(p).activation)).c_str(),
                p.checkpoint_weights ? "the checkpoint's weights" : config_of(p).expert_bias ? "biases, random weights"
                                                                                              : "no biases, random weights",
                p.from.c_str());

  // limits, per thread count
  std::map<int, Limits> limits;
  for (int t : o.threads) {
    Limits& l = limits[t];
    l.threads = t;
    l.dram_bytes = std::max<std::size_t>(std::size_t{1} << 30, 4 * llc);
    l.dram(), l.peak(), l.vnni(), l.bf16_dot(), l.amx();
    std::printf("limits, %d thread(s): DRAM read %.1f GB/s, fp32 FMA peak %.1f GFLOP/s, int8 VNNI peak %s, bf16 dot "
                "peak %s, AMX peak %s\n",
                t, l.dram_gbs, l.peak_gflops,
                l.vnni_gops > 0 ? (std::to_string(static_cast<long>(l.vnni_gops)) + " GOP/s").c_str()
                                : "n/a (built without __AVX512VNNI__)",
                l.bf16_dot_gflops > 0 ? (std::to_string(static_cast<long>(l.bf16_dot_gflops)) + " GFLOP/s").c_str()
                                      : "n/a (built without __AVX512BF16__)",
                l.amx_bf16_gflops > 0 ? (std::to_string(static_cast<long>(l.amx_bf16_gflops)) + " GFLOP/s bf16, " +
                                         std::to_string(static_cast<long>(l.amx_int8_gops)) + " GOP/s int8")
                                            .c_str()
                                      : "n/a (no AMX here)");
  }

  // the GPU: kernel::cuda's triple and the GPU peers, against the device's own limits
  bool gpu = false;
#ifdef POLYMOE_BENCH_CUDA
  const bool want_gpu = peer == "torch-gpu" || std::any_of(chosen.begin(), chosen.end(), [](const names& n) {
                          return n.k == kernel::cuda::name;
                        });
  if (want_gpu) {
    if (const std::string why = gpu_unavailable(); !why.empty()) {
      std::printf("GPU: skipped (kernel::cuda and the GPU peers): %s\n", why.c_str());
    } else {
      const gpu_limits g = measure_gpu_limits();
      for (auto& [t, l] : limits) l.gpu_copy_gbs = g.copy_gbs, l.gpu_bf16_gflops = g.matmul_gflops;
      std::printf("limits, GPU %s: copy %.0f GB/s (read + write), cuBLAS bf16 %.0f GFLOP/s\n", g.device.c_str(),
                  g.copy_gbs, g.matmul_gflops);
      gpu = true;
    }
  }
#else
  (void)gpu;
  if (peer == "torch-gpu") fail("--peer torch-gpu needs a build with the CUDA component (polymoe::cuda)");
#endif

  progress bar;
  const auto n_points = static_cast<int>(o.tokens.size() * o.threads.size());
  bar.total = static_cast<int>(shapes.size()) * (n_points * static_cast<int>(chosen.size() + 1) +
                                                 (peer.empty() ? 0 : static_cast<int>(o.tokens.size())));
  std::vector<row> rows;
  std::map<std::tuple<std::string, index_t, int>, double> baseline;  // (preset, T, threads) -> median s
  const auto add = [&](record r) {
    const Limits lim = limits.at(r.threads);
    row w{std::move(r), lim, 0};
    const auto b = baseline.find({w.r.preset, w.r.tokens, w.r.threads});
    if (b != baseline.end()) w.baseline_s = b->second;
    bar.clear();
    print_row(w);
    rows.push_back(std::move(w));
    ++bar.done;
    bar.draw(rows.back().r.quant + "/" + rows.back().r.kernel);
  };
  // Before each layer (and the baseline and the peer) the limits are re-measured; each keeps the
  // best value seen, and the final table, JSON, CSV and plot use the best of the whole run, so a
  // limit measured while the machine was busy cannot flatter a ratio.
  const auto info = [&](std::string s) {
    bar.clear();
    std::printf("%s\n", s.c_str());
    std::fflush(stdout);
    bar.draw("limits");
    std::string amx_now;  // the tile rate of this moment: not steady on shared machines
    for (auto& [t, l] : limits) {
      l.dram(), l.peak(), l.vnni(), l.bf16_dot();
      if (const double now = l.amx(); now > 0)
        amx_now += detail::concat(amx_now.empty() ? "" : ", ", t, " thr ", static_cast<long>(now));
    }
    bar.clear();
    if (!amx_now.empty()) std::printf("  AMX bf16 peak measured now: %s GFLOP/s\n", amx_now.c_str());
    bar.draw("");
  };

  for (const auto& p : shapes) {
    const auto t_make = clock_type::now();
    const ExpertWeights fp32 = p.checkpoint_weights
                                   ? io::hf_checkpoint::open(p.checkpoint_dir).load_fp32_experts(p.checkpoint_layer, 0, p.experts)
                                   : random_weights(p);
    // the baseline, rotated over copies of the fp32 weights as the layers are
    if (o.baseline) {
      const double layer_bytes = expert_bytes("fp32", p) * static_cast<double>(p.experts);
      std::string note;
      const int n = instances_for(layer_bytes, layer_bytes + 1e6, llc, note);
      std::vector<ExpertWeights> copies(static_cast<std::size_t>(n - 1), fp32);
      info(detail::concat("[baseline: per-expert Eigen loop, fp32] ", p.name, ": weights made in ",
                          seconds_since(t_make), " s; ", note));
      print_header();
      for (int threads : o.threads) {
        tbb::global_control gc(tbb::global_control::max_allowed_parallelism, static_cast<std::size_t>(threads));
        for (index_t T : o.tokens) {
          const Matrix hidden = random_hidden(T, p.hidden, static_cast<std::uint64_t>(T), o.bf16_inputs);
          const routing_set r = make_routings(T, p.experts, p.top_k, static_cast<std::uint64_t>(T) + 17);
          const auto V = static_cast<int>(r.ids.size());
          record rec;
          rec.a2a = "baseline", rec.quant = "fp32", rec.kernel = "eigen-loop", rec.preset = p.name;
          rec.tokens = T, rec.experts = p.experts, rec.threads = threads;
          rec.flops = flops_per_forward(p, T);
          rec.weight_bytes = r.distinct * expert_bytes("fp32", p);
          rec.note = note;
          time_reps(o.reps, std::min(2, V * n), [&](int f) {
            const int inst = (f / V) % n;
            const ExpertWeights& w = inst == 0 ? fp32 : copies[static_cast<std::size_t>(inst - 1)];
            const Matrix out = baseline_forward(w, hidden, r.ids[static_cast<std::size_t>(f % V)], r.weights);
            if (out.size() && out.data()[0] == 12345.678f) std::printf(" ");
          }, rec);
          baseline[{p.name, T, threads}] = rec.median_s;
          add(std::move(rec));
        }
      }
    }
    sweep s;
    s.opt = &o;
    s.shape = p;
    s.fp32 = &fp32;
    s.llc = llc;
    s.selected = selected;
    s.report = add;
    s.info = info;
    boost::mp11::mp_for_each<pairing::kernels_of<core_table>>([&]<class K>(K) {
      if (std::any_of(chosen.begin(), chosen.end(), [&](const names& n) { return n.k == K::name; }))
        bench_kernel<K>(s);
    });
#ifdef POLYMOE_BENCH_CUDA
    for (const names& n : chosen)
      if (gpu && n.k == kernel::cuda::name)
        for (auto& r : bench_cuda(p, fp32, o, info, n.q)) {
          r.threads = o.threads.front();  // the row takes that thread count's entry of the limits
          r.gpu = true;
          add(std::move(r));
        }
    if (gpu && peer == "torch-gpu") {
      info(detail::concat("[GPU peers: bench/peer_torch_gpu.py, PyTorch grouped_mm and HF loop, bf16] ", p.name));
      for (auto& r : run_gpu_peers(p, o, o.threads.front())) add(std::move(r));
    }
#endif
    if (peer == "torch") {
      const int thr = o.threads.back();
      info(detail::concat("[peer: bench/peer_torch.py, PyTorch HF expert loop, ", peer_dtype, ", ", thr,
                          " threads, ", peer_reps, " reps] ", p.name));
      for (auto& r : run_peer(p, o, peer_dtype, static_cast<int>(peer_reps), thr)) add(std::move(r));
    }
  }
  bar.clear();
  std::printf("limits, best of all passes:");
  for (auto& [t, l] : limits) {
    l.dram(), l.peak();
    std::printf(" %d thr: DRAM %.1f GB/s, FMA %.1f GFLOP/s, VNNI %s, AMX %s;", t, l.dram_gbs, l.peak_gflops,
                l.vnni_gops > 0 ? std::to_string(static_cast<long>(l.vnni_gops)).c_str() : "n/a",
                l.amx_bf16_gflops > 0 ? (std::to_string(static_cast<long>(l.amx_bf16_gflops)) + " bf16 / " +
                                         std::to_string(static_cast<long>(l.amx_int8_gops)) + " int8")
                                            .c_str()
                                      : "n/a");
  }
  std::printf("\n\nfinal table, ratios to the best limits of the run (x base = baseline median / median):\n");
  print_header();
  for (auto& w : rows) {
    w.lim = limits.at(w.r.threads);
    print_row(w);
  }
  if (!json.empty()) write_json(json, rows), std::printf("json: %s\n", json.c_str());
  if (!csv.empty()) write_csv(csv, rows), std::printf("csv: %s\n", csv.c_str());
  if (!png.empty() && !rows.empty()) {
    std::string title = "polymoe_bench: " + rows.front().r.preset + " (E=" + std::to_string(rows.front().r.experts) + ")";
    title += ", " + std::to_string(std::max_element(rows.begin(), rows.end(), [](const row& a, const row& b) {
                                     return a.r.threads < b.r.threads;
                                   })->r.threads) + " threads, " + cpu_model();
    plot(png, rows, title);
  }
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "polymoe_bench: %s\n", e.what());
  return 1;
}
