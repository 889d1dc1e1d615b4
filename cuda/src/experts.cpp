// The host side of the CUDA engine: weights re-laid and uploaded once, the workspace, argument
// checks, and CUDA errors turned into polymoe::error. The kernels are in experts.cu and routing.cu.
#include <polymoe/cuda/experts.hpp>

#include <algorithm>
#include <optional>
#include <string_view>
#include <utility>
#include <vector>

#include <cuda_runtime_api.h>

#include "host_check.hpp"
#include "launch.hpp"

#ifndef POLYMOE_CUDA_ARCHITECTURES
#define POLYMOE_CUDA_ARCHITECTURES "?"
#endif

namespace polymoe::cuda {
namespace {

using detail::check;
using detail::device_scope;

// Throws unless p is device (or managed) memory of `device`: a host pointer, or memory of another
// device, is refused before any launch.
void require_device_pointer(const void* p, std::string_view what, int device) {
  require(p != nullptr, "cuda: ", what, " is a null pointer");
  cudaPointerAttributes attr{};
  check(cudaPointerGetAttributes(&attr, p), "cudaPointerGetAttributes");
  require(attr.type == cudaMemoryTypeDevice || attr.type == cudaMemoryTypeManaged, "cuda: ", what,
          " is not device memory (a host pointer where a device pointer is expected)");
  require(attr.device == device, "cuda: ", what, " is memory of device ", attr.device, ", the engine is on device ",
          device);
}

// Throws unless the `bytes` bytes from p are device (or managed) memory of `device`: the first and
// the last, so that a range longer than its allocation is refused where the runtime can tell.
void require_device_bytes(const void* p, std::size_t bytes, std::string_view what, int device) {
  require_device_pointer(p, what, device);
  require_device_pointer(static_cast<const char*>(p) + bytes - 1, polymoe::detail::concat(what, " (its last byte)"),
                         device);
}

void require_runnable() {
  const cudaError_t err = detail::probe_kernels();
  if (err == cudaSuccess) return;
  (void)cudaGetLastError();
  int d = 0, major = 0, minor = 0;
  (void)cudaGetDevice(&d);
  (void)cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, d);
  (void)cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, d);
  throw error(polymoe::detail::concat("cuda: this build's kernels cannot run on device ", d, " (compute capability ", major, ".",
                             minor, "; built for CMAKE_CUDA_ARCHITECTURES=", POLYMOE_CUDA_ARCHITECTURES,
                             "): cudaFuncGetAttributes failed: ", cudaGetErrorName(err)));
}

// wgmma is sm_90a's alone: the wide tiles run where this build holds sm_90a code and the device is
// of compute capability 9.0 (elsewhere their kernel is empty and the large tiles serve).
bool wide_tiles_run(int device) {
  constexpr std::string_view archs = POLYMOE_CUDA_ARCHITECTURES;
  if (archs.find("90a") == std::string_view::npos) return false;
  int major = 0, minor = 0;
  check(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device), "cudaDeviceGetAttribute");
  check(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device), "cudaDeviceGetAttribute");
  return major == 9 && minor == 0;
}

detail::act_kind kind_of(Activation a) {
  switch (a) {
    case Activation::silu_gated: return detail::act_kind::silu_gated;
    case Activation::gelu_gated: return detail::act_kind::gelu_gated;
    case Activation::swiglu_oai: return detail::act_kind::swiglu_oai;
    case Activation::silu: return detail::act_kind::silu;
    case Activation::relu2: return detail::act_kind::relu2;
  }
  throw error("cuda: unknown activation");
}

constexpr std::size_t kAlign = 256;
std::size_t aligned(std::size_t b) { return (b + kAlign - 1) / kAlign * kAlign; }

// Bytes of the re-laid biases (b13 [E, r13p] | b2 [E, hp]), 0 without biases.
std::size_t bias_bytes(const ExpertShape& s, const detail::geometry& g) {
  if (!s.bias) return 0;
  return aligned(static_cast<std::size_t>(s.experts) * g.r13p * 4) + aligned(static_cast<std::size_t>(s.experts) * g.hp * 4);
}

}  // namespace

// ---------------------------------------------------------------------------------------------

int current_device() {
  int d = 0;
  check(cudaGetDevice(&d), "cudaGetDevice");
  return d;
}

int device_count() noexcept {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    (void)cudaGetLastError();
    return 0;
  }
  return n;
}

void set_current_device(int device) {
  const int devices = device_count();
  require(device >= 0 && device < devices, "cuda: device ", device, " does not exist (", devices, " devices)");
  check(cudaSetDevice(device), "cudaSetDevice");
}

std::string device_name(int device) {
  cudaDeviceProp prop{};
  check(cudaGetDeviceProperties(&prop, device), "cudaGetDeviceProperties");
  return polymoe::detail::concat(prop.name, " (sm_", prop.major, prop.minor, ")");
}

void require_on_device(const device_view& v, std::string_view what, int device) {
  if (v.empty()) return;
  require(v.device == device, "cuda: ", what, " says device ", v.device, ", the layer is on device ", device);
  require_device_bytes(v.data, static_cast<std::size_t>(v.extent_bytes()), what, device);
}

void to_bf16(const device_view& src, const device_view& dst, stream_t stream) {
  require(src.type == element_type::f32 && dst.type == element_type::bf16, "cuda: to_bf16: ", to_string(src.type),
          " into ", to_string(dst.type), ", expected float32 into bfloat16");
  require(src.rows == dst.rows && src.cols == dst.cols && src.rows < (index_t{1} << 31) && src.cols < (index_t{1} << 31),
          "cuda: to_bf16: [", src.rows, ", ", src.cols, "] into [", dst.rows, ", ", dst.cols, "]");
  check(detail::launch_to_bf16(src.as<const float>(), src.row_stride, dst.as<std::uint16_t>(), dst.row_stride,
                               static_cast<int>(src.rows), static_cast<int>(src.cols), stream),
        "launch of to_bf16");
}

