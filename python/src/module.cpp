// The Python extension module polymoe._polymoe (the package python/polymoe re-exports it).
//
// Tensors cross without copies: a numpy array, or any tensor exposing DLPack (__dlpack__: PyTorch,
// CuPy, JAX), with contiguous rows is viewed in place, and `out=` is written in place. Host tensors
// go to layers computing in host memory (a CUDA layer copies them each way, as the tool's host
// conveniences do); CUDA tensors to layers computing in CUDA memory, on the caller's stream.
// bfloat16: DLPack says it; numpy has no such dtype, so a uint16 array of bf16 bit patterns is taken
// with dtype="bfloat16". A host layer widens bf16 inputs to fp32 (exactly) and rounds its output to
// nearest-even, one conversion each way.
// The GIL is released while a layer computes, on the layer's TBB arena; one layer runs one forward
// at a time.
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
#include <utility>

#include <tbb/task_arena.h>

#include <polymoe/codecs/bf16.hpp>
#include <polymoe/dlpack.hpp>

#include "any_layer.hpp"

namespace py = pybind11;
using namespace polymoe;

namespace {

/// A dtype or type mismatch: Python's TypeError, with polymoe's message prefix.
struct type_error : std::runtime_error {
  explicit type_error(const std::string& what) : std::runtime_error("polymoe: " + what) {}
};

// ---- tensors -------------------------------------------------------------------------------

enum class elem { f32, bf16, i32, other };

using f32_map = Eigen::Map<Matrix, 0, Eigen::OuterStride<>>;
using id_map = Eigen::Map<IdMatrix, 0, Eigen::OuterStride<>>;

// A dtype's kind and size, read through Python: pybind11 before 2.12 reads them from numpy's C
// descriptor, whose layout numpy 2 changed (wrong values, not an error, under numpy 2).
char kind_of(const py::array& a) { return a.dtype().attr("kind").cast<std::string>().at(0); }
py::ssize_t itemsize_of(const py::array& a) { return a.dtype().attr("itemsize").cast<py::ssize_t>(); }
/// A new C-contiguous array made by numpy itself (pybind11 before 2.12 computes a new array's
/// strides from the descriptor's element size, which it misreads under numpy 2).
py::array new_array(index_t rows, index_t cols, const char* dtype) {
  return py::module_::import("numpy").attr("empty")(py::make_tuple(rows, cols), dtype).cast<py::array>();
}

/// A 2-D tensor with contiguous rows, seen where it lies: host memory or CUDA memory.
struct tensor_view {
  void* data = nullptr;
  elem type = elem::f32;
  index_t rows = 0, cols = 0, row_stride = 0;  // row_stride in elements
  bool cuda = false;
  int device = 0;
  std::string dtype_name;  // for messages

