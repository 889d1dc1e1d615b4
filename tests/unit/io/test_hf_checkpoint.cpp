// io::hf_checkpoint and io::checkpoint_files: expert-parallel loading reads exactly the local
// slice, pre-quantized layers load into the schemes' stored forms as the schemes' own factories
// make them, families and errors.
#include <gtest/gtest.h>

#include <polymoe/io/hf_checkpoint.hpp>

#include "quant_fixture.hpp"

namespace polymoe {
namespace {

std::filesystem::path case_dir(const std::string& c) { return test::fixtures_dir() / c; }

class checkpoint_ep : public ::testing::TestWithParam<std::string> {};

TEST_P(checkpoint_ep, local_experts_are_the_slice_of_all) {
  const auto ckpt = io::hf_checkpoint::open(case_dir(GetParam()));
  const auto full = ckpt.load_layer(0);
  const auto& fw = std::get<MoeWeights>(full.weights);
  for (int r = 0; r < 2; ++r) {
    const auto part = ckpt.load_layer(0, r, 2);
    EXPECT_EQ(part.cfg.ep_rank, r);
    const auto& pw = std::get<MoeWeights>(part.weights);
    const index_t El = part.cfg.local_experts(), first = part.cfg.first_local_expert();
    ASSERT_EQ(pw.experts.shape.experts, El);
    for (index_t e = 0; e < El; ++e) {
      EXPECT_EQ(pw.experts.w13_of(e), fw.experts.w13_of(first + e)) << "expert " << first + e;
      EXPECT_EQ(pw.experts.w2_of(e), fw.experts.w2_of(first + e));
      if (pw.experts.shape.bias) {
        EXPECT_EQ(pw.experts.b13.row(e), fw.experts.b13.row(first + e));
        EXPECT_EQ(pw.experts.b2.row(e), fw.experts.b2.row(first + e));
      }
    }
    EXPECT_EQ(pw.router_weight, fw.router_weight);
    EXPECT_EQ(pw.shared.has_value(), fw.shared.has_value());
  }
}
INSTANTIATE_TEST_SUITE_P(checkpoint, checkpoint_ep, ::testing::Values("mixtral", "qwen3_moe", "deepseek_v3", "gpt_oss"));

TEST(checkpoint, gpt_oss_mxfp4_loads_as_the_scheme_factory_makes_it) {
  const auto L = io::hf_checkpoint::open(case_dir("gpt_oss_mxfp4")).load_layer(0);
  ASSERT_EQ(L.scheme, io::stored_scheme::of<quant::mxfp4::weights>());
  const auto& w = std::get<BasicMoeWeights<quant::mxfp4::weights>>(L.weights);
  const auto ref = test::load_gpt_oss_mxfp4();
  EXPECT_EQ(w.experts.w13_blocks, ref.weights.experts.w13_blocks);
  EXPECT_EQ(w.experts.w13_scales, ref.weights.experts.w13_scales);
  EXPECT_EQ(w.experts.w2_blocks, ref.weights.experts.w2_blocks);
  EXPECT_EQ(w.experts.w2_scales, ref.weights.experts.w2_scales);
  EXPECT_EQ(w.experts.b13, ref.weights.experts.b13);
  EXPECT_EQ(w.router_bias, ref.weights.router_bias);
  // expert parallelism: rank 1 of 4 holds experts [2, 4) of the stacked tensors
  const auto part = io::hf_checkpoint::open(case_dir("gpt_oss_mxfp4")).load_layer(0, 1, 4);
  const auto& pw = std::get<BasicMoeWeights<quant::mxfp4::weights>>(part.weights);
  const std::size_t per = w.experts.w13_blocks.size() / 8;
  EXPECT_TRUE(std::equal(pw.experts.w13_blocks.begin(), pw.experts.w13_blocks.end(), w.experts.w13_blocks.begin() + 2 * per));
  // layer 1 of the same checkpoint is fp32
  EXPECT_EQ(io::hf_checkpoint::open(case_dir("gpt_oss_mxfp4")).scheme_of(1), io::stored_scheme::float_weights());
}

TEST(checkpoint, deepseek_fp8_loads_as_the_scheme_factory_makes_it) {
  const auto L = io::hf_checkpoint::open(case_dir("deepseek_v3_fp8")).load_layer(0);
  ASSERT_EQ(L.scheme, io::stored_scheme::of<quant::fp8_block::weights>());
  const auto& w = std::get<BasicMoeWeights<quant::fp8_block::weights>>(L.weights);
  const auto ref = test::load_deepseek_v3_fp8();
  EXPECT_EQ(w.experts.w13, ref.weights.experts.w13);
  EXPECT_EQ(w.experts.w2_scale_inv, ref.weights.experts.w2_scale_inv);
  ASSERT_TRUE(w.shared.has_value());
  EXPECT_EQ(w.shared->w13_scale_inv, ref.weights.shared->w13_scale_inv);
  EXPECT_EQ(L.cfg.router.correction_bias, ref.cfg.router.correction_bias);
  EXPECT_EQ(L.cfg.router.routed_scaling_factor, 2.5f);
}

TEST(checkpoint, errors_name_the_layer_and_the_field) {
  const auto ckpt = io::hf_checkpoint::open(case_dir("mixtral"));
  try {
    (void)ckpt.load_layer(3);
    FAIL();
  } catch (const error& e) {
    EXPECT_NE(std::string(e.what()).find("layer 3 is out of range [0, num_hidden_layers=1)"), std::string::npos)
        << e.what();
  }
  EXPECT_THROW((void)ckpt.load_layer(0, 0, 3), error);  // 8 experts over 3 ranks
  EXPECT_THROW((void)io::parse_family("llama"), error);
  EXPECT_THROW((void)io::checkpoint_files::open(case_dir("nope")), error);
}

TEST(checkpoint, sharded_files_are_found_through_the_index) {
  const auto dir = std::filesystem::temp_directory_path() / "polymoe_test_sharded";
  std::filesystem::remove_all(dir);
  std::vector<io::tensor_source> ts;
  for (int i = 0; i < 5; ++i)
    ts.push_back({"t" + std::to_string(i), io::dtype::F32, {64}, [i](std::span<std::byte> b) {
                    std::vector<float> v(64, static_cast<float>(i));
                    std::memcpy(b.data(), v.data(), b.size());
                  }});
  const auto files = io::write_checkpoint(dir, ts, 600);  // 256 bytes each: two per shard
  EXPECT_EQ(files.size(), 3u);
  const auto c = io::checkpoint_files::open(dir);
  EXPECT_TRUE(c.sharded());
  EXPECT_EQ(c.names().size(), 5u);
  EXPECT_EQ(c.matrix("t3")(0, 7), 3.0f);
  EXPECT_THROW((void)c.info("t9"), error);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace polymoe