void quantize_e4m3(const device_view& src, std::uint8_t* codes, float* scales, index_t group, stream_t stream) {
  constexpr std::string_view what = "cuda: quantize_e4m3";
  require(group == 0 || group == 128, what, ": group must be 128 or 0 (one scale a row), got ", group);
  require(src.type == element_type::f32 || src.type == element_type::bf16, what, ": src is ", to_string(src.type),
          ", expected float32 or bfloat16");
  const index_t rows = src.rows, cp = e4m3_columns(src.cols);
  require(rows < (index_t{1} << 31) && cp < (index_t{1} << 31) && rows * cp < (index_t{1} << 40), what, ": src [",
          rows, ", ", src.cols, "] is too large");
  if (rows == 0 || src.cols == 0) return;
  const int d = current_device();
  require_on_device(src, "quantize_e4m3: src", d);
  const auto n_codes = static_cast<std::size_t>(rows * cp), n_scales = static_cast<std::size_t>(rows * (cp / 128));
  require_device_bytes(codes, n_codes, "quantize_e4m3: codes", d);
  require_device_bytes(scales, n_scales * 4, "quantize_e4m3: scales", d);
  const auto overlap = [](const void* a, std::size_t na, const void* b, std::size_t nb) {
    const auto x = reinterpret_cast<std::uintptr_t>(a), y = reinterpret_cast<std::uintptr_t>(b);
    return x < y + nb && y < x + na;
  };
  const std::size_t src_bytes = static_cast<std::size_t>(src.extent_bytes());
  require(!overlap(codes, n_codes, src.data, src_bytes) && !overlap(scales, n_scales * 4, src.data, src_bytes) &&
              !overlap(codes, n_codes, scales, n_scales * 4),
          what, ": src, codes and scales must not share memory");
  check(detail::launch_quantize_e4m3(src.data, src.type == element_type::bf16, src.row_stride, static_cast<int>(rows),
                                     static_cast<int>(src.cols), static_cast<int>(group), codes, static_cast<int>(cp),
                                     scales, stream),
        "launch of quantize_e4m3");
}

void shared_slot(const device_view& hidden, const float* gate, std::int32_t* ids, float* weights, stream_t stream) {
  require(hidden.type == element_type::f32 || hidden.type == element_type::bf16, "cuda: shared_slot: hidden is ",
          to_string(hidden.type));
  require(hidden.rows < (index_t{1} << 26), "cuda: shared_slot: ", hidden.rows, " tokens are too many");
  check(detail::launch_shared_slot(hidden.data, hidden.type == element_type::bf16, hidden.row_stride,
                                   static_cast<int>(hidden.rows), static_cast<int>(hidden.cols), gate, ids, weights,
                                   stream),
        "launch of shared_slot");
}

std::string unavailable_reason() {
  int n = 0;
  const cudaError_t err = cudaGetDeviceCount(&n);
  if (err != cudaSuccess) {
    (void)cudaGetLastError();
    return polymoe::detail::concat("cudaGetDeviceCount failed: ", cudaGetErrorName(err), " (", cudaGetErrorString(err), ")");
  }
  if (n == 0) return "no CUDA device";
  try {
    require_runnable();
  } catch (const error& e) {
    return e.what();
  }
  return {};
}

device_memory::device_memory(std::size_t bytes) : bytes_(bytes) {
  if (bytes > 0) {
    const cudaError_t err = cudaMalloc(&p_, bytes);
    if (err != cudaSuccess) {
      (void)cudaGetLastError();
      throw error(polymoe::detail::concat("cuda: cudaMalloc(", bytes, " bytes) failed: ", cudaGetErrorName(err), " (",
                                 cudaGetErrorString(err), ")"));
    }
  }
}
device_memory::~device_memory() {
  if (p_) (void)cudaFree(p_);
}
device_memory::device_memory(device_memory&& o) noexcept
    : p_(std::exchange(o.p_, nullptr)), bytes_(std::exchange(o.bytes_, 0)) {}
device_memory& device_memory::operator=(device_memory&& o) noexcept {
  if (this != &o) {
    if (p_) (void)cudaFree(p_);
    p_ = std::exchange(o.p_, nullptr);
    bytes_ = std::exchange(o.bytes_, 0);
  }
  return *this;
}
void device_memory::upload(const void* src, std::size_t bytes, std::size_t offset) {
  require(offset + bytes <= bytes_, "cuda::device_memory: upload past the end (", offset, " + ", bytes, " > ", bytes_,
          ")");
  if (bytes == 0) return;
  check(cudaMemcpy(static_cast<char*>(p_) + offset, src, bytes, cudaMemcpyHostToDevice), "cudaMemcpy (upload)");
  // From pageable memory cudaMemcpy may return before the data lands; a forward queued next on a
  // non-blocking stream would not wait for it.
  check(cudaStreamSynchronize(nullptr), "cudaStreamSynchronize (upload)");
}
void device_memory::download(void* dst, std::size_t bytes, std::size_t offset) const {
  require(offset + bytes <= bytes_, "cuda::device_memory: download past the end (", offset, " + ", bytes, " > ",
          bytes_, ")");
  if (bytes)
    check(cudaMemcpy(dst, static_cast<const char*>(p_) + offset, bytes, cudaMemcpyDeviceToHost),
          "cudaMemcpy (download)");
}

// ---------------------------------------------------------------------------------------------

void synchronize(stream_t stream) { check(cudaStreamSynchronize(stream), "cudaStreamSynchronize"); }

struct Router::impl {
  detail::routing_args args;  // args.bias points into bias
  index_t experts = 0, top_k = 0;
  device_array<float> bias;
};

Router::Router(const RouterConfig& rc, index_t num_experts) : impl_(std::make_unique<impl>()) {
  rc.validate(num_experts);
  require(num_experts <= 1024, "cuda::Router: num_experts=", num_experts, " exceeds the device router's 1024");
  require(rc.top_k <= 32, "cuda::Router: top_k=", rc.top_k, " exceeds the device router's 32");
  require(rc.method != RoutingMethod::sigmoid_grouped_topk || rc.n_group <= 32, "cuda::Router: n_group=", rc.n_group,
          " exceeds the device router's 32");
  impl& m = *impl_;
  m.experts = num_experts;
  m.top_k = rc.top_k;
  if (rc.method == RoutingMethod::sigmoid_grouped_topk && rc.correction_bias.size() > 0) {
    m.bias = device_array<float>(static_cast<std::size_t>(num_experts));
    m.bias.upload(std::span<const float>(rc.correction_bias.data(), static_cast<std::size_t>(num_experts)));
  }
  detail::routing_args& a = m.args;
  a.method = rc.method == RoutingMethod::softmax_topk ? 0 : rc.method == RoutingMethod::topk_softmax ? 1 : 2;
  a.experts = static_cast<int>(num_experts);
  a.k = static_cast<int>(rc.top_k);
  a.renormalize = rc.renormalize;
  a.n_group = static_cast<int>(rc.n_group);
  a.topk_group = static_cast<int>(rc.topk_group);
  a.scale = rc.routed_scaling_factor;
  a.bias = m.bias.data();
}
Router::~Router() = default;
Router::Router(Router&&) noexcept = default;
Router& Router::operator=(Router&&) noexcept = default;
index_t Router::top_k() const noexcept { return impl_->top_k; }
index_t Router::experts() const noexcept { return impl_->experts; }

