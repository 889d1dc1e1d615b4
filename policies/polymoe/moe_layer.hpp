#pragma once
// MoeLayer<A2A, Quant, Kernel>: one Mixture-of-Experts layer composed from three policies.
//
//   hidden [T,H], router_logits [T,E]
//     -> route                          topk ids [T,k] (global), weights [T,k] (fp32, scaled once)
//     -> A2A::dispatch                  DispatchOutput<A2A::format> (rows on the wire_of<A2A, Quant>)
//     -> Kernel::run (native, through an adapter, or fused; chosen at compile time)
//     -> A2A::combine                   out [T,H]
//     (+ shared expert)
//
// Whether a triple is valid, and which path it takes, is computed from the layer's pairing table:
// basic_moe_layer<Table, A2A, Quant, Kernel>, and MoeLayer is the core table's (pairing_table.hpp).
// An invalid triple is one compile error naming the axis at fault; a valid one has no virtual call
// and no run-time look-up anywhere in forward.
//
//   using Layer = polymoe::MoeLayer<polymoe::a2a::local, polymoe::quant::bf16, polymoe::kernel::tbb_grouped>;
//   Layer layer(cfg, weights);                      // quantizes and prepacks once
//   polymoe::Matrix out = layer.forward(hidden, router_logits);
//
// A layer keeps scratch buffers between calls: call forward on one layer from one thread at a time
// (it parallelises internally).
#include <functional>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>

#include <polymoe/core/agree.hpp>
#include <polymoe/core/error.hpp>
#include <polymoe/core/pairing.hpp>
#include <polymoe/core/routing.hpp>
#include <polymoe/core/wire.hpp>
#include <polymoe/kernels/permute.hpp>
#include <polymoe/quantize/wire.hpp>

