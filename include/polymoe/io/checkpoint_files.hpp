#pragma once
// polymoe::io — the safetensors files of a checkpoint directory, read and written.
//
// checkpoint_files::open(dir) finds the tensors of a Hugging Face checkpoint: a sharded one through
// `model.safetensors.index.json` ({"weight_map": {"tensor": "model-00001-of-00002.safetensors"}}),
// else `model.safetensors`, else every `*.safetensors` in the directory. Shards are opened (mapped
// and their headers validated) only when one of their tensors is asked for, and a mapping touches
// only the pages of the tensors that are read, so loading one layer reads only that layer.
//
//   auto files = polymoe::io::checkpoint_files::open("Mixtral-8x7B");
//   polymoe::Matrix g = files.matrix("model.layers.3.block_sparse_moe.gate.weight");
//
// write_checkpoint writes tensors produced one at a time (each `fill` callback gets a buffer of
// exactly its size), so a checkpoint far larger than memory can be generated; it shards when the
// data exceeds `shard_bytes` and then writes the index.
#include <algorithm>
#include <cstddef>
#include <cstdio>
#include <span>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <polymoe/core/error.hpp>
#include <polymoe/io/file_io.hpp>
#include <polymoe/io/json.hpp>
#include <polymoe/io/safetensors.hpp>

namespace polymoe::io {

/// A JSON file parsed (at most max_text_file_bytes, a regular file: see read_text_file in
/// file_io.hpp; errors name the file, line and column).
[[nodiscard]] inline json read_json_file(const std::filesystem::path& p) {
  return parse_json(read_text_file(p), p.string());
}

/// The index of a sharded checkpoint: `model.safetensors.index.json`.
inline constexpr std::string_view index_file_name = "model.safetensors.index.json";

/// The (tensor, shard file name) pairs of the weight_map of the index file `index`. Every name must
/// be a file name in the checkpoint directory: not empty, not "." or "..", without '/' and without a
/// NUL byte (which the system would take as the end of the name). polymoe::error naming the index
/// and the entry otherwise.
[[nodiscard]] inline std::vector<std::pair<std::string, std::string>> read_weight_map(
    const std::filesystem::path& index) {
  const json j = read_json_file(index);
  require(j.is_object(), index.string(), ": expected a JSON object");
  const json* wm = j.find("weight_map");
  require(wm != nullptr && wm->is_object(), index.string(), ": missing the object 'weight_map'");
  std::vector<std::pair<std::string, std::string>> entries;
  for (const auto& [tensor, file] : wm->as_object()) {
    require(file.is_string(), index.string(), ": weight_map['", tensor, "'] is ", file.type_name(),
            ", expected a file name");
    const std::string& f = file.as_string();
    require(f.find('\0') == std::string::npos, index.string(), ": weight_map['", tensor, "'] = ", json_quote(f),
            " holds a NUL byte, which would end the file name");
    require(!f.empty() && f.find('/') == std::string::npos && f != "." && f != "..", index.string(),
            ": weight_map['", tensor, "'] = '", f, "' is not a file name in the checkpoint directory");
    entries.emplace_back(tensor, f);
  }
  return entries;
}

/// The files of the checkpoint in `dir` that polymoe writes and reads, those that exist, in this
/// order: config.json, the index and every shard its weight_map lists (names checked as
/// read_weight_map checks them), model.safetensors. Nothing else in `dir` is named.
[[nodiscard]] inline std::vector<std::string> checkpoint_file_names(const std::filesystem::path& dir) {
  std::vector<std::string> names;
  std::error_code ec;
  const auto add = [&](const std::string& n) {
    if (std::filesystem::exists(std::filesystem::symlink_status(dir / n, ec)) &&
        std::find(names.begin(), names.end(), n) == names.end())
      names.push_back(n);
  };
  add("config.json");
  if (std::filesystem::exists(std::filesystem::symlink_status(dir / index_file_name, ec))) {
    add(std::string(index_file_name));
    for (const auto& [tensor, f] : read_weight_map(dir / index_file_name)) add(f);
  }
  add("model.safetensors");
  return names;
}

/// The tensors of a checkpoint directory, possibly sharded. Move-only.
class checkpoint_files {
 public:
  /// Finds the checkpoint's files in `dir`; polymoe::error when there are none or the index is bad.
  [[nodiscard]] static checkpoint_files open(const std::filesystem::path& dir) {
    checkpoint_files c;
    c.dir_ = dir;
    std::error_code ec;
    require(std::filesystem::is_directory(dir, ec), "checkpoint directory '", dir.string(), "' does not exist");
    const auto index = dir / index_file_name;
    if (std::filesystem::exists(index, ec)) {
      for (const auto& [tensor, f] : read_weight_map(index)) c.where_.emplace(tensor, c.shard_index(f));
      c.indexed_ = true;
    } else if (std::filesystem::exists(dir / "model.safetensors", ec)) {
      c.add_whole_file("model.safetensors");
    } else {
      std::vector<std::string> found;
      for (const auto& e : std::filesystem::directory_iterator(dir, ec))
        if (e.path().extension() == ".safetensors") found.push_back(e.path().filename().string());
      std::sort(found.begin(), found.end());
      require(!found.empty(), "checkpoint directory '", dir.string(),
              "' has no model.safetensors.index.json, no model.safetensors and no *.safetensors file");
      for (const auto& f : found) c.add_whole_file(f);
    }
    return c;
  }