void Router::route(const float* logits, index_t tokens, std::int32_t* ids, float* weights, stream_t stream) const {
  const impl& m = *impl_;
  require(tokens >= 0 && tokens * m.experts < (index_t{1} << 31), "cuda::Router: tokens=", tokens,
          " out of range for ", m.experts, " experts");
  if (tokens == 0) return;
  const int device = current_device();
  require_device_pointer(logits, "router_logits", device);
  require_device_pointer(ids, "topk_ids", device);
  require_device_pointer(weights, "topk_weights", device);
  check(detail::launch_route(m.args, logits, static_cast<int>(tokens), ids, weights, stream), "route_kernel launch");
}

// ---------------------------------------------------------------------------------------------

struct Experts::impl {
  ExpertShape shape;
  detail::geometry g;
  std::optional<ExpertMlp> mlp;  // the constructor's, for the pointer forwards
  int device = 0;
  TileChoice tiles = TileChoice::automatic;
  bool wide = false;  // the wide tiles run here (wide_tiles_run)
  device_memory weights;  // w13 | w2 | b13 | b2
  detail::weights_view wv;
  // workspace, one allocation, grown with the batch
  device_memory work;
  detail::workspace_view ws;
  std::int32_t* route_ids = nullptr;
  float* route_weights = nullptr;
  std::int32_t* route_rows = nullptr;  // the masked format's: each row's result to its own row
  index_t cap_tokens = 0, cap_pairs = 0;

  void init(const ExpertShape& s);
  void upload(const quant::bf16::weights& w);
  /// 4-bit weights: `block` elements a scale code (32: MXFP4, 16: NVFP4), rows packed two a byte.
  struct fp4_store {
    const std::uint8_t *w13, *s13, *w2, *s2;
    const float *g13, *g2;  // nvfp4's scale_2, else null
    index_t block;
  };
  void upload(const fp4_store& w, const quant::ExpertStore& store);
  /// E4M3 weights: codes [E, rows13, H] and [E, H, I] as stored; scale13(e, row, kb) and
  /// scale2(e, row, kb) the fp32 scale of a stored row's 128 k number kb. act_group: 128 or 0.
  template <class S13, class S2>
  void upload_e4m3(const std::uint8_t* w13, const std::uint8_t* w2, S13&& scale13, S2&& scale2, int act_group,
                   const quant::ExpertStore& store);
  // Row r' of the padded w13 holds canonical row src13(r') (or zeros when it is < 0).
  [[nodiscard]] index_t src13(index_t r) const;
  void upload_biases(const quant::ExpertStore& w, std::size_t at);
  void grow(index_t tokens, index_t top_k);
  void check_mlp(const ExpertMlp& mlp) const;
  /// The constructor's activation, checked against the weights, for the pointer forwards.
  void use_mlp(const ExpertMlp& m) {
    check_mlp(m);
    mlp = m;
  }
};

void Experts::impl::check_mlp(const ExpertMlp& mlp) const {
  const ExpertShape& s = shape;
  require(s.gated == is_gated(mlp.activation.kind), "cuda::Experts: the weights are ", s.gated ? "gated" : "non-gated",
          " but the activation ", to_string(mlp.activation.kind), " is ", is_gated(mlp.activation.kind) ? "gated" : "not");
  require(mlp.activation.kind != Activation::swiglu_oai || s.bias, "cuda::Experts: swiglu_oai needs expert biases");
}

index_t Experts::impl::src13(index_t r) const {
  const index_t I = shape.intermediate;
  if (!g.gated) return r < I ? r : -1;
  const index_t q = r / 16, wi = r % 16, j = 8 * q + (wi < 8 ? wi : wi - 8);
  if (j >= I) return -1;
  return wi < 8 ? j : I + j;
}

// The biases (re-laid as w13's rows) at byte `at` of the weights' block: b13 [E, r13p] | b2 [E, hp].
void Experts::impl::upload_biases(const quant::ExpertStore& w, std::size_t at) {
  if (!shape.bias) return;
  const index_t E = shape.experts, H = shape.hidden;
  const std::size_t b_b13 = aligned(static_cast<std::size_t>(E) * g.r13p * 4);
  char* base = static_cast<char*>(weights.get());
  wv.b13 = reinterpret_cast<const float*>(base + at);
  wv.b2 = reinterpret_cast<const float*>(base + at + b_b13);
  std::vector<float> b(static_cast<std::size_t>(std::max(g.r13p, g.hp)));
  for (index_t e = 0; e < E; ++e) {
    std::fill(b.begin(), b.end(), 0.0f);
    for (index_t r = 0; r < g.r13p; ++r)
      if (const index_t s = src13(r); s >= 0) b[r] = w.b13(e, s);
    weights.upload(b.data(), static_cast<std::size_t>(g.r13p) * 4, at + e * g.r13p * 4);
    std::fill(b.begin(), b.end(), 0.0f);
    for (index_t r = 0; r < H; ++r) b[r] = w.b2(e, r);
    weights.upload(b.data(), static_cast<std::size_t>(g.hp) * 4, at + b_b13 + e * g.hp * 4);
  }
}

void Experts::impl::upload(const quant::bf16::weights& w) {
  const index_t E = shape.experts, H = shape.hidden, I = shape.intermediate, R = shape.rows13();
  const std::size_t n13 = static_cast<std::size_t>(g.r13p) * g.hp, n2 = static_cast<std::size_t>(g.hp) * g.ip;
  const std::size_t b_w13 = aligned(E * n13 * 2), b_w2 = aligned(E * n2 * 2);
  weights = device_memory(b_w13 + b_w2 + bias_bytes(shape, g));
  char* base = static_cast<char*>(weights.get());
  wv.format = detail::wfmt::bf16;
  wv.w13 = base;
  wv.w2 = base + b_w13;
  std::vector<std::uint16_t> buf(std::max(n13, n2));
  for (index_t e = 0; e < E; ++e) {
    std::fill(buf.begin(), buf.end(), std::uint16_t{0});
    for (index_t r = 0; r < g.r13p; ++r) {
      const index_t s = src13(r);
      if (s < 0) continue;
      const std::uint16_t* from = w.w13.data() + (e * R + s) * H;
      std::copy(from, from + H, buf.begin() + r * g.hp);
    }
    weights.upload(buf.data(), n13 * 2, e * n13 * 2);
    std::fill(buf.begin(), buf.end(), std::uint16_t{0});
    for (index_t r = 0; r < H; ++r) {
      const std::uint16_t* from = w.w2.data() + (e * H + r) * I;
      std::copy(from, from + I, buf.begin() + r * g.ip);
    }
    weights.upload(buf.data(), n2 * 2, b_w13 + e * n2 * 2);
  }
  upload_biases(w, b_w13 + b_w2);
}