namespace polymoe {

namespace detail {

/// The kernel k set so that a row's result does not depend on the rows batched with it: its
/// batch_invariant() where it has one, else k itself (a kernel without one is so as it is).
template <class Kernel>
Kernel batch_invariant_of(const Kernel& k) {
  if constexpr (requires { { k.batch_invariant() } -> std::same_as<Kernel>; })
    return k.batch_invariant();
  else
    return k;
}

/// The top-k width of caller-supplied routing for T tokens: within the experts, the layer's
/// top_k where the dispatcher exchanges records of that width, 1 where the routing weight
/// multiplies the input. Every layer checks it alike.
template <class A2A>
void check_topk_width(const MoeConfig& cfg, index_t T, index_t k) {
  require(T == 0 || (k >= 1 && k <= cfg.num_experts), "top-k width ", k, " must be in [1, num_experts=",
          cfg.num_experts, "]");
  if constexpr (is_collective<A2A>)
    require(T == 0 || k == cfg.top_k(), "top-k width ", k, " differs from MoeConfig.router.top_k=", cfg.top_k(),
            " (", A2A::name, " exchanges records of top_k ids between ranks)");
  require(!cfg.router_weight_on_input || k == 1, "router_weight_on_input needs top_k == 1, got ", k);
}

/// The shape an expert store stands for (fp32 weights hold it, quantized stores compute it).
inline ExpertShape shape_of(const ExpertWeights& e) noexcept { return e.shape; }
template <class S>
ExpertShape shape_of(const S& e) noexcept {
  return e.shape();
}

/// Validates a layer's config and weights before anything is prepared: the config, the shapes of
/// the routed and shared experts, the shared gate and the router against the config, and each
/// store's own arrays where it can say (whatever memory space the layer then computes in).
template <class W>
void check_layer_inputs(const MoeConfig& cfg, const BasicMoeWeights<W>& w) {
  cfg.validate();
  const ExpertShape want{cfg.local_experts(), cfg.hidden, cfg.intermediate, is_gated(cfg.activation), cfg.expert_bias};
  require(shape_of(w.experts) == want, "MoeWeights.experts has shape ", shape_of(w.experts), ", MoeConfig wants ",
          want);
  if (cfg.shared_intermediate > 0) {
    require(w.shared.has_value(), "MoeConfig.shared_intermediate=", cfg.shared_intermediate,
            " but MoeWeights.shared is empty");
    const ExpertShape sw = shape_of(*w.shared);
    require(sw.experts == 1 && sw.hidden == cfg.hidden && sw.intermediate == cfg.shared_intermediate &&
                sw.gated == is_gated(cfg.activation),
            "MoeWeights.shared has shape ", sw, ", MoeConfig wants one expert with hidden=", cfg.hidden,
            ", intermediate=", cfg.shared_intermediate);
  } else {
    require(!w.shared.has_value(), "MoeWeights.shared is set but MoeConfig.shared_intermediate is 0");
  }
  if (cfg.shared_expert_gate) {
    require(w.shared_gate.rows() == 1 && w.shared_gate.cols() == cfg.hidden, "MoeWeights.shared_gate is [",
            w.shared_gate.rows(), ", ", w.shared_gate.cols(), "], expected [1, ", cfg.hidden, "]");
    require_finite(w.shared_gate, "MoeWeights", "shared_gate");
  }
  if (w.router_weight.size()) {
    require(w.router_weight.rows() == cfg.num_experts && w.router_weight.cols() == cfg.hidden,
            "MoeWeights.router_weight is [", w.router_weight.rows(), ", ", w.router_weight.cols(), "], expected [",
            cfg.num_experts, ", ", cfg.hidden, "]");
    require(w.router_bias.size() == 0 || w.router_bias.size() == cfg.num_experts, "MoeWeights.router_bias has ",
            w.router_bias.size(), " entries, expected ", cfg.num_experts);
    require_finite(w.router_weight, "MoeWeights", "router_weight");
    require_finite(w.router_bias.transpose(), "MoeWeights", "router_bias");
  }
  if constexpr (requires { w.experts.validate(std::string_view{}); }) {  // fp32 weights, or a store built by hand
    w.experts.validate("MoeWeights.experts");
    if (w.shared) w.shared->validate("MoeWeights.shared");
  }
}

/// Runs the kernel on a dispatch output of format F along `Path`, writing into the combine input.
template <class Path, class F>
struct runner;
template <class F>
struct runner<path::native, F> {
  template <class Q, class K, class P>
  void operator()(const K& k, const DispatchOutput<F>& d, const P& p, const ExpertMlp& mlp, CombineInput<F>& c) {
    k.template run<Q>(d, p, mlp, c);
  }
};
template <class To, class F>
struct runner<path::adapted<To>, F> {
  kernels::adapter<F, To> adapter;
  template <class Q, class K, class P>
  void operator()(const K& k, const DispatchOutput<F>& d, const P& p, const ExpertMlp& mlp, CombineInput<F>& c) {
    DispatchOutput<To> d2 = adapter.pre(d, mlp);
    CombineInput<To> c2 = adapter.output(c, d2);
    k.template run<Q>(d2, p, mlp, c2);
    adapter.post(d, mlp, c2, c);
  }
};

/// The primary template exists only to fail: it is instantiated for invalid triples, reports the
/// diagnostic once, and accepts any use so no second error follows.
template <class A2A, class Quant, class Kernel, class Resolution>
class moe_layer_impl {
  // Completing the diagnostic type fires its static_assert: the one error of an invalid triple.
  static_assert(sizeof(typename Resolution::diagnostic) > 0);

 public:
  template <class... Args>
  explicit moe_layer_impl(Args&&...) {}
  template <class... Args>
  Matrix forward(Args&&...) {
    return {};
  }
  template <class... Args>
  Matrix forward_routed(Args&&...) {
    return {};
  }
};

template <class A2A, class Quant, class Kernel, class Path, class SharedPath>
class moe_layer_impl<A2A, Quant, Kernel, pairing::ok<Path, SharedPath>> {
  static_assert(dispatcher<A2A>, "polymoe: the A2A policy is listed in the pairing table but does not model "
                                 "polymoe::dispatcher (dispatch / combine_input / combine)");
  static_assert(quant_scheme<Quant>, "polymoe: the Quant policy is listed in the pairing table but does not model "
                                     "polymoe::quant_scheme (weights / quantize / dequantize / quantize_activation)");