  [[nodiscard]] device_view as_device(std::string_view what) const {
    const element_type t = type == elem::f32 ? element_type::f32 : type == elem::bf16 ? element_type::bf16
                           : type == elem::i32 ? element_type::i32
                           : throw type_error(detail::concat(what, " has dtype ", dtype_name,
                                                             "; CUDA layers take float32, bfloat16 and int32"));
    return {data, t, rows, cols, row_stride, device};
  }
};

/// A numpy array's 2-D view (a 1-D array is one row). `declared` bf16: uint16 arrays of bf16 bits.
tensor_view view_of_numpy(const py::array& a, std::string_view what, bool declared_bf16, bool writable) {
  require(a.ndim() == 2, what, " has ", a.ndim(), " dimensions, expected 2 (rows, columns)");
  const char kind = kind_of(a);
  const py::ssize_t item = itemsize_of(a);
  tensor_view v;
  v.dtype_name = std::string(py::str(a.dtype()));
  if (declared_bf16) {
    if (kind != 'u' || item != 2)
      throw type_error(detail::concat(what, " has dtype ", v.dtype_name,
                                      "; with dtype=\"bfloat16\" polymoe takes uint16 arrays of bf16 bit patterns"));
    v.type = elem::bf16;
  } else {
    v.type = kind == 'f' && item == 4 ? elem::f32 : kind == 'i' && item == 4 ? elem::i32 : elem::other;
  }
  v.rows = a.shape(0);
  v.cols = a.shape(1);
  const auto s0 = a.strides(0), s1 = a.strides(1);
  require(v.cols <= 1 || s1 == item, what, " has a column stride of ", s1, " bytes; polymoe takes rows whose ",
          "elements are contiguous (numpy.ascontiguousarray makes a copy that is)");
  require(v.rows <= 1 || (s0 > 0 && s0 % item == 0 && s0 / item >= v.cols), what, " has a row stride of ", s0,
          " bytes for ", v.cols, " columns; polymoe takes row-major arrays with rows that do not overlap");
  require(reinterpret_cast<std::uintptr_t>(a.data()) % static_cast<std::uintptr_t>(item) == 0, what,
          " is not aligned to its element size");
  require(!writable || a.writeable(), what, " is read-only");
  v.data = const_cast<void*>(a.data());
  v.row_stride = v.rows <= 1 ? v.cols : static_cast<index_t>(s0 / item);
  return v;
}

/// A tensor taken through the DLPack protocol (__dlpack__): the producer's capsule is consumed (renamed
/// "used_dltensor", as the protocol asks) and its deleter called when this ends, with the GIL held.
class dlpack_tensor {
 public:
  dlpack_tensor(const py::object& o, std::string_view what, cuda_stream stream) {
    const auto dev = o.attr("__dlpack_device__")().cast<std::pair<int, int>>();
    const bool cuda = dev.first == kDLCUDA || dev.first == kDLCUDAManaged;
    py::object cap;
    // a CUDA producer orders its pending work before the consumer's stream (1: CUDA's legacy default)
    if (cuda)
      cap = o.attr("__dlpack__")(py::arg("stream") = stream == nullptr ? std::uintptr_t{1}
                                                                       : reinterpret_cast<std::uintptr_t>(stream));
    else
      cap = o.attr("__dlpack__")();
    auto* m = static_cast<DLManagedTensor*>(PyCapsule_GetPointer(cap.ptr(), "dltensor"));
    if (m == nullptr) {
      PyErr_Clear();
      throw type_error(detail::concat(what, ": __dlpack__ did not give a \"dltensor\" capsule"));
    }
    PyCapsule_SetName(cap.ptr(), "used_dltensor");
    managed_ = m;
  }
  dlpack_tensor(const dlpack_tensor&) = delete;
  dlpack_tensor& operator=(const dlpack_tensor&) = delete;
  ~dlpack_tensor() {
    if (managed_->deleter != nullptr) managed_->deleter(managed_);
  }
  [[nodiscard]] const DLTensor& tensor() const { return managed_->dl_tensor; }

 private:
  DLManagedTensor* managed_ = nullptr;
};

tensor_view view_of_dlpack(const DLTensor& t, std::string_view what) {
  const DLDeviceType d = t.device.device_type;
  require(d == kDLCPU || d == kDLCUDAHost || d == kDLCUDA || d == kDLCUDAManaged, what,
          " is in memory of DLPack device type ", static_cast<int>(d), "; polymoe takes host and CUDA tensors");
  tensor_view v;
  v.dtype_name = detail::dlpack_dtype_name(t.dtype);
  const bool known = t.dtype.lanes == 1 && ((t.dtype.code == kDLFloat && t.dtype.bits == 32) ||
                                            (t.dtype.code == kDLBfloat && t.dtype.bits == 16) ||
                                            (t.dtype.code == kDLInt && t.dtype.bits == 32));
  // another dtype: the shape checks still apply; the element type is named where it matters
  DLTensor f = t;
  if (!known) f.dtype = {kDLFloat, 32, 1};
  const detail::dlpack_matrix m = detail::dlpack_as_matrix(f, what);
  v.type = !known ? elem::other : m.type == element_type::f32 ? elem::f32 : m.type == element_type::bf16 ? elem::bf16
                                                                                                            : elem::i32;
  v.data = m.data;
  v.rows = m.rows;
  v.cols = m.cols;
  v.row_stride = m.row_stride;
  v.cuda = d == kDLCUDA || d == kDLCUDAManaged;
  v.device = t.device.device_id;
  return v;
}

/// One tensor argument: a numpy array or a DLPack producer, kept alive and viewed until the call ends.
struct tensor_arg {
  py::object keep;
  std::optional<dlpack_tensor> dl;
  tensor_view view;