namespace {

// One stored 4-bit row (`bytes` packed bytes, element 2i in the low nibble of byte i; padding
// past them zero) into its padded row of Kp/2 bytes in the kernels' order (weights_view): byte
// q·8 + s·2 + h of each 64-k unit holds stored byte 8s + 4h + q of the unit.
void relay_fp4_row(const std::uint8_t* src, std::size_t bytes, int Kp, std::uint8_t* dst) {
  for (int u = 0; u < Kp / 64; ++u)
    for (int q = 0; q < 4; ++q)
      for (int s = 0; s < 4; ++s)
        for (int h = 0; h < 2; ++h) {
          const std::size_t from = static_cast<std::size_t>(u) * 32 + s * 8 + h * 4 + q;
          dst[u * 32 + q * 8 + s * 2 + h] = from < bytes ? src[from] : std::uint8_t{0};
        }
}

}  // namespace

void Experts::impl::upload(const fp4_store& w, const quant::ExpertStore& store) {
  const index_t E = shape.experts, H = shape.hidden, I = shape.intermediate, R = shape.rows13();
  const detail::wfmt format = w.block == quant::mxfp4::block ? detail::wfmt::mxfp4 : detail::wfmt::nvfp4;
  const int sb = detail::scale_bytes(format);
  const index_t per = 64 / w.block;  // scale codes a 64-k unit
  const index_t nbH = (H + w.block - 1) / w.block, nbI = (I + w.block - 1) / w.block;
  const std::size_t q13 = static_cast<std::size_t>(g.r13p) * g.hp / 2, q2 = static_cast<std::size_t>(g.hp) * g.ip / 2;
  const std::size_t c13 = static_cast<std::size_t>(g.hp / 64) * g.r13p * sb, c2 = static_cast<std::size_t>(g.ip / 64) * g.hp * sb;
  const std::size_t b_q13 = aligned(E * q13), b_q2 = aligned(E * q2), b_s13 = aligned(E * c13), b_s2 = aligned(E * c2);
  const std::size_t b_g = w.g13 ? aligned(static_cast<std::size_t>(E) * 4) : 0;
  weights = device_memory(b_q13 + b_q2 + b_s13 + b_s2 + 2 * b_g + bias_bytes(shape, g));
  char* base = static_cast<char*>(weights.get());
  wv.format = format;
  check(detail::deep_blocks_per_sm(format, &g.deep_per_sm), "cudaOccupancyMaxActiveBlocksPerMultiprocessor");
  wv.w13 = base;
  wv.w2 = base + b_q13;
  wv.s13 = reinterpret_cast<const std::uint8_t*>(base + b_q13 + b_q2);
  wv.s2 = reinterpret_cast<const std::uint8_t*>(base + b_q13 + b_q2 + b_s13);
  const std::size_t at_g = b_q13 + b_q2 + b_s13 + b_s2;
  if (w.g13) {
    wv.g13 = reinterpret_cast<const float*>(base + at_g);
    wv.g2 = reinterpret_cast<const float*>(base + at_g + b_g);
    weights.upload(w.g13, static_cast<std::size_t>(E) * 4, at_g);
    weights.upload(w.g2, static_cast<std::size_t>(E) * 4, at_g + b_g);
  }
  // One projection of an expert: `rows` padded rows (the stored row of each from `src`, or zeros),
  // each of Kp padded columns; its codes at byte q_at of the block, its scale codes at c_at.
  std::vector<std::uint8_t> q(std::max(q13, q2)), c(std::max(c13, c2));
  auto project = [&](const std::uint8_t* codes, const std::uint8_t* scales, index_t nb, int rows, int Kp, auto&& src, std::size_t q_at, std::size_t c_at) {
    const std::size_t row_bytes = static_cast<std::size_t>(nb) * w.block / 2;
    std::fill(q.begin(), q.end(), std::uint8_t{0});
    std::fill(c.begin(), c.end(), std::uint8_t{0});
    for (int r = 0; r < rows; ++r) {
      const index_t s = src(r);
      if (s < 0) continue;
      relay_fp4_row(codes + s * row_bytes, row_bytes, Kp, q.data() + static_cast<std::size_t>(r) * Kp / 2);
      for (index_t b = 0; b < nb; ++b)  // unit b / per, byte b % per of row r's codes
        c[(static_cast<std::size_t>(b / per) * rows + r) * sb + b % per] = scales[s * nb + b];
    }
    weights.upload(q.data(), static_cast<std::size_t>(rows) * Kp / 2, q_at);
    weights.upload(c.data(), static_cast<std::size_t>(Kp / 64) * rows * sb, c_at);
  };
  for (index_t e = 0; e < E; ++e) {
    const std::size_t row13 = static_cast<std::size_t>(nbH) * w.block / 2, row2 = static_cast<std::size_t>(nbI) * w.block / 2;
    project(w.w13 + e * R * row13, w.s13 + e * R * nbH, nbH, g.r13p, g.hp, [&](index_t r) { return src13(r); },
            e * q13, b_q13 + b_q2 + e * c13);
    project(w.w2 + e * H * row2, w.s2 + e * H * nbI, nbI, g.hp, g.ip,
            [&](index_t r) { return r < H ? r : index_t{-1}; }, b_q13 + e * q2, b_q13 + b_q2 + b_s13 + e * c2);
  }
  upload_biases(store, at_g + 2 * b_g);
}

