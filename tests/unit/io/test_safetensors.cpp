// safetensors reader / writer: every fixture file, a write -> read round trip, and malformed files
// (each must give a polymoe::error naming the problem, never a crash or another exception).
#include "fixtures_root.hpp"
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <polymoe/io/safetensors.hpp>
#include <polymoe/codecs/bf16.hpp>
#include <polymoe/codecs/e4m3.hpp>
#include <string>
#include <string_view>
#include <vector>

namespace {

namespace fs = std::filesystem;
using namespace polymoe::io;

const fs::path fixtures = polymoe::test::fixtures_root() / "hf";

// A scratch folder per test, removed afterwards.
class safetensors_tmp : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = fs::temp_directory_path() /
           (std::string("polymoe_st_") + info->name() + "_" + std::to_string(::getpid()));
    fs::create_directories(dir_);
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
  fs::path file(const std::string& name) const { return dir_ / name; }

  // Writes an 8-byte length (the real one unless overridden), the header text and the data bytes.
  fs::path raw(const std::string& name, std::string_view header, std::size_t data_bytes,
               std::optional<std::uint64_t> length = std::nullopt) const {
    const fs::path p = file(name);
    std::ofstream out(p, std::ios::binary);
    std::uint64_t n = length.value_or(header.size());
    for (int i = 0; i < 8; ++i) {
      out.put(static_cast<char>(n & 0xFF));
      n >>= 8;
    }
    out.write(header.data(), static_cast<std::streamsize>(header.size()));
    const std::string data(data_bytes, '\x01');
    out.write(data.data(), static_cast<std::streamsize>(data.size()));
    return p;
  }

  fs::path dir_;
};

// The open must fail with a polymoe::error whose message has the prefix and every `words`.
void expect_open_error(const fs::path& p, std::initializer_list<std::string_view> words) {
  try {
    auto f = safetensors_file::open(p);
    ADD_FAILURE() << "opening " << p << " succeeded; expected an error";
  } catch (const polymoe::error& e) {
    const std::string msg = e.what();
    EXPECT_EQ(msg.rfind("polymoe: ", 0), 0u) << msg;
    EXPECT_NE(msg.find(p.filename().string()), std::string::npos)
        << "message must name the file: " << msg;
    for (const auto w : words)
      EXPECT_NE(msg.find(w), std::string::npos) << "missing '" << w << "' in: " << msg;
  } catch (const std::exception& e) {
    ADD_FAILURE() << "expected polymoe::error, got another exception: " << e.what();
  }
}

std::vector<fs::path> fixture_files() {
  std::vector<fs::path> files;
  for (const auto& e : fs::recursive_directory_iterator(fixtures))
    if (e.is_regular_file() && e.path().extension() == ".safetensors") files.push_back(e.path());
  std::sort(files.begin(), files.end());
  return files;
}

// ---- fixtures
// ---------------------------------------------------------------------------------------

TEST(safetensors_fixtures, every_fixture_file_opens_and_validates) {
  const auto files = fixture_files();
  ASSERT_GE(files.size(), 13u);  // 6 cases x (model, io) + dtype_tables
  for (const auto& p : files) {
    SCOPED_TRACE(p.string());
    const auto f = safetensors_file::open(p);
    EXPECT_GT(f.size(), 0u);
    EXPECT_TRUE(f.is_mapped());
    const auto names = f.names();
    EXPECT_TRUE(std::is_sorted(names.begin(), names.end()));
    for (const auto& t : f.tensors()) {
      EXPECT_EQ(f.bytes(t.name).size(), static_cast<std::size_t>(t.numel()) * dtype_size(t.dtype));
      if (t.dtype == dtype::F32 || t.dtype == dtype::BF16 || t.dtype == dtype::F16 ||
          t.dtype == dtype::F8_E4M3 || t.dtype == dtype::F8_E5M2) {
        EXPECT_EQ(f.to_f32(t.name).size(), static_cast<std::size_t>(t.numel()));
      }
    }
  }
}

