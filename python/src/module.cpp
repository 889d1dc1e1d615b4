// The Python extension module polymoe._polymoe (the package python/polymoe re-exports it).
//
// Tensors cross without copies: a float32 numpy array (or a host DLPack float32 tensor, through
// numpy) with contiguous rows is viewed in place as the layer's Eigen::Ref, and `out=` is written in
// place. bfloat16 has no numpy dtype: a uint16 array holding bf16 bit patterns is taken with
// dtype="bfloat16" (polymoe.Layer.forward(..., dtype="bfloat16")); such inputs are widened to fp32
// (exactly) and the output rounded to nearest-even, which costs one conversion each way.
// The GIL is released while a layer computes; one layer runs one forward at a time.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <atomic>
#include <cstdint>
#include <cstring>
#include <exception>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>

#include <polymoe/codecs/bf16.hpp>

#include "any_layer.hpp"

namespace py = pybind11;
using namespace polymoe;

namespace {

/// A dtype or type mismatch: Python's TypeError, with polymoe's message prefix.
struct type_error : std::runtime_error {
  explicit type_error(const std::string& what) : std::runtime_error("polymoe: " + what) {}
};

// ---- arrays --------------------------------------------------------------------------------

enum class elem { f32, bf16 };

// A dtype's kind and size, read through Python: pybind11 before 2.12 reads them from numpy's C
// descriptor, whose layout numpy 2 changed (wrong values, not an error, under numpy 2).
char kind_of(const py::array& a) { return a.dtype().attr("kind").cast<std::string>().at(0); }
py::ssize_t itemsize_of(const py::array& a) { return a.dtype().attr("itemsize").cast<py::ssize_t>(); }
/// A new C-contiguous array made by numpy itself (pybind11 before 2.12 computes a new array's
/// strides from the descriptor's element size, which it misreads under numpy 2).
py::array new_array(index_t rows, index_t cols, const char* dtype) {
  return py::module_::import("numpy").attr("empty")(py::make_tuple(rows, cols), dtype).cast<py::array>();
}

/// A 2-D numpy array with contiguous rows, seen where it lies.
struct array_view {
  void* data;
  index_t rows, cols, row_stride;  // row_stride in elements
};

array_view view_of(const py::array& a, std::string_view what, std::size_t itemsize, bool writable) {
  require(a.ndim() == 2, what, " has ", a.ndim(), " dimensions, expected 2 (rows, columns)");
  const index_t rows = a.shape(0), cols = a.shape(1);
  const auto s0 = a.strides(0), s1 = a.strides(1);
  const auto item = static_cast<py::ssize_t>(itemsize);
  require(cols <= 1 || s1 == item, what, " has a column stride of ", s1, " bytes; polymoe takes rows whose elements ",
          "are contiguous (numpy.ascontiguousarray makes a copy that is)");
  require(rows <= 1 || (s0 > 0 && s0 % item == 0 && s0 / item >= cols), what, " has a row stride of ", s0,
          " bytes for ", cols, " columns; polymoe takes row-major arrays with rows that do not overlap");
  require(reinterpret_cast<std::uintptr_t>(a.data()) % itemsize == 0, what, " is not aligned to its element size");
  require(!writable || a.writeable(), what, " is read-only");
  return {const_cast<void*>(a.data()), rows, cols, rows <= 1 ? cols : static_cast<index_t>(s0 / item)};
}

using f32_map = Eigen::Map<Matrix, 0, Eigen::OuterStride<>>;
using id_map = Eigen::Map<IdMatrix, 0, Eigen::OuterStride<>>;

/// The element type an array stands for: float32, or uint16 bit patterns declared bfloat16.
elem elem_of(const py::array& a, std::string_view what, elem declared) {
  if (declared == elem::bf16) {
    if (kind_of(a) != 'u' || itemsize_of(a) != 2)
      throw type_error(detail::concat(what, " has dtype ", std::string(py::str(a.dtype())),
                                      "; with dtype=\"bfloat16\" polymoe takes uint16 arrays of bf16 bit patterns"));
    return elem::bf16;
  }
  if (kind_of(a) != 'f' || itemsize_of(a) != 4)
    throw type_error(detail::concat(what, " has dtype ", std::string(py::str(a.dtype())),
                                    "; polymoe takes float32 (or bf16 bit patterns in uint16 with dtype=\"bfloat16\")"));
  return elem::f32;
}

/// A float input: a view in place for float32, an exact fp32 copy of bf16.
struct f32_input {
  Matrix widened;
  std::optional<f32_map> map;
  f32_input(const py::array& a, std::string_view what, elem declared) {
    const elem e = elem_of(a, what, declared);
    const array_view v = view_of(a, what, e == elem::f32 ? 4 : 2, false);
    if (e == elem::f32) {
      map.emplace(static_cast<float*>(v.data), v.rows, v.cols, Eigen::OuterStride<>(v.row_stride));
    } else {
      widened.resize(v.rows, v.cols);
      const auto* p = static_cast<const std::uint16_t*>(v.data);
      for (index_t r = 0; r < v.rows; ++r)
        for (index_t c = 0; c < v.cols; ++c) widened(r, c) = codecs::bf16_to_float(p[r * v.row_stride + c]);
      map.emplace(widened.data(), v.rows, v.cols, Eigen::OuterStride<>(v.cols));
    }
  }
};

/// The output: the caller's float32 array written in place, or fp32 scratch rounded into a bf16 one.
struct f32_output {
  py::array array;
  Matrix scratch;
  std::optional<f32_map> map;
  array_view view{};
  elem e = elem::f32;
  f32_output(py::array a, elem declared) : array(std::move(a)) {
    e = elem_of(array, "out", declared);
    view = view_of(array, "out", e == elem::f32 ? 4 : 2, true);
    if (e == elem::f32) {
      map.emplace(static_cast<float*>(view.data), view.rows, view.cols, Eigen::OuterStride<>(view.row_stride));
    } else {
      scratch.resize(view.rows, view.cols);
      map.emplace(scratch.data(), view.rows, view.cols, Eigen::OuterStride<>(view.cols));
    }
  }
  /// After the forward: bf16 outputs take the fp32 result rounded to nearest-even.
  void finish() {
    if (e != elem::bf16) return;
    auto* p = static_cast<std::uint16_t*>(view.data);
    for (index_t r = 0; r < view.rows; ++r)
      for (index_t c = 0; c < view.cols; ++c) p[r * view.row_stride + c] = codecs::float_to_bf16(scratch(r, c));
  }
};

/// topk_ids: int32 viewed in place; other integer dtypes copied into int32 (range-checked).
struct id_input {
  IdMatrix copied;
  std::optional<id_map> map;
  explicit id_input(const py::array& a) {
    if (kind_of(a) != 'i' && kind_of(a) != 'u')
      throw type_error(detail::concat("topk_ids has dtype ", std::string(py::str(a.dtype())),
                                      "; polymoe takes an integer array (int32 without a copy)"));
    if (itemsize_of(a) == 4 && kind_of(a) == 'i') {
      const array_view v = view_of(a, "topk_ids", 4, false);
      map.emplace(static_cast<std::int32_t*>(v.data), v.rows, v.cols, Eigen::OuterStride<>(v.row_stride));
      return;
    }
    const auto as64 = py::array_t<std::int64_t, py::array::c_style | py::array::forcecast>::ensure(a);
    require(as64 && as64.ndim() == 2, "topk_ids has ", a.ndim(), " dimensions, expected 2 (rows, columns)");
    copied.resize(as64.shape(0), as64.shape(1));
    const auto* p = as64.data();
    for (index_t i = 0; i < copied.size(); ++i) {
      require(p[i] >= INT32_MIN && p[i] <= INT32_MAX, "topk_ids holds ", p[i], ", outside int32");
      copied.data()[i] = static_cast<std::int32_t>(p[i]);
    }
    map.emplace(copied.data(), copied.rows(), copied.cols(), Eigen::OuterStride<>(copied.cols()));
  }
};

/// A numpy array as given, or a host tensor exposing DLPack (__dlpack__) viewed by numpy in place.
py::array as_array(const py::object& o, std::string_view what) {
  if (py::isinstance<py::array>(o)) return py::reinterpret_borrow<py::array>(o);
  if (py::hasattr(o, "__dlpack__")) {
    try {
      return py::module_::import("numpy").attr("from_dlpack")(o).cast<py::array>();
    } catch (py::error_already_set& e) {
      throw type_error(detail::concat(what, ": numpy cannot view this DLPack tensor in place (", e.what(),
                                      "); pass a host float32 tensor"));
    }
  }
  throw type_error(detail::concat(what, " is a ", std::string(py::str(py::type::of(o).attr("__name__"))),
                                  "; pass a numpy array or a tensor exposing __dlpack__"));
}

elem parse_dtype(const std::string& d) {
  if (d == "float32") return elem::f32;
  if (d == "bfloat16") return elem::bf16;
  throw error(detail::concat("dtype='", d, "'; valid: float32, bfloat16"));
}

// ---- configuration and weights -------------------------------------------------------------

template <class Enum>
Enum parse_enum(const std::string& s, std::string_view what) {
  std::string valid;
  // enumerators are numbered from 0; to_string answers "?" past the last
  for (int i = 0;; ++i) {
    const auto v = static_cast<Enum>(i);
    const std::string_view n = to_string(v);
    if (n == "?") break;
    if (n == s) return v;
    valid += (valid.empty() ? "" : ", ") + std::string(n);
  }
  throw error(detail::concat("config: ", what, " '", s, "' is unknown; valid: ", valid));
}

Matrix matrix_of(const py::handle& h, std::string_view what) {
  const auto a = py::array_t<float, py::array::c_style | py::array::forcecast>::ensure(h);
  if (!a) throw type_error(detail::concat(what, " is not an array of numbers"));
  if (a.ndim() == 1) {
    Matrix m(1, a.shape(0));
    if (m.size()) std::memcpy(m.data(), a.data(), sizeof(float) * static_cast<std::size_t>(m.size()));
    return m;
  }
  require(a.ndim() == 2 || a.ndim() == 3, what, " has ", a.ndim(), " dimensions, expected 2 (or 3: stacked per expert)");
  // a stack [E, R, C] is the canonical [E·R, C]: the same bytes
  const index_t cols = a.shape(a.ndim() - 1), rows = cols ? a.size() / cols : 0;
  Matrix m(rows, cols);
  if (m.size()) std::memcpy(m.data(), a.data(), sizeof(float) * static_cast<std::size_t>(m.size()));
  return m;
}

MoeConfig config_from_dict(const py::dict& d) {
  MoeConfig c;
  const std::string keys =
      "hidden, intermediate, num_experts, top_k, activation, routing, renormalize, n_group, topk_group, "
      "routed_scaling_factor, correction_bias, swiglu_alpha, swiglu_limit, expert_bias, router_weight_on_input, "
      "shared_intermediate, shared_expert_gate";
  for (const auto& [k, v] : d) {
    const std::string key = py::str(k);
    if (key == "hidden") c.hidden = v.cast<index_t>();
    else if (key == "intermediate") c.intermediate = v.cast<index_t>();
    else if (key == "num_experts") c.num_experts = v.cast<index_t>();
    else if (key == "top_k") c.router.top_k = v.cast<index_t>();
    else if (key == "activation") c.activation = parse_enum<Activation>(v.cast<std::string>(), "activation");
    else if (key == "routing") c.router.method = parse_enum<RoutingMethod>(v.cast<std::string>(), "routing");
    else if (key == "renormalize") c.router.renormalize = v.cast<bool>();
    else if (key == "n_group") c.router.n_group = v.cast<index_t>();
    else if (key == "topk_group") c.router.topk_group = v.cast<index_t>();
    else if (key == "routed_scaling_factor") c.router.routed_scaling_factor = v.cast<float>();
    else if (key == "correction_bias") c.router.correction_bias = matrix_of(v, "correction_bias").reshaped();
    else if (key == "swiglu_alpha") c.swiglu_alpha = v.cast<float>();
    else if (key == "swiglu_limit") c.swiglu_limit = v.cast<float>();
    else if (key == "expert_bias") c.expert_bias = v.cast<bool>();
    else if (key == "router_weight_on_input") c.router_weight_on_input = v.cast<bool>();
    else if (key == "shared_intermediate") c.shared_intermediate = v.cast<index_t>();
    else if (key == "shared_expert_gate") c.shared_expert_gate = v.cast<bool>();
    else throw error(detail::concat("config: unknown key '", key, "'; valid keys: ", keys));
  }
  c.validate();
  return c;
}

MoeWeights weights_from_dict(const MoeConfig& c, const py::dict& d) {
  static constexpr const char* known[] = {"w13", "w2", "b13", "b2", "shared_w13", "shared_w2", "shared_gate",
                                          "router_weight", "router_bias"};
  std::string keys;
  for (const char* k : known) keys += (keys.empty() ? "" : ", ") + std::string(k);
  for (const auto& [k, v] : d) {
    const std::string key = py::str(k);
    bool ok = false;
    for (const char* n : known) ok = ok || key == n;
    require(ok, "weights: unknown key '", key, "'; valid keys: ", keys);
  }
  MoeWeights w;
  const bool gated = is_gated(c.activation);
  const ExpertShape routed{c.local_experts(), c.hidden, c.intermediate, gated, c.expert_bias};
  // a bias given as [E, R] or [E·R] stacks: reshape to [E, R] (sizes checked by validate)
  auto bias_shaped = [](Matrix m, index_t rows, index_t cols) {
    require(m.size() == rows * cols, "weights: a bias has ", m.size(), " values, expected ", rows, " x ", cols);
    Matrix r = Eigen::Map<const Matrix>(m.data(), rows, cols);
    return r;
  };
  ExpertWeights e;
  e.shape = routed;
  require(d.contains("w13") && d.contains("w2"), "weights: 'w13' and 'w2' are required; valid keys: ", keys);
  e.w13 = matrix_of(d["w13"], "w13");
  e.w2 = matrix_of(d["w2"], "w2");
  if (c.expert_bias) {
    require(d.contains("b13") && d.contains("b2"), "weights: the config has expert_bias, so 'b13' and 'b2' are required");
    e.b13 = bias_shaped(matrix_of(d["b13"], "b13"), routed.experts, routed.rows13());
    e.b2 = bias_shaped(matrix_of(d["b2"], "b2"), routed.experts, routed.hidden);
  }
  e.validate("weights");
  w.experts = std::move(e);
  if (c.shared_intermediate > 0) {
    ExpertWeights s;
    s.shape = ExpertShape{1, c.hidden, c.shared_intermediate, gated, false};
    require(d.contains("shared_w13") && d.contains("shared_w2"),
            "weights: the config has shared_intermediate, so 'shared_w13' and 'shared_w2' are required");
    s.w13 = matrix_of(d["shared_w13"], "shared_w13");
    s.w2 = matrix_of(d["shared_w2"], "shared_w2");
    s.validate("weights (shared)");
    w.shared = std::move(s);
  }
  if (d.contains("shared_gate")) w.shared_gate = matrix_of(d["shared_gate"], "shared_gate");
  if (d.contains("router_weight")) w.router_weight = matrix_of(d["router_weight"], "router_weight");
  if (d.contains("router_bias")) w.router_bias = matrix_of(d["router_bias"], "router_bias").reshaped();
  return w;
}

// ---- the layer -----------------------------------------------------------------------------

/// What a Python Layer and its pending handles share: the layer, and whether a forward runs.
struct layer_state {
  std::unique_ptr<python::any_layer> layer;
  std::atomic<bool> busy{false};
  std::string names;

