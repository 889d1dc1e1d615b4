#pragma once
// The tiled kernels' tuning: the choices that measurement settled (docs/decisions.md), as one
// value that kernel::tiled and kernel::tiled_amx carry and hand down to every place that reads
// one. A default-constructed tuning is the library's measured defaults; a benchmark that measures
// a default builds two kernels with two tunings, and a test that must reach a path the defaults
// avoid (every block on the AMX tiles, y streamed at every size) builds its kernel with it.
//
//   kernels::tiled::tuning t;
//   t.amx_min_rows = 1;  // every row block on the tiles
//   polymoe::MoeLayer<polymoe::a2a::local, polymoe::quant::bf16, polymoe::kernel::tiled_amx> layer(
//       cfg, weights, {}, polymoe::kernel::tiled_amx{t});
//
// parse_tuning reads the text form that the tools take (--tuning y-stream=on,amx-min-rows=1) and
// to_string writes it.
#include <charconv>
#include <cstdint>
#include <string>
#include <string_view>

#include <polymoe/core/error.hpp>
#include <polymoe/core/types.hpp>
#include <polymoe/kernels/tiled/level.hpp>

namespace polymoe::kernels::tiled {

/// A choice the kernel makes by a measured rule (automatic), or forced one way at every size.
enum class mode : std::uint8_t { automatic, off, on };

struct tuning {
  /// GEMM 2 stores y with non-temporal stores when y and the weights of the experts with rows
  /// outgrow the last-level cache (an ordinary store would first read each line for ownership);
  /// off / on force it at every size (the same values). docs/decisions.md#y-streaming
  mode y_stream = mode::automatic;
  /// kernel::tiled_amx runs its two GEMMs as one pipeline of tasks (decode faster, prefill not
  /// slower); off runs them as phases (the same bits). docs/decisions.md#pipeline
  bool pipeline = true;
  /// kernel::tiled_amx runs GEMM 1 one task per row block from 16 rows per block on average, where
  /// the pipeline runs (int8 keeps its inputs and activations in the worker's buffers); off / on
  /// force it wherever the pipeline runs (the same bits). docs/decisions.md#gemm1-by-block
  mode gemm1_by_block = mode::automatic;
  /// Columns per step of the top-k sum: k streams of y in flight instead of one, about a quarter
  /// faster than whole rows (the same bits at any step). docs/decisions.md#sum-span
  index_t sum_span = 64;
  /// Buffers of 2 MiB or more (packed weights, workspace) 2 MiB-aligned and offered transparent
  /// huge pages (fewer page walks over a gigabyte of weights); read when buffers are allocated,
  /// so it acts from prepare on. docs/decisions.md#huge-pages
  bool huge_pages = true;
  /// Rows per block from which kernel::tiled_amx runs a block on the AMX tiles, in every format;
  /// 0: each format's measured threshold (amx_min_rows_bf16, amx_min_rows_int8, ...). 1 puts
  /// every block on the tiles. docs/decisions.md#amx-min-rows
  index_t amx_min_rows = 0;
  /// bf16's row-block cut on the AMX tiles (a multiple of 16, at most amx_block_rows = 256): 256
  /// keeps an expert's rows in one block at T = 2048, 7-10 % faster than 128 (the same bits).
  /// docs/decisions.md#amx-row-blocks
  index_t bf16_block_rows = 256;
  /// Split GEMM 1 rows whose lo terms are all zero (bf16 hidden states) run the hi term alone:
  /// the same bits with half the tile work. docs/decisions.md#bf16-terms
  bool one_term = true;
  /// Decoded-format blocks of up to 16 rows decode each k-block between the previous one's tile
  /// products (amx::decoded_row_group) instead of a slab before its products (the same bits).
  /// docs/decisions.md#row-group-loop
  bool row_group = true;
  /// Every row by one path whatever else its block holds, so that a row's result does not depend
  /// on its batch: blocks of one or two rows run the tile loops (the short loops sum in another
  /// order), and kernel::tiled_amx puts every block on the tiles where the layer runs them. The
  /// layer runs its shared expert so (expert parallelism runs it on each rank's own tokens); the
  /// routed experts see the same rows either way and keep the measured paths.
  bool batch_invariant = false;
  /// The instruction-set level a build that chooses at run time prepares for (level.hpp): native
  /// means the best this CPU runs; a named level must be compiled in and run here (tests and
  /// benchmarks of the lower levels). A pinned build has only native.
  isa_level isa = isa_level::native;