 public:
  using a2a_type = A2A;
  using quant_type = Quant;
  using kernel_type = Kernel;
  using path_type = Path;
  using format_type = typename A2A::format;
  /// How activation rows travel: the scheme's quantized form if the dispatcher carries it, else fp32.
  using wire_type = wire_of<A2A, Quant>;
  using quant_weights = typename Quant::weights;
  using prepared_type = typename Kernel::template prepared<Quant>;

  /// From fp32 weights: quantizes with Quant, then lets Kernel re-lay them.
  moe_layer_impl(MoeConfig cfg, const MoeWeights& w, A2A a2a = {}, Kernel kernel = {});

  /// From weights already in Quant's stored form (a pre-quantized checkpoint): no requantization.
  moe_layer_impl(MoeConfig cfg, BasicMoeWeights<quant_weights> w, A2A a2a = {}, Kernel kernel = {})
    requires(!std::is_same_v<typename Quant::weights, ExpertWeights>);

  /// As forward(hidden, router_logits), writing into `out` [T, H]: after the first call with a
  /// batch this large, nothing is allocated (with a kernel that allocates nothing itself).
  void forward_into(const MatrixCRef& hidden, const MatrixCRef& router_logits, MatrixRef out) {
    detail::agree_on(a2a_, [&] {
      check_hidden(hidden);
      require(router_logits.rows() == hidden.rows(), "forward: router_logits has ", router_logits.rows(),
              " rows, hidden has ", hidden.rows());
      require(out.rows() == hidden.rows() && out.cols() == cfg_.hidden, "forward_into: out is [", out.rows(), ", ",
              out.cols(), "], expected [", hidden.rows(), ", ", cfg_.hidden, "]");
      require(!overlaps(out, hidden) && !overlaps(out, router_logits),
              "forward_into: out shares memory with hidden or router_logits; the layer reads them after it "
              "starts writing out (pass a separate output)");
      route_layer(router_logits);
    });
    run_into(hidden, route_ids_.topRows(routed_), route_w_.topRows(routed_), out);
  }

  /// Routes with the layer's RouterConfig, then runs the experts.
  Matrix forward(const MatrixCRef& hidden, const MatrixCRef& router_logits) {
    detail::agree_on(a2a_, [&] {
      check_hidden(hidden);
      require(router_logits.rows() == hidden.rows(), "forward: router_logits has ", router_logits.rows(),
              " rows, hidden has ", hidden.rows());
      route_layer(router_logits);
    });
    return run(hidden, route_ids_.topRows(routed_), route_w_.topRows(routed_));
  }

  /// Computes the router logits from the layer's router weight (and bias), then as above.
  Matrix forward(const MatrixCRef& hidden) {
    own_logits(hidden);
    return forward(hidden, logits_);
  }
  /// As forward(hidden), writing into `out` [T, H] (as forward_into with router logits).
  void forward_into(const MatrixCRef& hidden, MatrixRef out) {
    own_logits(hidden);
    forward_into(hidden, logits_, out);
  }
  /// Whether the layer has a router weight (forward(hidden) needs one).
  [[nodiscard]] bool has_router() const noexcept { return router_weight_.size() > 0; }

  /// Caller-supplied routing ("bypassed" top-k): global expert ids [T,k] and their final weights
  /// [T,k] (the routed scaling factor is NOT applied again here).
  /// With a collective dispatcher the width must be the layer's top_k (every rank's records carry
  /// top_k ids); a rank with no tokens may pass ids and weights of any width.
  Matrix forward_routed(const MatrixCRef& hidden, const IdMatrixCRef& topk_ids, const MatrixCRef& topk_weights) {
    detail::agree_on(a2a_, [&] { check_routing(hidden, topk_ids, topk_weights); });
    if constexpr (detail::is_collective<A2A>)
      if (hidden.rows() == 0)
        return run(hidden, top_rows(route_ids_, 0, cfg_.top_k()), top_rows(route_w_, 0, cfg_.top_k()));
    return run(hidden, topk_ids, topk_weights);
  }