  tensor_arg(const py::object& o, std::string_view what, bool declared_bf16, bool writable, cuda_stream stream) {
    keep = o;
    if (py::isinstance<py::array>(o)) {
      view = view_of_numpy(py::reinterpret_borrow<py::array>(o), what, declared_bf16, writable);
    } else if (py::hasattr(o, "__dlpack__") && py::hasattr(o, "__dlpack_device__")) {
      dl.emplace(o, what, stream);
      view = view_of_dlpack(dl->tensor(), what);
      require(!declared_bf16 || view.type == elem::bf16, what, " has dtype ", view.dtype_name,
              "; dtype=\"bfloat16\" is for uint16 numpy arrays (a DLPack tensor says its own dtype)");
    } else {
      throw type_error(detail::concat(what, " is a ", std::string(py::str(py::type::of(o).attr("__name__"))),
                                      "; pass a numpy array or a tensor exposing __dlpack__"));
    }
  }
};

/// A float input in host memory: a view in place for float32, an exact fp32 copy of bf16.
struct f32_input {
  Matrix widened;
  std::optional<f32_map> map;
  f32_input(const tensor_view& v, std::string_view what) {
    if (v.type == elem::f32) {
      map.emplace(static_cast<float*>(v.data), v.rows, v.cols, Eigen::OuterStride<>(v.row_stride));
    } else if (v.type == elem::bf16) {
      widened.resize(v.rows, v.cols);
      const auto* p = static_cast<const std::uint16_t*>(v.data);
      for (index_t r = 0; r < v.rows; ++r)
        for (index_t c = 0; c < v.cols; ++c) widened(r, c) = codecs::bf16_to_float(p[r * v.row_stride + c]);
      map.emplace(widened.data(), v.rows, v.cols, Eigen::OuterStride<>(v.cols));
    } else {
      throw type_error(detail::concat(what, " has dtype ", v.dtype_name,
                                      "; polymoe takes float32 or bfloat16 (bf16 bit patterns in uint16 numpy arrays "
                                      "with dtype=\"bfloat16\")"));
    }
  }
};

/// The output in host memory: the caller's float32 tensor written in place, or fp32 scratch
/// rounded into a bf16 one.
struct f32_output {
  Matrix scratch;
  std::optional<f32_map> map;
  tensor_view view;
  explicit f32_output(const tensor_view& v) : view(v) {
    if (v.type == elem::f32) {
      map.emplace(static_cast<float*>(v.data), v.rows, v.cols, Eigen::OuterStride<>(v.row_stride));
    } else if (v.type == elem::bf16) {
      scratch.resize(v.rows, v.cols);
      map.emplace(scratch.data(), v.rows, v.cols, Eigen::OuterStride<>(v.cols));
    } else {
      throw type_error(detail::concat("out has dtype ", v.dtype_name, "; polymoe writes float32 or bfloat16"));
    }
  }
  /// After the forward: bf16 outputs take the fp32 result rounded to nearest-even.
  void finish() {
    if (view.type != elem::bf16) return;
    auto* p = static_cast<std::uint16_t*>(view.data);
    for (index_t r = 0; r < view.rows; ++r)
      for (index_t c = 0; c < view.cols; ++c) p[r * view.row_stride + c] = codecs::float_to_bf16(scratch(r, c));
  }
};

/// topk_ids in host memory: int32 viewed in place; other integer dtypes copied into int32 (range-checked).
struct id_input {
  IdMatrix copied;
  std::optional<id_map> map;
  id_input(const tensor_arg& a) {
    const tensor_view& v = a.view;
    if (v.type == elem::i32) {
      map.emplace(static_cast<std::int32_t*>(v.data), v.rows, v.cols, Eigen::OuterStride<>(v.row_stride));
      return;
    }
    // other integers: through numpy (a DLPack host tensor is viewed by numpy in place)
    py::object np = py::module_::import("numpy");
    py::object arr = a.keep;
    if (!py::isinstance<py::array>(arr)) {
      try {
        arr = np.attr("from_dlpack")(a.keep);
      } catch (py::error_already_set&) {
        throw type_error(detail::concat("topk_ids has dtype ", v.dtype_name, "; polymoe takes integer ids (int32 ",
                                        "without a copy)"));
      }
    }
    const py::array ids = py::reinterpret_borrow<py::array>(arr);
    if (kind_of(ids) != 'i' && kind_of(ids) != 'u')
      throw type_error(detail::concat("topk_ids has dtype ", v.dtype_name,
                                      "; polymoe takes an integer array (int32 without a copy)"));
    const auto as64 = py::array_t<std::int64_t, py::array::c_style | py::array::forcecast>::ensure(ids);
    require(as64 && as64.ndim() == 2, "topk_ids has ", ids.ndim(), " dimensions, expected 2 (rows, columns)");
    copied.resize(as64.shape(0), as64.shape(1));
    const auto* p = as64.data();
    for (index_t i = 0; i < copied.size(); ++i) {
      require(p[i] >= INT32_MIN && p[i] <= INT32_MAX, "topk_ids holds ", p[i], ", outside int32");
      copied.data()[i] = static_cast<std::int32_t>(p[i]);
    }
    map.emplace(copied.data(), copied.rows(), copied.cols(), Eigen::OuterStride<>(copied.cols()));
  }
};

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

/// What a Python Layer and its pending handles share: the layer, its TBB arena, and whether a
/// forward runs.
struct layer_state {
  std::unique_ptr<python::any_layer> layer;
  std::unique_ptr<tbb::task_arena> arena;
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

/// The tensors of one forward, kept alive and viewed until it ends.
struct forward_call {
  std::optional<tensor_arg> hidden_arg, second_arg, ids_arg, out_arg;  // second: router_logits or topk_weights
  std::optional<f32_input> hidden, second;
  std::optional<id_input> ids;
  std::optional<f32_output> out;
  bool device = false;
  cuda_stream stream = nullptr;

