// DLPack at the API edge (<polymoe/dlpack.hpp>): DLTensors as device views and as host matrices,
// without copies, and every tensor polymoe cannot view refused with a polymoe: error naming it.
#include <cstdint>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include <polymoe/dlpack.hpp>

#include "test_util.hpp"

namespace {

using namespace polymoe;

struct tensor {
  std::vector<std::int64_t> shape, strides;
  DLTensor t{};
  tensor(void* data, DLDeviceType dev, DLDataType type, std::vector<std::int64_t> s, std::vector<std::int64_t> st = {})
      : shape(std::move(s)), strides(std::move(st)) {
    t.data = data;
    t.device = {dev, dev == kDLCPU ? 0 : 1};
    t.ndim = static_cast<std::int32_t>(shape.size());
    t.dtype = type;
    t.shape = shape.data();
    t.strides = strides.empty() ? nullptr : strides.data();
  }
};
constexpr DLDataType f32{kDLFloat, 32, 1}, bf16{kDLBfloat, 16, 1}, i32{kDLInt, 32, 1}, f64{kDLFloat, 64, 1};

void expect_error(auto&& f, const std::string& part) {
  try {
    f();
    ADD_FAILURE() << "no error; expected one containing '" << part << "'";
  } catch (const polymoe::error& e) {
    EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what();
    EXPECT_EQ(std::string(e.what()).rfind("polymoe: ", 0), 0u) << e.what();
  }
}

TEST(Dlpack, DeviceViewsPointIntoTheTensor) {
  std::vector<float> mem(64);
  tensor a(mem.data(), kDLCUDA, f32, {3, 5});
  device_view v = device_view_of(a.t, "hidden");
  EXPECT_EQ(v.data, mem.data());
  EXPECT_EQ(v.type, element_type::f32);
  EXPECT_EQ(v.rows, 3);
  EXPECT_EQ(v.cols, 5);
  EXPECT_EQ(v.row_stride, 5);
  EXPECT_EQ(v.device, 1);
  tensor b(mem.data(), kDLCUDA, bf16, {4, 6}, {10, 1});  // rows of a wider tensor
  b.t.byte_offset = 8;
  v = device_view_of(b.t, "hidden");
  EXPECT_EQ(v.data, reinterpret_cast<char*>(mem.data()) + 8);
  EXPECT_EQ(v.type, element_type::bf16);
  EXPECT_EQ(v.row_stride, 10);
  tensor c(mem.data(), kDLCUDAManaged, i32, {2, 8});
  EXPECT_EQ(device_view_of(c.t, "topk_ids").type, element_type::i32);
  tensor d(mem.data(), kDLCUDA, f32, {1, 5}, {1, 1});  // one row: its row stride does not matter
  EXPECT_EQ(device_view_of(d.t, "x").row_stride, 5);
}

TEST(Dlpack, TensorsItCannotViewAreRefused) {
  std::vector<float> mem(64);
  tensor three(mem.data(), kDLCUDA, f32, {2, 2, 2});
  expect_error([&] { (void)device_view_of(three.t, "hidden"); }, "hidden has 3 dimensions, expected 2");
  tensor dbl(mem.data(), kDLCUDA, f64, {2, 2});
  expect_error([&] { (void)device_view_of(dbl.t, "hidden"); }, "hidden has dtype float64");
  tensor cols(mem.data(), kDLCUDA, f32, {4, 4}, {1, 4});  // column-major
  expect_error([&] { (void)device_view_of(cols.t, "hidden"); }, "column stride of 4");
  tensor overlap(mem.data(), kDLCUDA, f32, {4, 4}, {2, 1});
  expect_error([&] { (void)device_view_of(overlap.t, "out"); }, "row stride of 2 elements for 4 columns");
  tensor host(mem.data(), kDLCPU, f32, {2, 2});
  expect_error([&] { (void)device_view_of(host.t, "hidden"); }, "hidden is not in CUDA device memory");
  tensor dev(mem.data(), kDLCUDA, f32, {2, 2});
  expect_error([&] { (void)host_matrix_of(dev.t, "hidden"); }, "hidden is not in host memory");
  tensor half(mem.data(), kDLCPU, bf16, {2, 2});
  expect_error([&] { (void)host_matrix_of(half.t, "hidden"); }, "hidden is bfloat16; the host layers take float32");
  tensor odd(mem.data(), kDLCUDA, f32, {2, 2});
  odd.t.byte_offset = 2;
  expect_error([&] { (void)device_view_of(odd.t, "hidden"); }, "byte offset of 2");
  tensor lanes(mem.data(), kDLCUDA, DLDataType{kDLFloat, 32, 4}, {2, 2});
  expect_error([&] { (void)device_view_of(lanes.t, "hidden"); }, "dtype float32x4");
}

TEST(Dlpack, HostTensorsRunAHostLayerWithoutCopies) {
  std::mt19937 rng(5);
  const MoeConfig cfg = test::moe_config(32, 16, 4, 2);
  const MoeWeights w = test::random_weights(rng, cfg);
  MoeLayer<a2a::local, quant::fp32, kernel::reference> layer(cfg, w);
  const index_t T = 6, stride = 40;  // hidden is every row of a wider buffer
  std::vector<float> hx(static_cast<std::size_t>(T * stride)), hz(static_cast<std::size_t>(T * 4)),
      hout(static_cast<std::size_t>(T * 32), -1.0f);
  for (auto& v : hx) v = std::normal_distribution<float>()(rng);
  for (auto& v : hz) v = std::normal_distribution<float>()(rng);
  tensor x(hx.data(), kDLCPU, f32, {T, 32}, {stride, 1}), z(hz.data(), kDLCPU, f32, {T, 4}),
      out(hout.data(), kDLCPU, f32, {T, 32});
  const host_matrix_view xv = host_matrix_of(x.t, "hidden");
  EXPECT_EQ(xv.data(), hx.data());
  host_matrix_view ov = host_matrix_of(out.t, "out");
  layer.forward_into(xv, host_matrix_of(z.t, "router_logits"), ov);
  Matrix xm(T, 32), zm(T, 4);
  for (index_t t = 0; t < T; ++t)
    for (index_t c = 0; c < 32; ++c) xm(t, c) = hx[static_cast<std::size_t>(t * stride + c)];
  for (index_t i = 0; i < T * 4; ++i) zm.data()[i] = hz[static_cast<std::size_t>(i)];
  const Matrix want = layer.forward(xm, zm);
  for (index_t i = 0; i < want.size(); ++i) ASSERT_EQ(hout[static_cast<std::size_t>(i)], want.data()[i]) << i;
}

}  // namespace