TEST(safetensors_fixtures, mixtral_io_shapes_and_metadata) {
  const auto f = safetensors_file::open(fixtures / "mixtral" / "io.safetensors");
  EXPECT_EQ(f.names(), (std::vector<std::string>{"hidden_states", "output", "router_logits"}));
  const auto& h = f.info("hidden_states");
  EXPECT_EQ(h.dtype, dtype::F32);
  EXPECT_EQ(h.shape, (std::vector<std::int64_t>{9, 64}));
  EXPECT_EQ(f.info("router_logits").shape, (std::vector<std::int64_t>{9, 8}));
  const polymoe::Matrix x = f.matrix("hidden_states");
  EXPECT_EQ(x.rows(), 9);
  EXPECT_EQ(x.cols(), 64);
  const auto flat = f.to_f32("hidden_states");
  EXPECT_EQ(x(2, 5), flat[2 * 64 + 5]);
  EXPECT_TRUE(x.allFinite());
  EXPECT_EQ(f.metadata().at("family"), "mixtral");
  EXPECT_EQ(f.metadata().at("layer"), "0");
}

TEST(safetensors_fixtures, gpt_oss_mxfp4_blocks_and_scales) {
  const auto f = safetensors_file::open(fixtures / "gpt_oss_mxfp4" / "model.safetensors");
  int blocks = 0, scales = 0;
  for (const auto& t : f.tensors()) {
    if (t.name.ends_with("_blocks")) {
      ++blocks;
      EXPECT_EQ(t.dtype, dtype::U8) << t.name;
      ASSERT_EQ(t.rank(), 4u) << t.name;
      EXPECT_EQ(t.shape[3], 16) << t.name;
      const std::string s = t.name.substr(0, t.name.size() - 7) + "_scales";
      ASSERT_TRUE(f.contains(s)) << s;
      const auto& si = f.info(s);
      EXPECT_EQ(si.dtype, dtype::U8);
      EXPECT_EQ(si.shape, (std::vector<std::int64_t>{t.shape[0], t.shape[1], t.shape[2]}));
      EXPECT_EQ(f.u8(t.name).size(), static_cast<std::size_t>(t.numel()));
    } else if (t.name.ends_with("_scales")) {
      ++scales;
    }
  }
  EXPECT_EQ(blocks, 2);
  EXPECT_EQ(scales, 2);
}

TEST(safetensors_fixtures, deepseek_fp8_weights_decode_exactly) {
  const auto f = safetensors_file::open(fixtures / "deepseek_v3_fp8" / "model.safetensors");
  int fp8 = 0;
  for (const auto& t : f.tensors()) {
    if (t.dtype != dtype::F8_E4M3) continue;
    ++fp8;
    const auto codes = f.fp8_codes(t.name);
    const auto values = f.to_f32(t.name);
    ASSERT_EQ(codes.size(), values.size());
    for (std::size_t i = 0; i < codes.size(); ++i)
      ASSERT_EQ(std::bit_cast<std::uint32_t>(values[i]),
                std::bit_cast<std::uint32_t>(polymoe::codecs::e4m3_to_float(codes[i])));
    ASSERT_TRUE(t.name.ends_with(".weight")) << t.name;
    const std::string scale = t.name + "_scale_inv";
    ASSERT_TRUE(f.contains(scale)) << scale;
    EXPECT_EQ(f.info(scale).dtype, dtype::F32);
    ASSERT_EQ(f.info(scale).rank(), 2u);
    EXPECT_EQ(f.info(scale).shape[0], (t.shape[0] + 127) / 128);  // 128x128 blocks
    EXPECT_EQ(f.info(scale).shape[1], (t.shape[1] + 127) / 128);
  }
  EXPECT_GT(fp8, 0);
}