  python::any_layer& acquire() {
    require(layer != nullptr, "the layer was closed (Layer.close()); build a new one");
    bool expected = false;
    require(busy.compare_exchange_strong(expected, true),
            "the layer is running a forward already (a submit() not yet waited for, or another thread); "
            "one layer runs one forward at a time");
    return *layer;
  }
  void release() { busy.store(false); }
};

/// The arrays of one forward, kept alive (and viewed) until it ends.
struct forward_call {
  std::optional<f32_input> hidden, second;  // second: router_logits or topk_weights
  std::optional<id_input> ids;
  std::optional<f32_output> out;
  py::object keep;  // the input arrays (their memory is viewed)

  void run(python::any_layer& l) {
    if (ids)
      l.forward_routed_into(*hidden->map, *ids->map, *second->map, *out->map);
    else
      l.forward_into(*hidden->map, *second->map, *out->map);
    out->finish();
  }
};

class Layer;

/// A forward running on its own thread (Layer.submit); wait() gives its output or raises its error.
class Handle {
 public:
  Handle(std::shared_ptr<layer_state> s, std::unique_ptr<forward_call> call) : state_(std::move(s)), call_(std::move(call)) {
    python::any_layer& l = state_->acquire();
    thread_ = std::thread([this, &l] {
      try {
        call_->run(l);
      } catch (...) {
        error_ = std::current_exception();
      }
      done_.store(true);
    });
  }
  Handle(const Handle&) = delete;
  Handle& operator=(const Handle&) = delete;
  ~Handle() {
    if (thread_.joinable()) {
      py::gil_scoped_release nogil;
      thread_.join();
      state_->release();
    }
  }
  [[nodiscard]] bool done() const { return done_.load(); }
  py::array wait() {
    if (thread_.joinable()) {
      {
        py::gil_scoped_release nogil;
        thread_.join();
      }
      state_->release();
    }
    require(call_ != nullptr, "handle: wait() was called already");
    std::unique_ptr<forward_call> call = std::move(call_);
    if (error_) std::rethrow_exception(error_);
    return call->out->array;
  }

