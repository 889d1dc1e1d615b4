// Writes malformed checkpoints and input files for the `polymoe` error tests:
//   make_malformed OUT_DIR FIXTURES_HF_DIR
// OUT_DIR/<case>/{config.json, model.safetensors}: each case breaks one thing.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <tuple>
#include <vector>

#include <polymoe/io/checkpoint_files.hpp>
#include <polymoe/io/safetensors.hpp>

namespace fs = std::filesystem;

namespace {

void write_raw(const fs::path& p, const std::string& header, std::uint64_t declared_len, std::size_t data_bytes) {
  std::ofstream f(p, std::ios::binary | std::ios::trunc);
  unsigned char len[8];
  std::uint64_t n = declared_len;
  for (auto& b : len) b = static_cast<unsigned char>(n & 0xFF), n >>= 8;
  f.write(reinterpret_cast<const char*>(len), 8);
  f.write(header.data(), static_cast<std::streamsize>(header.size()));
  const std::string zeros(data_bytes, '\0');
  f.write(zeros.data(), static_cast<std::streamsize>(zeros.size()));
}

void with_header(const fs::path& dir, const std::string& header, std::size_t data_bytes) {
  write_raw(dir / "model.safetensors", header, header.size(), data_bytes);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: make_malformed OUT_DIR FIXTURES_HF_DIR\n");
    return 2;
  }
  const fs::path out = argv[1], fixtures = argv[2];
  const fs::path mixtral = fixtures / "mixtral";
  const std::string config = polymoe::io::read_text_file(mixtral / "config.json");
  auto make = [&](const std::string& name, bool with_config = true) {
    const fs::path d = out / name;
    fs::create_directories(d);
    if (with_config) polymoe::io::write_text_file(d / "config.json", config);
    return d;
  };
  const std::string ok_entry = R"("w":{"dtype":"F32","shape":[2,2],"data_offsets":[0,16]})";
  // the file ends inside the 8-byte header length
  {
    const auto d = make("truncated");
    std::ofstream(d / "model.safetensors", std::ios::binary) << "\x10\x00\x00";
  }
  // the header length points past the end of the file
  write_raw(make("header_past_end") / "model.safetensors", "{" + ok_entry + "}", 1'000'000, 16);
  // data_offsets beyond the data region
  with_header(make("bad_offsets"), R"({"w":{"dtype":"F32","shape":[2,2],"data_offsets":[0,16]}})", 8);
  // two tensors sharing bytes
  with_header(make("overlapping"),
              R"({"a":{"dtype":"F32","shape":[2,2],"data_offsets":[0,16]},"b":{"dtype":"F32","shape":[2,2],"data_offsets":[8,24]}})",
              24);
  // shape x dtype does not match the byte range
  with_header(make("size_mismatch"), R"({"w":{"dtype":"F32","shape":[4,8],"data_offsets":[0,96]}})", 96);
  // a dtype the format does not have
  with_header(make("unknown_dtype"), R"({"w":{"dtype":"F7","shape":[2,2],"data_offsets":[0,16]}})", 16);
  // not JSON
  with_header(make("bad_json"), R"({"w":{"dtype":"F32","shape":[2,2],"data_offsets":[0,16]},})", 16);
  // negative dimension / offsets not integers
  with_header(make("bad_shape"), R"({"w":{"dtype":"F32","shape":[-2,2],"data_offsets":[0,16]}})", 16);
  // config.json that is not JSON
  {
    const auto d = make("bad_config", false);
    polymoe::io::write_text_file(d / "config.json", "{\"model_type\": \"mixtral\",");
    fs::copy_file(mixtral / "model.safetensors", d / "model.safetensors", fs::copy_options::overwrite_existing);
  }
  // config.json of an unknown family
  {
    const auto d = make("unknown_family", false);
    polymoe::io::write_text_file(d / "config.json", R"({"model_type": "llama", "num_hidden_layers": 1})");
    fs::copy_file(mixtral / "model.safetensors", d / "model.safetensors", fs::copy_options::overwrite_existing);
  }
  // config.json missing a field the family needs
  {
    const auto d = make("missing_field", false);
    polymoe::io::write_text_file(d / "config.json",
                                 R"({"model_type": "mixtral", "num_hidden_layers": 1, "hidden_size": 64})");
    fs::copy_file(mixtral / "model.safetensors", d / "model.safetensors", fs::copy_options::overwrite_existing);
  }
  // a valid file without one expert tensor
  {
    const auto d = make("missing_tensor");
    const auto f = polymoe::io::safetensors_file::open(mixtral / "model.safetensors");
    std::vector<polymoe::io::tensor_to_write> keep;
    for (const auto& t : f.tensors())
      if (t.name != "model.layers.0.block_sparse_moe.experts.3.w2.weight")
        keep.push_back({t.name, t.dtype, t.shape, f.bytes_of(t)});
    polymoe::io::save_safetensors(d / "model.safetensors", keep);
  }
  // a sharded checkpoint whose index names a shard that does not exist
  {
    const auto d = make("missing_shard");
    polymoe::io::write_text_file(d / "model.safetensors.index.json",
                                 R"({"metadata":{},"weight_map":{"model.layers.0.block_sparse_moe.experts.0.w1.weight":"model-00001-of-00002.safetensors","model.layers.0.block_sparse_moe.gate.weight":"model-00001-of-00002.safetensors"}})");
  }
  // an expert tensor with the wrong shape
  {
    const auto d = make("wrong_shape");
    const auto f = polymoe::io::safetensors_file::open(mixtral / "model.safetensors");
    std::vector<polymoe::io::tensor_to_write> keep;
    for (const auto& t : f.tensors()) {
      auto shape = t.shape;
      if (t.name == "model.layers.0.block_sparse_moe.experts.1.w1.weight") shape = {shape[1], shape[0]};
      keep.push_back({t.name, t.dtype, shape, f.bytes_of(t)});
    }
    polymoe::io::save_safetensors(d / "model.safetensors", keep);
  }
  // an index whose shard name holds a NUL byte: cut at the NUL, it would name model.safetensors
  {
    const auto d = make("nul_shard_name");
    fs::copy_file(mixtral / "model.safetensors", d / "model.safetensors", fs::copy_options::overwrite_existing);
    polymoe::io::json weight_map = polymoe::io::json::object();
    for (const auto& name : polymoe::io::safetensors_file::open(mixtral / "model.safetensors").names())
      weight_map.set(name, polymoe::io::json(std::string("model.safetensors\0.bak", 22)));
    polymoe::io::json index = polymoe::io::json::object();
    index.set("weight_map", std::move(weight_map));
    polymoe::io::write_text_file(d / "model.safetensors.index.json", index.dump());
  }
  // input files: hidden_states with the wrong width; no hidden_states at all
  {
    const auto d = make("inputs", false);
    std::vector<float> x(3 * 5, 1.0f);
    polymoe::io::save_safetensors(d / "wrong_width.safetensors",
                                  {polymoe::io::tensor_view<float>("hidden_states", {3, 5}, std::span<const float>(x))});
    polymoe::io::save_safetensors(d / "no_hidden.safetensors",
                                  {polymoe::io::tensor_view<float>("other", {3, 5}, std::span<const float>(x))});
    // mixtral's io with one NaN in hidden_states; with every hidden value at 1e30 (finite, but the
    // products overflow); with a NaN in the expected output (a reference compare must refuse)
    const auto io = polymoe::io::safetensors_file::open(mixtral / "io.safetensors");
    auto with = [&](const fs::path& file, const std::string& tensor, auto edit) {
      std::vector<std::vector<float>> keep;
      std::vector<polymoe::io::tensor_to_write> ts;
      for (const auto& t : io.tensors()) {
        auto& v = keep.emplace_back(io.to_f32(t.name));
        if (t.name == tensor) edit(v);
        ts.push_back(polymoe::io::tensor_view<float>(t.name, t.shape, std::span<const float>(v)));
      }
      polymoe::io::save_safetensors(file, ts);
    };
    with(d / "nan_hidden.safetensors", "hidden_states", [](std::vector<float>& v) { v[64 + 2] = std::nanf(""); });
    with(d / "huge_hidden.safetensors", "hidden_states", [](std::vector<float>& v) {
      for (auto& x : v) x = 1e30f;
    });
    with(d / "nan_reference.safetensors", "output", [](std::vector<float>& v) { v[5] = std::nanf(""); });
    // two topk_ids that differ in two places
    const std::vector<std::int32_t> ids_a{0, 1, 2, 3}, ids_b{0, 1, 3, 2};
    polymoe::io::save_safetensors(d / "ids_a.safetensors",
                                  {polymoe::io::tensor_view<std::int32_t>("topk_ids", {2, 2}, std::span(ids_a))});
    polymoe::io::save_safetensors(d / "ids_b.safetensors",
                                  {polymoe::io::tensor_view<std::int32_t>("topk_ids", {2, 2}, std::span(ids_b))});
  }
  // a NaN in one expert weight; config.json sizes its tensors contradict; num_hidden_layers = 2^40
  {
    const auto d = make("nan_weight");
    const auto f = polymoe::io::safetensors_file::open(mixtral / "model.safetensors");
    std::vector<std::vector<std::byte>> keep;
    std::vector<polymoe::io::tensor_to_write> ts;
    for (const auto& t : f.tensors()) {
      const auto b = f.bytes_of(t);
      auto& v = keep.emplace_back(b.begin(), b.end());
      if (t.name == "model.layers.0.block_sparse_moe.experts.2.w3.weight") {
        const float nan = std::nanf("");
        std::memcpy(v.data() + 4 * (64 + 7), &nan, 4);  // [1, 7]
      }
      ts.push_back({t.name, t.dtype, t.shape, std::span<const std::byte>(v)});
    }
    polymoe::io::save_safetensors(d / "model.safetensors", ts);
  }
  for (const auto& [name, key, value] : {std::tuple{"huge_experts", "num_local_experts", std::int64_t{1} << 40},
                                         std::tuple{"huge_hidden", "hidden_size", std::int64_t{1} << 31},
                                         std::tuple{"wrong_intermediate", "intermediate_size", std::int64_t{1} << 30},
                                         std::tuple{"huge_layers", "num_hidden_layers", std::int64_t{1} << 40}}) {
    const auto d = make(name);
    polymoe::io::json c = polymoe::io::parse_json(config, "config.json");
    c.set(key, polymoe::io::json(value));
    polymoe::io::write_text_file(d / "config.json", c.dump());
    fs::copy_file(mixtral / "model.safetensors", d / "model.safetensors", fs::copy_options::overwrite_existing);
  }
  return 0;
}
