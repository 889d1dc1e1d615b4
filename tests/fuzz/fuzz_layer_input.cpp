// libFuzzer target: MoeLayer's input validation. The bytes choose a batch (T, k, hidden values,
// top-k ids, weights, router logits, including NaN/Inf and out-of-range ids); the layer must either
// throw polymoe::error or return a [T, H] result, never crash, read out of bounds or throw
// anything else, for the reference, tbb_grouped and tiled kernels.
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>

#include <polymoe/polymoe.hpp>

using namespace polymoe;

namespace {
struct Bytes {
  const std::uint8_t* p;
  std::size_t n;
  std::uint8_t u8() { return n ? (--n, *p++) : 0; }
  float f32() {
    std::uint32_t b = 0;
    for (int i = 0; i < 4; ++i) b = b << 8 | u8();
    // Mostly small finite values, sometimes the raw bit pattern (NaN, Inf, huge, subnormal).
    if ((b & 0xF) == 0) return std::bit_cast<float>(b);
    return static_cast<float>(static_cast<std::int32_t>(b >> 4) % 2001) / 500.0f;
  }
};

constexpr index_t H = 16, E = 8;

MoeConfig config() {
  MoeConfig cfg;
  cfg.hidden = H;
  cfg.intermediate = 8;
  cfg.num_experts = E;
  cfg.router.top_k = 2;
  return cfg;
}

MoeWeights weights() {
  MoeWeights w;
  w.experts = ExpertWeights(ExpertShape{E, H, 8, true, false});
  for (index_t i = 0; i < w.experts.w13.size(); ++i) w.experts.w13.data()[i] = std::sin(static_cast<float>(i)) * 0.3f;
  for (index_t i = 0; i < w.experts.w2.size(); ++i) w.experts.w2.data()[i] = std::cos(static_cast<float>(i)) * 0.3f;
  return w;
}

template <class K>
void run(Bytes in, const Matrix& hidden, const IdMatrix& ids, const Matrix& wt, const Matrix& logits, bool routed) {
  static auto layer = std::make_unique<MoeLayer<a2a::local, quant::fp32, K>>(config(), weights());
  (void)in;
  try {
    const Matrix out = routed ? layer->forward_routed(hidden, ids, wt) : layer->forward(hidden, logits);
    if (out.rows() != hidden.rows() || out.cols() != H) __builtin_trap();
  } catch (const error& e) {
    if (std::strncmp(e.what(), "polymoe: ", 9) != 0) __builtin_trap();
  }
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  Bytes in{data, size};
  const std::uint8_t mode = in.u8();
  const index_t T = in.u8() % 40;
  const index_t k = 1 + in.u8() % 10;                          // may exceed E
  const index_t cols = (mode & 4) ? H + (in.u8() % 3) - 1 : H;  // sometimes the wrong width
  Matrix hidden(T, cols), wt(T, k), logits(T, (mode & 8) ? E + 1 : E);
  IdMatrix ids(T, k);
  for (index_t i = 0; i < hidden.size(); ++i) hidden.data()[i] = in.f32();
  for (index_t i = 0; i < ids.size(); ++i) ids.data()[i] = static_cast<std::int8_t>(in.u8()) % 11;  // -10..10
  for (index_t i = 0; i < wt.size(); ++i) wt.data()[i] = in.f32();
  for (index_t i = 0; i < logits.size(); ++i) logits.data()[i] = in.f32();
  const bool routed = mode & 1;
  switch ((mode >> 4) % 3) {
    case 0: run<kernel::reference>(in, hidden, ids, wt, logits, routed); break;
    case 1: run<kernel::tbb_grouped>(in, hidden, ids, wt, logits, routed); break;
    default: run<kernel::tiled>(in, hidden, ids, wt, logits, routed); break;
  }
  return 0;
}