 private:
  std::shared_ptr<layer_state> state_;
  std::unique_ptr<forward_call> call_;
  std::exception_ptr error_;
  std::atomic<bool> done_{false};
  std::thread thread_;
};

class Layer {
 public:
  Layer(std::unique_ptr<python::any_layer> l, std::string names) : state_(std::make_shared<layer_state>()) {
    state_->layer = std::move(l);
    state_->names = std::move(names);
  }

  static std::shared_ptr<Layer> build(const MoeConfig& cfg, io::stored_layer_weights weights, const std::string& quant,
                                      const std::string& kernel, const std::string& a2a) {
    std::string k = kernel;
    if (selection::normalize_name(k) == "auto") {
      const std::string_view best = selection::auto_kernel<python::py_triples>(a2a, quant);
      // none pairs: select_triple names the dispatcher or scheme at fault
      k = best.empty() ? std::string(selection::all_triple_names<python::py_triples>().front().kernel) : std::string(best);
    }
    const auto selected = selection::select_triple<python::py_triples>(a2a, quant, k, python::py_labels);
    const auto n = selection::names_of(selected);
    std::unique_ptr<python::any_layer> l;
    {
      py::gil_scoped_release nogil;  // quantizing and prepacking take a while
      l = python::make_layer(selected, cfg, weights);
    }
    return std::make_shared<Layer>(std::move(l), detail::concat(n.a2a, "/", n.quant, "/", n.kernel));
  }

