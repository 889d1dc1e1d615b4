#pragma once
// A layer whose kernel computes in CUDA memory: basic_moe_layer<Table, A2A, Quant, Kernel> where
// Kernel's memory_space is space::cuda (kernel::cuda). The same pipeline as a host layer (route,
// A2A::dispatch, Kernel::run, A2A::combine, + the shared expert), every step queued on the
// caller's stream, on device views (<polymoe/core/device_view.hpp>; <polymoe/dlpack.hpp> makes
// them from DLTensors):
//
//   polymoe::CudaMoeLayer<a2a::local, quant::bf16, kernel::cuda> layer(cfg, weights);  // uploads once
//   layer.forward(hidden, router_logits, out, stream);   // device views; nothing waits for the device
//
// A dispatcher with its own schedule of those steps (A2A::forward(..., compute): micro-batches
// exchanged while the kernel computes) runs them its way. With a2a::local, after the first call
// at a batch size, a forward allocates nothing and never synchronises with the host: it can be
// captured in a CUDA graph (a dispatcher whose counts come back to the host, nccl_ragged, waits
// for them). The Eigen overloads (copies each way, waiting for
// the device) are a convenience for tools and tests.
#include <concepts>
#include <cstdint>
#include <optional>
#include <string>
#include <type_traits>

#include <polymoe/core/device_view.hpp>
#include <polymoe/core/error.hpp>
#include <polymoe/core/pairing.hpp>
#include <polymoe/cuda/experts.hpp>
#include <polymoe/moe_layer.hpp>

namespace polymoe::detail {

template <class A2A, class Quant, class Kernel, class Path, class SharedPath>
  requires std::same_as<kernel_memory_space<Kernel>, space::cuda>
class moe_layer_impl<A2A, Quant, Kernel, pairing::ok<Path, SharedPath>> {
  static_assert(std::is_same_v<Path, path::native> && std::is_same_v<SharedPath, path::native>,
                "polymoe: a kernel that computes in CUDA memory runs its dispatcher's format natively (the "
                "table's adapters run in host memory)");

 public:
  using a2a_type = A2A;
  using quant_type = Quant;
  using kernel_type = Kernel;
  using path_type = Path;
  using format_type = typename A2A::format;
  using quant_weights = typename Quant::weights;
  using prepared_type = typename Kernel::template prepared<Quant>;

  /// From fp32 weights: quantizes with Quant on the host, then uploads (the current device).
  moe_layer_impl(MoeConfig cfg, const MoeWeights& w, A2A a2a = {}, Kernel kernel = {})
      : cfg_(std::move(cfg)), a2a_(std::move(a2a)), kernel_(std::move(kernel)) {
    build(w, [](const ExpertWeights& e) { return Quant::quantize(e); });
  }
  /// From weights already in Quant's stored form: no requantization.
  moe_layer_impl(MoeConfig cfg, BasicMoeWeights<quant_weights> w, A2A a2a = {}, Kernel kernel = {})
    requires(!std::is_same_v<quant_weights, ExpertWeights>)
      : cfg_(std::move(cfg)), a2a_(std::move(a2a)), kernel_(std::move(kernel)) {
    build(w, [](quant_weights& e) -> quant_weights&& { return std::move(e); });
  }

  /// out [T, H] = the layer of hidden [T, H] (float32 or bfloat16), routed on the device from
  /// router_logits [T, E] float32 (packed rows). out is float32, or bfloat16: the fp32 sum of the
  /// routed experts and the shared expert rounded once. All on `stream`, on the layer's device.
  /// With a dispatcher that communicates, every rank calls it (a rank with no tokens too), and
  /// one rank's bad input is every rank's error.
  void forward(const device_view& hidden, const device_view& router_logits, const device_view& out,
               cuda_stream stream) {
    const index_t T = hidden.rows;
    agree_on(a2a_, [&] {
      check_io(hidden, out);
      require_view(router_logits, "router_logits", T, cfg_.num_experts, {element_type::f32});
      require(router_logits.row_stride == router_logits.cols, "router_logits must be packed rows (row stride ",
              router_logits.row_stride, ", expected ", router_logits.cols, ")");
      grow(T);
      if (T == 0) return;
      require_on_device(hidden, out);  // every view before the first launch
      polymoe::cuda::require_on_device(router_logits, "router_logits", device_);
    });
    if (T == 0 && !is_collective<A2A>) return;
    const device_view ids = device_view::of(route_ids_.data(), T, cfg_.top_k(), device_);
    const device_view w = device_view::of(route_w_.data(), T, cfg_.top_k(), device_);
    if (T > 0) router_->route(router_logits.as<const float>(), T, ids.as<std::int32_t>(), w.as<float>(), stream);
    run_into(hidden, ids, w, out, stream);
  }