TEST(safetensors_fixtures, dtype_tables_layout) {
  const auto f = safetensors_file::open(fixtures / "dtype_tables.safetensors");
  EXPECT_EQ(f.info("bf16_cast_bits").dtype, dtype::I16);
  EXPECT_EQ(f.info("e4m3_cast_code").dtype, dtype::U8);
  EXPECT_EQ(f.info("float8_e4m3fn_decode").shape, (std::vector<std::int64_t>{256}));
  EXPECT_EQ(f.info("bf16_cast_input").shape, f.info("bf16_cast_bits").shape);
  EXPECT_NE(f.metadata().at("producer").find("torch"), std::string::npos);
  EXPECT_EQ(f.matrix("float8_e5m2_decode").rows(), 1);  // 1-D -> [1, N]
  EXPECT_EQ(f.matrix("float8_e5m2_decode").cols(), 256);
}

// ---- dtypes
// ------------------------------------------------------------------------------------------

TEST(safetensors_dtype, names_sizes_and_parse) {
  for (const dtype t : all_dtypes) EXPECT_EQ(parse_dtype(dtype_name(t)), t);
  EXPECT_EQ(dtype_size(dtype::F32), 4u);
  EXPECT_EQ(dtype_size(dtype::BF16), 2u);
  EXPECT_EQ(dtype_size(dtype::F8_E5M2), 1u);
  EXPECT_EQ(dtype_size(dtype::I64), 8u);
  EXPECT_EQ(dtype_name(dtype::F8_E4M3), "F8_E4M3");
  try {
    (void)parse_dtype("F4_E2M1");
    ADD_FAILURE() << "expected an error";
  } catch (const polymoe::error& e) {
    EXPECT_NE(std::string(e.what()).find("unknown safetensors dtype \"F4_E2M1\""),
              std::string::npos)
        << e.what();
  }
}

// ---- round trip
// --------------------------------------------------------------------------------------

