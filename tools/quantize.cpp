// `polymoe quantize`: a quantized copy of a checkpoint, in the layout real checkpoints use.
#include <algorithm>
#include <charconv>
#include <memory>
#include <cstdio>
#include <filesystem>
#include <iostream>

#include "cli.hpp"
#include "layout.hpp"
#include "progress.hpp"

namespace polymoe::cli {

namespace {

/// Checks --out before anything is written: empty or absent, or (with --force) holding a checkpoint
/// none of whose files is one of the source checkpoint's (by inode). Returns the files of the
/// checkpoint --out holds (io::checkpoint_file_names), to remove once the new one is written.
std::vector<std::string> previous_checkpoint(bool force, const std::filesystem::path& out,
                                             const io::checkpoint_files& source) {
  std::error_code ec;
  if (!std::filesystem::exists(out, ec)) return {};
  require(std::filesystem::is_directory(out, ec), "quantize: --out '", out.string(), "' is not a directory");
  std::vector<std::filesystem::path> entries;
  for (const auto& e : std::filesystem::directory_iterator(out, ec)) entries.push_back(e.path());
  require(!ec, "quantize: cannot list --out '", out.string(), "': ", ec.message());
  if (entries.empty()) return {};
  require(force, "quantize: --out '", out.string(), "' is not empty (it holds '",
          entries.front().filename().string(), "'", entries.size() > 1 ? " and more" : "",
          "); pass --force to replace the checkpoint it holds");
  const std::vector<std::filesystem::path> read = checkpoint_paths(source);
  for (const auto& e : entries)
    io::require_not_overwriting(e, read, "quantize: '" + e.string() + "' in --out");
  return io::checkpoint_file_names(out);
}

/// Removes `name` from `dir` unless it is a directory; polymoe::error when it cannot.
void remove_stale(const std::filesystem::path& dir, const std::string& name) {
  std::error_code ec;
  const auto p = dir / name;
  if (std::filesystem::is_directory(std::filesystem::symlink_status(p, ec))) return;
  std::filesystem::remove(p, ec);
  require(!ec, "quantize: cannot remove the previous checkpoint's '", p.string(), "': ", ec.message());
}

/// `polymoe quantize`'s settings, as the command line gives them.
struct quantize_settings {
  std::string checkpoint, out, layer, scheme;
  std::int64_t shard_mb = 4096;
  bool force = false;
  progress_flags shown;
};

/// The table of --help: the schemes and their tensors per projection.
std::string scheme_table() {
  std::string table;
  boost::mp11::mp_for_each<boost::mp11::mp_transform<boost::mp11::mp_identity, io::stored_layouts>>(
      [&]<class W>(boost::mp11::mp_identity<W>) {
        using L = quant::checkpoint_layout<W>;
        std::string line = "  " + std::string(L::alias == L::name ? L::name : L::alias);
        line.resize(std::max<std::size_t>(line.size() + 1, 13), ' ');
        bool first = true;
        io::for_each_stored_tensor<W>([&](const auto& t) {
          line += std::string(first ? "" : " + ") + "P" + std::string(t.suffix) + " " +
                  std::string(io::dtype_name(io::dtypes_of(t.type).front()));
          if (!t.stacked.empty()) line += " [" + std::string(t.stacked) + "]";
          first = false;
        });
        table += line + "\n";
      });
  return table;
}

int quantize_command(const quantize_settings& a);

}  // namespace

command add_quantize(CLI::App& polymoe) {
  CLI::App* app = polymoe.add_subcommand(
      "quantize", "write a quantized copy of a checkpoint (the schemes with a checkpoint layout)");
  auto s = std::make_shared<quantize_settings>();
  app->add_option("--checkpoint", s->checkpoint, "the Hugging Face checkpoint to copy")->type_name("DIR")->required();
  app->add_option("--layer", s->layer, "the MoE layer whose experts are quantized, or all (every MoE layer)")
      ->type_name("N|all")
      ->required()
      ->check(CLI::Validator(
          [](std::string& v) {
            std::int64_t n = 0;
            const auto [p, ec] = std::from_chars(v.data(), v.data() + v.size(), n);
            return v == "all" || (ec == std::errc{} && p == v.data() + v.size())
                       ? std::string()
                       : "must be an integer or all, got '" + v + "'";
          },
          ""));
  app->add_option("--scheme", s->scheme, "the scheme, by a layout's name or alias or a scheme's name (below)")
      ->type_name("NAME")
      ->required()
      ->check(programs::choice(stored_names()));
  app->add_option("--out", s->out, "the new checkpoint's directory: empty or absent (or see --force)")
      ->type_name("DIR")
      ->required();
  app->add_option("--shard-mb", s->shard_mb, "output larger than this is sharded (default 4096)")
      ->type_name("MB")
      ->check(CLI::Range(std::int64_t{1}, std::int64_t{1} << 30));
  app->add_flag("--force", s->force, "write into a DIR that holds a checkpoint (see below)");
  s->shown.add_to(*app);
  app->footer(
      "Writes a copy of the checkpoint whose MoE experts (routed and shared) in layer N, or in every MoE\n"
      "layer, are quantized with the scheme, in the layout real checkpoints use, and a config.json with the\n"
      "matching quantization_config; every other tensor is copied unchanged. The result is read back by\n"
      "`polymoe run` without requantization. The schemes and their tensors per projection P (gpt_oss:\n"
      "stacked under experts.gate_up_proj / down_proj with the suffixes in brackets):\n" +
      scheme_table() +
      "Stored weights are dequantized first when the input is already quantized. Experts are processed one\n"
      "at a time; output larger than --shard-mb (default 4096) is sharded with model.safetensors.index.json.\n"
      "DIR must be empty or absent. --force writes into a DIR that holds a checkpoint, and then removes the\n"
      "files of that checkpoint (config.json, its index, the shards the index lists, model.safetensors) the\n"
      "new one does not replace; nothing else in DIR is touched. A write longer than a second shows its\n"
      "progress on stderr (--progress: from the start; --quiet: no progress and no summary).");
  return {app, [s] { return quantize_command(*s); }};
}

namespace {

int quantize_command(const quantize_settings& a) {
  const std::string &in_dir = a.checkpoint, &out_dir = a.out, &layer_s = a.layer;
  const out_scheme scheme = parse_out_scheme(a.scheme);
  const std::uint64_t shard = static_cast<std::uint64_t>(a.shard_mb) << 20;
  std::error_code ec;
  require(!std::filesystem::exists(out_dir, ec) || !std::filesystem::equivalent(in_dir, out_dir, ec),
          "quantize: --out must differ from --checkpoint");
  const auto ckpt = std::make_shared<io::hf_checkpoint>(io::hf_checkpoint::open(in_dir));
  const std::vector<std::string> previous = previous_checkpoint(a.force, out_dir, ckpt->files());
  const auto& names = ckpt->names();
  std::vector<index_t> layers;
  if (layer_s == "all") {
    layers = ckpt->moe_layers();  // the layers the files hold, whatever num_hidden_layers says
    require(!layers.empty(), "quantize: the checkpoint has no MoE layer");
  } else {
    layers.push_back(std::stoll(layer_s));  // an integer: checked by the option
    (void)ckpt->moe_config(layers[0]);  // checks the layer
  }
  std::vector<io::tensor_source> out;
  std::vector<std::string> replaced;
  for (const index_t n : layers) {
    const MoeConfig c = ckpt->moe_config(n);
    replaced.push_back(names.moe(n) + "experts.");
    if (c.shared_intermediate > 0) replaced.push_back(names.shared(n));
    auto P = std::make_shared<expert_provider>(
        scheme, [ckpt, n](index_t e) { return ckpt->load_fp32_experts(n, e, 1); },
        [ckpt, n]() { return *ckpt->load_fp32_shared(n); });
    add_expert_tensors(out, names, n, c, std::move(P));
  }
  for (const auto& name : ckpt->files().names()) {
    bool skip = false;
    for (const auto& r : replaced) skip |= name.starts_with(r);
    if (skip) continue;
    const auto& t = ckpt->files().info(name);
    out.push_back({name, t.dtype, t.shape, [ckpt, name](std::span<std::byte> b) {
                     const auto src = ckpt->files().bytes(name);
                     layout_detail::put(b, src.data(), src.size());
                   }});
  }
  std::uint64_t total = 0;
  for (const auto& t : out) total += t.nbytes();
  const auto files = [&] {
    progress p(a.shown.mode(), "quantize: writing " + out_dir, total);
    return io::write_checkpoint(out_dir, std::move(out), shard, [&](std::uint64_t done) { p.set(done); });
  }();
  io::json config = ckpt->config();
  config.set("quantization_config", quantization_config(scheme, ckpt->family()));
  io::write_text_file(std::filesystem::path(out_dir) / "config.json", config.dump());
  // The checkpoint's sample input (make-checkpoint writes one) goes along, so that `run` on the
  // quantized checkpoint takes the same command as on the original.
  const std::filesystem::path sample = std::filesystem::path(in_dir) / "input.safetensors";
  bool copied_input = false;
  if (std::filesystem::is_regular_file(sample, ec)) {
    io::atomic_output_file copy(std::filesystem::path(out_dir) / "input.safetensors");
    copy.write(io::read_regular_file(sample, "quantize: cannot copy '" + sample.string() + "'", std::uint64_t{1} << 40));
    copy.commit();
    copied_input = true;
  }
  for (const auto& f : previous)  // the previous checkpoint's files that the new one does not replace
    if (f != "config.json" && std::find(files.begin(), files.end(), f) == files.end()) remove_stale(out_dir, f);
  if (!a.shown.quiet)  // the layout's one name, whichever spelling --scheme used
    std::printf("polymoe quantize: %s -> %s (%s, %zu layer%s, %zu file%s%s)\n", in_dir.c_str(), out_dir.c_str(),
                std::string(to_string(scheme.layout)).c_str(), layers.size(), layers.size() == 1 ? "" : "s",
                files.size(), files.size() == 1 ? "" : "s", copied_input ? ", input.safetensors copied" : "");
  return 0;
}

}  // namespace

}  // namespace polymoe::cli