  void run(python::any_layer& l) {
    if (device) {
      const device_view h = hidden_arg->view.as_device("hidden"), o = out_arg->view.as_device("out");
      if (ids_arg)
        l.forward_routed_device(h, ids_arg->view.as_device("topk_ids"), second_arg->view.as_device("topk_weights"), o,
                                stream);
      else
        l.forward_device(h, second_arg->view.as_device("router_logits"), o, stream);
      return;
    }
    if (ids) {
      l.forward_routed_into(*hidden->map, *ids->map, *second->map, *out->map);
    } else if (second) {
      l.forward_into(*hidden->map, *second->map, *out->map);
    } else {  // the layer's router: on the layer's arena, the GIL released
      l.forward_into(*hidden->map, *out->map);
    }
    out->finish();
  }
};

/// A forward running on the layer's arena (Layer.submit); wait() gives its output or raises its error.
class Handle {
 public:
  Handle(std::shared_ptr<layer_state> s, std::unique_ptr<forward_call> call) : state_(std::move(s)), call_(std::move(call)) {
    python::any_layer& l = state_->acquire();
    running_ = true;
    state_->arena->enqueue([this, &l] {
      try {
        call_->run(l);
      } catch (...) {
        error_ = std::current_exception();
      }
      done_.store(true);
      done_.notify_all();
    });
  }
  Handle(const Handle&) = delete;
  Handle& operator=(const Handle&) = delete;
  ~Handle() { finish(); }
  [[nodiscard]] bool done() const { return done_.load(); }
  py::object wait() {
    finish();
    require(call_ != nullptr, "handle: wait() was called already");
    std::unique_ptr<forward_call> call = std::move(call_);
    if (error_) std::rethrow_exception(error_);
    return call->out_arg->keep;
  }

 private:
  /// Waits (the GIL released) for the forward, once, and frees the layer for the next.
  void finish() {
    if (!running_) return;
    {
      py::gil_scoped_release nogil;
      done_.wait(false);
    }
    running_ = false;
    state_->release();
  }
  std::shared_ptr<layer_state> state_;
  std::unique_ptr<forward_call> call_;
  std::exception_ptr error_;
  std::atomic<bool> done_{false};
  bool running_ = false;
};

class Layer {
 public:
  Layer(std::unique_ptr<python::any_layer> l, std::string names, int threads) : state_(std::make_shared<layer_state>()) {
    state_->layer = std::move(l);
    state_->names = std::move(names);
    state_->arena = std::make_unique<tbb::task_arena>(threads > 0 ? threads : static_cast<int>(tbb::task_arena::automatic));
  }