  std::unique_ptr<forward_call> prepare(const py::object& hidden_in, const py::object& second_in,
                                        const py::object* ids_in, const py::object& out, const std::string& dtype) {
    const py::array hidden = as_array(hidden_in, "hidden");
    const py::array second = as_array(second_in, ids_in ? "topk_weights" : "router_logits");
    std::optional<py::array> ids_array;
    if (ids_in) ids_array = as_array(*ids_in, "topk_ids");
    const py::array* ids = ids_array ? &*ids_array : nullptr;
    python::any_layer& l = alive();
    const elem e = parse_dtype(dtype);
    auto call = std::make_unique<forward_call>();
    call->hidden.emplace(hidden, "hidden", e);
    if (ids) {
      call->ids.emplace(*ids);
      call->second.emplace(second, "topk_weights", elem::f32);
    } else {
      call->second.emplace(second, "router_logits", e);
    }
    const index_t rows = call->hidden->map->rows(), cols = l.config().hidden;
    py::array o;
    if (out.is_none())
      o = new_array(rows, cols, e == elem::f32 ? "float32" : "uint16");
    else
      o = as_array(out, "out");
    call->out.emplace(o, e);
    call->keep = py::make_tuple(hidden, second, ids ? py::object(*ids) : py::none());
    return call;
  }

