// Writes malformed checkpoints and input files for the `polymoe` error tests:
//   make_malformed OUT_DIR FIXTURES_HF_DIR
// OUT_DIR/<case>/{config.json, model.safetensors}: each case breaks one thing.
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

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
  // input files: hidden_states with the wrong width; no hidden_states at all
  {
    const auto d = make("inputs", false);
    std::vector<float> x(3 * 5, 1.0f);
    polymoe::io::save_safetensors(d / "wrong_width.safetensors",
                                  {polymoe::io::tensor_view<float>("hidden_states", {3, 5}, std::span<const float>(x))});
    polymoe::io::save_safetensors(d / "no_hidden.safetensors",
                                  {polymoe::io::tensor_view<float>("other", {3, 5}, std::span<const float>(x))});
  }
  return 0;
}