  /// Caller-supplied routing: ids [T, k] int32 (an id outside [0, num_experts) is a slot not
  /// computed, as -1; the device does not check them) and weights [T, k] float32, packed rows.
  /// With a dispatcher that communicates, the width must be the layer's top_k (a rank with no
  /// tokens may pass any).
  void forward_routed(const device_view& hidden, const device_view& topk_ids, const device_view& topk_weights,
                      const device_view& out, cuda_stream stream) {
    const index_t T = hidden.rows;
    agree_on(a2a_, [&] {
      check_io(hidden, out);
      require_view(topk_ids, "topk_ids", T, -1, {element_type::i32});
      require_view(topk_weights, "topk_weights", T, topk_ids.cols, {element_type::f32});
      check_topk_width<A2A>(cfg_, T, topk_ids.cols);
      grow(T);
      if (T == 0) return;
      require_on_device(hidden, out);
      polymoe::cuda::require_on_device(topk_ids, "topk_ids", device_);
      polymoe::cuda::require_on_device(topk_weights, "topk_weights", device_);
    });
    if (T > 0) {
      run_into(hidden, topk_ids, topk_weights, out, stream);
    } else if constexpr (is_collective<A2A>) {  // this rank's part of the exchange
      run_into(hidden, device_view::of(route_ids_.data(), 0, cfg_.top_k(), device_),
               device_view::of(route_w_.data(), 0, cfg_.top_k(), device_), out, stream);
    }
  }

  // ---- host-memory conveniences: copies each way, synchronous -------------------------------

  Matrix forward(const MatrixCRef& hidden, const MatrixCRef& router_logits) {
    agree_on(a2a_, [&] {
      require(hidden.cols() == cfg_.hidden, "hidden has ", hidden.cols(), " columns, expected hidden=", cfg_.hidden);
      require(router_logits.rows() == hidden.rows() && router_logits.cols() == cfg_.num_experts, "router_logits is [",
              router_logits.rows(), ", ", router_logits.cols(), "], expected [", hidden.rows(), ", ",
              cfg_.num_experts, "]");
    });
    const index_t T = hidden.rows();
    polymoe::cuda::device_array<float> dh(host_size(T, cfg_.hidden)), dz(host_size(T, cfg_.num_experts)),
        dout(host_size(T, cfg_.hidden));
    upload(dh, hidden);
    upload(dz, router_logits);
    forward(device_view::of(dh.data(), T, cfg_.hidden, device_), device_view::of(dz.data(), T, cfg_.num_experts, device_),
            device_view::of(dout.data(), T, cfg_.hidden, device_), nullptr);
    Matrix out = download(dout, T);
    report_device_errors();
    const auto n = static_cast<std::size_t>(T * cfg_.top_k());
    last_ids_.resize(T, cfg_.top_k());
    last_w_.resize(T, cfg_.top_k());
    if (n > 0) {
      route_ids_.download({last_ids_.data(), n});
      route_w_.download({last_w_.data(), n});
    }
    return out;
  }
  /// The router logits from the layer's router weight (and bias), on the host, then as above.
  Matrix forward(const MatrixCRef& hidden) {
    agree_on(a2a_, [&] {
      require(router_weight_.size() > 0, "forward(hidden): the layer has no router weight; pass router_logits");
      require(hidden.cols() == cfg_.hidden, "hidden has ", hidden.cols(), " columns, expected hidden=", cfg_.hidden);
    });
    Matrix logits = hidden * router_weight_.transpose();
    if (router_bias_.size()) logits.rowwise() += router_bias_.transpose();
    return forward(hidden, logits);
  }
  /// Whether the layer has a router weight (forward(hidden) needs one).
  [[nodiscard]] bool has_router() const noexcept { return router_weight_.size() > 0; }
  Matrix forward_routed(const MatrixCRef& hidden, const IdMatrixCRef& topk_ids, const MatrixCRef& topk_weights) {
    const index_t T = hidden.rows(), k = topk_ids.cols(), E = cfg_.num_experts;
    agree_on(a2a_, [&] {
      require(hidden.cols() == cfg_.hidden, "hidden has ", hidden.cols(), " columns, expected hidden=", cfg_.hidden);
      require(topk_ids.rows() == T && topk_weights.rows() == T && topk_weights.cols() == k, "topk_ids is [",
              topk_ids.rows(), ", ", k, "] and topk_weights [", topk_weights.rows(), ", ", topk_weights.cols(),
              "], expected [", T, ", k] both");
      check_topk_width<A2A>(cfg_, T, k);
      for (index_t t = 0; t < T; ++t)  // the host can check what the device does not
        for (index_t j = 0; j < k; ++j) {
          const auto id = topk_ids(t, j);
          require(id >= 0 && id < E, "topk_ids[", t, ", ", j, "] = ", id, " is outside [0, num_experts=", E, ")");
          for (index_t i = 0; i < j; ++i)
            require(topk_ids(t, i) != id, "topk_ids[", t, "] lists expert ", id, " twice");
        }
    });
    polymoe::cuda::device_array<float> dh(host_size(T, cfg_.hidden)), dw(host_size(T, k)),
        dout(host_size(T, cfg_.hidden));
    polymoe::cuda::device_array<std::int32_t> di(host_size(T, k));
    upload(dh, hidden);
    upload(dw, topk_weights);
    const IdMatrix ids = topk_ids;
    di.upload({ids.data(), static_cast<std::size_t>(ids.size())});
    forward_routed(device_view::of(dh.data(), T, cfg_.hidden, device_), device_view::of(di.data(), T, k, device_),
                   device_view::of(dw.data(), T, k, device_), device_view::of(dout.data(), T, cfg_.hidden, device_),
                   nullptr);
    Matrix out = download(dout, T);
    report_device_errors();
    return out;
  }