  static std::shared_ptr<Layer> build(const MoeConfig& cfg, io::stored_layer_weights weights, const std::string& quant,
                                      const std::string& kernel, const std::string& a2a, int threads) {
    require(threads >= 0, "threads=", threads, "; pass 0 (every core) or a positive count");
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
    return std::make_shared<Layer>(std::move(l), detail::concat(n.a2a, "/", n.quant, "/", n.kernel), threads);
  }

  std::unique_ptr<forward_call> prepare(const py::object& hidden_in, const py::object& second_in,
                                        const py::object* ids_in, const py::object& out, const std::string& dtype,
                                        std::uintptr_t stream) {
    python::any_layer& l = alive();
    const bool declared_bf16 = parse_dtype(dtype) == elem::bf16;
    auto call = std::make_unique<forward_call>();
    call->stream = reinterpret_cast<cuda_stream>(stream);
    const tensor_view& h = call->hidden_arg.emplace(hidden_in, "hidden", declared_bf16, false, call->stream).view;
    call->device = h.cuda;
    const index_t rows = h.rows, cols = l.config().hidden;
    const char* second_name = ids_in ? "topk_weights" : "router_logits";
    if (!second_in.is_none())
      call->second_arg.emplace(second_in, second_name, declared_bf16 && !ids_in, false, call->stream);
    if (ids_in) call->ids_arg.emplace(*ids_in, "topk_ids", false, false, call->stream);
    if (out.is_none()) {
      call->out_arg.emplace(new_output(hidden_in, h, rows, cols), "out", declared_bf16, true,
                            call->stream);
    } else {
      call->out_arg.emplace(out, "out", declared_bf16, true, call->stream);
    }
    return call;
  }

  py::object forward(const py::object& hidden, const py::object& router_logits, const py::object& out,
                     const std::string& dtype, std::uintptr_t stream) {
    auto call = prepare(hidden, router_logits, nullptr, out, dtype, stream);
    return run(*call);
  }
  py::object forward_routed(const py::object& hidden, const py::object& ids, const py::object& weights,
                            const py::object& out, const std::string& dtype, std::uintptr_t stream) {
    auto call = prepare(hidden, weights, &ids, out, dtype, stream);
    return run(*call);
  }
  std::unique_ptr<Handle> submit(const py::object& hidden, const py::object& router_logits, const py::object& out,
                                 const std::string& dtype) {
    return submitted(prepare(hidden, router_logits, nullptr, out, dtype, 0));
  }
  std::unique_ptr<Handle> submit_routed(const py::object& hidden, const py::object& ids, const py::object& weights,
                                        const py::object& out, const std::string& dtype) {
    return submitted(prepare(hidden, weights, &ids, out, dtype, 0));
  }

  void close() {
    require(!state_->busy.load(), "close: a forward is running; wait() for it first");
    state_->layer.reset();
  }
  [[nodiscard]] bool closed() const { return state_->layer == nullptr; }
  std::string describe() { return alive().describe(); }
  std::string note() { return alive().note; }
  bool on_device() { return alive().on_device(); }
  int threads() const { return state_->arena->max_concurrency(); }
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

  /// The output when none is given: like hidden (a torch tensor gives a torch tensor on its device),
  /// bfloat16 where hidden is, else float32.
  static py::object new_output(const py::object& hidden, const tensor_view& h, index_t rows, index_t cols) {
    const bool bf16 = h.type == elem::bf16;
    if (py::isinstance<py::array>(hidden)) return new_array(rows, cols, bf16 ? "uint16" : "float32");
    if (py::hasattr(hidden, "new_empty")) {  // a torch.Tensor
      py::object torch = py::module_::import("torch");
      return hidden.attr("new_empty")(py::make_tuple(rows, cols),
                                      py::arg("dtype") = torch.attr(bf16 ? "bfloat16" : "float32"));
    }
    require(!h.cuda, "hidden is a CUDA tensor of a type polymoe cannot allocate; pass out=");
    require(!bf16, "hidden is a bfloat16 tensor that is not a torch.Tensor; pass out=");
    return new_array(rows, cols, "float32");
  }