TEST_F(safetensors_tmp, write_read_round_trip) {
  const std::vector<float> w = {1.0f, -2.5f, 3.25f, 0.0f, 1e-8f, -7.0f};
  const std::vector<std::uint16_t> bf = {
      polymoe::codecs::float_to_bf16(1.5f), polymoe::codecs::float_to_bf16(-3.0f),
      polymoe::codecs::float_to_bf16(0.15625f), polymoe::codecs::float_to_bf16(1024.0f)};
  const std::vector<std::uint8_t> u = {1, 2, 3, 4, 250};
  const std::vector<std::int64_t> ids = {-1, 1LL << 40};
  const std::vector<std::int32_t> scalar = {42};
  const std::vector<std::uint8_t> fp8 = {0x38, 0xB8, 0x7E, 0x01};
  const std::vector<float> none;
  const std::vector<tensor_to_write> tensors = {
      tensor_view<float>("z.weight", {2, 3}, w),
      {"a.bf16", dtype::BF16, {4}, std::as_bytes(std::span(bf))},
      tensor_view<std::uint8_t>("m.u8", {5}, u),
      tensor_view<std::int64_t>("ids", {2}, ids),
      tensor_view<std::int32_t>("scalar", {}, scalar),
      tensor_view<float>("empty", {0, 3}, none),
      {"fp8", dtype::F8_E4M3, {2, 2}, std::as_bytes(std::span(fp8))},
      tensor_view<float>("cube", {1, 2, 3}, w),
      tensor_view<float>("s.f32", {}, std::span(w).last(1)),
  };
  const auto p = file("rt.safetensors");
  save_safetensors(p, tensors, {{"format", "pt"}, {"note", "quote \" and \\ and \n"}});
  EXPECT_FALSE(fs::exists(file("rt.safetensors.tmp")));

  // header padded with spaces to a multiple of 8
  {
    std::ifstream in(p, std::ios::binary);
    unsigned char len[8];
    in.read(reinterpret_cast<char*>(len), 8);
    std::uint64_t n = 0;
    for (int i = 7; i >= 0; --i) n = (n << 8) | len[i];
    EXPECT_EQ(n % 8, 0u);
    std::string header(n, '\0');
    in.read(header.data(), static_cast<std::streamsize>(n));
    EXPECT_EQ(header.rfind("{\"__metadata__\"", 0), 0u) << header;
    EXPECT_EQ(header.find_last_not_of(' '), header.find_last_of('}'));
  }

  const auto f = safetensors_file::open(p);
  EXPECT_EQ(f.names(), (std::vector<std::string>{"a.bf16", "cube", "empty", "fp8", "ids", "m.u8",
                                                 "s.f32", "scalar", "z.weight"}));
  EXPECT_EQ(f.metadata().at("format"), "pt");
  EXPECT_EQ(f.metadata().at("note"), "quote \" and \\ and \n");

  const polymoe::Matrix m = f.matrix("z.weight");
  ASSERT_EQ(m.rows(), 2);
  ASSERT_EQ(m.cols(), 3);
  for (int i = 0; i < 6; ++i) EXPECT_EQ(m(i / 3, i % 3), w[static_cast<std::size_t>(i)]);
  EXPECT_EQ(f.to_f32("a.bf16"), (std::vector<float>{1.5f, -3.0f, 0.15625f, 1024.0f}));
  EXPECT_EQ(f.u8("m.u8"), u);
  EXPECT_EQ(f.i64("ids"), ids);
  EXPECT_EQ(f.i32("scalar"), scalar);
  EXPECT_TRUE(f.info("scalar").shape.empty());
  EXPECT_THROW((void)f.matrix("scalar"), polymoe::error);  // I32 does not convert to fp32
  const polymoe::Matrix s = f.matrix("s.f32");             // rank 0 -> [1, 1]
  EXPECT_EQ(s.rows(), 1);
  EXPECT_EQ(s.cols(), 1);
  EXPECT_EQ(s(0, 0), -7.0f);
  EXPECT_EQ(f.info("empty").numel(), 0);
  EXPECT_TRUE(f.to_f32("empty").empty());
  EXPECT_EQ(f.matrix("empty").rows(), 0);
  EXPECT_EQ(f.to_f32("fp8"), (std::vector<float>{1.0f, -1.0f, 448.0f, 0x1p-9f}));
  EXPECT_EQ(f.fp8_codes("fp8"), fp8);
  EXPECT_EQ(f.info("fp8").shape, (std::vector<std::int64_t>{2, 2}));
  const auto raw = f.bytes("z.weight");
  ASSERT_EQ(raw.size(), 24u);
  EXPECT_EQ(std::memcmp(raw.data(), w.data(), 24), 0);

  // type checks on access
  EXPECT_THROW((void)f.u8("z.weight"), polymoe::error);
  EXPECT_THROW((void)f.to_f32("ids"), polymoe::error);
  try {
    (void)f.matrix("cube");
    ADD_FAILURE() << "rank 3 -> matrix must fail";
  } catch (const polymoe::error& e) {
    EXPECT_NE(std::string(e.what()).find("rank 3"), std::string::npos) << e.what();
  }

  // write again from what was read: identical bytes
  std::vector<tensor_to_write> again;
  for (const auto& t : f.tensors()) again.push_back({t.name, t.dtype, t.shape, f.bytes(t.name)});
  std::map<std::string, std::string> meta(f.metadata().begin(), f.metadata().end());
  save_safetensors(file("rt2.safetensors"), again, meta);
  std::ifstream a(p, std::ios::binary), b(file("rt2.safetensors"), std::ios::binary);
  const std::string sa((std::istreambuf_iterator<char>(a)), {}),
      sb((std::istreambuf_iterator<char>(b)), {});
  EXPECT_EQ(sa, sb);
}

TEST_F(safetensors_tmp, move_only_and_move_keeps_the_mapping) {
  const std::vector<float> w = {1, 2, 3};
  save_safetensors(file("m.safetensors"), {tensor_view<float>("w", {3}, w)});
  static_assert(!std::is_copy_constructible_v<safetensors_file>);
  static_assert(std::is_nothrow_move_constructible_v<safetensors_file>);
  auto f = safetensors_file::open(file("m.safetensors"));
  safetensors_file g = std::move(f);
  EXPECT_EQ(g.to_f32("w"), w);
  auto h = safetensors_file::open(file("m.safetensors"));
  h = std::move(g);
  EXPECT_EQ(h.to_f32("w"), w);
}

