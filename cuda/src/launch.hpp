#pragma once
// What the host side of the CUDA engine (experts.cpp, a plain C++ translation unit) and its kernels
// (*.cu) share: plain structs and the launch functions. Nothing of Eigen or the core headers enters
// the CUDA translation units, so nvcc compiles only the kernels.
#include <cstdint>

#include <cuda_runtime_api.h>

namespace polymoe::cuda::detail {

/// The activation, as the kernels know it (experts.cpp maps polymoe::Activation onto it).
enum class act_kind : int { silu_gated, gelu_gated, swiglu_oai, silu, relu2 };

/// Padding of every GEMM dimension (rows and columns of the uploaded weights, the K of both
/// GEMMs): the tiles then need no bounds checks on loads, and padded weights and biases are zero.
inline constexpr int pad = 128;
[[nodiscard]] constexpr long long round_up(long long v, long long m) { return (v + m - 1) / m * m; }

/// Shapes of the uploaded weights (weights_view::format says how each element is stored).
///   w13 [E, r13p, hp] bf16; gated: rows interleaved by 8 (rows 16q..16q+7 are gate rows 8q..8q+7,
///       rows 16q+8..16q+15 the up rows 8q..8q+7), so that one thread holds gate and up of the same
///       column of the intermediate in GEMM 1's epilogue; non-gated: rows 0..I-1.
///   w2  [E, hp, ip] bf16 (rows: output columns of the layer; columns: the intermediate)
///   b13 [E, r13p] fp32, interleaved like w13; b2 [E, hp] fp32 (both null without biases)
struct geometry {
  int experts = 0, hidden = 0, inter = 0;
  int hp = 0, ip = 0, r13p = 0;
  bool gated = true;
  int sms = 1;  ///< the device's multiprocessors (the persistent grids)
  int deep_per_sm = 0;  ///< blocks of the deep tiles' GEMM 1 a multiprocessor holds (4-bit formats)
};
/// Columns of the deep tiles' column tiles.
inline constexpr int deep_tile_cols = 32;

/// How the uploaded weights are stored.
///   bf16: w13 and w2 as above, bf16.
///   mxfp4, nvfp4: E2M1 codes, two a byte, rows as above (w13 [E, r13p, hp/2] bytes, w2 [E, hp, ip/2]);
///     within each 64 k of a row the 32 bytes are re-laid for the GEMMs' fragments: byte
///     q·8 + s·2 + h holds the pair of elements 16s + 2q + 8h, 16s + 2q + 8h + 1 (low nibble first),
///     so that a thread's four elements of each k16 step are one 16-bit unit.
///     s13 [E, hp/64, r13p] and s2 [E, ip/64, hp]: the block scale codes of each row's 64 k,
///     2 bytes (mxfp4: E8M0 of the two blocks of 32) or 4 (nvfp4: E4M3 of the four blocks of 16);
///     nvfp4: g13 [E] and g2 [E] the per-expert scale_2, applied to the sums.
///   e4m3: E4M3 codes, one a byte, rows as above (w13 [E, r13p, hp] bytes, w2 [E, hp, ip]), with
///     t13 [E, hp/128, r13p/8] and t2 [E, ip/128, hp/8]: the fp32 scale of each 8 rows' 128 k (a
///     DeepSeek block's weight_scale_inv, or the projection's one scale: both the same for the 8
///     rows of a group, gate and up interleaved or not); the GEMMs' inputs are
///     E4M3 codes too, quantized on the device per row in groups of act_group columns (0: the whole
///     row), and the products of each 128 k are summed on the fp8 tensor cores, then scaled.
enum class wfmt : int { bf16, mxfp4, nvfp4, e4m3 };

/// Bytes of block scale codes per row per 64 k of a 4-bit format.
[[nodiscard]] constexpr int scale_bytes(wfmt f) { return f == wfmt::mxfp4 ? 2 : 4; }

struct weights_view {
  wfmt format = wfmt::bf16;
  const void* w13 = nullptr;
  const void* w2 = nullptr;
  const std::uint8_t* s13 = nullptr;
  const std::uint8_t* s2 = nullptr;
  const float* g13 = nullptr;
  const float* g2 = nullptr;
  const float* t13 = nullptr;
  const float* t2 = nullptr;
  int act_group = 128;  ///< e4m3: columns of an activation scale (0: one scale a row)
  const float* b13 = nullptr;
  const float* b2 = nullptr;
};

/// Workspace of one forward over at most `pairs` (token, slot) pairs of at most `tokens` tokens.
struct workspace_view {
  int* hist = nullptr;         ///< [sort_blocks(pairs), E] per-block counts, then per-block offsets
  int* counts = nullptr;       ///< [E] rows of each expert
  int* offsets = nullptr;      ///< [E + 1] first sorted row of each expert
  int* tile_start = nullptr;   ///< [E + 1] first row tile of each expert; [E] = tiles in all
  int* tile_info = nullptr;    ///< [tile_entries(pairs, E), 4] per row tile of the grid: expert (-1: none),
                               ///< first sorted row, rows, 0; written by the sort
  int* sorted_pair = nullptr;  ///< [pairs] pair index t·k + j of each sorted row
  int* pos_of_pair = nullptr;  ///< [pairs] sorted row of each pair, -1 for a slot not computed
  std::uint16_t* x = nullptr;  ///< [tokens, hp] bf16 expert input rows (e4m3: [tokens, hp] codes)
  std::uint16_t* h = nullptr;  ///< [pairs, ip] bf16 intermediate rows, in sorted order (e4m3: codes)
  float* y = nullptr;          ///< [pairs, H] fp32 expert outputs (weighted), in sorted order
  // e4m3 only (null otherwise)
  float* xs = nullptr;         ///< [tokens, hp/128] scales of x's codes, per 128 columns
  float* hf = nullptr;         ///< [pairs, ip] fp32 intermediate rows, before their quantization
  float* hs = nullptr;         ///< [pairs, ip/128] scales of h's codes
};

struct routing_args {
  int method = 0;  ///< 0 softmax_topk, 1 topk_softmax, 2 sigmoid_grouped_topk
  int experts = 0, k = 0;
  bool renormalize = true;
  int n_group = 1, topk_group = 1;
  float scale = 1.0f;
  const float* bias = nullptr;  ///< device [E] correction bias, or null
};

struct forward_args {
  const void* hidden = nullptr;       ///< [T, H] fp32, or bf16 bits when hidden_bf16; row t at t · ld_hidden
  bool hidden_bf16 = false;
  long long ld_hidden = 0;
  const std::int32_t* ids = nullptr;  ///< [T, k]
  const float* weights = nullptr;     ///< [T, k]
  void* out = nullptr;                ///< [T, H] fp32, or bf16 bits when out_bf16; row t at t · ld_out
  bool out_bf16 = false;
  long long ld_out = 0;
  bool accumulate = false;            ///< out += the sum instead of out = the sum
  /// Pair mode: [T, k] the row of out (fp32) that gets each computed pair's own weighted result;
  /// no top-k sum. Null: out gets each token's sum.
  const int* pair_rows = nullptr;
  /// Leave out's rows of tokens with no slot computed as they are; with one slot a token, their
  /// input rows are not read either.
  bool keep_uncomputed = false;
  int tokens = 0, k = 0;
  /// A bound on the pairs computed (ids not -1), when the caller knows one below tokens · k (the
  /// masked format's padding): the grids' row tiles are sized for it. 0: tokens · k.
  long long pair_bound = 0;
  act_kind act = act_kind::silu_gated;
  float alpha = 1.702f, limit = 7.0f;
  bool weight_on_input = false;
  /// When set, ids and weights are the engine's own: the forward routes `logits` [T, E] into them first.
  const routing_args* route = nullptr;
  const float* logits = nullptr;
};

/// The tile shapes the GEMMs are compiled for. wide: bf16 and E4M3 on wgmma (a build for sm_90a on
/// a device of compute capability 9.0 only; the caller checks), the large ones for the 4-bit formats.
enum class tiles : int { tiny, small, large, wide, deep };

/// Sort blocks of the counting sort for `pairs` pairs.
[[nodiscard]] int sort_blocks(long long pairs);
/// Row tiles of the grid for `pairs` rows over `experts` experts (the worst case of any routing).
[[nodiscard]] int max_row_tiles(tiles t, long long pairs, int experts);
/// Blocks of the deep tiles' GEMM 1 for weights of format f a multiprocessor holds (0: f has no
/// deep tiles).
[[nodiscard]] cudaError_t deep_blocks_per_sm(wfmt f, int* blocks);
/// Entries of workspace_view::tile_info for `pairs` pairs: the most row tiles of any tile shape.
[[nodiscard]] int tile_entries(long long pairs, int experts);

/// cudaSuccess when this build holds code the current device can run.
cudaError_t probe_kernels();
/// Sets the kernels' attributes on the current device (their shared memory above 48 KiB), once,
/// outside any stream capture.
cudaError_t prepare_kernels();

/// The whole forward on `stream`; returns the first launch error (cudaSuccess if none).
/// Names the failing step in `*step`.
cudaError_t launch_forward(const geometry& g, const weights_view& w, const workspace_view& ws, const forward_args& a,
                           tiles t, cudaStream_t stream, const char** step);

/// The shared expert's one slot per token: ids [T] = 0 and weights [T] = sigmoid(hidden[t] · gate),
/// the dot product summed in double, or 1 where gate is null.
cudaError_t launch_shared_slot(const void* hidden, bool hidden_bf16, long long ld_hidden, int tokens, int H,
                               const float* gate, std::int32_t* ids, float* weights, cudaStream_t stream);

/// dst [rows, cols] bf16 = src [rows, cols] fp32 rounded to nearest even (row strides ld_*).
cudaError_t launch_to_bf16(const float* src, long long ld_src, std::uint16_t* dst, long long ld_dst, int rows, int cols,
                           cudaStream_t stream);

/// E4M3 codes of rows of src (fp32, or bf16 bits when src_bf16; row r at r · ld_src, `cols`
/// columns) as the fp8 schemes define them (polymoe/quantize/fp8.hpp): per group of `group`
/// columns (0: the whole row), s = amax / 448 (1 for an all-zero group) and code =
/// e4m3_satfinite(x / s), both in fp32 round-to-nearest; a group holding a NaN or an infinity gets
/// codes 0 and scale NaN. codes [rows, cp] (cp a multiple of 128 >= cols; columns past cols are
/// code 0), scales [rows, cp/128] (a row's one scale repeated when group is 0).
cudaError_t launch_quantize_e4m3(const void* src, bool src_bf16, long long ld_src, int rows, int cols, int group,
                                 std::uint8_t* codes, int cp, float* scales, cudaStream_t stream);

/// The masked format as tokens of one slot: row e · capacity + i is expert e's when i <
/// min(masked_m[e], capacity), else no slot (id -1); weights 1; rows[q] = q (each row's result
/// to its own row of out).
cudaError_t launch_masked_slots(const std::int32_t* masked_m, int experts, int capacity, std::int32_t* ids,
                                float* weights, std::int32_t* rows, cudaStream_t stream);


/// Routing of `tokens` rows of logits [T, E] into ids [T, k] and weights [T, k], on `stream`.
cudaError_t launch_route(const routing_args& r, const float* logits, int tokens, std::int32_t* ids, float* weights,
                         cudaStream_t stream);

}  // namespace polymoe::cuda::detail