  /// Views the call's host tensors as the layer's Eigen inputs, or checks its CUDA tensors' space.
  void bind(forward_call& call, python::any_layer& l) {
    const bool any_cuda = call.hidden_arg->view.cuda || call.out_arg->view.cuda ||
                          (call.second_arg && call.second_arg->view.cuda) || (call.ids_arg && call.ids_arg->view.cuda);
    const bool all_cuda = call.hidden_arg->view.cuda && call.out_arg->view.cuda &&
                          (!call.second_arg || call.second_arg->view.cuda) && (!call.ids_arg || call.ids_arg->view.cuda);
    require(any_cuda == all_cuda, "the tensors of one forward are in host and CUDA memory both; pass them all in one");
    if (call.device) {
      require(call.second_arg.has_value(), call.ids_arg ? "topk_weights" : "router_logits",
              " is required for CUDA tensors (the router's product is computed on the host only)");
      return;
    }
    call.hidden.emplace(call.hidden_arg->view, "hidden");
    if (call.second_arg) call.second.emplace(call.second_arg->view, call.ids_arg ? "topk_weights" : "router_logits");
    if (call.ids_arg) call.ids.emplace(*call.ids_arg);
    call.out.emplace(call.out_arg->view);
    if (!call.second_arg) {
      require(!call.ids_arg, "topk_weights is required with topk_ids");
      require(l.has_router(), "router_logits is None, but the layer has no router weight (weights ",
              "'router_weight'); pass router_logits");
      const auto& h = *call.hidden->map;
      require(h.cols() == l.config().hidden, "hidden has ", h.cols(), " columns, expected hidden=", l.config().hidden);
    }
  }

  py::object run(forward_call& call) {
    python::any_layer& l = state_->acquire();
    struct releaser {
      layer_state& s;
      ~releaser() { s.release(); }
    } r{*state_};
    bind(call, l);
    std::exception_ptr failed;  // carried past TBB's frames here, not through them
    {
      py::gil_scoped_release nogil;
      state_->arena->execute([&] {
        try {
          call.run(l);
        } catch (...) {
          failed = std::current_exception();
        }
      });
    }
    if (failed) std::rethrow_exception(failed);
    return call.out_arg->keep;
  }

  std::unique_ptr<Handle> submitted(std::unique_ptr<forward_call> call) {
    require(!call->device, "submit() is for host tensors; a forward on CUDA tensors is already asynchronous on its ",
            "stream (call forward)");
    bind(*call, alive());
    return std::make_unique<Handle>(state_, std::move(call));
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
        bool fast = true, available = true;
        try {
          if constexpr (requires(const K& k) { std::string(k.path()); }) path = std::string(K{}.path());
          if constexpr (requires { K::fast_here(); }) fast = K::fast_here();
        } catch (const polymoe::error& e) {  // a kernel whose device is not here (no GPU or no driver)
          path = e.what();
          fast = available = false;
        }
        py::dict kd;
        kd["path"] = path;
        kd["fast_here"] = fast;
        kd["available"] = available;
        kernels[py::str(std::string(K::name))] = kd;
      });
  d["kernels"] = kernels;
  d["triples"] = boost::mp11::mp_size<python::py_triples>::value;
#if defined(POLYMOE_WITH_CUDA)
  d["components"] = py::make_tuple("core", "io", "python", "cuda");
  d["memory_spaces"] = py::make_tuple("host", "cuda");
#else
  d["components"] = py::make_tuple("core", "io", "python");
  d["memory_spaces"] = py::make_tuple("host");
#endif
  return d;
}

}  // namespace

