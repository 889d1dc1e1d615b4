// `polymoe inspect` and `polymoe compare`.
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <memory>

#include <polymoe/io/hf_checkpoint.hpp>

#include "cli.hpp"

namespace polymoe::cli {
namespace {

/// Names with their digit runs compared as numbers: "experts.2." before "experts.10.".
bool natural_less(const std::string& a, const std::string& b) {
  std::size_t i = 0, j = 0;
  const auto digit = [](char c) { return c >= '0' && c <= '9'; };
  while (i < a.size() && j < b.size()) {
    if (digit(a[i]) && digit(b[j])) {
      std::size_t i2 = i, j2 = j;
      while (i2 < a.size() && a[i2] == '0') ++i2;  // leading zeros do not make a number larger
      while (j2 < b.size() && b[j2] == '0') ++j2;
      std::size_t ie = i2, je = j2;
      while (ie < a.size() && digit(a[ie])) ++ie;
      while (je < b.size() && digit(b[je])) ++je;
      if (ie - i2 != je - j2) return ie - i2 < je - j2;
      if (const int c = a.compare(i2, ie - i2, b, j2, je - j2); c != 0) return c < 0;
      i = ie, j = je;
    } else {
      if (a[i] != b[j]) return a[i] < b[j];
      ++i, ++j;
    }
  }
  return a.size() - i < b.size() - j || (a.size() - i == b.size() - j && a < b);
}

bool is_integer(io::dtype d) {
  return d == io::dtype::U8 || d == io::dtype::I8 || d == io::dtype::I16 || d == io::dtype::I32 || d == io::dtype::I64;
}

/// An integer tensor's values, widened.
std::vector<std::int64_t> integers(const io::safetensors_file& f, const io::tensor_info& t) {
  const auto widen = [](const auto& v) { return std::vector<std::int64_t>(v.begin(), v.end()); };
  switch (t.dtype) {
    case io::dtype::U8: return widen(f.u8(t.name));
    case io::dtype::I8: return widen(f.i8(t.name));
    case io::dtype::I16: return widen(f.i16(t.name));
    case io::dtype::I32: return widen(f.i32(t.name));
    case io::dtype::I64: return f.i64(t.name);
    default:
      throw error(detail::concat("compare: tensor '", t.name, "' is ", io::dtype_name(t.dtype), " in one file and an ",
                                 "integer tensor in the other"));
  }
}

/// `polymoe inspect`'s settings, as the command line gives them.
struct inspect_settings {
  std::string dir;
  std::int64_t layer = -1;
  bool tensors = false;
  const CLI::Option* layer_given = nullptr;
};

/// `polymoe compare`'s settings, as the command line gives them.
struct compare_settings {
  std::string got, reference, tensor = "output";
  double tol = 1e-5;
  bool exact = false;
};

int inspect_command(const inspect_settings& a);
int compare_command(const compare_settings& a);

}  // namespace

command add_inspect(CLI::App& polymoe) {
  CLI::App* app =
      polymoe.add_subcommand("inspect", "print a checkpoint's family, shapes, quantization and tensors per layer");
  auto s = std::make_shared<inspect_settings>();
  app->add_option("DIR", s->dir, "the Hugging Face checkpoint")->type_name("")->required();
  s->layer_given = app->add_option("--layer", s->layer, "only layer N")->type_name("N");
  app->add_flag("--tensors", s->tensors, "every tensor, with its dtype and shape");
  app->footer("Prints the checkpoint's family (config.json model_type), its files, and for each layer (or only\n"
              "layer N): whether it is an MoE layer, how its experts are stored (float, fp8_block, mxfp4, nvfp4,\n"
              "int8, int4), its MoE shapes and routing, and its tensor inventory (count and bytes; every tensor with\n"
              "--tensors).");
  return {app, [s] { return inspect_command(*s); }};
}

command add_compare(CLI::App& polymoe) {
  CLI::App* app = polymoe.add_subcommand("compare", "compare a tensor of two safetensors files (relative max error)");
  auto s = std::make_shared<compare_settings>();
  app->add_option("GOT", s->got, "the file checked (safetensors)")->type_name("")->required();
  app->add_option("REFERENCE", s->reference, "the file it is checked against (safetensors)")
      ->type_name("")
      ->required();
  app->add_option("--tensor", s->tensor, "the tensor compared (default output)")->type_name("NAME");
  app->add_option("--tol", s->tol, "the largest relative error that passes (default 1e-5)")
      ->type_name("X")
      ->check(CLI::Validator(
          [](std::string& v) {
            double x = -1;
            return CLI::detail::lexical_cast(v, x) && x >= 0 ? std::string()
                                                              : "must be a non-negative number, got '" + v + "'";
          },
          "X >= 0"));
  app->add_flag("--exact", s->exact, "every tensor of REFERENCE in GOT with the same dtype, shape and bytes");
  app->footer("Prints max |got - ref| / max |ref| for the tensor (default `output`) and fails (exit 1) when it is\n"
              "above --tol (default 1e-5). --exact: every tensor of REFERENCE must be in GOT with the same dtype,\n"
              "shape and bytes.");
  return {app, [s] { return compare_command(*s); }};
}

namespace {

int inspect_command(const inspect_settings& a) {
  const auto ckpt = io::hf_checkpoint::open(a.dir);
  const auto& files = ckpt.files();
  const auto& names = ckpt.names();
  std::printf("checkpoint  %s\nfamily      %s\nfiles       ", a.dir.c_str(),
              std::string(io::to_string(ckpt.family())).c_str());
  for (const auto& f : files.files()) std::printf("%s ", f.c_str());
  std::printf("%s\n", files.sharded() ? "(sharded, model.safetensors.index.json)" : "");
  if (const auto* q = ckpt.config().find("quantization_config")) std::printf("quantization_config  %s\n", q->dump().c_str());
  const index_t L = ckpt.num_layers();
  const std::vector<index_t> present = ckpt.layers_in_files();  // bounded by the files, not by config.json
  std::printf("layers      %lld", static_cast<long long>(L));
  if (static_cast<index_t>(present.size()) != L) std::printf(" (%zu in these files)", present.size());
  std::printf("\n");
  const index_t only = a.layer;
  require(a.layer_given->count() == 0 || (only >= 0 && only < L), "inspect: --layer ", only, " is out of range [0, ", L, ")");
  auto tensor_line = [&](const std::string& n) {
    const auto& t = files.info(n);
    std::printf("    %-64s %-8s %s\n", n.c_str(), std::string(io::dtype_name(t.dtype)).c_str(), t.shape_string().c_str());
  };
  if (only >= 0 && !std::binary_search(present.begin(), present.end(), only))
    std::printf("layer %lld: not in these files\n", static_cast<long long>(only));
  for (const index_t n : present) {
    if (only >= 0 && n != only) continue;
    auto tensors = files.names_with_prefix(names.layer(n));
    std::sort(tensors.begin(), tensors.end(), natural_less);  // experts 1, 2, ..., 10, not 1, 10, 11, 2
    std::uint64_t bytes = 0;
    for (const auto& t : tensors) bytes += files.info(t).nbytes();
    std::printf("layer %lld: %zu tensors, %.3f MB", static_cast<long long>(n), tensors.size(), bytes / 1e6);
    if (!ckpt.is_moe_layer(n)) {
      std::printf(", no MoE block\n");
    } else {
      const MoeConfig c = ckpt.moe_config(n);
      std::printf(", MoE (%s): experts %s\n", std::string(to_string(c.router.method)).c_str(),
                  std::string(io::to_string(ckpt.scheme_of(n))).c_str());
      std::printf("    E=%lld k=%lld H=%lld I=%lld activation=%s renormalize=%d", static_cast<long long>(c.num_experts),
                  static_cast<long long>(c.top_k()), static_cast<long long>(c.hidden),
                  static_cast<long long>(c.intermediate), std::string(to_string(c.activation)).c_str(),
                  c.router.renormalize ? 1 : 0);
      if (c.router.method == RoutingMethod::sigmoid_grouped_topk)
        std::printf(" n_group=%lld topk_group=%lld scaling=%g", static_cast<long long>(c.router.n_group),
                    static_cast<long long>(c.router.topk_group), static_cast<double>(c.router.routed_scaling_factor));
      if (c.shared_intermediate)
        std::printf(" shared_intermediate=%lld%s", static_cast<long long>(c.shared_intermediate),
                    c.shared_expert_gate ? " (sigmoid gate)" : "");
      std::printf("\n");
    }
    if (a.tensors)
      for (const auto& t : tensors) tensor_line(t);
  }
  const auto rest = files.names();
  std::size_t other = 0;
  for (const auto& t : rest)
    if (!t.starts_with("model.layers.")) {
      ++other;
      if (a.tensors && only < 0) tensor_line(t);
    }
  std::printf("other tensors: %zu\n", other);
  return 0;
}

int compare_command(const compare_settings& a) {
  const auto got = io::safetensors_file::open(a.got);
  const auto ref = io::safetensors_file::open(a.reference);
  if (a.exact) {
    for (const auto& t : ref.tensors()) {
      const auto& g = got.info(t.name);
      require(g.dtype == t.dtype && g.shape == t.shape, "compare: tensor '", t.name, "' is ", io::dtype_name(g.dtype),
              " ", g.shape_string(), " vs ", io::dtype_name(t.dtype), " ", t.shape_string());
      const auto x = got.bytes_of(g), y = ref.bytes_of(t);
      require(x.size() == y.size() && (x.empty() || std::memcmp(x.data(), y.data(), x.size()) == 0), "compare: tensor '",
              t.name, "' differs");
    }
    std::printf("compare: %zu tensors identical\n", ref.size());
    return 0;
  }
  const std::string& name = a.tensor;
  const double tol = a.tol;
  if (const auto& g = got.info(name), &r = ref.info(name); is_integer(g.dtype) || is_integer(r.dtype)) {
    // ids and counts: equal or not; a tolerance means nothing for them
    require(g.shape == r.shape, "compare: '", name, "' is ", g.shape_string(), " vs ", r.shape_string());
    const auto x = integers(got, g), y = integers(ref, r);
    std::size_t differ = 0, first = 0;
    for (std::size_t i = x.size(); i-- > 0;)
      if (x[i] != y[i]) ++differ, first = i;
    require(differ == 0, "compare: '", name, "': ", differ, " of ", x.size(), " values differ (the first at flat index ",
            first, ": ", differ ? x[first] : 0, " vs ", differ ? y[first] : 0, ")");
    std::printf("compare %s: %zu integer values identical\n", name.c_str(), x.size());
    return 0;
  }
  const Matrix x = got.matrix(name), y = ref.matrix(name);
  require(x.rows() == y.rows() && x.cols() == y.cols(), "compare: '", name, "' is [", x.rows(), ", ", x.cols(),
          "] vs [", y.rows(), ", ", y.cols(), "]");
  // Both files: a NaN in the reference would make every comparison false and the check pass.
  for (const auto& [m, file] : {std::pair{&x, &a.got}, std::pair{&y, &a.reference}})
    require(m->allFinite(), "compare: '", name, "' in ", *file, " has non-finite values");
  const double err = x.size() ? static_cast<double>((x - y).cwiseAbs().maxCoeff()) : 0.0;
  const double scale = y.size() ? static_cast<double>(y.cwiseAbs().maxCoeff()) : 0.0;
  const double rel = scale > 0 ? err / scale : err;
  std::printf("compare %s: max abs error %.3g, max |ref| %.3g, relative %.3g (tolerance %.3g)\n", name.c_str(), err,
              scale, rel, tol);
  require(rel <= tol, "compare: '", name, "' relative error ", rel, " exceeds the tolerance ", tol);
  return 0;
}

}  // namespace

}  // namespace polymoe::cli