  /// As forward_routed, writing into `out` [T, H] (nothing allocated after the first call at a
  /// batch this large, as forward_into).
  void forward_routed_into(const MatrixCRef& hidden, const IdMatrixCRef& topk_ids, const MatrixCRef& topk_weights,
                           MatrixRef out) {
    detail::agree_on(a2a_, [&] {
      check_routing(hidden, topk_ids, topk_weights);
      require(out.rows() == hidden.rows() && out.cols() == cfg_.hidden, "forward_routed_into: out is [", out.rows(),
              ", ", out.cols(), "], expected [", hidden.rows(), ", ", cfg_.hidden, "]");
      require(!overlaps(out, hidden) && !overlaps(out, topk_weights),
              "forward_routed_into: out shares memory with hidden or topk_weights; the layer reads them after it "
              "starts writing out (pass a separate output)");
    });
    if constexpr (detail::is_collective<A2A>)
      if (hidden.rows() == 0) {
        run_into(hidden, top_rows(route_ids_, 0, cfg_.top_k()), top_rows(route_w_, 0, cfg_.top_k()), out);
        return;
      }
    run_into(hidden, topk_ids, topk_weights, out);
  }

  [[nodiscard]] const MoeConfig& config() const noexcept { return cfg_; }
  /// The triple and what its kernel runs on this machine, for logs and tools: "local / bf16 / tiled
  /// (AVX-512 with VNNI, BF16 and VBMI, chosen at run time)". The kernel's part is its optional
  /// path() (the expert_kernel concept); without one, its name alone.
  [[nodiscard]] std::string describe() const {
    std::string s = polymoe::detail::concat(A2A::name, " / ", Quant::name, " / ", Kernel::name);
    if constexpr (requires(const Kernel& k) { std::string(k.path()); }) s += " (" + std::string(kernel_.path()) + ")";
    return s;
  }
  /// The routing of the last forward(hidden, ...) call: ids [T, k] global, weights [T, k].
  [[nodiscard]] auto last_topk_ids() const { return route_ids_.topRows(routed_); }
  [[nodiscard]] auto last_topk_weights() const { return route_w_.topRows(routed_); }
  [[nodiscard]] const Kernel& kernel() const noexcept { return kernel_; }
  [[nodiscard]] const prepared_type& prepared() const noexcept { return *prepared_; }
  [[nodiscard]] const ExpertMlp& mlp() const noexcept { return mlp_; }
  [[nodiscard]] A2A& dispatcher() noexcept { return a2a_; }

 private:
  /// Both constructors: validates, turns each expert set into Quant's store (to_store), prepares it.
  template <class W, class ToStore>
  void build(W& w, ToStore to_store);

  template <class W>
  void finish(const BasicMoeWeights<W>& w) {
    if constexpr (requires { a2a_.configure(cfg_); }) a2a_.configure(cfg_);
    mlp_ = ExpertMlp{ActivationParams{cfg_.activation, cfg_.swiglu_alpha, cfg_.swiglu_limit},
                     cfg_.router_weight_on_input};
    shared_gate_ = w.shared_gate;
    router_weight_ = w.router_weight;
    router_bias_ = w.router_bias;
  }

  // The router's logits of `hidden` into logits_ (forward(hidden)): the layer's router weight and bias.
  void own_logits(const MatrixCRef& hidden) {
    detail::agree_on(a2a_, [&] {
      require(router_weight_.size() > 0, "forward(hidden): the layer has no router weight; pass router_logits");
      check_hidden(hidden);
    });
    logits_.noalias() = hidden * router_weight_.transpose();
    if (router_bias_.size()) logits_.rowwise() += router_bias_.transpose();
  }
  void check_hidden(const MatrixCRef& hidden) const {
    require(hidden.cols() == cfg_.hidden, "hidden has ", hidden.cols(), " columns, expected hidden=", cfg_.hidden);
  }

  void check_routing(const MatrixCRef& hidden, const IdMatrixCRef& ids, const MatrixCRef& w) const {
    check_hidden(hidden);
    const index_t T = hidden.rows(), k = ids.cols(), E = cfg_.num_experts;
    require(ids.rows() == T && w.rows() == T, "topk_ids has ", ids.rows(), " rows and topk_weights ", w.rows(),
            ", hidden has ", T);
    require(w.cols() == k, "topk_ids has ", k, " columns but topk_weights has ", w.cols());
    detail::check_topk_width<A2A>(cfg_, T, k);
    for (index_t t = 0; t < T; ++t)
      for (index_t j = 0; j < k; ++j) {
        const auto id = ids(t, j);
        require(id >= 0 && id < E, "topk_ids[", t, ", ", j, "] = ", id, " is outside [0, num_experts=", E, ")");
        require(std::isfinite(w(t, j)), "topk_weights[", t, ", ", j, "] is not finite (", w(t, j), ")");
        for (index_t i = 0; i < j; ++i)
          require(ids(t, i) != id, "topk_ids[", t, "] lists expert ", id, " twice");
      }
  }

