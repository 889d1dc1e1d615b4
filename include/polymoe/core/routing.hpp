#pragma once
// Routing: router logits [T, E] -> top-k global expert ids [T, k] and fp32 weights [T, k].
// The routed scaling factor is applied here and nowhere else.
#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <vector>

#include <polymoe/core/config.hpp>

namespace polymoe {

struct Routing {
  IdMatrix ids;    ///< [T, k] global expert ids
  Matrix weights;  ///< [T, k] fp32

  /// Scratch reused by route_into, so routing a batch no larger than the last allocates nothing.
  struct Scratch {
    std::vector<index_t> idx;
    std::vector<float> s, choice, gscore, masked;
  } scratch;
};

namespace detail {
// Indices of the k largest of v[0..n), largest first; ties go to the lower index (deterministic).
inline void topk_indices(const float* v, index_t n, index_t k, std::vector<index_t>& idx) {
  idx.resize(static_cast<std::size_t>(n));
  std::iota(idx.begin(), idx.end(), index_t{0});
  std::partial_sort(idx.begin(), idx.begin() + k, idx.end(), [v](index_t a, index_t b) {
    return v[a] > v[b] || (v[a] == v[b] && a < b);
  });
  idx.resize(static_cast<std::size_t>(k));
}
}  // namespace detail

/// Routes every token into ids [T, k] / weights [T, k] (views, e.g. the top rows of larger buffers).
/// Throws polymoe::error on a RouterConfig that cannot route over num_experts, non-finite logits
/// (naming the token) or bad shapes.
inline void route_rows(const RouterConfig& rc, index_t num_experts, const MatrixCRef& logits, Eigen::Ref<IdMatrix> ids,
                       MatrixRef weights, Routing::Scratch& scratch) {
  const index_t T = logits.rows(), E = logits.cols(), k = rc.top_k;
  require(E == num_experts, "router_logits has ", E, " columns, expected num_experts=", num_experts);
  rc.validate(num_experts);
  require(ids.rows() == T && ids.cols() == k && weights.rows() == T && weights.cols() == k,
          "route: output views must be [", T, ", ", k, "]");
  auto& idx = scratch.idx;
  auto& s = scratch.s;
  auto& choice = scratch.choice;
  idx.reserve(static_cast<std::size_t>(E));
  s.resize(static_cast<std::size_t>(E));
  choice.resize(static_cast<std::size_t>(E));
  for (index_t t = 0; t < T; ++t) {
    const float* z = logits.row(t).data();
    for (index_t e = 0; e < E; ++e)
      require(std::isfinite(z[e]), "router_logits[", t, ", ", e, "] is not finite (", z[e], ")");
    float* w = weights.row(t).data();
    std::int32_t* id = ids.row(t).data();
    switch (rc.method) {
      case RoutingMethod::softmax_topk: {
        const float m = *std::max_element(z, z + E);
        float sum = 0.0f;
        for (index_t e = 0; e < E; ++e) sum += (s[e] = std::exp(z[e] - m));
        for (index_t e = 0; e < E; ++e) s[e] /= sum;
        detail::topk_indices(s.data(), E, k, idx);
        float ksum = 0.0f;
        for (index_t j = 0; j < k; ++j) ksum += (w[j] = s[idx[j]]);
        for (index_t j = 0; j < k; ++j) {
          id[j] = static_cast<std::int32_t>(idx[j]);
          if (rc.renormalize) w[j] /= ksum;
        }
        break;
      }
      case RoutingMethod::topk_softmax: {
        detail::topk_indices(z, E, k, idx);
        const float m = z[idx[0]];
        float sum = 0.0f;
        for (index_t j = 0; j < k; ++j) sum += (w[j] = std::exp(z[idx[j]] - m));
        for (index_t j = 0; j < k; ++j) {
          w[j] /= sum;
          id[j] = static_cast<std::int32_t>(idx[j]);
        }
        break;
      }
      case RoutingMethod::sigmoid_grouped_topk: {
        const index_t G = rc.n_group, per = E / G;
        for (index_t e = 0; e < E; ++e) {
          s[e] = 1.0f / (1.0f + std::exp(-z[e]));
          choice[e] = s[e] + (rc.correction_bias.size() ? rc.correction_bias[e] : 0.0f);
        }
        // group score: sum of the group's two largest choice scores
        auto& gscore = scratch.gscore;
        gscore.resize(static_cast<std::size_t>(G));
        for (index_t g = 0; g < G; ++g) {
          detail::topk_indices(choice.data() + g * per, per, 2, idx);
          gscore[g] = choice[g * per + idx[0]] + choice[g * per + idx[1]];
        }
        detail::topk_indices(gscore.data(), G, rc.topk_group, idx);
        auto& masked = scratch.masked;
        // Experts of the groups not kept are out of the running: -inf, as DeepSeek's inference code,
        // transformers 5.x, sglang and vLLM mask them. (A 0.0 mask, as older transformers had, lets a
        // discarded expert win whenever the correction bias makes the kept experts' scores negative.)
        masked.assign(static_cast<std::size_t>(E), -std::numeric_limits<float>::infinity());
        for (index_t gi : idx)
          for (index_t e = gi * per; e < (gi + 1) * per; ++e) masked[e] = choice[e];
        detail::topk_indices(masked.data(), E, k, idx);
        float ksum = 0.0f;
        for (index_t j = 0; j < k; ++j) ksum += (w[j] = s[idx[j]]);
        for (index_t j = 0; j < k; ++j) {
          id[j] = static_cast<std::int32_t>(idx[j]);
          if (rc.renormalize) w[j] /= (ksum + 1e-20f);
        }
        break;
      }
    }
    if (rc.routed_scaling_factor != 1.0f)
      for (index_t j = 0; j < k; ++j) w[j] *= rc.routed_scaling_factor;
  }
}

/// Routes every token into `out` (resized to [T, k]), reusing its scratch.
inline void route_into(const RouterConfig& rc, index_t num_experts, const MatrixCRef& logits, Routing& out) {
  out.ids.resize(logits.rows(), rc.top_k);
  out.weights.resize(logits.rows(), rc.top_k);
  route_rows(rc, num_experts, logits, out.ids, out.weights, out.scratch);
}

[[nodiscard]] inline Routing route(const RouterConfig& rc, index_t num_experts, const MatrixCRef& logits) {
  Routing r;
  route_into(rc, num_experts, logits, r);
  return r;
}

}  // namespace polymoe