template <class S13, class S2>
void Experts::impl::upload_e4m3(const std::uint8_t* w13, const std::uint8_t* w2, S13&& scale13, S2&& scale2,
                                int act_group, const quant::ExpertStore& store) {
  const index_t E = shape.experts, H = shape.hidden, I = shape.intermediate, R = shape.rows13();
  const std::size_t n13 = static_cast<std::size_t>(g.r13p) * g.hp, n2 = static_cast<std::size_t>(g.hp) * g.ip;
  // one scale for 8 rows: the schemes' scales are constant over each aligned group of 8 (checked)
  const std::size_t s13 = static_cast<std::size_t>(g.hp / 128) * (g.r13p / 8),
                    s2 = static_cast<std::size_t>(g.ip / 128) * (g.hp / 8);
  const std::size_t b_w13 = aligned(E * n13), b_w2 = aligned(E * n2), b_t13 = aligned(E * s13 * 4),
                    b_t2 = aligned(E * s2 * 4);
  weights = device_memory(b_w13 + b_w2 + b_t13 + b_t2 + bias_bytes(shape, g));
  char* base = static_cast<char*>(weights.get());
  wv.format = detail::wfmt::e4m3;
  wv.act_group = act_group;
  wv.w13 = base;
  wv.w2 = base + b_w13;
  wv.t13 = reinterpret_cast<const float*>(base + b_w13 + b_w2);
  wv.t2 = reinterpret_cast<const float*>(base + b_w13 + b_w2 + b_t13);
  std::vector<std::uint8_t> q(std::max(n13, n2));
  std::vector<float> t(std::max(s13, s2));
  std::vector<char> set(t.size());
  // One projection of an expert: `rows` padded rows of Kp codes (stored row src(r) of K codes, or
  // zeros when src(r) < 0) at byte q_at, and the scale of each 8 rows' 128 k (scale(stored row, kb))
  // at byte t_at.
  auto project = [&](const std::uint8_t* codes, int rows, int Kp, index_t K, auto&& src, auto&& scale,
                     std::size_t q_at, std::size_t t_at) {
    const index_t groups = rows / 8;
    std::fill(q.begin(), q.end(), std::uint8_t{0});
    std::fill(t.begin(), t.end(), 0.0f);
    std::fill(set.begin(), set.end(), 0);
    for (index_t r = 0; r < rows; ++r) {
      const index_t s = src(r);
      if (s < 0) continue;
      std::copy_n(codes + s * K, K, q.begin() + r * Kp);
      for (index_t kb = 0; kb * 128 < K; ++kb) {
        const std::size_t at = static_cast<std::size_t>(kb * groups + r / 8);
        const float v = scale(s, kb);
        require(!set[at] || t[at] == v, "cuda::Experts: E4M3 weight scales differ within an aligned group of 8 rows");
        t[at] = v, set[at] = 1;
      }
    }
    weights.upload(q.data(), static_cast<std::size_t>(rows) * Kp, q_at);
    weights.upload(t.data(), static_cast<std::size_t>(Kp / 128) * groups * 4, t_at);
  };
  for (index_t e = 0; e < E; ++e) {
    project(w13 + e * R * H, g.r13p, g.hp, H, [&](index_t r) { return src13(r); },
            [&](index_t s, index_t kb) { return scale13(e, s, kb); }, e * n13, b_w13 + b_w2 + e * s13 * 4);
    project(w2 + e * H * I, g.hp, g.ip, I, [&](index_t r) { return r < H ? r : index_t{-1}; },
            [&](index_t s, index_t kb) { return scale2(e, s, kb); }, b_w13 + e * n2, b_w13 + b_w2 + b_t13 + e * s2 * 4);
  }
  upload_biases(store, b_w13 + b_w2 + b_t13 + b_t2);
}

void Experts::impl::grow(index_t tokens, index_t top_k) {
  const index_t pairs = tokens * top_k;
  if (tokens <= cap_tokens && pairs <= cap_pairs) return;
  const index_t T = std::max(tokens, cap_tokens), P = std::max(pairs, cap_pairs);
  const std::size_t E = static_cast<std::size_t>(g.experts);
  const std::size_t blocks = static_cast<std::size_t>(detail::sort_blocks(P));
  const bool q8 = wv.format == detail::wfmt::e4m3;  // E4M3 codes and scales of x and h, h in fp32
  const std::size_t sizes[] = {
      aligned(blocks * E * 4),                         // hist
      aligned(E * 4),                                  // counts
      aligned((E + 1) * 4),                            // offsets
      aligned((E + 1) * 4),                            // tile_start
      aligned(static_cast<std::size_t>(detail::tile_entries(P, g.experts)) * 16),  // tile_info
      aligned(static_cast<std::size_t>(P) * 4),        // sorted_pair
      aligned(static_cast<std::size_t>(P) * 4),        // pos_of_pair
      aligned(static_cast<std::size_t>(T) * g.hp * 2),  // x
      aligned(static_cast<std::size_t>(P) * g.ip * 2),  // h
      aligned(static_cast<std::size_t>(P) * g.hidden * 4),  // y
      aligned(static_cast<std::size_t>(P) * 4),        // route_ids
      aligned(static_cast<std::size_t>(P) * 4),        // route_weights
      aligned(static_cast<std::size_t>(P) * 4),        // route_rows
      aligned(q8 ? static_cast<std::size_t>(T) * (g.hp / 128) * 4 : 0),  // xs
      aligned(q8 ? static_cast<std::size_t>(P) * g.ip * 4 : 0),           // hf
      aligned(q8 ? static_cast<std::size_t>(P) * (g.ip / 128) * 4 : 0),   // hs
  };
  std::size_t total = 0;
  for (std::size_t s : sizes) total += s;
  work = device_memory();  // the old block first: the peak stays one workspace
  work = device_memory(total);
  char* p = static_cast<char*>(work.get());
  void* parts[std::size(sizes)];
  for (std::size_t i = 0; i < std::size(sizes); ++i) parts[i] = p, p += sizes[i];
  ws.hist = static_cast<int*>(parts[0]);
  ws.counts = static_cast<int*>(parts[1]);
  ws.offsets = static_cast<int*>(parts[2]);
  ws.tile_start = static_cast<int*>(parts[3]);
  ws.tile_info = static_cast<int*>(parts[4]);
  ws.sorted_pair = static_cast<int*>(parts[5]);
  ws.pos_of_pair = static_cast<int*>(parts[6]);
  ws.x = static_cast<std::uint16_t*>(parts[7]);
  ws.h = static_cast<std::uint16_t*>(parts[8]);
  ws.y = static_cast<float*>(parts[9]);
  route_ids = static_cast<std::int32_t*>(parts[10]);
  route_weights = static_cast<float*>(parts[11]);
  route_rows = static_cast<std::int32_t*>(parts[12]);
  ws.xs = q8 ? static_cast<float*>(parts[13]) : nullptr;
  ws.hf = q8 ? static_cast<float*>(parts[14]) : nullptr;
  ws.hs = q8 ? static_cast<float*>(parts[15]) : nullptr;
  cap_tokens = T;
  cap_pairs = P;
}