  checkpoint_files(checkpoint_files&&) noexcept = default;
  checkpoint_files& operator=(checkpoint_files&&) noexcept = default;

  [[nodiscard]] const std::filesystem::path& dir() const noexcept { return dir_; }
  /// True when the tensors were found through model.safetensors.index.json.
  [[nodiscard]] bool sharded() const noexcept { return indexed_; }
  /// The shard file names, in first-seen order.
  [[nodiscard]] std::vector<std::string> files() const {
    std::vector<std::string> f;
    for (const auto& s : shards_) f.push_back(s.name);
    return f;
  }
  /// Every file the tensors are read from: the index (when sharded) and each shard.
  [[nodiscard]] std::vector<std::filesystem::path> paths() const {
    std::vector<std::filesystem::path> p;
    if (indexed_) p.push_back(dir_ / index_file_name);
    for (const auto& s : shards_) p.push_back(dir_ / s.name);
    return p;
  }
  /// Every tensor name, sorted.
  [[nodiscard]] std::vector<std::string> names() const {
    std::vector<std::string> n;
    n.reserve(where_.size());
    for (const auto& [k, v] : where_) n.push_back(k);
    return n;
  }
  /// Names that start with `prefix`, sorted.
  [[nodiscard]] std::vector<std::string> names_with_prefix(std::string_view prefix) const {
    std::vector<std::string> n;
    for (auto it = where_.lower_bound(prefix); it != where_.end() && it->first.starts_with(prefix); ++it)
      n.push_back(it->first);
    return n;
  }
  [[nodiscard]] bool contains(std::string_view name) const { return where_.find(name) != where_.end(); }

  /// The file holding `name` (opened on first use); polymoe::error naming the tensor when absent.
  [[nodiscard]] const safetensors_file& file_of(std::string_view name) const {
    const auto it = where_.find(name);
    require(it != where_.end(), "checkpoint '", dir_.string(), "': missing tensor '", name, "'");
    const safetensors_file& f = shard(it->second);
    require(f.contains(name), "checkpoint '", dir_.string(), "': the index puts tensor '", name, "' in '",
            shards_[it->second].name, "', which does not hold it");
    return f;
  }
  [[nodiscard]] const tensor_info& info(std::string_view name) const { return file_of(name).info(name); }
  [[nodiscard]] Matrix matrix(std::string_view name) const { return file_of(name).matrix(name); }
  [[nodiscard]] std::vector<float> to_f32(std::string_view name) const { return file_of(name).to_f32(name); }
  [[nodiscard]] std::span<const std::byte> bytes(std::string_view name) const { return file_of(name).bytes(name); }

 private:
  struct shard_entry {
    std::string name;
    std::unique_ptr<safetensors_file> file;  // opened on first use
  };

  checkpoint_files() = default;

  std::size_t shard_index(const std::string& f) {
    for (std::size_t i = 0; i < shards_.size(); ++i)
      if (shards_[i].name == f) return i;
    shards_.push_back({f, nullptr});
    return shards_.size() - 1;
  }
  void add_whole_file(const std::string& f) {
    const std::size_t i = shard_index(f);
    for (const auto& t : shard(i).tensors()) {
      const auto [it, fresh] = where_.emplace(t.name, i);
      require(fresh, "checkpoint '", dir_.string(), "': tensor '", t.name, "' is in both '", shards_[it->second].name,
              "' and '", f, "'");
    }
  }
  const safetensors_file& shard(std::size_t i) const {
    auto& s = shards_[i];
    if (!s.file) s.file = std::make_unique<safetensors_file>(safetensors_file::open(dir_ / s.name));
    return *s.file;
  }

  std::filesystem::path dir_;
  bool indexed_ = false;
  mutable std::vector<shard_entry> shards_;
  std::map<std::string, std::size_t, std::less<>> where_;
};

/// One tensor of a checkpoint being written: `fill` writes exactly product(shape)·dtype_size bytes.
struct tensor_source {
  std::string name;
  ::polymoe::io::dtype dtype = ::polymoe::io::dtype::F32;
  std::vector<std::int64_t> shape;
  std::function<void(std::span<std::byte>)> fill;

