// One part of the Python module's layers (python/CMakeLists.txt compiles this file once per part,
// with POLYMOE_PY_PART set; any_layer.hpp says which triples a part holds).
#include <optional>
#include <type_traits>

#include "any_layer.hpp"

namespace polymoe::python {
namespace {

template <class A2A, class Quant, class Kernel>
class layer_of final : public any_layer {
  static constexpr bool device = std::is_same_v<kernel_memory_space<Kernel>, space::cuda>;

 public:
  layer_of(const MoeConfig& cfg, io::stored_layer_weights& weights) {
    note = io::emplace_layer(layer_, cfg, weights, A2A{}, Kernel{});
  }
  void forward_into(const MatrixCRef& hidden, const MatrixCRef& router_logits, MatrixRef out) override {
    if constexpr (device)
      out = layer_->forward(hidden, router_logits);  // the host convenience: copies each way
    else
      layer_->forward_into(hidden, router_logits, out);
  }
  void forward_into(const MatrixCRef& hidden, MatrixRef out) override {
    if constexpr (device)
      out = layer_->forward(hidden);
    else
      layer_->forward_into(hidden, out);
  }
  void forward_routed_into(const MatrixCRef& hidden, const IdMatrixCRef& topk_ids, const MatrixCRef& topk_weights,
                           MatrixRef out) override {
    if constexpr (device)
      out = layer_->forward_routed(hidden, topk_ids, topk_weights);
    else
      layer_->forward_routed_into(hidden, topk_ids, topk_weights, out);
  }
  void forward_device(const device_view& hidden, const device_view& router_logits, const device_view& out,
                      cuda_stream stream) override {
    if constexpr (device)
      layer_->forward(hidden, router_logits, out, stream);
    else
      host_only();
  }
  void forward_routed_device(const device_view& hidden, const device_view& topk_ids, const device_view& topk_weights,
                             const device_view& out, cuda_stream stream) override {
    if constexpr (device)
      layer_->forward_routed(hidden, topk_ids, topk_weights, out, stream);
    else
      host_only();
  }
  [[nodiscard]] bool on_device() const override { return device; }
  [[nodiscard]] std::string describe() const override { return layer_->describe(); }
  [[nodiscard]] const MoeConfig& config() const override { return layer_->config(); }
  [[nodiscard]] bool has_router() const override { return layer_->has_router(); }

 private:
  [[noreturn]] static void host_only() {
    throw error(detail::concat("kernel=\"", Kernel::name, "\" computes in host memory; pass host tensors (numpy "
                               "arrays, CPU tensors), or build the layer with kernel=\"cuda\" for CUDA tensors"));
  }
  std::optional<basic_moe_layer<py_table, A2A, Quant, Kernel>> layer_;
};

}  // namespace

template <std::size_t P>
std::unique_ptr<any_layer> make_layer_part(const triple_variant& selected, const MoeConfig& cfg,
                                           io::stored_layer_weights& weights) {
  return std::visit(
      [&](auto t) -> std::unique_ptr<any_layer> {
        using T = decltype(t);
        if constexpr (part_of<T> == P)
          return std::make_unique<layer_of<typename T::a2a, typename T::quant, typename T::kernel>>(cfg, weights);
        else
          throw error("make_layer_part: the selected triple is not this part's");
      },
      selected);
}

template std::unique_ptr<any_layer> make_layer_part<POLYMOE_PY_PART>(const triple_variant&, const MoeConfig&,
                                                                     io::stored_layer_weights&);

}  // namespace polymoe::python