void Experts::impl::init(const ExpertShape& s) {
  shape = s;
  require(s.experts <= 1024, "cuda::Experts: ", s.experts, " experts exceed the sort's 1024");
  require(s.hidden < (1 << 24) && s.intermediate < (1 << 24), "cuda::Experts: hidden or intermediate too large");
  device = current_device();
  require_runnable();
  check(detail::prepare_kernels(), "cudaFuncSetAttribute (grouped_gemm shared memory)");
  wide = wide_tiles_run(device);
  g.experts = static_cast<int>(s.experts);
  g.hidden = static_cast<int>(s.hidden);
  g.inter = static_cast<int>(s.intermediate);
  g.hp = static_cast<int>(detail::round_up(s.hidden, detail::pad));
  g.ip = static_cast<int>(detail::round_up(s.intermediate, detail::pad));
  g.gated = s.gated;
  g.r13p = s.gated ? 2 * g.ip : g.ip;
  check(cudaDeviceGetAttribute(&g.sms, cudaDevAttrMultiProcessorCount, device), "cudaDeviceGetAttribute");
}

Experts::Experts(const quant::bf16::weights& w) : impl_(std::make_unique<impl>()) {
  w.validate("cuda::Experts");
  impl_->init(w.shape());
  impl_->upload(w);
}

Experts::Experts(const quant::mxfp4::weights& w) : impl_(std::make_unique<impl>()) {
  w.validate("cuda::Experts");
  impl_->init(w.shape());
  impl_->upload(impl::fp4_store{w.w13_blocks.data(), w.w13_scales.data(), w.w2_blocks.data(), w.w2_scales.data(),
                                nullptr, nullptr, quant::mxfp4::block},
                w);
}

Experts::Experts(const quant::nvfp4::weights& w) : impl_(std::make_unique<impl>()) {
  w.validate("cuda::Experts");
  impl_->init(w.shape());
  impl_->upload(impl::fp4_store{w.w13.data(), w.w13_scale.data(), w.w2.data(), w.w2_scale.data(),
                                w.w13_scale_2.data(), w.w2_scale_2.data(), quant::nvfp4::block},
                w);
}

Experts::Experts(const quant::fp8_block::weights& w) : impl_(std::make_unique<impl>()) {
  w.validate("cuda::Experts");
  impl_->init(w.shape());
  const ExpertShape s = w.shape();
  const index_t parts = s.gated ? 2 : 1, I = s.intermediate, gH = quant::fp8_block::grid(s.hidden),
                gI = quant::fp8_block::grid(I);
  // DeepSeek's grids, per projection: gate, up and down blocks of 128 rows x 128 columns
  impl_->upload_e4m3(
      w.w13.data(), w.w2.data(),
      [&](index_t e, index_t row, index_t kb) {
        const index_t p = row / I, rr = row - p * I;
        return w.w13_scale_inv[static_cast<std::size_t>(((e * parts + p) * gI + rr / 128) * gH + kb)];
      },
      [&](index_t e, index_t row, index_t kb) {
        return w.w2_scale_inv[static_cast<std::size_t>((e * gH + row / 128) * gI + kb)];
      },
      quant::fp8_block::block, w);
}

Experts::Experts(const quant::fp8::weights& w) : impl_(std::make_unique<impl>()) {
  w.validate("cuda::Experts");
  impl_->init(w.shape());
  impl_->upload_e4m3(
      w.w13.data(), w.w2.data(), [&](index_t e, index_t, index_t) { return w.w13_scale[static_cast<std::size_t>(e)]; },
      [&](index_t e, index_t, index_t) { return w.w2_scale[static_cast<std::size_t>(e)]; }, 0, w);
}

Experts::Experts(const quant::bf16::weights& w, const ExpertMlp& mlp) : Experts(w) {
  impl_->use_mlp(mlp);
}
Experts::Experts(const quant::mxfp4::weights& w, const ExpertMlp& mlp) : Experts(w) {
  impl_->use_mlp(mlp);
}
Experts::Experts(const quant::nvfp4::weights& w, const ExpertMlp& mlp) : Experts(w) {
  impl_->use_mlp(mlp);
}
Experts::Experts(const quant::fp8_block::weights& w, const ExpertMlp& mlp) : Experts(w) {
  impl_->use_mlp(mlp);
}
Experts::Experts(const quant::fp8::weights& w, const ExpertMlp& mlp) : Experts(w) {
  impl_->use_mlp(mlp);
}

std::string_view Experts::weight_format() const noexcept {
  switch (impl_->wv.format) {
    case detail::wfmt::mxfp4: return "mxfp4";
    case detail::wfmt::nvfp4: return "nvfp4";
    case detail::wfmt::e4m3: return impl_->wv.act_group == 0 ? "fp8" : "fp8_block";
    default: return "bf16";
  }
}

Experts::~Experts() = default;
Experts::Experts(Experts&&) noexcept = default;
Experts& Experts::operator=(Experts&&) noexcept = default;

ExpertShape Experts::shape() const noexcept { return impl_->shape; }
int Experts::device() const noexcept { return impl_->device; }
void Experts::set_tiles(TileChoice t) noexcept { impl_->tiles = t; }

void Experts::reserve(index_t tokens, index_t top_k) {
  require(tokens >= 0 && top_k >= 1, "cuda::Experts::reserve: tokens=", tokens, ", top_k=", top_k);
  device_scope scope(impl_->device);
  impl_->grow(tokens, top_k);
}

void Experts::forward_routed(const float* hidden, index_t tokens, const std::int32_t* ids, const float* weights,
                             index_t top_k, float* out, stream_t stream) {
  require(impl_->mlp.has_value(), "cuda::Experts: constructed without an ExpertMlp; use run()");
  require(tokens >= 0, "cuda::Experts: tokens must be >= 0, got ", tokens);
  const int d = impl_->device;
  const index_t H = impl_->shape.hidden;
  routed_call c{device_view::of(hidden, tokens, H, d), device_view::of(ids, tokens, top_k, d),
                device_view::of(weights, tokens, top_k, d), device_view::of(out, tokens, H, d)};
  run(c, *impl_->mlp, stream);
}

void Experts::run(const routed_call& c, const ExpertMlp& mlp, stream_t stream) const {
  launch(c, mlp, stream, false, false);
}