  py::array forward(const py::object& hidden, const py::object& router_logits, const py::object& out,
                    const std::string& dtype) {
    auto call = prepare(hidden, router_logits, nullptr, out, dtype);
    return run(*call);
  }
  py::array forward_routed(const py::object& hidden, const py::object& ids, const py::object& weights,
                           const py::object& out, const std::string& dtype) {
    auto call = prepare(hidden, weights, &ids, out, dtype);
    return run(*call);
  }
  std::unique_ptr<Handle> submit(const py::object& hidden, const py::object& router_logits, const py::object& out,
                                 const std::string& dtype) {
    return std::make_unique<Handle>(state_, prepare(hidden, router_logits, nullptr, out, dtype));
  }
  std::unique_ptr<Handle> submit_routed(const py::object& hidden, const py::object& ids, const py::object& weights,
                                        const py::object& out, const std::string& dtype) {
    return std::make_unique<Handle>(state_, prepare(hidden, weights, &ids, out, dtype));
  }

  void close() {
    require(!state_->busy.load(), "close: a forward is running; wait() for it first");
    state_->layer.reset();
  }
  [[nodiscard]] bool closed() const { return state_->layer == nullptr; }
  std::string describe() { return alive().describe(); }
  std::string note() { return alive().note; }
  const std::string& names() const { return state_->names; }
  py::dict config() {
    const MoeConfig& c = alive().config();
    py::dict d;
    d["hidden"] = c.hidden;
    d["intermediate"] = c.intermediate;
    d["num_experts"] = c.num_experts;
    d["top_k"] = c.top_k();
    d["activation"] = std::string(to_string(c.activation));
    d["routing"] = std::string(to_string(c.router.method));
    d["shared_intermediate"] = c.shared_intermediate;
    return d;
  }