  [[nodiscard]] const MoeConfig& config() const noexcept { return cfg_; }
  /// "local / bf16 / cuda (NVIDIA H100 80GB HBM3 (sm_90), mma.sync)".
  [[nodiscard]] std::string describe() const {
    return polymoe::detail::concat(A2A::name, " / ", Quant::name, " / ", Kernel::name, " (", kernel_.path(), ")");
  }
  /// The routing of the last host-memory forward(hidden, ...) (copied back from the device); a
  /// forward on device views leaves its routing on the device.
  [[nodiscard]] const IdMatrix& last_topk_ids() const noexcept { return last_ids_; }
  [[nodiscard]] const Matrix& last_topk_weights() const noexcept { return last_w_; }
  [[nodiscard]] int device() const noexcept { return device_; }
  [[nodiscard]] const Kernel& kernel() const noexcept { return kernel_; }
  [[nodiscard]] const prepared_type& prepared() const noexcept { return *prepared_; }
  [[nodiscard]] const ExpertMlp& mlp() const noexcept { return mlp_; }
  [[nodiscard]] A2A& dispatcher() noexcept { return a2a_; }

 private:
  // One agreed step (with a dispatcher that communicates): one rank's bad config or weights, or a
  // failed upload, is every rank's error; then the ranks' layers are compared and connected.
  template <class W, class ToStore>
  void build(W& w, ToStore to_store) {
    agree_on(a2a_, [&] {
      check_layer_inputs(cfg_, w);
      if constexpr (requires { a2a_.configure(cfg_); }) a2a_.configure(cfg_);
      if constexpr (requires { a2a_.agree_on_layer(); })  // noted before the weights move
        a2a_.template describe_layer<A2A, Quant, Kernel>(cfg_, w);
      if (const std::string why = polymoe::cuda::unavailable_reason(); !why.empty())
        throw error(polymoe::detail::concat(Kernel::name, ": no usable GPU: ", why));
      device_ = polymoe::cuda::current_device();
      router_.emplace(cfg_.router, cfg_.num_experts);
      prepared_.emplace(kernel_.template prepare<Quant>(to_store(w.experts)));
      if (w.shared) shared_.emplace(shared_kernel_.template prepare<Quant>(to_store(*w.shared)));
      if (cfg_.shared_expert_gate) {
        shared_gate_ = polymoe::cuda::device_array<float>(static_cast<std::size_t>(cfg_.hidden));
        shared_gate_.upload({w.shared_gate.data(), static_cast<std::size_t>(cfg_.hidden)});
      }
      mlp_ = ExpertMlp{ActivationParams{cfg_.activation, cfg_.swiglu_alpha, cfg_.swiglu_limit},
                       cfg_.router_weight_on_input};
      router_weight_ = w.router_weight;
      router_bias_ = w.router_bias;
    });
    if constexpr (requires { a2a_.agree_on_layer(); }) a2a_.agree_on_layer();
    if constexpr (requires { a2a_.connect(device_); }) a2a_.connect(device_);
  }

  void check_io(const device_view& hidden, const device_view& out) const {
    const index_t T = hidden.rows;
    require(T >= 0, "hidden has ", T, " rows");
    require_view(hidden, "hidden", T, cfg_.hidden, {element_type::f32, element_type::bf16});
    require_view(out, "out", T, cfg_.hidden, {element_type::f32, element_type::bf16});
    require(!out.overlaps(hidden), "out shares memory with hidden; the layer reads hidden after it starts writing "
                                   "out (pass a separate output)");
    if constexpr (requires { a2a_.check_input(hidden); }) a2a_.check_input(hidden);  // the dispatcher's limits
  }