void Experts::launch(const routed_call& c, const ExpertMlp& mlp, stream_t stream, bool keep_uncomputed,
                     bool own_routing, const Router* router, const float* logits, index_t rows_hint,
                     index_t row_bound) const {
  impl& m = *impl_;
  const index_t E = m.shape.experts, tokens = c.hidden.rows, top_k = c.ids.cols;
  m.check_mlp(mlp);
  require(tokens >= 0, "cuda::Experts: tokens must be >= 0, got ", tokens);
  require(top_k >= 1 && top_k <= E, "cuda::Experts: top_k must be in [1, ", E, "], got ", top_k);
  require_view(c.hidden, "cuda::Experts: hidden", tokens, m.shape.hidden, {element_type::f32, element_type::bf16});
  require_view(c.ids, "cuda::Experts: topk_ids", tokens, top_k, {element_type::i32});
  require_view(c.weights, "cuda::Experts: topk_weights", tokens, top_k, {element_type::f32});
  const bool pair_mode = !c.pair_rows.empty() || c.pair_rows.data != nullptr;
  if (pair_mode) {
    require_view(c.pair_rows, "cuda::Experts: pair_rows", tokens, top_k, {element_type::i32});
    require(c.pair_rows.row_stride == top_k, "cuda::Experts: pair_rows must be packed rows (row stride = top_k)");
    require(!c.accumulate, "cuda::Experts: pair_rows writes each pair's row; it does not accumulate");
  }
  require_view(c.out, "cuda::Experts: out", pair_mode ? c.out.rows : tokens, m.shape.hidden,
               pair_mode ? std::initializer_list<element_type>{element_type::f32}
                         : std::initializer_list<element_type>{element_type::f32, element_type::bf16});
  require(c.ids.row_stride == top_k && c.weights.row_stride == top_k,
          "cuda::Experts: topk_ids and topk_weights must be packed rows (row stride = top_k)");
  require(!mlp.weight_on_input || top_k == 1, "cuda::Experts: weight_on_input needs top_k == 1, got top_k=", top_k);
  require(tokens * top_k * std::max<index_t>(m.g.ip, m.g.hidden) < (index_t{1} << 40) &&
              tokens * top_k < (index_t{1} << 31),
          "cuda::Experts: tokens=", tokens, " x top_k=", top_k, " is too large");
  if (tokens == 0) return;
  device_scope scope(m.device);
  require_on_device(c.hidden, "hidden", m.device);
  if (!own_routing) {  // the workspace's own are device memory of this device
    require_on_device(c.ids, "topk_ids", m.device);
    require_on_device(c.weights, "topk_weights", m.device);
  }
  require_on_device(c.out, "out", m.device);
  if (pair_mode) require_on_device(c.pair_rows, "pair_rows", m.device);
  require(!c.out.overlaps(c.hidden) && !c.out.overlaps(c.ids) && !c.out.overlaps(c.weights) &&
              !c.out.overlaps(c.pair_rows),
          "cuda::Experts: out shares memory with an input");
  m.grow(tokens, top_k);
  detail::forward_args a;
  a.hidden = c.hidden.data;
  a.hidden_bf16 = c.hidden.type == element_type::bf16;
  a.ld_hidden = c.hidden.row_stride;
  a.ids = c.ids.as<const std::int32_t>();
  a.weights = c.weights.as<const float>();
  a.out = c.out.data;
  a.out_bf16 = c.out.type == element_type::bf16;
  a.ld_out = c.out.row_stride;
  a.accumulate = c.accumulate;
  a.pair_rows = pair_mode ? c.pair_rows.as<const int>() : nullptr;
  a.keep_uncomputed = keep_uncomputed;
  a.pair_bound = row_bound;
  a.tokens = static_cast<int>(tokens);
  a.k = static_cast<int>(top_k);
  a.act = kind_of(mlp.activation.kind);
  a.alpha = mlp.activation.alpha;
  a.limit = mlp.activation.limit;
  a.weight_on_input = mlp.weight_on_input;
  if (router != nullptr) {
    a.route = &router->impl_->args;
    a.logits = logits;
  }
  detail::tiles t = detail::tiles::small;
  switch (m.tiles) {
    case TileChoice::tiny: t = detail::tiles::tiny; break;
    case TileChoice::small: t = detail::tiles::small; break;
    case TileChoice::large: t = detail::tiles::large; break;
    case TileChoice::wide: t = m.wide ? detail::tiles::wide : detail::tiles::large; break;
    case TileChoice::deep: t = detail::tiles::deep; break;
    case TileChoice::automatic: {  // by the mean rows an expert
      const index_t rows = rows_hint > 0 ? rows_hint : tokens * top_k;
      // E4M3 streams half the bytes a row: the small tiles' wider column tiles keep enough in
      // flight at every batch, never the tiny ones (docs/decisions.md#cuda-e4m3-tiles)
      const bool e4m3 = m.wv.format == detail::wfmt::e4m3;
      // E4M3's wide tiles only when asked for: wgmma sums each 128 k in an accumulator of 13
      // fraction bits, so the intermediate's E4M3 codes move off the reference's far more often
      // than with the large tiles' mma.sync (docs/decisions.md#cuda-e4m3-wide-opt-in)
      const detail::tiles many = m.wide && m.wv.format == detail::wfmt::bf16 ? detail::tiles::wide : detail::tiles::large;
      t = rows >= 32 * E ? many
          : rows >= 8 * E || e4m3 ? detail::tiles::small
                                  : detail::tiles::tiny;
      // 4-bit weights: the deep tiles while the blocks with rows fill at most one and a half
      // waves (docs/decisions.md#cuda-deep-tiles)
      const long long blocks = std::min<long long>(rows, E) * (std::max(m.g.r13p, m.g.hp) / detail::deep_tile_cols);
      if (t == detail::tiles::tiny && m.g.deep_per_sm > 0 && 2 * blocks <= 3LL * m.g.sms * m.g.deep_per_sm)
        t = detail::tiles::deep;
      break;
    }
  }
  const char* step = "forward";
  const cudaError_t err = detail::launch_forward(m.g, m.wv, m.ws, a, t, stream, &step);
  if (err != cudaSuccess) {
    (void)cudaGetLastError();
    throw error(polymoe::detail::concat("cuda: launch of ", step, " failed: ", cudaGetErrorName(err), " (",
                               cudaGetErrorString(err), ")"));
  }
}

