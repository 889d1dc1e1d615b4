// One part of the Python module's layers (python/CMakeLists.txt compiles this file once per part,
// with POLYMOE_PY_PART set; any_layer.hpp says which triples a part holds).
#include <optional>

#include "any_layer.hpp"

namespace polymoe::python {
namespace {

template <class A2A, class Quant, class Kernel>
class layer_of final : public any_layer {
 public:
  layer_of(const MoeConfig& cfg, io::stored_layer_weights& weights) {
    note = io::emplace_layer(layer_, cfg, weights, A2A{}, Kernel{});
  }
  void forward_into(const MatrixCRef& hidden, const MatrixCRef& router_logits, MatrixRef out) override {
    layer_->forward_into(hidden, router_logits, out);
  }
  void forward_routed_into(const MatrixCRef& hidden, const IdMatrixCRef& topk_ids, const MatrixCRef& topk_weights,
                           MatrixRef out) override {
    layer_->forward_routed_into(hidden, topk_ids, topk_weights, out);
  }
  [[nodiscard]] std::string describe() const override { return layer_->describe(); }
  [[nodiscard]] const MoeConfig& config() const override { return layer_->config(); }

 private:
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