  /// The AMX threshold in use for a format whose measured threshold is `measured`.
  [[nodiscard]] constexpr index_t tiles_from(index_t measured) const noexcept {
    return batch_invariant ? 1 : amx_min_rows > 0 ? amx_min_rows : measured;
  }
  /// Whether blocks of one or two rows may run the short loops (decode), whose sum order differs.
  [[nodiscard]] constexpr bool short_loops() const noexcept { return !batch_invariant; }

  friend constexpr bool operator==(const tuning&, const tuning&) = default;
};

/// The keys of tuning's text form, one line each, for a tool's help text.
inline constexpr std::string_view tuning_keys =
    "  y-stream=auto|off|on        GEMM 2 stores y past the caches (auto: y + weights > last-level cache)\n"
    "  pipeline=on|off             tiled_amx: both GEMMs as one pipeline of tasks (off: phases)\n"
    "  gemm1-by-block=auto|off|on  tiled_amx: GEMM 1 a task per row block (auto: >= 16 rows per block)\n"
    "  sum-span=N                  columns per step of the top-k sum (default 64)\n"
    "  huge-pages=on|off           2 MiB pages for buffers of 2 MiB or more\n"
    "  amx-min-rows=N              tiled_amx: blocks of N rows or more on the tiles, every format\n"
    "                              (default 0: each format's measured threshold; 1: every block)\n"
    "  bf16-block-rows=N           tiled_amx: bf16's row-block cut on the tiles (16..256, step 16; default 256)\n"
    "  one-term=on|off             tiled_amx: split rows with zero lo terms run the hi term alone\n"
    "  row-group=on|off            tiled_amx: decoded blocks of <= 16 rows decode between tile products\n"
    "  batch-invariant=on|off      a row's result independent of its batch (the shared expert's setting)\n"
    "  isa=best|portable|avx512|avx512-vnni-bf16|avx512-zen\n"
    "                              the instruction-set level (a build without -march; default best)\n";

/// Throws polymoe::error when a field is out of its range.
inline void validate(const tuning& t) {
  require(t.sum_span >= 1 && t.sum_span <= (index_t{1} << 30), "tuning: sum-span must be in [1, 2^30], got ",
          t.sum_span);
  require(t.amx_min_rows >= 0 && t.amx_min_rows <= (index_t{1} << 30),
          "tuning: amx-min-rows must be in [0, 2^30] (0: the measured thresholds), got ", t.amx_min_rows);
  require(t.bf16_block_rows >= 16 && t.bf16_block_rows <= 256 && t.bf16_block_rows % 16 == 0,
          "tuning: bf16-block-rows must be a multiple of 16 in [16, 256], got ", t.bf16_block_rows);
}

namespace tuning_detail {
[[nodiscard]] constexpr std::string_view level_name(isa_level l) noexcept {
  switch (l) {
    case isa_level::portable: return "portable";
    case isa_level::avx512: return "avx512";
    case isa_level::avx512_vnni_bf16: return "avx512-vnni-bf16";
    case isa_level::avx512_zen: return "avx512-zen";
    case isa_level::native: break;
  }
  return "best";
}

[[nodiscard]] inline std::string_view mode_name(mode m) noexcept {
  return m == mode::on ? "on" : m == mode::off ? "off" : "auto";
}

}  // namespace tuning_detail

/// The text form of `t`: every key, `key=value` separated by commas (parse_tuning reads it back).
[[nodiscard]] inline std::string to_string(const tuning& t) {
  const auto flag = [](bool on) { return on ? "on" : "off"; };
  return polymoe::detail::concat("y-stream=", tuning_detail::mode_name(t.y_stream), ",pipeline=", flag(t.pipeline),
                        ",gemm1-by-block=", tuning_detail::mode_name(t.gemm1_by_block), ",sum-span=", t.sum_span,
                        ",huge-pages=", flag(t.huge_pages), ",amx-min-rows=", t.amx_min_rows,
                        ",bf16-block-rows=", t.bf16_block_rows, ",one-term=", flag(t.one_term),
                        ",row-group=", flag(t.row_group), ",batch-invariant=", flag(t.batch_invariant),
                        ",isa=", tuning_detail::level_name(t.isa));
}

/// `base` with the settings of `spec`: `key=value` pairs separated by commas (tuning_keys; `_`
/// may stand for `-`), applied in order; an empty spec changes nothing. Throws polymoe::error on
/// an unknown key, a value the key does not take, or a result out of range (validate).
[[nodiscard]] inline tuning parse_tuning(std::string_view spec, tuning base = {}) {
  tuning t = base;
  while (!spec.empty()) {
    const std::size_t comma = spec.find(',');
    const std::string_view item = spec.substr(0, comma);
    spec = comma == std::string_view::npos ? std::string_view{} : spec.substr(comma + 1);
    const std::size_t eq = item.find('=');
    require(eq != std::string_view::npos && eq > 0, "tuning: expected key=value, got '", item, "'");
    std::string key(item.substr(0, eq));
    for (char& c : key)
      if (c == '_') c = '-';
    const std::string_view value = item.substr(eq + 1);
    const auto on_off = [&]() {
      if (value == "on" || value == "1") return true;
      require(value == "off" || value == "0", "tuning: ", key, " takes on or off, got '", value, "'");
      return false;
    };
    const auto choice = [&]() {
      if (value == "auto") return mode::automatic;
      if (value == "on" || value == "1") return mode::on;
      require(value == "off" || value == "0", "tuning: ", key, " takes auto, on or off, got '", value, "'");
      return mode::off;
    };
    const auto number = [&]() {
      index_t v = 0;
      const auto [p, ec] = std::from_chars(value.data(), value.data() + value.size(), v);
      require(ec == std::errc{} && p == value.data() + value.size() && !value.empty(), "tuning: ", key,
              " takes a whole number, got '", value, "'");
      return v;
    };
    if (key == "y-stream")
      t.y_stream = choice();
    else if (key == "pipeline")
      t.pipeline = on_off();
    else if (key == "gemm1-by-block")
      t.gemm1_by_block = choice();
    else if (key == "sum-span")
      t.sum_span = number();
    else if (key == "huge-pages")
      t.huge_pages = on_off();
    else if (key == "amx-min-rows")
      t.amx_min_rows = number();
    else if (key == "bf16-block-rows")
      t.bf16_block_rows = number();
    else if (key == "one-term")
      t.one_term = on_off();
    else if (key == "row-group")
      t.row_group = on_off();
    else if (key == "batch-invariant")
      t.batch_invariant = on_off();
    else if (key == "isa") {
      bool known = false;
      for (isa_level l : {isa_level::native, isa_level::portable, isa_level::avx512, isa_level::avx512_vnni_bf16,
                          isa_level::avx512_zen})
        if (value == tuning_detail::level_name(l)) {
          t.isa = l;
          known = true;
        }
      require(known, "tuning: isa takes best, portable, avx512, avx512-vnni-bf16 or avx512-zen, got '", value, "'");
    }
    else
      throw polymoe::error(polymoe::detail::concat("tuning: unknown key '", key, "'; the keys:\n", tuning_keys));
  }
  validate(t);
  return t;
}

}  // namespace polymoe::kernels::tiled