 private:
  python::any_layer& alive() {
    require(state_->layer != nullptr, "the layer was closed (Layer.close()); build a new one");
    return *state_->layer;
  }
  py::array run(forward_call& call) {
    python::any_layer& l = state_->acquire();
    struct releaser {
      layer_state& s;
      ~releaser() { s.release(); }
    } r{*state_};
    {
      py::gil_scoped_release nogil;
      call.run(l);
    }
    return call.out->array;
  }

  std::shared_ptr<layer_state> state_;
};

py::dict describe_build() {
  py::dict d;
  d["version"] = POLYMOE_VERSION_STRING;
  d["commit"] = POLYMOE_GIT_COMMIT;
  py::dict kernels;
  boost::mp11::mp_for_each<boost::mp11::mp_transform<boost::mp11::mp_identity, pairing::kernels_of<python::py_table>>>(
      [&](auto id) {
        using K = typename decltype(id)::type;
        std::string path = std::string(K::name);
        if constexpr (requires(const K& k) { std::string(k.path()); }) path = std::string(K{}.path());
        bool fast = true;
        if constexpr (requires { K::fast_here(); }) fast = K::fast_here();
        py::dict kd;
        kd["path"] = path;
        kd["fast_here"] = fast;
        kernels[py::str(std::string(K::name))] = kd;
      });
  d["kernels"] = kernels;
  d["triples"] = boost::mp11::mp_size<python::py_triples>::value;
  d["components"] = py::make_tuple("core", "io", "python");
  d["memory_spaces"] = py::make_tuple("host");
  return d;
}

}  // namespace