  /// Whether two row-major views share any float (their first to last element's address ranges meet).
  static bool overlaps(const MatrixRef& a, const MatrixCRef& b) {
    if (a.size() == 0 || b.size() == 0) return false;
    const auto end = [](const float* p, index_t rows, index_t cols, index_t stride) { return p + (rows - 1) * stride + cols; };
    const float *a0 = a.data(), *b0 = b.data();
    return std::less<>{}(a0, end(b0, b.rows(), b.cols(), b.outerStride())) &&
           std::less<>{}(b0, end(a0, a.rows(), a.cols(), a.outerStride()));
  }

  Matrix run(const MatrixCRef& hidden, const IdMatrixCRef& ids, const MatrixCRef& weights) {
    Matrix out(hidden.rows(), cfg_.hidden);
    run_into(hidden, ids, weights, out);
    return out;
  }

  /// Grow-only scratch: `buf` keeps its largest size; callers use its top `rows` rows.
  template <class M>
  static auto top_rows(M& buf, index_t rows, index_t cols) {
    if (buf.rows() < rows || buf.cols() != cols) buf.resize(rows, cols);
    return buf.topRows(rows);
  }

  void route_layer(const MatrixCRef& logits) {
    const index_t T = logits.rows(), k = cfg_.top_k();
    routed_ = 0;
    route_rows(cfg_.router, cfg_.num_experts, logits, top_rows(route_ids_, T, k), top_rows(route_w_, T, k), scratch_);
    routed_ = T;
  }

  // Defined below the class, not inline: a program may instantiate a layer once (explicit
  // instantiation) and declare it `extern template` elsewhere, so the kernels compile once.
  void run_into(const MatrixCRef& hidden, const IdMatrixCRef& ids, const MatrixCRef& weights, MatrixRef out);
  void add_shared(const MatrixCRef& hidden, MatrixRef out);