PYBIND11_MODULE(_polymoe, m) {
  m.doc() = "polymoe: Mixture-of-Experts layers composed from compile-time policies, selected by name";
  // Never destroyed: a static Python object would be released after the interpreter has finalised.
  static auto* polymoe_error = new py::exception<polymoe::error>(m, "Error", PyExc_ValueError);
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const type_error& e) {
      PyErr_SetString(PyExc_TypeError, e.what());
    } catch (const polymoe::error& e) {
#if PYBIND11_VERSION_HEX >= 0x020C0000
      py::set_error(*polymoe_error, e.what());
#else
      (*polymoe_error)(e.what());
#endif
    }
  });

  m.def("valid_triples", [] {
    py::list out;
    for (const auto& t : selection::all_triple_names<python::py_triples>())
      out.append(py::make_tuple(std::string(t.a2a), std::string(t.quant), std::string(t.kernel)));
    return out;
  }, "Every valid (a2a, quant, kernel) triple of the table, in table order.");
  m.def("describe", &describe_build, "The build: version, commit, kernels (ISA path, fast here, available here), components.");
  m.def("auto_kernel", [](const std::string& a2a, const std::string& quant) {
    return std::string(selection::auto_kernel<python::py_triples>(a2a, quant));
  }, py::arg("a2a") = "local", py::arg("quant") = "bf16", "The kernel kernel=\"auto\" picks for (a2a, quant) here.");

  py::class_<Handle>(m, "Handle", "A forward running while Python continues (Layer.submit).")
      .def("wait", &Handle::wait, "Waits for the forward; returns its output or raises its error.")
      .def("done", &Handle::done, "Whether the forward has finished (wait() still collects it).");

  py::class_<Layer, std::shared_ptr<Layer>>(m, "Layer")
      .def(py::init([](const py::object& config, const py::dict& weights, const std::string& quant,
                       const std::string& kernel, const std::string& a2a, int threads) {
             MoeConfig cfg;
             py::dict w = weights;
             if (py::isinstance<py::dict>(config)) {
               cfg = config_from_dict(config.cast<py::dict>());
             } else if (py::isinstance<py::str>(config) || py::hasattr(config, "__fspath__")) {
               // a Hugging Face config.json (or its directory); a correction bias is a tensor: weights'
               cfg = io::hf_checkpoint::moe_config_of_json(py::str(config).cast<std::string>());
               if (w.contains("correction_bias")) {
                 w = py::dict(weights);
                 cfg.router.correction_bias = matrix_of(w["correction_bias"], "correction_bias").reshaped();
                 PyDict_DelItemString(w.ptr(), "correction_bias");
                 cfg.validate();
               }
             } else {
               throw type_error("config is a " + std::string(py::str(py::type::of(config).attr("__name__"))) +
                                "; pass a dict, or the path of a Hugging Face config.json");
             }
             return Layer::build(cfg, weights_from_dict(cfg, w), quant, kernel, a2a, threads);
           }),
           py::arg("config"), py::arg("weights"), py::arg("quant") = "bf16", py::arg("kernel") = "auto",
           py::arg("a2a") = "local", py::arg("threads") = 0)
      .def_static("from_checkpoint",
                  [](const std::string& dir, index_t layer, const std::string& quant, const std::string& kernel,
                     const std::string& a2a, int threads) {
                    io::hf_layer L;
                    {
                      py::gil_scoped_release nogil;
                      L = io::hf_checkpoint::open(dir).load_layer(layer);
                    }
                    return Layer::build(L.cfg, std::move(L.weights), quant, kernel, a2a, threads);
                  },
                  py::arg("dir"), py::arg("layer"), py::arg("quant") = "bf16", py::arg("kernel") = "auto",
                  py::arg("a2a") = "local", py::arg("threads") = 0)
      .def("forward", &Layer::forward, py::arg("hidden"), py::arg("router_logits") = py::none(),
           py::arg("out") = py::none(), py::arg("dtype") = "float32", py::arg("stream") = 0)
      .def("forward_routed", &Layer::forward_routed, py::arg("hidden"), py::arg("topk_ids"),
           py::arg("topk_weights"), py::arg("out") = py::none(), py::arg("dtype") = "float32", py::arg("stream") = 0)
      .def("submit", &Layer::submit, py::arg("hidden"), py::arg("router_logits") = py::none(),
           py::arg("out") = py::none(), py::arg("dtype") = "float32")
      .def("submit_routed", &Layer::submit_routed, py::arg("hidden"), py::arg("topk_ids"), py::arg("topk_weights"),
           py::arg("out") = py::none(), py::arg("dtype") = "float32")
      .def("close", &Layer::close)
      .def_property_readonly("closed", &Layer::closed)
      .def("describe", &Layer::describe)
      .def_property_readonly("note", &Layer::note)
      .def_property_readonly("triple", &Layer::names)
      .def_property_readonly("on_device", &Layer::on_device,
                             "Whether the kernel computes in CUDA memory (it takes CUDA tensors)")
      .def_property_readonly("threads", &Layer::threads, "The threads of the layer's arena")
      .def_property_readonly("config", &Layer::config);
}