void Experts::run(const masked_call& c, const ExpertMlp& mlp, stream_t stream) const {
  impl& m = *impl_;
  const index_t E = m.shape.experts, cap = c.capacity;
  require(cap >= 0, "cuda::Experts: capacity must be >= 0, got ", cap);
  require(E * cap < (index_t{1} << 31), "cuda::Experts: ", E, " experts x capacity ", cap, " is too large");
  require_view(c.hidden, "cuda::Experts: hidden", E * cap, m.shape.hidden, {element_type::f32, element_type::bf16});
  require_view(c.out, "cuda::Experts: out", E * cap, m.shape.hidden, {element_type::f32});
  require(c.masked_m.type == element_type::i32 && c.masked_m.rows * c.masked_m.cols == E &&
              (c.masked_m.rows <= 1 || c.masked_m.row_stride == 1),
          "cuda::Experts: masked_m must be ", E, " packed int32 counts, got [", c.masked_m.rows, ", ", c.masked_m.cols,
          "] ", to_string(c.masked_m.type));
  require(!mlp.weight_on_input, "cuda::Experts: the masked format takes no routing weight (weight_on_input)");
  if (E * cap == 0) return;
  device_scope scope(m.device);
  require_on_device(c.masked_m, "masked_m", m.device);
  m.grow(E * cap, 1);
  check(detail::launch_masked_slots(c.masked_m.as<const std::int32_t>(), static_cast<int>(E), static_cast<int>(cap),
                                    m.route_ids, m.route_weights, m.route_rows, stream),
        "launch of masked_slots");
  routed_call r{c.hidden, device_view::of(m.route_ids, E * cap, 1, m.device),
                device_view::of(m.route_weights, E * cap, 1, m.device), c.out, false,
                device_view::of(m.route_rows, E * cap, 1, m.device)};  // GEMM 2 writes each valid row
  launch(r, mlp, stream, true, true, nullptr, nullptr, std::clamp<index_t>(c.expected_rows, 0, E * cap),
         std::clamp<index_t>(c.max_rows, 0, E * cap));
}

void Experts::forward(const float* hidden, index_t tokens, const float* router_logits, const Router& router,
                      float* out, stream_t stream) {
  impl& m = *impl_;
  require(router.experts() == m.shape.experts, "cuda::Experts: the router routes over ", router.experts(),
          " experts, the engine holds ", m.shape.experts);
  if (tokens <= 0) {
    require(tokens == 0, "cuda::Experts: tokens must be >= 0, got ", tokens);
    return;
  }
  device_scope scope(m.device);
  const index_t k = router.top_k(), H = m.shape.hidden;
  require(tokens * k < (index_t{1} << 31) && tokens * m.shape.experts < (index_t{1} << 31), "cuda::Experts: tokens=",
          tokens, " is too large");
  require(m.mlp.has_value(), "cuda::Experts: constructed without an ExpertMlp; use run()");
  m.grow(tokens, k);
  require_device_pointer(router_logits, "router_logits", m.device);
  const int d = m.device;
  // the routing happens inside the forward's launches, into the workspace's ids and weights
  const routed_call c{device_view::of(hidden, tokens, H, d), device_view::of(m.route_ids, tokens, k, d),
                      device_view::of(m.route_weights, tokens, k, d), device_view::of(out, tokens, H, d)};
  launch(c, *m.mlp, stream, false, true, &router, router_logits);
}

void Experts::forward_routed(const MatrixCRef& hidden, const IdMatrixCRef& ids, const MatrixCRef& weights,
                             MatrixRef out) {
  impl& m = *impl_;
  const index_t T = hidden.rows(), H = m.shape.hidden, k = ids.cols();
  require(hidden.cols() == H, "cuda::Experts: hidden has ", hidden.cols(), " columns, the weights expect ", H);
  require(ids.rows() == T && weights.rows() == T && weights.cols() == k, "cuda::Experts: ids [", ids.rows(), ", ",
          ids.cols(), "] and weights [", weights.rows(), ", ", weights.cols(), "] must both be [", T, ", k]");
  require(out.rows() == T && out.cols() == H, "cuda::Experts: out is [", out.rows(), ", ", out.cols(),
          "], expected [", T, ", ", H, "]");
  if (T == 0) return;
  device_scope scope(m.device);
  const Matrix x = hidden, w = weights;
  const IdMatrix id = ids;
  device_array<float> dx(static_cast<std::size_t>(x.size())), dw(static_cast<std::size_t>(w.size())),
      dout(static_cast<std::size_t>(T * H));
  device_array<std::int32_t> di(static_cast<std::size_t>(id.size()));
  dx.upload({x.data(), static_cast<std::size_t>(x.size())});
  dw.upload({w.data(), static_cast<std::size_t>(w.size())});
  di.upload({id.data(), static_cast<std::size_t>(id.size())});
  forward_routed(dx.data(), T, di.data(), dw.data(), k, dout.data(), nullptr);
  check(cudaStreamSynchronize(nullptr), "cudaStreamSynchronize");
  Matrix o(T, H);
  dout.download({o.data(), static_cast<std::size_t>(o.size())});
  out = o;
}

void Experts::forward(const MatrixCRef& hidden, const MatrixCRef& router_logits, const Router& router, MatrixRef out) {
  impl& m = *impl_;
  const index_t T = hidden.rows(), H = m.shape.hidden;
  require(hidden.cols() == H, "cuda::Experts: hidden has ", hidden.cols(), " columns, the weights expect ", H);
  require(router_logits.rows() == T && router_logits.cols() == router.experts(), "cuda::Experts: router_logits is [",
          router_logits.rows(), ", ", router_logits.cols(), "], expected [", T, ", ", router.experts(), "]");
  require(out.rows() == T && out.cols() == H, "cuda::Experts: out is [", out.rows(), ", ", out.cols(),
          "], expected [", T, ", ", H, "]");
  if (T == 0) return;
  device_scope scope(m.device);
  const Matrix x = hidden, z = router_logits;
  device_array<float> dx(static_cast<std::size_t>(x.size())), dz(static_cast<std::size_t>(z.size())),
      dout(static_cast<std::size_t>(T * H));
  dx.upload({x.data(), static_cast<std::size_t>(x.size())});
  dz.upload({z.data(), static_cast<std::size_t>(z.size())});
  forward(dx.data(), T, dz.data(), router, dout.data(), nullptr);
  check(cudaStreamSynchronize(nullptr), "cudaStreamSynchronize");
  Matrix o(T, H);
  dout.download({o.data(), static_cast<std::size_t>(o.size())});
  out = o;
}

}  // namespace polymoe::cuda
