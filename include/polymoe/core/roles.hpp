#pragma once
// The three roles a policy can play in MoeLayer<A2A, Quant, Kernel>. A type opts into a role
// explicitly with a member alias (as stdexec's `using sender_concept = sender_tag;`), and each
// role's concept is assembled from named pieces so a failure says which piece is missing.
#include <concepts>
#include <string_view>

#include <polymoe/core/expert_weights.hpp>
#include <polymoe/core/formats.hpp>

namespace polymoe {

struct a2a_tag {};     ///< `using a2a_concept = polymoe::a2a_tag;` in a dispatcher
struct quant_tag {};   ///< `using quant_concept = polymoe::quant_tag;` in a quant scheme
struct kernel_tag {};  ///< `using kernel_concept = polymoe::kernel_tag;` in an expert kernel

/// Has a `static constexpr std::string_view name` used in diagnostics, configuration and reports.
template <class T>
concept named_policy = requires {
  { T::name } -> std::convertible_to<std::string_view>;
};

template <class T>
concept opts_into_a2a = requires { typename T::a2a_concept; } && std::derived_from<typename T::a2a_concept, a2a_tag>;
template <class T>
concept opts_into_quant = requires { typename T::quant_concept; } && std::derived_from<typename T::quant_concept, quant_tag>;
template <class T>
concept opts_into_kernel = requires { typename T::kernel_concept; } && std::derived_from<typename T::kernel_concept, kernel_tag>;

/// Declares the dispatch format it produces: `using format = polymoe::format::standard;`.
template <class T>
concept declares_format = requires { typename T::format; } && is_dispatch_format_v<typename T::format>;

/// A token dispatcher (the A2A axis).
///
/// Requirements: opts into a2a_tag, has a name, declares its format F, and
///   a.dispatch(hidden [T,H], ids [T,k] global, weights [T,k], cfg) -> DispatchOutput<F>
///   a.combine_input(d, out [T,H])                                 -> CombineInput<F> (where the kernel writes)
///   a.combine(c, out [T,H])                                       -> void (out = routed sum for the local tokens)
/// and optionally `using memory_spaces = mp_list<space::...>`, the memory it carries (none: host).
/// Example: polymoe::a2a::local (standard format, no communication, host and CUDA memory).
template <class T>
concept dispatcher = opts_into_a2a<T> && named_policy<T> && declares_format<T> &&
    requires(T& a, const MatrixCRef& h, const IdMatrixCRef& ids, const MatrixCRef& w, const MoeConfig& cfg,
             const DispatchOutput<typename T::format>& d, const CombineInput<typename T::format>& c, MatrixRef out) {
      { a.dispatch(h, ids, w, cfg) } -> std::same_as<DispatchOutput<typename T::format>>;
      { a.combine_input(d, out) } -> std::same_as<CombineInput<typename T::format>>;
      a.combine(c, out);
    };

/// A quantization scheme (the Quant axis): how expert weights (and, if it says so, activations)
/// are stored.
///
/// Requirements: opts into quant_tag, has a name, and
///   typename Q::weights                       the stored form; `.shape()` -> ExpertShape
///   Q::quantize(const ExpertWeights&)         -> Q::weights (from fp32)
///   Q::dequantize(w, e, w13 [rows13,H], w2 [H,I])  the exact fp32 values the scheme stands for
///   Q::quantize_activation(std::span<float>)  the activation rounding a kernel must apply to each
///                                             GEMM input row (identity for weight-only schemes)
/// Optionally `w.validate(std::string_view what)`: throws polymoe::error when the store's arrays
/// do not have the sizes its shape implies (MoeLayer calls it on stores it did not quantize).
/// Example: polymoe::quant::bf16.
template <class Q>
concept quant_scheme = opts_into_quant<Q> && named_policy<Q> && requires { typename Q::weights; } &&
    requires(const ExpertWeights& f, const typename Q::weights& w, index_t e, MatrixRef m, std::span<float> row) {
      { Q::quantize(f) } -> std::same_as<typename Q::weights>;
      { w.shape() } -> std::same_as<ExpertShape>;
      Q::dequantize(w, e, m, m);
      Q::quantize_activation(row);
    };

/// An expert compute backend (the Kernel axis) for scheme Q and the formats it runs natively.
///
/// Requirements: opts into kernel_tag, has a name, and for a scheme Q it implements
///   typename K::template prepared<Q>                 its own (re-laid, prepacked) weights
///   k.prepare<Q>(typename Q::weights)                -> prepared<Q>, called on the layer's kernel
///                                                       object (static, or a const member where
///                                                       the kernel's settings shape its buffers)
///   k.run(DispatchOutput<F>, prepared<Q>, ExpertMlp, CombineInput<F>) for each native format F
/// and optionally
///   K::speed (constexpr int)                         its rank for "the fastest kernel" (--kernel
///                                                       auto picks the highest that pairs and is
///                                                       fast here; none: 0)
///   K::fast_here()                                   whether this machine has what makes it fast
///                                                       (none: always)
///   k.path()                                         -> std::string: what it runs on this machine
///                                                       (instruction set, tiles), for
///                                                       MoeLayer::describe()
///   typename K::memory_space                         where it computes (memory_space.hpp; none:
///                                                       space::host)
///   k.batch_invariant()                              -> K: the kernel set so that a row's result
///                                                       does not depend on the rows batched with
///                                                       it; the layer runs its shared expert with
///                                                       it. A kernel without it must be so as it is.
/// Which schemes and formats it implements is stated in the pairing table, not here.
template <class K>
concept expert_kernel = opts_into_kernel<K> && named_policy<K>;

template <class K, class Q, class F>
concept expert_kernel_for = expert_kernel<K> && quant_scheme<Q> &&
    requires(const K& k, typename Q::weights w, const typename K::template prepared<Q>& p, const ExpertMlp& mlp,
             const DispatchOutput<F>& d, CombineInput<F> c) {
      { k.template prepare<Q>(std::move(w)) } -> std::same_as<typename K::template prepared<Q>>;
      k.template run<Q>(d, p, mlp, c);
    };

}  // namespace polymoe
