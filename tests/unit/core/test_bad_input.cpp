// Bad input: a polymoe::error naming what is wrong, never an abort.
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>

#include <polymoe/io/hf_checkpoint.hpp>

#include "fixtures_root.hpp"

#include "test_util.hpp"

using namespace polymoe;

namespace {

MoeConfig small_config() {
  MoeConfig cfg;
  cfg.hidden = 8;
  cfg.intermediate = 4;
  cfg.num_experts = 4;
  cfg.router.top_k = 2;
  return cfg;
}

template <class F>
void expect_error(F&& f, const std::string& fragment) {
  try {
    f();
    ADD_FAILURE() << "no polymoe::error; expected one containing '" << fragment << "'";
  } catch (const error& e) {
    const std::string what = e.what();
    EXPECT_EQ(what.rfind("polymoe: ", 0), 0u) << what;
    EXPECT_NE(what.find(fragment), std::string::npos) << "message: " << what << "\nexpected fragment: " << fragment;
  }
}

using Layer = MoeLayer<a2a::local, quant::fp32, kernel::tbb_grouped>;

struct BadInput : ::testing::Test {
  std::mt19937 rng{1};
  MoeConfig cfg = small_config();
  MoeWeights w = test::random_weights(rng, cfg);
};

TEST_F(BadInput, HiddenWithWrongWidth) {
  Layer layer(cfg, w);
  expect_error([&] { (void)layer.forward(Matrix::Zero(3, 7), Matrix::Zero(3, 4)); }, "hidden has 7 columns");
}

TEST_F(BadInput, LogitsWithWrongShape) {
  Layer layer(cfg, w);
  expect_error([&] { (void)layer.forward(Matrix::Zero(3, 8), Matrix::Zero(3, 5)); }, "router_logits has 5 columns");
  expect_error([&] { (void)layer.forward(Matrix::Zero(3, 8), Matrix::Zero(2, 4)); }, "router_logits has 2 rows");
}

TEST_F(BadInput, NonFiniteLogits) {
  Layer layer(cfg, w);
  Matrix logits = Matrix::Zero(3, 4);
  logits(1, 3) = std::numeric_limits<float>::infinity();
  expect_error([&] { (void)layer.forward(Matrix::Zero(3, 8), logits); }, "router_logits[1, 3] is not finite");
}

TEST_F(BadInput, ExpertIdOutOfRange) {
  Layer layer(cfg, w);
  IdMatrix ids(2, 2);
  ids << 0, 1, 2, 4;
  expect_error([&] { (void)layer.forward_routed(Matrix::Zero(2, 8), ids, Matrix::Ones(2, 2)); },
               "topk_ids[1, 1] = 4 is outside [0, num_experts=4)");
  ids(1, 1) = -1;
  expect_error([&] { (void)layer.forward_routed(Matrix::Zero(2, 8), ids, Matrix::Ones(2, 2)); },
               "topk_ids[1, 1] = -1");
}

TEST_F(BadInput, DuplicateExpertInOneToken) {
  Layer layer(cfg, w);
  IdMatrix ids(1, 2);
  ids << 3, 3;
  expect_error([&] { (void)layer.forward_routed(Matrix::Zero(1, 8), ids, Matrix::Ones(1, 2)); },
               "lists expert 3 twice");
}

TEST_F(BadInput, RoutingShapesDisagree) {
  Layer layer(cfg, w);
  expect_error([&] { (void)layer.forward_routed(Matrix::Zero(2, 8), IdMatrix::Zero(2, 2), Matrix::Ones(2, 3)); },
               "topk_weights has 3");
  expect_error([&] { (void)layer.forward_routed(Matrix::Zero(2, 8), IdMatrix::Zero(3, 2), Matrix::Ones(3, 2)); },
               "topk_ids has 3 rows");
}

TEST_F(BadInput, NonFiniteRoutingWeight) {
  Layer layer(cfg, w);
  IdMatrix ids(1, 2);
  ids << 0, 1;
  Matrix wt = Matrix::Ones(1, 2);
  wt(0, 1) = std::nanf("");
  expect_error([&] { (void)layer.forward_routed(Matrix::Zero(1, 8), ids, wt); }, "topk_weights[0, 1] is not finite");
}

TEST_F(BadInput, TopKGreaterThanE) {
  cfg.router.top_k = 5;
  expect_error([&] { Layer layer(cfg, w); }, "top_k must be in [1, num_experts=4], got 5");
  cfg.router.top_k = 2;
  Layer layer(cfg, w);
  expect_error([&] { (void)layer.forward_routed(Matrix::Zero(1, 8), IdMatrix::Zero(1, 5), Matrix::Ones(1, 5)); },
               "top-k width 5");
}

TEST_F(BadInput, ActivationNeedsBiases) {
  cfg.activation = Activation::swiglu_oai;
  expect_error([&] { Layer layer(cfg, w); }, "swiglu_oai needs expert biases");
  cfg.expert_bias = true;  // config says biases, weights have none
  expect_error([&] { Layer layer(cfg, w); }, "MoeWeights.experts has shape");
}

TEST_F(BadInput, WeightsOfTheWrongShape) {
  w.experts.w2.conservativeResize(w.experts.w2.rows() - 1, Eigen::NoChange);
  expect_error([&] { Layer layer(cfg, w); }, "w2 is [31, 4], expected [32, 4]");
}

TEST_F(BadInput, SharedExpertMissingOrUnexpected) {
  cfg.shared_intermediate = 6;
  expect_error([&] { Layer layer(cfg, w); }, "MoeWeights.shared is empty");
  cfg.shared_intermediate = 0;
  w.shared = test::random_experts(rng, ExpertShape{1, 8, 6, true, false});
  expect_error([&] { Layer layer(cfg, w); }, "shared_intermediate is 0");
}

TEST_F(BadInput, LocalDispatcherWithExpertParallelism) {
  cfg.ep_size = 2;
  cfg.ep_rank = 0;
  w = test::random_weights(rng, cfg);
  expect_error([&] { Layer layer(cfg, w); }, "a2a::local runs on one rank");
}

TEST_F(BadInput, ForwardWithoutRouterWeight) {
  Layer layer(cfg, w);
  expect_error([&] { (void)layer.forward(Matrix::Zero(1, 8)); }, "no router weight");
}

TEST_F(BadInput, OutputSharingMemoryWithTheInput) {
  // The shared expert reads hidden after the routed experts have written out: in place would be
  // silently wrong, so any overlap is refused.
  MoeConfig c = small_config();
  c.shared_intermediate = 4;
  std::mt19937 r(3);
  const MoeWeights ws = test::random_weights(r, c);
  Layer layer(c, ws);
  Matrix h = test::random_matrix(r, 3, 8);
  const Matrix logits = test::random_matrix(r, 3, 4);
  expect_error([&] { layer.forward_into(h, logits, h); }, "forward_into: out shares memory with hidden");
  Matrix both = test::random_matrix(r, 3, 12);  // hidden in columns 0-7, out in 4-11
  expect_error([&] { layer.forward_into(both.leftCols(8), logits, both.rightCols(8)); }, "out shares memory");
  Matrix out(3, 8);
  EXPECT_NO_THROW(layer.forward_into(both.leftCols(8), logits, out));
}

TEST_F(BadInput, HandBuiltQuantizedStoreOfTheWrongSize) {
  // A pre-quantized store's fields are public: one built or edited by hand with an array of the
  // wrong size is refused by the layer before a kernel indexes past it.
  const auto check = [&]<class Q>(auto shorten, const std::string& fragment) {
    BasicMoeWeights<typename Q::weights> q;
    q.experts = Q::quantize(w.experts);
    shorten(q.experts);
    expect_error([&] { MoeLayer<a2a::local, Q, kernel::reference> layer(cfg, std::move(q)); }, fragment);
  };
  check.template operator()<quant::int8_w8a8>([](auto& e) { e.w2_scale.pop_back(); },
                                              "MoeWeights.experts: w2_scale holds 31 values, the shape");
  check.template operator()<quant::int4_w4a8>([](auto& e) { e.w13.pop_back(); }, "w13 holds 511 values");
  check.template operator()<quant::bf16>([](auto& e) { e.w13.clear(); }, "w13 holds 0 values");
  check.template operator()<quant::mxfp4>([](auto& e) { e.w2_scales.resize(1); }, "w2_scales holds 1 values");
  check.template operator()<quant::nvfp4>([](auto& e) { e.w13_scale_2.push_back(1.0f); }, "w13_scale_2 holds 5 values");
  check.template operator()<quant::fp8_block>([](auto& e) { e.w13_scale_inv.clear(); }, "w13_scale_inv holds 0");
  check.template operator()<quant::fp8>([](auto& e) { e.b2 = Matrix::Zero(4, 8); }, "biases given but the shape");
  check.template operator()<quant::fp32>([](auto& e) { e.w2.resize(4 * 4, 8); }, "w2 is [16, 8], expected [32, 4]");
}

TEST_F(BadInput, EmptyBatchGivesEmptyResult) {
  Layer layer(cfg, w);
  const Matrix out = layer.forward(Matrix::Zero(0, 8), Matrix::Zero(0, 4));
  EXPECT_EQ(out.rows(), 0);
  EXPECT_EQ(out.cols(), 8);
}

TEST_F(BadInput, BadConfigFields) {
  MoeConfig c = small_config();
  c.hidden = 0;
  expect_error([&] { c.validate(); }, "MoeConfig.hidden must be > 0");
  c = small_config();
  c.router.method = RoutingMethod::sigmoid_grouped_topk;
  c.router.n_group = 3;
  expect_error([&] { c.validate(); }, "n_group=3 must divide num_experts=4");
  c = small_config();
  c.router_weight_on_input = true;
  expect_error([&] { c.validate(); }, "router_weight_on_input needs top_k == 1");
  for (const float f : {0.0f, -1.0f, std::numeric_limits<float>::infinity(), std::nanf("")}) {
    c = small_config();
    c.router.routed_scaling_factor = f;
    expect_error([&] { c.validate(); }, "routed_scaling_factor must be finite and > 0");
  }
  c = small_config();
  c.activation = Activation::swiglu_oai;
  c.expert_bias = true;
  c.swiglu_limit = -7.0f;  // std::clamp's precondition; the kernels would disagree
  expect_error([&] { c.validate(); }, "swiglu_limit must be > 0");
  c.swiglu_limit = 7.0f;
  c.swiglu_alpha = std::nanf("");
  expect_error([&] { c.validate(); }, "swiglu_alpha finite");
  c = small_config();
  c.router.method = RoutingMethod::sigmoid_grouped_topk;
  c.router.n_group = 2;
  c.router.correction_bias = Vector::Zero(4);
  c.router.correction_bias[2] = std::nanf("");  // breaks the ordering of the top-k
  expect_error([&] { c.validate(); }, "correction_bias[2] is not finite");
}

TEST_F(BadInput, RouteChecksItsRouterConfig) {
  // route() is public too: a RouterConfig that MoeConfig::validate would refuse is refused there,
  // not divided by zero (n_group 0) or sorted past its end (topk_group > n_group).
  const Matrix z = Matrix::Zero(2, 4);
  RouterConfig rc;
  rc.method = RoutingMethod::sigmoid_grouped_topk;
  rc.n_group = 0;
  expect_error([&] { (void)route(rc, 4, z); }, "n_group=0 must divide num_experts=4");
  rc.n_group = 2;
  rc.topk_group = 3;
  expect_error([&] { (void)route(rc, 4, z); }, "topk_group=3 must be in [1, n_group=2]");
  rc.topk_group = 1;
  rc.correction_bias = Vector::Zero(3);
  expect_error([&] { (void)route(rc, 4, z); }, "correction_bias has 3 entries, expected 4");
  rc.correction_bias = Vector::Zero(4);
  EXPECT_NO_THROW((void)route(rc, 4, z));
}


// ---- Non-finite weights: refused when the layer is built (every scheme, fp32 and bf16 included), and
// when a checkpoint is loaded, naming the tensor and the index.
template <class Q>
void expect_nonfinite_weights_refused(const MoeConfig& cfg, const MoeWeights& good) {
  SCOPED_TRACE(std::string(Q::name));
  for (const float bad : {std::nanf(""), std::numeric_limits<float>::infinity()}) {
    MoeWeights w = good;
    w.experts.w13(5, 3) = bad;
    expect_error([&] { MoeLayer<a2a::local, Q, kernel::reference> l(cfg, w); }, "w13[5, 3] = ");
    w = good;
    w.experts.w2(7, 1) = -bad;
    expect_error([&] { MoeLayer<a2a::local, Q, kernel::reference> l(cfg, w); }, "w2[7, 1] = ");
  }
}

TEST_F(BadInput, NonFiniteExpertWeightsAreRefusedByEveryScheme) {
  int schemes = 0;
  boost::mp11::mp_for_each<valid_triples>([&]<class A, class Q, class K>(boost::mp11::mp_list<A, Q, K>) {
    if constexpr (std::is_same_v<A, a2a::local> && std::is_same_v<K, kernel::reference>) {
      expect_nonfinite_weights_refused<Q>(cfg, w);
      ++schemes;
    }
  });
  EXPECT_EQ(schemes, static_cast<int>(boost::mp11::mp_size<pairing::quants_of<core_table>>::value));  // the reference runs every scheme
}

TEST_F(BadInput, NonFiniteRouterAndBiasesAreRefused) {
  MoeWeights bad = w;
  bad.router_weight = Matrix::Ones(4, 8);
  bad.router_weight(2, 6) = std::nanf("");
  expect_error([&] { Layer l(cfg, bad); }, "router_weight[2, 6] = nan is not finite");
  bad.router_weight(2, 6) = 0.0f;
  bad.router_bias = Vector::Zero(4);
  bad.router_bias[3] = -std::numeric_limits<float>::infinity();
  expect_error([&] { Layer l(cfg, bad); }, "router_bias[0, 3] = -inf is not finite");
  MoeConfig bc = cfg;
  bc.activation = Activation::swiglu_oai;
  bc.expert_bias = true;
  std::mt19937 r2(5);
  MoeWeights wb = test::random_weights(r2, bc);
  wb.experts.b13(1, 2) = std::nanf("");
  expect_error([&] { Layer l(bc, wb); }, "b13[1, 2] = nan is not finite");
}

TEST(BadCheckpoint, NonFiniteFloatTensorIsNamedWithItsIndex) {
  // A copy of a transformers fixture with one NaN written into an expert weight, one infinity into
  // the correction bias: the loader names the tensor and the element, whatever reads it.
  const auto src = test::fixtures_root() / "hf" / "deepseek_v3";
  const auto dir = std::filesystem::temp_directory_path() / ("polymoe_nan_ckpt_" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  std::filesystem::copy_file(src / "config.json", dir / "config.json");
  auto poison = [&](const std::string& tensor, std::int64_t index, float value) {
    const auto f = io::safetensors_file::open(src / "model.safetensors");
    std::vector<std::vector<std::byte>> keep;
    std::vector<io::tensor_to_write> out;
    for (const auto& t : f.tensors()) {
      const auto b = f.bytes_of(t);
      auto& v = keep.emplace_back(b.begin(), b.end());
      if (t.name == tensor) std::memcpy(v.data() + index * 4, &value, 4);
      out.push_back({t.name, t.dtype, t.shape, std::span<const std::byte>(v)});
    }
    std::filesystem::remove(dir / "model.safetensors");
    io::save_safetensors(dir / "model.safetensors", out);
  };
  poison("model.layers.0.mlp.experts.3.up_proj.weight", 2 * 64 + 5, std::nanf(""));  // [32, 64]: element [2, 5]
  expect_error([&] { (void)io::hf_checkpoint::open(dir).load_layer(0); },
               "tensor 'model.layers.0.mlp.experts.3.up_proj.weight' [2, 5] = nan is not finite");
  // under expert parallelism the slice of another rank is not read; this rank's is
  expect_error([&] { (void)io::hf_checkpoint::open(dir).load_layer(0, 0, 4); },
               "experts.3.up_proj.weight' [2, 5] = nan");
  EXPECT_NO_THROW((void)io::hf_checkpoint::open(dir).load_layer(0, 1, 4));
  poison("model.layers.0.mlp.gate.e_score_correction_bias", 9, std::numeric_limits<float>::infinity());
  expect_error([&] { (void)io::hf_checkpoint::open(dir).moe_config(0); },
               "tensor 'model.layers.0.mlp.gate.e_score_correction_bias' [9] = inf is not finite");
  std::filesystem::remove_all(dir);
}


// A copy of a transformers fixture whose config.json says something its tensors do not.
struct EditedCheckpoint {
  std::filesystem::path dir;
  explicit EditedCheckpoint(const std::string& tag, const std::string& key, std::int64_t value) {
    const auto src = test::fixtures_root() / "hf" / "deepseek_v3";
    dir = std::filesystem::temp_directory_path() / ("polymoe_cfg_" + tag + "_" + std::to_string(::getpid()));
    std::filesystem::remove_all(dir);
    std::filesystem::create_directories(dir);
    std::filesystem::copy_file(src / "model.safetensors", dir / "model.safetensors");
    io::json c = io::read_json_file(src / "config.json");
    c.set(key, io::json(value));
    std::ofstream(dir / "config.json") << c.dump();
  }
  ~EditedCheckpoint() { std::filesystem::remove_all(dir); }
};

TEST(BadCheckpoint, ConfigSizesAreCheckedAgainstTheTensorsBeforeAnyAllocation) {
  // Each would have sized an allocation of terabytes (or overflowed) before a tensor disagreed.
  {
    EditedCheckpoint c("experts", "n_routed_experts", std::int64_t{1} << 40);
    expect_error([&] { (void)io::hf_checkpoint::open(c.dir).load_layer(0); },
                 "config.json: n_routed_experts=1099511627776 and hidden_size=64 disagree with tensor "
                 "'model.layers.0.mlp.gate.weight' of shape [16, 64]");
  }
  {
    EditedCheckpoint c("hidden", "hidden_size", std::int64_t{1} << 31);
    expect_error([&] { (void)io::hf_checkpoint::open(c.dir).load_layer(0); }, "hidden_size=2147483648 disagree");
  }
  {
    EditedCheckpoint c("inter", "moe_intermediate_size", std::int64_t{1} << 30);
    expect_error([&] { (void)io::hf_checkpoint::open(c.dir).load_layer(0); },
                 "config.json: moe_intermediate_size=1073741824 disagrees with tensor "
                 "'model.layers.0.mlp.experts.0.gate_proj.weight' of shape [32, 64]");
  }
  {
    EditedCheckpoint c("shared", "n_shared_experts", std::int64_t{1} << 45);
    expect_error([&] { (void)io::hf_checkpoint::open(c.dir).load_layer(0); }, "n_shared_experts=35184372088832");
  }
  {
    EditedCheckpoint c("shared2", "n_shared_experts", 3);
    expect_error([&] { (void)io::hf_checkpoint::open(c.dir).load_layer(0); },
                 "n_shared_experts * moe_intermediate_size=96 disagrees with tensor "
                 "'model.layers.0.mlp.shared_experts.gate_proj.weight'");
  }
}

TEST(BadCheckpoint, LayerCountIsBoundedByTheFiles) {
  // num_hidden_layers = 2^40: listing the layers visits the ones the files hold, at once.
  EditedCheckpoint c("layers", "num_hidden_layers", std::int64_t{1} << 40);
  const auto ck = io::hf_checkpoint::open(c.dir);
  EXPECT_EQ(ck.num_layers(), std::int64_t{1} << 40);
  EXPECT_EQ(ck.layers_in_files(), std::vector<index_t>{0});
  EXPECT_EQ(ck.moe_layers(), std::vector<index_t>{0});
  expect_error([&] { (void)ck.load_layer(5); }, "layer 5 has no tensors");
}

}  // namespace
