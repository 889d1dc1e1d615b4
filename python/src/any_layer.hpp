#pragma once
// The Python module's layers: one type-erased interface over the layers of the valid triples of
// the core table, built from names at run time (polymoe/selection.hpp, as the tool does). The layers
// are instantiated in layer_part.cpp, compiled once per part (part P holds the triples whose index
// is P modulo layer_parts), so no translation unit instantiates every layer and the parts build in
// parallel. The virtual call is at the module's edge, once per forward, never inside one.
#include <cstddef>
#include <memory>
#include <string>

#include <boost/mp11/algorithm.hpp>

#include <polymoe/core/device_view.hpp>
#include <polymoe/io/hf_checkpoint.hpp>
#include <polymoe/polymoe.hpp>
#include <polymoe/selection.hpp>
#if defined(POLYMOE_WITH_CUDA)
#include <polymoe/cuda_table.hpp>
#endif

namespace polymoe::python {

/// The table the module selects from: the core table (the local dispatcher, every scheme, the CPU
/// kernels), with the CUDA component kernel::cuda's row added.
#if defined(POLYMOE_WITH_CUDA)
struct py_table : pairing::extend<core_table, table_rows::cuda_kernel> {};
#else
using py_table = core_table;
#endif
using py_triples = pairing::valid_triples_of<py_table>;
using triple_variant = selection::triple_variant<py_triples>;

/// Messages name the axes as the keywords of polymoe.Layer.
inline constexpr selection::axis_labels py_labels{"a2a=", "quant=", "kernel=",
                                                  " (polymoe.valid_triples() lists every valid triple)"};

/// A layer of any valid triple; one forward at a time (the module enforces it). Host tensors go to
/// the *_into methods (a layer computing in CUDA memory copies them each way); CUDA tensors to the
/// *_device methods, which only such a layer takes.
class any_layer {
 public:
  virtual ~any_layer() = default;
  virtual void forward_into(const MatrixCRef& hidden, const MatrixCRef& router_logits, MatrixRef out) = 0;
  /// The layer's own router (has_router()) gives the logits.
  virtual void forward_into(const MatrixCRef& hidden, MatrixRef out) = 0;
  virtual void forward_routed_into(const MatrixCRef& hidden, const IdMatrixCRef& topk_ids,
                                   const MatrixCRef& topk_weights, MatrixRef out) = 0;
  virtual void forward_device(const device_view& hidden, const device_view& router_logits, const device_view& out,
                              cuda_stream stream) = 0;
  virtual void forward_routed_device(const device_view& hidden, const device_view& topk_ids,
                                     const device_view& topk_weights, const device_view& out, cuda_stream stream) = 0;
  /// Whether the kernel computes in CUDA memory.
  [[nodiscard]] virtual bool on_device() const = 0;
  [[nodiscard]] virtual std::string describe() const = 0;
  [[nodiscard]] virtual const MoeConfig& config() const = 0;
  /// Whether the weights had the router's (forward_into(hidden, out) needs it).
  [[nodiscard]] virtual bool has_router() const = 0;
  /// How the weights came into the scheme's form (io::emplace_layer), empty when as given.
  std::string note;
};

/// The number of translation units the layers are split over (the build's POLYMOE_PY_PARTS).
inline constexpr std::size_t layer_parts = POLYMOE_PY_PARTS;

/// The part that instantiates triple T (a selection::triple_tag): its index among the triples.
template <class T>
inline constexpr std::size_t part_of =
    boost::mp11::mp_find<boost::mp11::mp_transform<selection::triple_tag, py_triples>, T>::value % layer_parts;

/// Builds the layer of the selected alternative, whose part must be P (layer_part.cpp).
template <std::size_t P>
std::unique_ptr<any_layer> make_layer_part(const triple_variant& selected, const MoeConfig& cfg,
                                           io::stored_layer_weights& weights);

/// Builds the layer of the selected triple, in the part that instantiates it.
inline std::unique_ptr<any_layer> make_layer(const triple_variant& selected, const MoeConfig& cfg,
                                             io::stored_layer_weights& weights) {
  return std::visit(
      [&](auto t) {
        return boost::mp11::mp_with_index<layer_parts>(
            part_of<decltype(t)>, [&](auto P) { return make_layer_part<P>(selected, cfg, weights); });
      },
      selected);
}

}  // namespace polymoe::python
