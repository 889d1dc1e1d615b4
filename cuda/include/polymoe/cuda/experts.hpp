#pragma once
// polymoe::cuda — the routed experts of a layer on an NVIDIA GPU, the optional CUDA component
// (CMake target polymoe::cuda). Weights are bf16 (quant::bf16); 4-bit E2M1 with their block
// scales (quant::mxfp4::weights, quant::nvfp4::weights), kept 4-bit on the device and decoded to
// bf16 in registers: the W4A16 schemes quant::mxfp4_w4a16 and quant::nvfp4_w4a16; or E4M3 with
// their scales (quant::fp8_block, quant::fp8), whose activations are quantized to E4M3 on the
// device and multiplied on the fp8 tensor cores.
//
// This header needs no CUDA header and no CUDA compiler: a stream is CUDA's cudaStream_t, declared
// here through CUDA's own incomplete type (struct CUstream_st), and device memory is a plain
// pointer. Host code includes it and links polymoe::cuda.
//
//   cuda::Experts experts(quant::bf16::quantize(fp32_weights), ExpertMlp{...});   // uploads once
//   cuda::Router router(cfg.router, cfg.num_experts);                               // uploads the bias
//   experts.forward(d_hidden, T, d_logits, router, d_out, stream);                  // all on the device
//
// forward and forward_routed compute what kernel::reference computes with quant::bf16 (or the
// scheme of the weights) for the standard format: each input row rounded to bf16 (fp8: quantized
// to E4M3), GEMM 1 (exact products, fp32 sums, bias; NVFP4's scale_2 multiplies the sums; fp8:
// the sums of each 128 k, at the fp8 tensor cores' precision, times their two scales), the activation, the intermediate rounded to bf16
// (fp8: quantized from fp32), GEMM 2 (+ bias) times the routing weight (or the input times it,
// ExpertMlp::weight_on_input), and the fp32 sum over the k slots
// in slot order. Results are bitwise the same from run to run. After the first call at a batch
// size (or reserve()), a forward allocates nothing and never waits for the device: it can be
// captured in a CUDA graph. Every CUDA error becomes a polymoe::error naming the call.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>

#include <polymoe/core/config.hpp>
#include <polymoe/core/device_view.hpp>
#include <polymoe/core/formats.hpp>
#include <polymoe/core/routing.hpp>
#include <polymoe/quant/bf16.hpp>
#include <polymoe/quant/fp8.hpp>
#include <polymoe/quant/fp8_block.hpp>
#include <polymoe/quant/mxfp4.hpp>
#include <polymoe/quant/nvfp4.hpp>

namespace polymoe::cuda {

using stream_t = cuda_stream;  ///< a cudaStream_t; nullptr is CUDA's default stream

/// Why this process cannot run the engine (no driver, no device, no code for the device's
/// architecture in this build), or empty when it can. Never throws.
[[nodiscard]] std::string unavailable_reason();

/// Device memory from cudaMalloc on the current device, freed on destruction.
class device_memory {
 public:
  device_memory() = default;
  explicit device_memory(std::size_t bytes);
  ~device_memory();
  device_memory(device_memory&& o) noexcept;
  device_memory& operator=(device_memory&& o) noexcept;
  device_memory(const device_memory&) = delete;
  device_memory& operator=(const device_memory&) = delete;

  [[nodiscard]] void* get() const noexcept { return p_; }
  [[nodiscard]] std::size_t bytes() const noexcept { return bytes_; }
  /// Synchronous copies between host memory and [offset, offset + bytes) of this block.
  void upload(const void* src, std::size_t bytes, std::size_t offset = 0);
  void download(void* dst, std::size_t bytes, std::size_t offset = 0) const;