  [[nodiscard]] std::uint64_t nbytes() const {
    std::uint64_t n = dtype_size(dtype);
    for (const auto d : shape) n *= static_cast<std::uint64_t>(d);
    return n;
  }
};

namespace detail {
/// Writes one safetensors file from sources, calling each fill once, in name order, through an
/// atomic_output_file (a fill that throws leaves `path` as it was and no temporary behind);
/// `written` (when set) gets `done` after each tensor, advanced by its bytes.
inline void write_streamed(const std::filesystem::path& path, std::vector<const tensor_source*> order,
                           const std::function<void(std::uint64_t)>& written, std::uint64_t& done) {
  std::sort(order.begin(), order.end(), [](const tensor_source* a, const tensor_source* b) { return a->name < b->name; });
  std::string header = "{";
  std::uint64_t offset = 0;
  for (std::size_t i = 0; i < order.size(); ++i) {
    const tensor_source& t = *order[i];
    require(!t.name.empty() && t.name != "__metadata__", "write_checkpoint: bad tensor name '", t.name, "'");
    require(i == 0 || order[i - 1]->name != t.name, "write_checkpoint: duplicate tensor '", t.name, "'");
    if (i) header += ",";
    header += json_quote(t.name) + ":{\"dtype\":\"" + std::string(dtype_name(t.dtype)) + "\",\"shape\":[";
    for (std::size_t k = 0; k < t.shape.size(); ++k) {
      if (k) header += ',';
      header += std::to_string(t.shape[k]);
    }
    const std::uint64_t n = t.nbytes();
    header += "],\"data_offsets\":[" + std::to_string(offset) + "," + std::to_string(offset + n) + "]}";
    offset += n;
  }
  header += "}";
  atomic_output_file out(path);
  write_header(out, std::move(header));
  std::vector<std::byte> buf;
  for (const tensor_source* t : order) {
    buf.assign(static_cast<std::size_t>(t->nbytes()), std::byte{0});
    if (t->fill) t->fill(buf);
    out.write(buf);
    done += buf.size();
    if (written) written(done);
  }
  out.commit();
}
}  // namespace detail

/// Writes `tensors` into `dir` (created if needed) as model.safetensors, or, when their data
/// exceeds `shard_bytes`, as model-0000i-of-0000n.safetensors shards (in name order) with
/// model.safetensors.index.json. Returns the files written. `written` (optional) is called after
/// each tensor with the bytes of tensor data written so far (for progress reports).
inline std::vector<std::string> write_checkpoint(const std::filesystem::path& dir, std::vector<tensor_source> tensors,
                                                 std::uint64_t shard_bytes = 4ull << 30,
                                                 const std::function<void(std::uint64_t)>& written = {}) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  require(!ec, "cannot create directory '", dir.string(), "': ", ec.message());
  require(std::filesystem::is_directory(dir, ec), "cannot write a checkpoint in '", dir.string(),
          "': it is not a directory");
  std::sort(tensors.begin(), tensors.end(), [](const tensor_source& a, const tensor_source& b) { return a.name < b.name; });
  std::vector<std::vector<const tensor_source*>> shards(1);
  std::uint64_t in_shard = 0, total = 0;
  for (const auto& t : tensors) {
    const std::uint64_t n = t.nbytes();
    if (in_shard > 0 && in_shard + n > shard_bytes) shards.emplace_back(), in_shard = 0;
    shards.back().push_back(&t);
    in_shard += n;
    total += n;
  }
  std::vector<std::string> files;
  std::uint64_t done = 0;
  if (shards.size() == 1) {
    detail::write_streamed(dir / "model.safetensors", shards[0], written, done);
    std::filesystem::remove(dir / index_file_name, ec);
    files.push_back("model.safetensors");
    return files;
  }
  json weight_map = json::object();
  char name[64];
  for (std::size_t i = 0; i < shards.size(); ++i) {
    std::snprintf(name, sizeof name, "model-%05zu-of-%05zu.safetensors", i + 1, shards.size());
    detail::write_streamed(dir / name, shards[i], written, done);
    for (const auto* t : shards[i]) weight_map.set(t->name, json(std::string(name)));
    files.push_back(name);
  }
  json meta = json::object();
  meta.set("total_size", json(static_cast<std::int64_t>(total)));
  json index = json::object();
  index.set("metadata", std::move(meta));
  index.set("weight_map", std::move(weight_map));
  write_text_file(dir / index_file_name, index.dump());
  std::filesystem::remove(dir / "model.safetensors", ec);
  return files;
}

}  // namespace polymoe::io
