// The CUDA kernel as a layer of the table: CudaMoeLayer<a2a::local, quant::bf16, kernel::cuda>
// against MoeLayer<a2a::local, quant::bf16, kernel::reference> (kernel_agreement_error within
// kernel_tolerance, as every CPU kernel) and against the transformers fixtures; device views with
// strided rows and bf16 input; the shared expert with its gate; a CUDA graph replaying bitwise the
// eager result; bad input refused before any launch, with no CUDA error left behind. Each test is
// skipped, with the reason, where no usable GPU is present.
#include <cstdint>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "gpu_test.hpp"

#include <cuda_runtime_api.h>

#include <polymoe/codecs/bf16.hpp>
#include <polymoe/cuda_table.hpp>

#include "hf_fixture.hpp"
#include "quant_fixture.hpp"
#include "test_util.hpp"

namespace {

using namespace polymoe;
namespace mp = boost::mp11;
using GpuLayer = CudaMoeLayer<a2a::local, quant::bf16, kernel::cuda>;
using RefLayer = MoeLayer<a2a::local, quant::bf16, kernel::reference>;


template <class Q = quant::bf16>
void expect_agrees(const Matrix& got, const Matrix& want, const std::string& what) {
  ASSERT_EQ(got.rows(), want.rows()) << what;
  EXPECT_LE(test::kernel_agreement_error<Q>(got, want), test::kernel_tolerance<Q>) << what;
}

/// A host matrix copied into device memory with `stride` elements per row (>= its columns).
struct device_rows {
  cuda::device_array<float> mem;
  device_view view;
  device_rows(const Matrix& m, index_t stride) : mem(static_cast<std::size_t>(std::max<index_t>(1, m.rows() * stride))) {
    std::vector<float> h(mem.size(), -7.0f);  // the gaps hold values the layer must not read or write
    for (index_t r = 0; r < m.rows(); ++r)
      for (index_t c = 0; c < m.cols(); ++c) h[static_cast<std::size_t>(r * stride + c)] = m(r, c);
    mem.upload(h);
    view = device_view{mem.data(), element_type::f32, m.rows(), m.cols(), stride, cuda::current_device()};
  }
  std::vector<float> all() const {
    std::vector<float> h(mem.size());
    mem.download(h);
    return h;
  }
  Matrix matrix() const {
    const std::vector<float> h = all();
    Matrix m(view.rows, view.cols);
    for (index_t r = 0; r < view.rows; ++r)
      for (index_t c = 0; c < view.cols; ++c) m(r, c) = h[static_cast<std::size_t>(r * view.row_stride + c)];
    return m;
  }
};

TEST(CudaLayer, TheTableHoldsIt) {
  static_assert(can_make_layer_in<cuda_table, a2a::local, quant::bf16, kernel::cuda>);
  static_assert(!can_make_layer_in<cuda_table, a2a::local, quant::fp32, kernel::cuda>);
  static_assert(std::is_same_v<pairing_path_in<cuda_table, a2a::local, quant::bf16, kernel::cuda>, path::native>);
  // the core table's triples are the same in the CUDA table
  static_assert(can_make_layer_in<cuda_table, a2a::local, quant::bf16, kernel::tiled>);
  SUCCEED();
}

class CudaLayerFixture : public ::testing::TestWithParam<std::string> {};

TEST_P(CudaLayerFixture, MatchesTheReferenceAndTransformers) {
  REQUIRE_GPU();
  const test::HfCase hc = test::load_hf_case(GetParam());
  GpuLayer gpu(hc.cfg, hc.weights);
  RefLayer ref(hc.cfg, hc.weights);
  const Matrix want = ref.forward(hc.hidden, hc.router_logits);
  const Matrix got = gpu.forward(hc.hidden, hc.router_logits);
  expect_agrees(got, want, GetParam() + " (router logits)");
  EXPECT_EQ(gpu.last_topk_ids(), ref.last_topk_ids()) << GetParam() << ": the device routed otherwise";
  EXPECT_LE(test::relative_error(got, hc.expected), test::fixture_tolerance<quant::bf16>) << GetParam();
  // the checkpoint's router weight (and bias) through the host convenience
  expect_agrees(gpu.forward(hc.hidden), ref.forward(hc.hidden), GetParam() + " (router weight)");
  EXPECT_NE(gpu.describe().find("local / bf16 / cuda ("), std::string::npos) << gpu.describe();
}

INSTANTIATE_TEST_SUITE_P(Families, CudaLayerFixture,
                         ::testing::Values("mixtral", "qwen3_moe", "deepseek_v3", "gpt_oss", "deepseek_v3_negbias"));

struct Shape {
  index_t H, I, E, k, T;
  Activation act = Activation::silu_gated;
  index_t shared = 0;
  bool gate = false;
};

MoeConfig config_of(const Shape& s) {
  MoeConfig cfg = test::moe_config(s.H, s.I, s.E, s.k, s.act);
  cfg.shared_intermediate = s.shared;
  cfg.shared_expert_gate = s.gate;
  return cfg;
}

TEST(CudaLayer, DeviceViewsStridedBf16AndSharedExperts) {
  REQUIRE_GPU();
  const Shape shapes[] = {
      {64, 32, 8, 2, 5},
      {96, 80, 16, 4, 33, Activation::silu_gated, 48, true},  // Qwen2-MoE: a gated shared expert
      {130, 70, 10, 3, 1, Activation::silu_gated, 64, false},  // DeepSeek: a shared expert, odd sizes
      {64, 48, 8, 2, 17, Activation::swiglu_oai},              // GPT-OSS: biases and the clamp
      {72, 40, 6, 1, 9, Activation::gelu_gated},
      {64, 32, 8, 2, 0},
  };
  std::mt19937 rng(7);
  for (const Shape& s : shapes) {
    const MoeConfig cfg = config_of(s);
    const MoeWeights w = test::random_weights(rng, cfg);
    GpuLayer gpu(cfg, w);
    RefLayer ref(cfg, w);
    const Matrix x = test::random_matrix(rng, s.T, s.H), z = test::random_matrix(rng, s.T, s.E, 2.0f);
    const std::string what = "H=" + std::to_string(s.H) + " T=" + std::to_string(s.T);
    const Matrix want = ref.forward(x, z);

    // strided hidden and out on a stream of our own; the gaps between rows are left as they were
    cudaStream_t stream = nullptr;
    ASSERT_EQ(cudaStreamCreate(&stream), cudaSuccess);
    device_rows dx(x, s.H + 3), dz(z, s.E), dout(Matrix::Zero(s.T, s.H), s.H + 5);
    gpu.forward(dx.view, dz.view, dout.view, stream);
    cuda::synchronize(stream);
    expect_agrees(dout.matrix(), want, what + " strided");
    const std::vector<float> all = dout.all();
    for (index_t r = 0; r < s.T; ++r)
      for (index_t c = s.H; c < s.H + 5; ++c)
        ASSERT_EQ(all[static_cast<std::size_t>(r * (s.H + 5) + c)], -7.0f) << what << ": a gap was written";

    // bfloat16 input: the kernel rounds its input rows to bf16 anyway, so bf16(x) gives the same
    Matrix xr = x;
    std::vector<std::uint16_t> xb(static_cast<std::size_t>(std::max<index_t>(1, x.size())));
    for (index_t i = 0; i < x.size(); ++i) {
      xb[static_cast<std::size_t>(i)] = codecs::float_to_bf16(x.data()[i]);
      xr.data()[i] = codecs::bf16_to_float(xb[static_cast<std::size_t>(i)]);
    }
    cuda::device_array<std::uint16_t> dxb(xb.size());
    dxb.upload(xb);
    device_rows dout2(Matrix::Zero(s.T, s.H), s.H);
    gpu.forward(device_view::of_bf16(dxb.data(), s.T, s.H, cuda::current_device()), dz.view, dout2.view, stream);
    cuda::synchronize(stream);
    expect_agrees(dout2.matrix(), ref.forward(xr, z), what + " bf16 input");

    // bfloat16 out (strided): the float32 result above rounded once, bitwise, with or without a
    // shared expert; the gaps are left as they were
    const std::vector<float> f32 = dout2.all();
    const index_t ldb = s.H + 2;
    std::vector<std::uint16_t> ob(static_cast<std::size_t>(std::max<index_t>(1, s.T * ldb)), 0xBEEF);
    cuda::device_array<std::uint16_t> dob(ob.size());
    dob.upload(ob);
    gpu.forward(device_view::of_bf16(dxb.data(), s.T, s.H, cuda::current_device()), dz.view,
                device_view{dob.data(), element_type::bf16, s.T, s.H, ldb, cuda::current_device()}, stream);
    cuda::synchronize(stream);
    dob.download(ob);
    for (index_t r = 0; r < s.T; ++r)
      for (index_t c = 0; c < ldb; ++c) {
        const std::uint16_t got = ob[static_cast<std::size_t>(r * ldb + c)];
        if (c < s.H)
          ASSERT_EQ(got, codecs::float_to_bf16(f32[static_cast<std::size_t>(r * s.H + c)])) << what << " bf16 out";
        else
          ASSERT_EQ(got, 0xBEEF) << what << ": a gap of the bf16 out was written";
      }

    // caller routing on the device
    const Routing r = route(cfg.router, cfg.num_experts, z);
    cuda::device_array<std::int32_t> di(static_cast<std::size_t>(std::max<index_t>(1, r.ids.size())));
    di.upload({r.ids.data(), static_cast<std::size_t>(r.ids.size())});
    device_rows dw(r.weights, s.k), dout3(Matrix::Zero(s.T, s.H), s.H);
    gpu.forward_routed(dx.view, device_view::of(di.data(), s.T, s.k, cuda::current_device()), dw.view, dout3.view,
                       stream);
    cuda::synchronize(stream);
    expect_agrees(dout3.matrix(), ref.forward_routed(x, r.ids, r.weights), what + " routed");
    ASSERT_EQ(cudaStreamDestroy(stream), cudaSuccess);
  }
}

// Every scheme of kernel::cuda's row (the table says which), as a layer of the table, against the
// reference layer on the same scheme: odd sizes, a shared expert with its gate, GPT-OSS's biases
// and clamp, bf16 input.
TEST(CudaLayer, EverySchemeOfItsRowAgreesWithTheReference) {
  REQUIRE_GPU();
  using row_schemes = pairing::kernel_schemes<cuda_table, kernel::cuda>;
  static_assert(mp::mp_size<row_schemes>::value >= 3);
  mp::mp_for_each<mp::mp_transform<mp::mp_identity, row_schemes>>([](auto id) {
    using Q = typename decltype(id)::type;
    std::mt19937 rng(21);
    for (const Shape& s : {Shape{64, 32, 8, 2, 5}, Shape{130, 70, 10, 3, 9, Activation::silu_gated, 64, true},
                           Shape{64, 48, 8, 2, 17, Activation::swiglu_oai}, Shape{96, 80, 16, 4, 300}}) {
      const MoeConfig cfg = config_of(s);
      const MoeWeights w = test::random_weights(rng, cfg);
      CudaMoeLayer<a2a::local, Q, kernel::cuda> gpu(cfg, w);
      MoeLayer<a2a::local, Q, kernel::reference> ref(cfg, w);
      const Matrix x = test::random_matrix(rng, s.T, s.H), z = test::random_matrix(rng, s.T, s.E);
      const std::string what = detail::concat(Q::name, " H=", s.H, " I=", s.I, " E=", s.E, " T=", s.T);
      const Matrix got = gpu.forward(x, z), want = ref.forward(x, z);
      const double err = test::kernel_agreement_error<Q>(got, want);
      std::printf("  %s: agreement error %.3g (tolerance %.3g)\n", what.c_str(), err, test::kernel_tolerance<Q>);
      EXPECT_LE(err, test::kernel_tolerance<Q>) << what;
      EXPECT_NE(gpu.describe().find(detail::concat("local / ", Q::name, " / cuda (")), std::string::npos)
          << gpu.describe();
    }
  });
}

// GPT-OSS's MXFP4 checkpoint blocks, uploaded as stored (4-bit on the device), through the layer:
// against transformers within bf16 activations' error, and against the reference kernel on the
// same scheme.
TEST(CudaLayer, GptOssMxfp4BlocksMatchTransformers) {
  REQUIRE_GPU();
  const auto qc = test::load_gpt_oss_mxfp4();
  CudaMoeLayer<a2a::local, quant::mxfp4_w4a16, kernel::cuda> gpu(qc.cfg, qc.weights);
  MoeLayer<a2a::local, quant::mxfp4_w4a16, kernel::reference> ref(qc.cfg, qc.weights);
  const Matrix got = gpu.forward(qc.hidden, qc.router_logits);
  const double e = test::relative_error(got, qc.expected);
  std::printf("gpt_oss_mxfp4, local / mxfp4_w4a16 / cuda: %.3g against transformers\n", e);
  EXPECT_LE(e, 1e-2);
  EXPECT_LE(test::kernel_agreement_error<quant::mxfp4_w4a16>(got, ref.forward(qc.hidden, qc.router_logits)),
            test::kernel_tolerance<quant::mxfp4_w4a16>);
}

// kernel::cuda on the masked format (DeepEP low-latency) against kernel::reference on the same
// padded rows: valid rows agree, padding rows keep what they held.
template <class Q>
void masked_against_reference() {
  SCOPED_TRACE(std::string(Q::name));
  std::mt19937 rng(13);
  for (const Shape& s : {Shape{64, 32, 8, 1, 0}, Shape{96, 48, 6, 1, 0, Activation::swiglu_oai}}) {
    const MoeConfig cfg = config_of(s);
    const MoeWeights w = test::random_weights(rng, cfg);
    const ExpertMlp mlp{ActivationParams{cfg.activation, cfg.swiglu_alpha, cfg.swiglu_limit}, false};
    const index_t E = s.E, cap = 9;
    const std::vector<index_t> counts = {0, 9, 3, 1, 7, 12, 2, 5};  // 12 > capacity: stands for 9
    std::vector<index_t> masked_m(counts.begin(), counts.begin() + E);
    std::vector<std::int32_t> masked_m32(masked_m.begin(), masked_m.end());
    const Matrix x = test::random_matrix(rng, E * cap, s.H);
    Matrix want = Matrix::Constant(E * cap, s.H, -7.0f);
    const kernel::reference ref;
    const auto pr = ref.prepare<Q>(Q::quantize(w.experts));
    std::vector<index_t> clamped = masked_m;
    for (auto& m : clamped) m = std::min(m, cap);
    DispatchOutput<format::masked> hd{x, clamped, cap, E};
    CombineInput<format::masked> hc{want};
    ref.run<Q>(hd, pr, mlp, hc);

    const kernel::cuda gpu;
    const auto pg = gpu.prepare<Q>(Q::quantize(w.experts));
    cuda::device_array<std::int32_t> dm(masked_m32.size());
    dm.upload(masked_m32);
    device_rows dx(x, s.H), dout(Matrix::Constant(E * cap, s.H, -7.0f), s.H);
    DispatchOutput<format::masked, space::cuda> d{dx.view, device_view::of(dm.data(), 1, E, cuda::current_device()),
                                                  cap, E, nullptr};
    CombineInput<format::masked, space::cuda> c{dout.view, nullptr};
    gpu.run<Q>(d, pg, mlp, c);
    cuda::synchronize(nullptr);
    const Matrix got = dout.matrix();
    expect_agrees<Q>(got, want, "masked");
    for (index_t e = 0; e < E; ++e)
      for (index_t i = std::min(masked_m[static_cast<std::size_t>(e)], cap); i < cap; ++i)
        ASSERT_EQ(got(e * cap + i, 0), -7.0f) << "padding row " << i << " of expert " << e << " was written";
  }
}

TEST(CudaLayer, MaskedFormatNatively) {
  REQUIRE_GPU();
  mp::mp_for_each<mp::mp_transform<mp::mp_identity, pairing::kernel_schemes<cuda_table, kernel::cuda>>>(
      [](auto id) { masked_against_reference<typename decltype(id)::type>(); });
}

TEST(CudaLayer, GraphReplayIsBitwiseEager) {
  REQUIRE_GPU();
  const Shape s{128, 96, 16, 4, 40, Activation::silu_gated, 64, true};
  std::mt19937 rng(11);
  const MoeConfig cfg = config_of(s);
  GpuLayer gpu(cfg, test::random_weights(rng, cfg));
  const Matrix x = test::random_matrix(rng, s.T, s.H), z = test::random_matrix(rng, s.T, s.E, 2.0f);
  cudaStream_t stream = nullptr;
  ASSERT_EQ(cudaStreamCreate(&stream), cudaSuccess);
  device_rows dx(x, s.H), dz(z, s.E), eager(Matrix::Zero(s.T, s.H), s.H), replay(Matrix::Zero(s.T, s.H), s.H);
  gpu.forward(dx.view, dz.view, eager.view, stream);  // the first call at this batch size allocates
  cuda::synchronize(stream);
  cudaGraph_t graph = nullptr;
  ASSERT_EQ(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal), cudaSuccess);
  gpu.forward(dx.view, dz.view, replay.view, stream);
  ASSERT_EQ(cudaStreamEndCapture(stream, &graph), cudaSuccess);
  cudaGraphExec_t exec = nullptr;
  ASSERT_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);
  for (int i = 0; i < 3; ++i) ASSERT_EQ(cudaGraphLaunch(exec, stream), cudaSuccess);
  cuda::synchronize(stream);
  EXPECT_EQ(replay.all(), eager.all());
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  cudaStreamDestroy(stream);
}