 private:
  void* p_ = nullptr;
  std::size_t bytes_ = 0;
};

/// A typed device array (n elements of T).
template <class T>
class device_array {
 public:
  device_array() = default;
  explicit device_array(std::size_t n) : mem_(n * sizeof(T)), n_(n) {}
  [[nodiscard]] T* data() const noexcept { return static_cast<T*>(mem_.get()); }
  [[nodiscard]] std::size_t size() const noexcept { return n_; }
  void upload(std::span<const T> src) {
    require(src.size() <= n_, "cuda::device_array: upload of ", src.size(), " elements into ", n_);
    mem_.upload(src.data(), src.size_bytes());
  }
  void download(std::span<T> dst) const {
    require(dst.size() <= n_, "cuda::device_array: download of ", dst.size(), " elements from ", n_);
    mem_.download(dst.data(), dst.size_bytes());
  }

 private:
  device_memory mem_;
  std::size_t n_ = 0;
};

/// Waits for the work queued on `stream` (polymoe::error on a CUDA error).
void synchronize(stream_t stream);

/// The current device (polymoe::error on a CUDA error).
[[nodiscard]] int current_device();
/// The devices this process sees (0 where CUDA cannot be asked).
[[nodiscard]] int device_count() noexcept;
/// Makes `device` the current one (polymoe::error naming it when that fails).
void set_current_device(int device);
/// "NVIDIA H100 80GB HBM3 (sm_90)": the device's name and compute capability.
[[nodiscard]] std::string device_name(int device);
/// polymoe::error naming `what` unless v's memory (its first and last element) is device or
/// managed memory of `device` and v.device says so: a host pointer, or a tensor on another device,
/// is refused before any launch.
void require_on_device(const device_view& v, std::string_view what, int device);

/// dst = src rounded to bf16 (nearest even), on `stream`: src float32 and dst bfloat16 views of
/// the same shape (row strides of their own).
void to_bf16(const device_view& src, const device_view& dst, stream_t stream);

/// Columns of the E4M3 codes of rows of `cols` values: cols rounded up to a multiple of 128.
[[nodiscard]] constexpr index_t e4m3_columns(index_t cols) noexcept { return (cols + 127) / 128 * 128; }

/// E4M3 codes of src's rows (float32 or bfloat16 [rows, cols], any row stride) on `stream`, as the
/// fp8 schemes quantize activations (polymoe/quantize/fp8.hpp): per group of `group` columns
/// (128: quant::fp8_block; 0: the whole row, quant::fp8), s = amax / 448 (1 for an all-zero
/// group) and code = e4m3(x / s), saturated to ±448, both in fp32 round-to-nearest-even. codes:
/// device memory of [rows, e4m3_columns(cols)] bytes, packed (codes past cols are 0); scales:
/// [rows, e4m3_columns(cols) / 128] floats, packed (with group 0, a row's scale in each). A group
/// holding a NaN or an infinity gets codes 0 and scale NaN (its values cannot be E4M3 codes).
void quantize_e4m3(const device_view& src, std::uint8_t* codes, float* scales, index_t group, stream_t stream);

/// The shared expert's one slot per token on `stream`: ids [T] = 0 and weights [T] =
/// sigmoid(hidden[t] · gate) (the dot product in double), or 1 where gate is null. hidden is
/// float32 or bfloat16 [T, H]; gate a device array of H floats.
void shared_slot(const device_view& hidden, const float* gate, std::int32_t* ids, float* weights, stream_t stream);

/// Routing on the device (every method of RouterConfig, the same ids as route_rows and weights to
/// fp32 rounding). Holds the correction bias on the device.
class Router {
 public:
  /// Throws polymoe::error when `rc` cannot route over `num_experts` (RouterConfig::validate) or
  /// the device kernel does not hold the shape (num_experts <= 1024, top_k and n_group <= 32).
  Router(const RouterConfig& rc, index_t num_experts);
  ~Router();
  Router(Router&&) noexcept;
  Router& operator=(Router&&) noexcept;

  /// logits [T, E] fp32 -> ids [T, k] int32, weights [T, k] fp32, all device pointers, on `stream`.
  /// Logits are not checked for finiteness on the device (the host route does).
  void route(const float* logits, index_t tokens, std::int32_t* ids, float* weights, stream_t stream) const;
  /// Convenience (copies each way, synchronous): the same as route() on host matrices.
  [[nodiscard]] Routing route(const MatrixCRef& logits) const;