PYBIND11_MODULE(_polymoe, m) {
  m.doc() = "polymoe: Mixture-of-Experts layers composed from compile-time policies, selected by name";
  static py::exception<polymoe::error> polymoe_error(m, "Error", PyExc_ValueError);
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const type_error& e) {
      PyErr_SetString(PyExc_TypeError, e.what());
    } catch (const polymoe::error& e) {
      polymoe_error(e.what());
    }
  });

  m.def("valid_triples", [] {
    py::list out;
    for (const auto& t : selection::all_triple_names<python::py_triples>())
      out.append(py::make_tuple(std::string(t.a2a), std::string(t.quant), std::string(t.kernel)));
    return out;
  }, "Every valid (a2a, quant, kernel) triple of the table, in table order.");
  m.def("describe", &describe_build, "The build: version, commit, kernels (ISA path, fast here), components.");
  m.def("auto_kernel", [](const std::string& a2a, const std::string& quant) {
    return std::string(selection::auto_kernel<python::py_triples>(a2a, quant));
  }, py::arg("a2a") = "local", py::arg("quant") = "bf16", "The kernel kernel=\"auto\" picks for (a2a, quant) here.");

  py::class_<Handle>(m, "Handle", "A forward running while Python continues (Layer.submit).")
      .def("wait", &Handle::wait, "Waits for the forward; returns its output or raises its error.")
      .def("done", &Handle::done, "Whether the forward has finished (wait() still collects it).");

  py::class_<Layer, std::shared_ptr<Layer>>(m, "Layer")
      .def(py::init([](const py::dict& config, const py::dict& weights, const std::string& quant,
                       const std::string& kernel, const std::string& a2a) {
             const MoeConfig cfg = config_from_dict(config);
             return Layer::build(cfg, weights_from_dict(cfg, weights), quant, kernel, a2a);
           }),
           py::arg("config"), py::arg("weights"), py::arg("quant") = "bf16", py::arg("kernel") = "auto",
           py::arg("a2a") = "local")
      .def_static("from_checkpoint",
                  [](const std::string& dir, index_t layer, const std::string& quant, const std::string& kernel,
                     const std::string& a2a) {
                    io::hf_layer L;
                    {
                      py::gil_scoped_release nogil;
                      L = io::hf_checkpoint::open(dir).load_layer(layer);
                    }
                    return Layer::build(L.cfg, std::move(L.weights), quant, kernel, a2a);
                  },
                  py::arg("dir"), py::arg("layer"), py::arg("quant") = "bf16", py::arg("kernel") = "auto",
                  py::arg("a2a") = "local")
      .def("forward", &Layer::forward, py::arg("hidden"), py::arg("router_logits"), py::arg("out") = py::none(),
           py::arg("dtype") = "float32")
      .def("forward_routed", &Layer::forward_routed, py::arg("hidden"), py::arg("topk_ids"),
           py::arg("topk_weights"), py::arg("out") = py::none(), py::arg("dtype") = "float32")
      .def("submit", &Layer::submit, py::arg("hidden"), py::arg("router_logits"), py::arg("out") = py::none(),
           py::arg("dtype") = "float32")
      .def("submit_routed", &Layer::submit_routed, py::arg("hidden"), py::arg("topk_ids"), py::arg("topk_weights"),
           py::arg("out") = py::none(), py::arg("dtype") = "float32")
      .def("close", &Layer::close)
      .def_property_readonly("closed", &Layer::closed)
      .def("describe", &Layer::describe)
      .def_property_readonly("note", &Layer::note)
      .def_property_readonly("triple", &Layer::names)
      .def_property_readonly("config", &Layer::config);
}