  void require_on_device(const device_view& hidden, const device_view& out) const {
    polymoe::cuda::require_on_device(hidden, "hidden", device_);
    polymoe::cuda::require_on_device(out, "out", device_);
  }

  /// Grow-only device scratch for T tokens: the routing and the shared expert's slot.
  void grow(index_t T) {
    if constexpr (requires { a2a_.reserve(T); }) a2a_.reserve(T);
    const auto n = static_cast<std::size_t>(T);
    if (n <= capacity_) return;
    const auto k = static_cast<std::size_t>(cfg_.top_k());
    route_ids_ = {};
    route_w_ = {};
    route_ids_ = polymoe::cuda::device_array<std::int32_t>(n * k);
    route_w_ = polymoe::cuda::device_array<float>(n * k);
    if (shared_) {
      shared_ids_ = {};
      shared_w_ = {};
      shared_ids_ = polymoe::cuda::device_array<std::int32_t>(n);
      shared_w_ = polymoe::cuda::device_array<float>(n);
    }
    capacity_ = n;
  }

  void run_into(const device_view& hidden, const device_view& ids, const device_view& weights,
                const device_view& out_view, cuda_stream stream) {
    const index_t T = hidden.rows;
    // bf16 out with a shared expert: both sums into fp32 rows here, then rounded once into out
    const bool staged = shared_ && out_view.type == element_type::bf16;
    if (staged && staged_.size() < host_size(T, cfg_.hidden)) {
      staged_ = {};
      staged_ = polymoe::cuda::device_array<float>(host_size(T, cfg_.hidden));
    }
    const device_view out = staged ? device_view::of(staged_.data(), T, cfg_.hidden, device_) : out_view;
    const auto compute = [&](const auto& d, auto& c) { kernel_.template run<Quant>(d, *prepared_, mlp_, c); };
    if constexpr (requires { a2a_.forward(hidden, ids, weights, cfg_, out, stream, compute); }) {
      a2a_.forward(hidden, ids, weights, cfg_, out, stream, compute);  // the dispatcher's own schedule
    } else {
      auto d = a2a_.dispatch(hidden, ids, weights, cfg_, stream);
      auto c = a2a_.combine_input(d, out);
      compute(d, c);
      a2a_.combine(c, out);
    }
    if (!shared_ || T == 0) return;
    polymoe::cuda::shared_slot(hidden, cfg_.shared_expert_gate ? shared_gate_.data() : nullptr, shared_ids_.data(),
                               shared_w_.data(), stream);
    DispatchOutput<format::standard, space::cuda> sd{hidden, device_view::of(shared_ids_.data(), T, 1, device_),
                                                     device_view::of(shared_w_.data(), T, 1, device_), 1, stream};
    CombineInput<format::standard, space::cuda> sc{out, stream, true};
    shared_kernel_.template run<Quant>(sd, *shared_, ExpertMlp{mlp_.activation, false}, sc);
    if (staged) polymoe::cuda::to_bf16(out, out_view, stream);
  }

  // After the host-memory forwards' wait: a dispatcher that learns of errors on the device (an
  // expert's capacity overflowed) reports them now, on every rank alike.
  void report_device_errors() {
    if constexpr (requires { a2a_.report_device_errors(); }) a2a_.report_device_errors();
  }

  static std::size_t host_size(index_t r, index_t c) { return static_cast<std::size_t>(r * c); }
  static void upload(polymoe::cuda::device_array<float>& d, const MatrixCRef& m) {
    const Matrix packed = m;
    d.upload({packed.data(), static_cast<std::size_t>(packed.size())});
  }
  Matrix download(const polymoe::cuda::device_array<float>& d, index_t T) const {
    polymoe::cuda::synchronize(nullptr);
    Matrix out(T, cfg_.hidden);
    d.download({out.data(), static_cast<std::size_t>(out.size())});
    return out;
  }

  MoeConfig cfg_;
  A2A a2a_;
  Kernel kernel_;
  Kernel shared_kernel_ = batch_invariant_of(kernel_);
  ExpertMlp mlp_{};
  int device_ = 0;
  std::optional<polymoe::cuda::Router> router_;
  std::optional<prepared_type> prepared_, shared_;
  polymoe::cuda::device_array<float> shared_gate_;
  Matrix router_weight_;
  Vector router_bias_;
  polymoe::cuda::device_array<std::int32_t> route_ids_, shared_ids_;
  polymoe::cuda::device_array<float> route_w_, shared_w_;
  polymoe::cuda::device_array<float> staged_;  // fp32 rows of a bf16 out with a shared expert
  std::size_t capacity_ = 0;
  IdMatrix last_ids_;
  Matrix last_w_;
};

}  // namespace polymoe::detail