TEST_F(safetensors_tmp, writer_rejects_bad_input) {
  const std::vector<float> w = {1, 2, 3};
  const auto expect_write_error = [&](std::vector<tensor_to_write> t, std::string_view word) {
    try {
      save_safetensors(file("bad.safetensors"), t);
      ADD_FAILURE() << "expected an error mentioning " << word;
    } catch (const polymoe::error& e) {
      EXPECT_NE(std::string(e.what()).find(word), std::string::npos) << e.what();
      EXPECT_EQ(std::string(e.what()).rfind("polymoe: ", 0), 0u);
    }
  };
  expect_write_error({tensor_view<float>("w", {2, 2}, w)}, "size mismatch");
  expect_write_error({tensor_view<float>("w", {3}, w), tensor_view<float>("w", {3}, w)},
                     "duplicate");
  expect_write_error({tensor_view<float>("__metadata__", {3}, w)}, "__metadata__");
  expect_write_error({tensor_view<float>("", {3}, w)}, "empty name");
  expect_write_error({tensor_view<float>("w", {-3}, w)}, "negative");
  EXPECT_FALSE(fs::exists(file("bad.safetensors")));
}

// ---- malformed files
// -----------------------------------------------------------------------------

TEST_F(safetensors_tmp, malformed_files_give_clear_errors) {
  const std::string ok_entry = R"("w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]})";
  {  // sanity: the helper makes a valid file
    const auto f = safetensors_file::open(raw("good.safetensors", "{" + ok_entry + "}", 8));
    EXPECT_EQ(f.info("w").shape, (std::vector<std::int64_t>{2}));
  }
  {
    const fs::path p = file("tiny.safetensors");
    std::ofstream(p, std::ios::binary) << "abcde";
    expect_open_error(p, {"truncated"});
  }
  expect_open_error(raw("empty.safetensors", "", 0), {"header length 0"});
  expect_open_error(raw("len.safetensors", "{" + ok_entry + "}", 8, 1000),
                    {"header length 1000", "past the end"});
  expect_open_error(raw("huge_len.safetensors", "{}", 0, ~0ULL), {"header length", "past the end"});
  expect_open_error(raw("notjson.safetensors", "{\"w\": nope}", 0), {"not valid JSON", "offset"});
  expect_open_error(raw("array.safetensors", "[1, 2]  ", 0), {"expected a JSON object"});
  expect_open_error(
      raw("outside.safetensors", R"({"w":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})", 8),
      {"'w'", "outside the data region"});
  expect_open_error(raw("overlap.safetensors",
                        R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                        R"("b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
                        12),
                    {"'a'", "'b'", "overlap"});
  expect_open_error(
      raw("size.safetensors", R"({"w":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", 8),
      {"'w'", "size mismatch", "needs 12 bytes"});
  expect_open_error(
      raw("dtype.safetensors", R"({"w":{"dtype":"F4","shape":[2],"data_offsets":[0,2]}})", 2),
      {"'w'", "unknown dtype \"F4\""});
  expect_open_error(
      raw("negdim.safetensors", R"({"w":{"dtype":"U8","shape":[-2],"data_offsets":[0,2]}})", 2),
      {"'w'", "negative dimension -2"});
  expect_open_error(
      raw("fracdim.safetensors", R"({"w":{"dtype":"U8","shape":[2.0],"data_offsets":[0,2]}})", 2),
      {"'w'", "shape"});
  expect_open_error(
      raw("order.safetensors", R"({"w":{"dtype":"U8","shape":[0],"data_offsets":[4,2]}})", 4),
      {"'w'", "begin > end"});
  expect_open_error(raw("nooff.safetensors", R"({"w":{"dtype":"U8","shape":[2]}})", 2),
                    {"'w'", "missing", "data_offsets"});
  expect_open_error(raw("nodtype.safetensors", R"({"w":{"shape":[2],"data_offsets":[0,2]}})", 2),
                    {"'w'", "missing", "dtype"});
  expect_open_error(
      raw("offs3.safetensors", R"({"w":{"dtype":"U8","shape":[2],"data_offsets":[0,1,2]}})", 2),
      {"'w'", "data_offsets"});
  expect_open_error(
      raw("overflow.safetensors",
          R"({"w":{"dtype":"F32","shape":[4611686018427387904,4],"data_offsets":[0,0]}})", 0),
      {"'w'", "overflow"});
  expect_open_error(raw("meta.safetensors", "{\"__metadata__\":{\"k\":1}," + ok_entry + "}", 8),
                    {"__metadata__", "'k'", "expected a string"});
  expect_open_error(raw("meta2.safetensors", "{\"__metadata__\":[]," + ok_entry + "}", 8),
                    {"__metadata__"});
  expect_open_error(raw("entry.safetensors", R"({"w":[1,2]})", 0), {"'w'", "expected an object"});
  expect_open_error(raw("dup.safetensors", "{" + ok_entry + "," + ok_entry + "}", 8),
                    {"duplicate key"});
  expect_open_error(file("does_not_exist.safetensors"), {"cannot open"});
  expect_open_error(dir_, {"not a regular file"});
}