  [[nodiscard]] index_t top_k() const noexcept;
  [[nodiscard]] index_t experts() const noexcept;

 private:
  friend class Experts;  // Experts::forward routes inside its own launches
  struct impl;
  std::unique_ptr<impl> impl_;
};

/// Which GEMM tiles a forward uses: by the mean rows an expert (automatic), or one of them
/// (tests run each on every shape). wide: Hopper's wgmma (128 x 256 tiles for bf16 weights, 128 x
/// 128 for E4M3) in a build for sm_90a on a device of compute capability 9.0; elsewhere, and for
/// the 4-bit formats, the large tiles in their place. automatic takes the wide tiles for bf16 only:
/// for E4M3 they are faster at prefill but sum in wgmma's narrower accumulator (DeepGEMM's
/// numerics), so they are the caller's choice. deep: for the 4-bit formats, the tiny row tiles with
/// twice the k a pipeline stage (fewer, larger loads in each block's walk over K: faster when the
/// whole grid is resident at once, slower when it takes several waves); elsewhere the tiny tiles.
/// automatic takes them for 4-bit weights when the blocks with rows fill at most 1.5 waves.
enum class TileChoice { automatic, tiny, small, large, wide, deep };

/// One forward over views (kernel::cuda's run): out [T, H] (=, or += with accumulate) the routed
/// sum of the experts of hidden's rows. hidden float32 or bfloat16 with any row stride; ids and
/// weights packed [T, k]; out float32 or bfloat16 (the fp32 sum rounded once; with accumulate,
/// out's value added in fp32 first) with any row stride.
///
/// With pair_rows (int32 [T, k], packed): each computed pair's own weighted result (the row the
/// sum would add) goes to row pair_rows[t, j] of out, float32 [any rows, H], and nothing is summed
/// (how an expert-parallel dispatcher returns each slot to its token's rank). Rows of computed
/// pairs must be distinct and inside out; those of pairs not computed are not read.
struct routed_call {
  device_view hidden, ids, weights, out;
  bool accumulate = false;
  device_view pair_rows{};
};

/// One forward of the masked format (DeepEP low-latency): hidden [E · capacity, H] float32 or
/// bfloat16, rows e · capacity + i of expert e valid for i < masked_m[e] (int32 [E] on the device;
/// a count above capacity stands for capacity); out [E · capacity, H] float32 gets each valid row's
/// unweighted expert output, and its padding rows are left as they are.
struct masked_call {
  device_view hidden, masked_m;
  index_t capacity = 0;
  device_view out;
  /// The valid rows of all experts together that the caller expects (the automatic tile shape's
  /// batch; 0: every row, experts · capacity).
  index_t expected_rows = 0;
  /// The most valid rows of all experts together, when the caller knows fewer than experts ·
  /// capacity (the grids are sized for them; a larger sum of masked_m leaves rows uncomputed). 0:
  /// experts · capacity.
  index_t max_rows = 0;
};

/// The routed experts of a layer on one device (the current one at construction).
class Experts {
 public:
  /// Uploads the weights (re-laid for the kernels) to the current device. Throws polymoe::error
  /// on a bad store or when the device cannot run this build's kernels. Without an ExpertMlp the
  /// activation is given to each run().
  Experts(const quant::bf16::weights& w, const ExpertMlp& mlp);
  explicit Experts(const quant::bf16::weights& w);
  /// 4-bit weights: the E2M1 codes and scale codes as stored (the W4A16 schemes' arithmetic).
  Experts(const quant::mxfp4::weights& w, const ExpertMlp& mlp);
  explicit Experts(const quant::mxfp4::weights& w);
  Experts(const quant::nvfp4::weights& w, const ExpertMlp& mlp);
  explicit Experts(const quant::nvfp4::weights& w);
  /// E4M3 weights with their scales (DeepSeek's 128x128 blocks, or one a projection): the
  /// schemes quant::fp8_block and quant::fp8, whose activations are quantized to E4M3 on the
  /// device (per token in groups of 128, or per token) and multiplied on the fp8 tensor cores.
  /// fp8_block weights always run fp8_block here, never fp8_block_weight_only.
  Experts(const quant::fp8_block::weights& w, const ExpertMlp& mlp);
  explicit Experts(const quant::fp8_block::weights& w);
  Experts(const quant::fp8::weights& w, const ExpertMlp& mlp);
  explicit Experts(const quant::fp8::weights& w);
  ~Experts();
  Experts(Experts&&) noexcept;
  Experts& operator=(Experts&&) noexcept;

