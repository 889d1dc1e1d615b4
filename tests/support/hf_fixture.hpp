#pragma once
// Test support: reads one layer of a ../shared/fixtures/hf case (config.json + model.safetensors +
// io.safetensors, all written by Hugging Face transformers) into a MoeConfig and fp32 MoeWeights,
// through polymoe's checkpoint loader (include/polymoe/io/hf_checkpoint.hpp).
#include "fixtures_root.hpp"
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include <polymoe/core/expert_weights.hpp>
#include <polymoe/io/hf_checkpoint.hpp>
#include <polymoe/io/json.hpp>
#include <polymoe/io/safetensors.hpp>

namespace polymoe::test {

inline std::filesystem::path fixtures_dir() { return fixtures_root() / "hf"; }

/// A case's directory: ../shared/fixtures/hf/<name>, else tests/data/hf/<name> (the transformers
/// fixtures this repository makes itself with scripts/transformers_fixtures.py).
inline std::filesystem::path hf_case_dir(const std::string& name) {
  const auto shared = fixtures_dir() / name;
  return std::filesystem::is_directory(shared) ? shared : test_data_dir() / "hf" / name;
}

struct HfCase {
  std::string name;
  MoeConfig cfg;
  MoeWeights weights;
  Matrix hidden, router_logits, expected;
};

inline io::json read_json_file(const std::filesystem::path& p) {
  std::ifstream f(p);
  std::stringstream ss;
  ss << f.rdbuf();
  return io::parse_json(ss.str(), p.string());
}

inline index_t geti(const io::json& c, std::string_view k) { return c.at(k).as_int(); }

/// Layer 0 of a float fixture case, loaded with polymoe's own checkpoint loader
/// (io::hf_checkpoint), which this test support used to re-implement in a minimal way.
inline HfCase load_hf_case(const std::string& name) {
  const auto dir = hf_case_dir(name);
  const auto io_file = io::safetensors_file::open(dir / "io.safetensors");
  HfCase hc;
  hc.name = name;
  hc.hidden = io_file.matrix("hidden_states");
  hc.router_logits = io_file.matrix("router_logits");
  hc.expected = io_file.matrix("output");
  io::hf_layer layer = io::hf_checkpoint::open(dir).load_layer(0);
  require(layer.scheme == io::stored_scheme::float_weights(), "test fixture loader: case ", name,
          " is pre-quantized; use quant_fixture.hpp");
  hc.cfg = layer.cfg;
  hc.weights = std::move(std::get<MoeWeights>(layer.weights));
  return hc;
}

}  // namespace polymoe::test