TEST_F(safetensors_tmp, missing_tensor_lookup_names_it) {
  const std::vector<float> w = {1, 2};
  save_safetensors(file("one.safetensors"), {tensor_view<float>("w", {2}, w)});
  const auto f = safetensors_file::open(file("one.safetensors"));
  EXPECT_FALSE(f.contains("v"));
  for (const auto& call : {+[](const safetensors_file& s) { (void)s.info("v"); },
                           +[](const safetensors_file& s) { (void)s.to_f32("v"); },
                           +[](const safetensors_file& s) { (void)s.matrix("v"); },
                           +[](const safetensors_file& s) { (void)s.bytes("v"); }}) {
    try {
      call(f);
      ADD_FAILURE() << "expected an error";
    } catch (const polymoe::error& e) {
      const std::string msg = e.what();
      EXPECT_NE(msg.find("no tensor named 'v'"), std::string::npos) << msg;
      EXPECT_NE(msg.find("one.safetensors"), std::string::npos) << msg;
    }
  }
}

// Every truncation and every single-byte corruption of a valid file either opens (and then every
// tensor reads within bounds) or throws polymoe::error — nothing else.
TEST_F(safetensors_tmp, truncations_and_corruptions_never_crash) {
  const std::vector<float> w = {1, 2, 3, 4, 5, 6};
  const std::vector<std::uint8_t> u = {9, 8, 7};
  save_safetensors(file("src.safetensors"),
                   {tensor_view<float>("w", {2, 3}, w), tensor_view<std::uint8_t>("u", {3}, u)},
                   {{"k", "v"}});
  std::ifstream in(file("src.safetensors"), std::ios::binary);
  const std::string good((std::istreambuf_iterator<char>(in)), {});
  const auto try_open = [&](const std::string& content, const std::string& what) {
    const auto p = file("mut.safetensors");
    std::ofstream(p, std::ios::binary | std::ios::trunc)
        .write(content.data(), static_cast<std::streamsize>(content.size()));
    try {
      const auto f = safetensors_file::open(p);
      for (const auto& t : f.tensors()) {
        const auto b = f.bytes(t.name);
        EXPECT_LE(b.size(), content.size()) << what;
        if (t.dtype == dtype::F32 || t.dtype == dtype::F8_E4M3 || t.dtype == dtype::BF16)
          (void)f.to_f32(t.name);
      }
    } catch (const polymoe::error& e) {
      EXPECT_EQ(std::string(e.what()).rfind("polymoe: ", 0), 0u) << what;
    } catch (const std::exception& e) {
      ADD_FAILURE() << what << ": unexpected exception " << e.what();
    }
  };
  for (std::size_t n = 0; n < good.size(); ++n)
    try_open(good.substr(0, n), "truncated to " + std::to_string(n));
  for (std::size_t i = 0; i < good.size(); ++i)
    for (const unsigned char v : {0x00, 0x22, 0x2C, 0x30, 0x39, 0x5D, 0x7D, 0xFF}) {
      std::string bad = good;
      bad[i] = static_cast<char>(v);
      try_open(bad, "byte " + std::to_string(i) + " set to " + std::to_string(v));
    }
}

}  // namespace
