#pragma once
#include <span>
#include <string_view>
#include <vector>

#include <polymoe/core/roles.hpp>
#include <polymoe/codecs/bf16.hpp>
#include <polymoe/quant/store.hpp>

namespace polymoe::quant {

/// bf16 weights, bf16 activations (each GEMM input row rounded to bf16, round-to-nearest-even),
/// fp32 accumulation and fp32 top-k sum: what a bf16 inference engine computes.
struct bf16 {
  using quant_concept = quant_tag;
  static constexpr std::string_view name = "bf16";

  struct weights : ExpertStore {
    std::vector<std::uint16_t> w13;  ///< [E·rows13, H] bf16 bits, row-major
    std::vector<std::uint16_t> w2;   ///< [E·H, I]

    void validate(std::string_view what) const {
      const ExpertShape& s = shape_;
      check_sizes(what, {{"w13", w13.size(), count(s.rows13(), s.hidden)}, {"w2", w2.size(), count(s.hidden, s.intermediate)}});
    }
  };

  static std::vector<std::uint16_t> encode(const Matrix& m) {
    std::vector<std::uint16_t> out(static_cast<std::size_t>(m.size()));
    const index_t cols = m.cols();
    for_each_part(m.rows(), 64, [&](index_t r) {
      const float* src = m.data() + r * cols;
      std::uint16_t* dst = out.data() + r * cols;
      for (index_t c = 0; c < cols; ++c) dst[c] = codecs::float_to_bf16(src[c]);
    });
    return out;
  }
  static void decode(const std::uint16_t* src, MatrixRef dst) {
    for (index_t r = 0; r < dst.rows(); ++r)
      for (index_t c = 0; c < dst.cols(); ++c) dst(r, c) = codecs::bf16_to_float(src[r * dst.cols() + c]);
  }

  static weights quantize(const ExpertWeights& f) {
    f.validate("quant::bf16::quantize");
    return weights{ExpertStore::from(f), encode(f.w13), encode(f.w2)};
  }
  static void dequantize(const weights& w, index_t e, MatrixRef w13, MatrixRef w2) {
    const auto& s = w.shape_;
    decode(w.w13.data() + e * s.rows13() * s.hidden, w13);
    decode(w.w2.data() + e * s.hidden * s.intermediate, w2);
  }
  static void quantize_activation(std::span<float> row) noexcept { codecs::round_to_bf16(row); }
};

}  // namespace polymoe::quant