  [[nodiscard]] ExpertShape shape() const noexcept;
  [[nodiscard]] int device() const noexcept;

  /// out [T, H] = Σ_j weights[t, j] · expert_{ids[t, j]}(hidden[t]) (ids of -1 skipped). Device
  /// pointers, row-major, on the engine's device; runs on `stream` without waiting for it.
  void forward_routed(const float* hidden, index_t tokens, const std::int32_t* ids, const float* weights,
                      index_t top_k, float* out, stream_t stream);
  /// Routing (router) on the device, then forward_routed.
  void forward(const float* hidden, index_t tokens, const float* router_logits, const Router& router, float* out,
               stream_t stream);

  /// The forward of a routed_call with `mlp` (checked against the weights), on `stream`.
  /// The workspace grows here (the weights stay as they are): one run at a time per engine.
  void run(const routed_call& c, const ExpertMlp& mlp, stream_t stream) const;
  /// The masked format's forward on `stream` (never waits for the device).
  void run(const masked_call& c, const ExpertMlp& mlp, stream_t stream) const;

  /// Convenience for tools and tests (device copies each way, synchronous).
  void forward_routed(const MatrixCRef& hidden, const IdMatrixCRef& ids, const MatrixCRef& weights, MatrixRef out);
  void forward(const MatrixCRef& hidden, const MatrixCRef& router_logits, const Router& router, MatrixRef out);

  /// Grows the workspace now for `tokens` tokens of `top_k` slots (forward grows it when needed).
  void reserve(index_t tokens, index_t top_k);
  void set_tiles(TileChoice t) noexcept;
  /// "bf16", "mxfp4", "nvfp4", "fp8_block" or "fp8": how the weights are held.
  [[nodiscard]] std::string_view weight_format() const noexcept;

 private:
  // own_routing: ids and weights are the engine's workspace (not checked); router: route
  // `logits` into them as part of the forward.
  void launch(const routed_call& c, const ExpertMlp& mlp, stream_t stream, bool keep_uncomputed, bool own_routing,
              const Router* router = nullptr, const float* logits = nullptr, index_t rows_hint = 0,
              index_t row_bound = 0) const;
  struct impl;
  std::unique_ptr<impl> impl_;
};

// Defined here, in the caller's translation unit: Eigen objects are allocated and freed on the
// same side of the library boundary, whatever alignment each side was compiled for (a library
// built without -march=native and a caller built with it disagree on Eigen's allocator).
inline Routing Router::route(const MatrixCRef& logits) const {
  const index_t T = logits.rows(), k = top_k();
  require(logits.cols() == experts(), "cuda::Router: router_logits has ", logits.cols(), " columns, expected ",
          experts());
  Routing r;
  r.ids.resize(T, k);
  r.weights.resize(T, k);
  if (T == 0) return r;
  const Matrix z = logits;
  const auto n = static_cast<std::size_t>(T * k);
  device_array<float> dz(static_cast<std::size_t>(z.size())), dw(n);
  device_array<std::int32_t> di(n);
  dz.upload({z.data(), static_cast<std::size_t>(z.size())});
  route(dz.data(), T, di.data(), dw.data(), nullptr);
  synchronize(nullptr);
  di.download({r.ids.data(), n});
  dw.download({r.weights.data(), n});
  return r;
}

}  // namespace polymoe::cuda