TEST(CudaLayer, BadInputIsRefusedBeforeAnyLaunch) {
  REQUIRE_GPU();
  const Shape s{64, 32, 8, 2, 4};
  std::mt19937 rng(3);
  const MoeConfig cfg = config_of(s);
  const MoeWeights w = test::random_weights(rng, cfg);
  GpuLayer gpu(cfg, w);
  const Matrix x = test::random_matrix(rng, s.T, s.H), z = test::random_matrix(rng, s.T, s.E);
  device_rows dx(x, s.H), dz(z, s.E), dout(Matrix::Zero(s.T, s.H), s.H);
  std::vector<float> host(static_cast<std::size_t>(s.T * s.H));
  const int dev = cuda::current_device();
  const auto expect_error = [&](auto&& f, const std::string& part) {
    try {
      f();
      ADD_FAILURE() << "no error; expected one containing '" << part << "'";
    } catch (const polymoe::error& e) {
      EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what();
      EXPECT_EQ(std::string(e.what()).rfind("polymoe: ", 0), 0u) << e.what();
    }
    EXPECT_EQ(cudaGetLastError(), cudaSuccess) << "a CUDA error was left behind after: " << part;
  };
  expect_error([&] { gpu.forward(device_view::of(host.data(), s.T, s.H, dev), dz.view, dout.view, nullptr); },
               "hidden is not device memory");
  expect_error([&] { gpu.forward(dx.view, dz.view, device_view::of(host.data(), s.T, s.H, dev), nullptr); },
               "out is not device memory");
  device_view other = dx.view;
  other.device = dev + 1;
  expect_error([&] { gpu.forward(other, dz.view, dout.view, nullptr); }, "hidden says device");
  device_view ints = dx.view;
  ints.type = element_type::i32;
  expect_error([&] { gpu.forward(ints, dz.view, dout.view, nullptr); }, "hidden is int32, expected float32 or bfloat16");
  expect_error([&] { gpu.forward(dx.view, dz.view, dx.view, nullptr); }, "out shares memory with hidden");
  expect_error([&] { gpu.forward(dx.view, dz.view.top_rows(2), dout.view, nullptr); }, "router_logits is [2, 8]");
  device_view narrow = dx.view;
  narrow.row_stride = s.H - 1;
  expect_error([&] { gpu.forward(narrow, dz.view, dout.view, nullptr); }, "row stride");
  IdMatrix twice(s.T, 2);
  twice.setZero();
  expect_error([&] { (void)gpu.forward_routed(x, twice, Matrix::Ones(s.T, 2)); }, "lists expert 0 twice");
  // a good call still runs after the refusals
  gpu.forward(dx.view, dz.view, dout.view, nullptr);
  cuda::synchronize(nullptr);
  expect_agrees(dout.matrix(), RefLayer(cfg, w).forward(x, z), "after the refusals");
}

}  // namespace