  MoeConfig cfg_;
  A2A a2a_;
  Kernel kernel_;
  // The shared expert runs on the tokens of the batch it is given (under expert parallelism, each
  // rank's own), so its rows must not depend on their batch: see batch_invariant_of.
  Kernel shared_kernel_ = detail::batch_invariant_of(kernel_);
  ExpertMlp mlp_{};
  std::optional<prepared_type> prepared_;
  std::optional<prepared_type> shared_;
  runner<Path, format_type> runner_;
  runner<SharedPath, format::standard> shared_runner_;
  Matrix shared_gate_, router_weight_;
  Vector router_bias_;
  IdMatrix route_ids_;
  Matrix route_w_;
  Routing::Scratch scratch_;
  index_t routed_ = 0;
  Matrix logits_, shared_w_, shared_out_;
  IdMatrix shared_ids_;
};

template <class A2A, class Quant, class Kernel, class Path, class SharedPath>
moe_layer_impl<A2A, Quant, Kernel, pairing::ok<Path, SharedPath>>::moe_layer_impl(MoeConfig cfg, const MoeWeights& w, A2A a2a, Kernel kernel)
    : cfg_(std::move(cfg)), a2a_(std::move(a2a)), kernel_(std::move(kernel)) {
  build(w, [](const ExpertWeights& e) { return Quant::quantize(e); });
}

template <class A2A, class Quant, class Kernel, class Path, class SharedPath>
moe_layer_impl<A2A, Quant, Kernel, pairing::ok<Path, SharedPath>>::moe_layer_impl(MoeConfig cfg, BasicMoeWeights<quant_weights> w, A2A a2a, Kernel kernel)
  requires(!std::is_same_v<typename Quant::weights, ExpertWeights>)
    : cfg_(std::move(cfg)), a2a_(std::move(a2a)), kernel_(std::move(kernel)) {
  build(w, [](quant_weights& e) -> quant_weights&& { return std::move(e); });
}

template <class A2A, class Quant, class Kernel, class Path, class SharedPath>
template <class W, class ToStore>
void moe_layer_impl<A2A, Quant, Kernel, pairing::ok<Path, SharedPath>>::build(W& w, ToStore to_store) {
  // One agreed step: one rank's bad config or weights (or a failed allocation) is every rank's error.
  detail::agree_on(a2a_, [&] {
    check_layer_inputs(cfg_, w);
    if constexpr (requires { a2a_.agree_on_layer(); })  // noted before the weights move
      a2a_.template describe_layer<A2A, Quant, Kernel>(cfg_, w);
    prepared_.emplace(kernel_.template prepare<Quant>(to_store(w.experts)));
    if (w.shared) shared_.emplace(shared_kernel_.template prepare<Quant>(to_store(*w.shared)));
    finish(w);
  });
  // Collective dispatchers: every rank's layer must be the same layer (policies, config, the
  // weights all ranks hold whole); compared once every rank has built its own, before any token moves.
  if constexpr (requires { a2a_.agree_on_layer(); }) a2a_.agree_on_layer();
}

template <class A2A, class Quant, class Kernel, class Path, class SharedPath>
void moe_layer_impl<A2A, Quant, Kernel, pairing::ok<Path, SharedPath>>::run_into(const MatrixCRef& hidden, const IdMatrixCRef& ids, const MatrixCRef& weights,
                                                              MatrixRef out) {
  if (hidden.rows() == 0 && !detail::is_collective<A2A>) return;  // other ranks may still send us work
  auto d = [&] {
    if constexpr (std::is_same_v<wire_type, wire::fp32>)
      return a2a_.dispatch(hidden, ids, weights, cfg_);
    else
      return a2a_.dispatch(hidden, ids, weights, cfg_, wire_type{});
  }();
  auto c = a2a_.combine_input(d, out);
  runner_.template operator()<Quant>(kernel_, d, *prepared_, mlp_, c);
  a2a_.combine(c, out);
  if (shared_) add_shared(hidden, out);
}

template <class A2A, class Quant, class Kernel, class Path, class SharedPath>
void moe_layer_impl<A2A, Quant, Kernel, pairing::ok<Path, SharedPath>>::add_shared(const MatrixCRef& hidden, MatrixRef out) {
  const index_t T = hidden.rows();
  auto ids = top_rows(shared_ids_, T, 1);
  auto w = top_rows(shared_w_, T, 1);
  auto y = top_rows(shared_out_, T, cfg_.hidden);
  ids.setZero();
  if (cfg_.shared_expert_gate) {
    // Each row's gate by its own dot product, summed in order in double: the same bits whatever
    // rows share its batch and wherever they sit in memory (a matrix product's sum order depends on both).
    const float* g = shared_gate_.data();
    for (index_t t = 0; t < T; ++t) {
      double z = 0.0;
      for (index_t i = 0; i < cfg_.hidden; ++i) z += static_cast<double>(hidden(t, i)) * g[i];
      w(t, 0) = 1.0f / (1.0f + std::exp(-static_cast<float>(z)));
    }
  } else {
    w.setOnes();
  }
  DispatchOutput<format::standard> d{hidden, ids, w, 1};
  CombineInput<format::standard> c{y};
  shared_runner_.template operator()<Quant>(shared_kernel_, d, *shared_, ExpertMlp{mlp_.activation, false}, c);
  out += y;
}


}  // namespace detail

/// A Mixture-of-Experts layer of the pairing table `Table`: A2A dispatches tokens, Quant stores the
/// weights, Kernel runs the experts. polymoe::MoeLayer<A2A, Quant, Kernel> is the layer of
/// polymoe::core_table (<polymoe/pairing_table.hpp>). See the top of this header and
/// docs/architecture.md.
template <class Table, class A2A, class Quant, class Kernel>
class basic_moe_layer : public detail::moe_layer_impl<A2A, Quant, Kernel, pairing::resolve<Table, A2A, Quant, Kernel>> {
  using base = detail::moe_layer_impl<A2A, Quant, Kernel, pairing::resolve<Table, A2A, Quant, Kernel>>;

 public:
  using table_type = Table;
  using base::base;
};

}  // namespace polymoe
