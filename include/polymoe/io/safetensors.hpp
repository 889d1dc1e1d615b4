#pragma once
// polymoe::io — safetensors reader and writer.
//
// File format (https://github.com/huggingface/safetensors): an 8-byte little-endian header length
// N, N bytes of UTF-8 JSON — {"name": {"dtype": "F32", "shape": [2, 3], "data_offsets": [b, e]},
// ...,
// "__metadata__": {"key": "value"}} — then the data region; offsets are relative to its start.
//
// safetensors_file::open memory-maps the file read-only (falling back to reading it when mmap is
// not possible) and validates the whole header before anything is exposed: the header length, the
// JSON, every entry's dtype / shape / data_offsets, that offsets lie inside the data region with
// begin <= end, that (end - begin) == product(shape) * dtype_size (computed without overflow), that
// no two tensors overlap, and that __metadata__ is an object of strings. Each failure is a
// polymoe::error naming the file and the tensor or field:
//
//   polymoe: safetensors file 'model.safetensors': tensor 'w1': data_offsets [0, 96] hold 96 bytes,
//   but shape [4, 8] of F32 needs 128 bytes
//
//   auto f = polymoe::io::safetensors_file::open("io.safetensors");
//   polymoe::Matrix x = f.matrix("hidden_states");          // [T, H], converted to fp32
//   std::span<const std::byte> raw = f.bytes("w_blocks");   // zero-copy view into the mapping
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <optional>
#include <polymoe/core/error.hpp>
#include <polymoe/core/types.hpp>
#include <polymoe/io/file_io.hpp>
#include <polymoe/io/json.hpp>
#include <polymoe/codecs/bf16.hpp>
#include <polymoe/codecs/e4m3.hpp>
#include <polymoe/codecs/e5m2.hpp>
#include <polymoe/codecs/fp16.hpp>
#include <span>
#include <string>
#include <string_view>
#include <system_error>
#include <type_traits>
#include <utility>
#include <vector>

namespace polymoe::io {

static_assert(
    std::endian::native == std::endian::little,
    "polymoe: safetensors data is little-endian; this reader assumes a little-endian host");

/// Element types of a safetensors tensor (the names the format uses).
enum class dtype : std::uint8_t { F32, F16, BF16, F8_E4M3, F8_E5M2, U8, I8, I16, I32, I64 };

inline constexpr dtype all_dtypes[] = {dtype::F32,     dtype::F16, dtype::BF16, dtype::F8_E4M3,
                                       dtype::F8_E5M2, dtype::U8,  dtype::I8,   dtype::I16,
                                       dtype::I32,     dtype::I64};

/// Bytes per element.
[[nodiscard]] constexpr std::size_t dtype_size(dtype t) noexcept {
  switch (t) {
    case dtype::F32: return 4;
    case dtype::F16: return 2;
    case dtype::BF16: return 2;
    case dtype::F8_E4M3: return 1;
    case dtype::F8_E5M2: return 1;
    case dtype::U8: return 1;
    case dtype::I8: return 1;
    case dtype::I16: return 2;
    case dtype::I32: return 4;
    case dtype::I64: return 8;
  }
  return 0;
}

/// The format's name of a dtype ("F32", "F8_E4M3", ...).
[[nodiscard]] constexpr std::string_view dtype_name(dtype t) noexcept {
  switch (t) {
    case dtype::F32: return "F32";
    case dtype::F16: return "F16";
    case dtype::BF16: return "BF16";
    case dtype::F8_E4M3: return "F8_E4M3";
    case dtype::F8_E5M2: return "F8_E5M2";
    case dtype::U8: return "U8";
    case dtype::I8: return "I8";
    case dtype::I16: return "I16";
    case dtype::I32: return "I32";
    case dtype::I64: return "I64";
  }
  return "?";
}

/// The dtype named `name`, or nullopt.
[[nodiscard]] constexpr std::optional<dtype> try_parse_dtype(std::string_view name) noexcept {
  for (const dtype t : all_dtypes)
    if (dtype_name(t) == name) return t;
  return std::nullopt;
}

/// The dtype named `name`; polymoe::error naming it when unknown.
[[nodiscard]] inline dtype parse_dtype(std::string_view name) {
  const auto t = try_parse_dtype(name);
  require(t.has_value(), "unknown safetensors dtype \"", name,
          "\" (known: F32, F16, BF16, F8_E4M3, F8_E5M2, U8, I8, I16, I32, I64)");
  return *t;
}

namespace detail {
template <class>
inline constexpr bool dependent_false = false;

inline std::string shape_string(std::span<const std::int64_t> shape) {
  std::string s = "[";
  for (std::size_t i = 0; i < shape.size(); ++i) {
    if (i) s += ", ";
    s += std::to_string(shape[i]);
  }
  return s + "]";
}
}  // namespace detail

/// The dtype whose elements are C++ type T (float, uint8_t, int8_t, int16_t, int32_t, int64_t).
template <class T>
inline constexpr dtype dtype_of = [] {
  if constexpr (std::is_same_v<T, float>)
    return dtype::F32;
  else if constexpr (std::is_same_v<T, std::uint8_t>)
    return dtype::U8;
  else if constexpr (std::is_same_v<T, std::int8_t>)
    return dtype::I8;
  else if constexpr (std::is_same_v<T, std::int16_t>)
    return dtype::I16;
  else if constexpr (std::is_same_v<T, std::int32_t>)
    return dtype::I32;
  else if constexpr (std::is_same_v<T, std::int64_t>)
    return dtype::I64;
  else
    static_assert(detail::dependent_false<T>,
                  "polymoe: dtype_of<T>: T has no safetensors dtype (use float, uint8_t, int8_t, "
                  "int16_t, int32_t or int64_t)");
}();

/// One tensor's entry in a safetensors header.
struct tensor_info {
  std::string name;
  ::polymoe::io::dtype dtype = ::polymoe::io::dtype::F32;
  std::vector<std::int64_t> shape;
  /// Byte offsets relative to the start of the data region: [begin, end).
  std::uint64_t begin = 0;
  std::uint64_t end = 0;

  [[nodiscard]] std::size_t rank() const noexcept { return shape.size(); }
  [[nodiscard]] std::int64_t numel() const noexcept {
    std::int64_t n = 1;
    for (const auto d : shape) n *= d;
    return n;
  }
  [[nodiscard]] std::size_t nbytes() const noexcept {
    return static_cast<std::size_t>(end - begin);
  }
  [[nodiscard]] std::string shape_string() const { return detail::shape_string(shape); }
};

/// A validated, read-only safetensors file (memory-mapped). Move-only; unmaps on destruction.
class safetensors_file {
 public:
  /// Limit on the JSON header size (the reference implementation's limit).
  static constexpr std::uint64_t max_header_bytes = 100'000'000;

  /// Opens and validates `path`; polymoe::error naming the file and the field on any problem.
  [[nodiscard]] static safetensors_file open(const std::filesystem::path& path) {
    safetensors_file f;
    f.path_ = path.string();
    f.load();
    f.parse_header();
    return f;
  }

  safetensors_file(safetensors_file&& o) noexcept { swap(o); }
  safetensors_file& operator=(safetensors_file&& o) noexcept {
    if (this != &o) {
      safetensors_file tmp(std::move(o));
      swap(tmp);
    }
    return *this;
  }
  safetensors_file(const safetensors_file&) = delete;
  safetensors_file& operator=(const safetensors_file&) = delete;
  ~safetensors_file() { unmap(); }

  [[nodiscard]] const std::string& path() const noexcept { return path_; }
  /// True when the file is memory-mapped (false: it was read into memory).
  [[nodiscard]] bool is_mapped() const noexcept { return mapped_; }
  /// Tensor names, sorted.
  [[nodiscard]] std::vector<std::string> names() const {
    std::vector<std::string> n;
    n.reserve(tensors_.size());
    for (const auto& t : tensors_) n.push_back(t.name);
    return n;
  }
  /// All entries, sorted by name.
  [[nodiscard]] const std::vector<tensor_info>& tensors() const noexcept { return tensors_; }
  [[nodiscard]] std::size_t size() const noexcept { return tensors_.size(); }
  [[nodiscard]] bool contains(std::string_view name) const { return lookup(name) != nullptr; }
  /// The entry of `name`; polymoe::error naming the tensor and file when absent.
  [[nodiscard]] const tensor_info& info(std::string_view name) const {
    const tensor_info* t = lookup(name);
    if (t == nullptr)
      fail("no tensor named '", name, "' (the file holds ", tensors_.size(), " tensors)");
    return *t;
  }
  /// The __metadata__ strings (empty when the header has none).
  [[nodiscard]] const std::map<std::string, std::string, std::less<>>& metadata() const noexcept {
    return metadata_;
  }

  /// The raw little-endian bytes of `name` (a view into the mapping, valid while this object
  /// lives).
  [[nodiscard]] std::span<const std::byte> bytes(std::string_view name) const {
    return bytes_of(info(name));
  }
  [[nodiscard]] std::span<const std::byte> bytes_of(const tensor_info& t) const {
    return {data_ + data_offset_ + t.begin, t.nbytes()};
  }

  /// The elements of `name` as fp32, converted from F32, F16, BF16, F8_E4M3 or F8_E5M2 (exactly).
  [[nodiscard]] std::vector<float> to_f32(std::string_view name) const {
    const tensor_info& t = info(name);
    const auto raw = bytes_of(t);
    std::vector<float> out(static_cast<std::size_t>(t.numel()));
    convert_to_f32(t, raw, out.data());
    return out;
  }

  /// `name` as an fp32 matrix: a 2-D tensor [r, c] as is, a 1-D [n] as a [1, n] row, a scalar as
  /// [1, 1]; polymoe::error for rank > 2 (see tensors()/to_f32 for those).
  [[nodiscard]] Matrix matrix(std::string_view name) const {
    const tensor_info& t = info(name);
    if (t.rank() > 2)
      fail("tensor '", t.name, "' has shape ", t.shape_string(), " (rank ", t.rank(),
           "); matrix() needs rank 1 or 2");
    const index_t rows = t.rank() == 2 ? t.shape[0] : 1;
    const index_t cols = t.rank() == 2 ? t.shape[1] : (t.rank() == 1 ? t.shape[0] : 1);
    Matrix m(rows, cols);
    convert_to_f32(t, bytes_of(t), m.data());
    return m;
  }

  /// The elements of `name` copied as T; its dtype must be exactly dtype_of<T>.
  template <class T>
  [[nodiscard]] std::vector<T> values(std::string_view name) const {
    const tensor_info& t = info(name);
    if (t.dtype != dtype_of<T>)
      fail("tensor '", t.name, "' has dtype ", dtype_name(t.dtype), ", expected ",
           dtype_name(dtype_of<T>));
    std::vector<T> out(static_cast<std::size_t>(t.numel()));
    if (!out.empty()) std::memcpy(out.data(), bytes_of(t).data(), t.nbytes());
    return out;
  }
  [[nodiscard]] std::vector<std::uint8_t> u8(std::string_view name) const {
    return values<std::uint8_t>(name);
  }
  [[nodiscard]] std::vector<std::int8_t> i8(std::string_view name) const {
    return values<std::int8_t>(name);
  }
  [[nodiscard]] std::vector<std::int16_t> i16(std::string_view name) const {
    return values<std::int16_t>(name);
  }
  [[nodiscard]] std::vector<std::int32_t> i32(std::string_view name) const {
    return values<std::int32_t>(name);
  }
  [[nodiscard]] std::vector<std::int64_t> i64(std::string_view name) const {
    return values<std::int64_t>(name);
  }
  /// The raw codes of an F8_E4M3 / F8_E5M2 / BF16 / F16 tensor (no conversion).
  [[nodiscard]] std::vector<std::uint8_t> fp8_codes(std::string_view name) const {
    const tensor_info& t = info(name);
    if (t.dtype != dtype::F8_E4M3 && t.dtype != dtype::F8_E5M2)
      fail("tensor '", t.name, "' has dtype ", dtype_name(t.dtype),
           ", expected F8_E4M3 or F8_E5M2");
    const auto raw = bytes_of(t);
    std::vector<std::uint8_t> out(raw.size());
    if (!out.empty()) std::memcpy(out.data(), raw.data(), raw.size());
    return out;
  }
  [[nodiscard]] std::vector<std::uint16_t> half_bits(std::string_view name) const {
    const tensor_info& t = info(name);
    if (t.dtype != dtype::BF16 && t.dtype != dtype::F16)
      fail("tensor '", t.name, "' has dtype ", dtype_name(t.dtype), ", expected BF16 or F16");
    std::vector<std::uint16_t> out(static_cast<std::size_t>(t.numel()));
    if (!out.empty()) std::memcpy(out.data(), bytes_of(t).data(), t.nbytes());
    return out;
  }

 private:
  safetensors_file() = default;

  template <class... Parts>
  [[noreturn]] void fail(Parts&&... parts) const {
    throw error(::polymoe::detail::concat("safetensors file '", path_,
                                          "': ", std::forward<Parts>(parts)...));
  }

  void swap(safetensors_file& o) noexcept {
    std::swap(path_, o.path_);
    std::swap(map_, o.map_);
    std::swap(map_size_, o.map_size_);
    std::swap(mapped_, o.mapped_);
    std::swap(buffer_, o.buffer_);
    std::swap(data_, o.data_);
    std::swap(file_size_, o.file_size_);
    std::swap(data_offset_, o.data_offset_);
    std::swap(tensors_, o.tensors_);
    std::swap(metadata_, o.metadata_);
  }

  void unmap() noexcept {
    if (mapped_ && map_ != nullptr) ::munmap(map_, map_size_);
    map_ = nullptr;
    mapped_ = false;
  }

  const tensor_info* lookup(std::string_view name) const {
    const auto it = std::lower_bound(
        tensors_.begin(), tensors_.end(), name,
        [](const tensor_info& t, std::string_view n) { return std::string_view(t.name) < n; });
    return (it != tensors_.end() && it->name == name) ? &*it : nullptr;
  }

  void load() {
    const regular_file file = open_regular_file(path_, ::polymoe::detail::concat("safetensors file '", path_, "'"));
    const int fd = file.fd.get();
    file_size_ = file.size;
    if (file_size_ < 8)
      fail("file is truncated: ", file_size_, " bytes, too small for the 8-byte header length");
    if (file_size_ > std::numeric_limits<std::size_t>::max()) fail("file is too large to map");
    void* p = ::mmap(nullptr, static_cast<std::size_t>(file_size_), PROT_READ, MAP_PRIVATE, fd, 0);
    if (p != MAP_FAILED) {
      map_ = p;
      map_size_ = static_cast<std::size_t>(file_size_);
      mapped_ = true;
      data_ = static_cast<const std::byte*>(p);
      return;
    }
    // fall back to reading the whole file
    buffer_.resize(static_cast<std::size_t>(file_size_));
    std::size_t got = 0;
    while (got < buffer_.size()) {
      const ::ssize_t r =
          ::pread(fd, buffer_.data() + got, buffer_.size() - got, static_cast<::off_t>(got));
      if (r < 0 && errno == EINTR) continue;
      if (r <= 0)
        fail("cannot read (", got, " of ", buffer_.size(),
             " bytes): ", r < 0 ? std::strerror(errno) : "unexpected end of file");
      got += static_cast<std::size_t>(r);
    }
    data_ = buffer_.data();
  }

  void parse_header() {
    std::uint64_t n = 0;
    for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<std::uint8_t>(data_[i]);
    if (n > file_size_ - 8)
      fail("header length ", n, " runs past the end of the file (", file_size_, " bytes; at most ",
           file_size_ - 8, " available) — the file is truncated or not safetensors");
    if (n > max_header_bytes)
      fail("header length ", n, " exceeds the limit of ", max_header_bytes, " bytes");
    if (n < 2) fail("header length ", n, " is too small for a JSON object");
    data_offset_ = 8 + n;
    const std::uint64_t data_size = file_size_ - data_offset_;
    const std::string_view text(reinterpret_cast<const char*>(data_ + 8),
                                static_cast<std::size_t>(n));

    json header;
    try {
      header = parse_json(text, "header", 64);
    } catch (const error& e) {
      std::string_view msg = e.what();
      if (msg.rfind("polymoe: ", 0) == 0) msg.remove_prefix(9);
      fail("header is not valid JSON: ", msg);
    }
    if (!header.is_object()) fail("header is ", header.type_name(), ", expected a JSON object");

    for (const auto& [key, value] : header.as_object()) {
      if (key == "__metadata__") {
        if (!value.is_object())
          fail("__metadata__ is ", value.type_name(), ", expected an object of strings");
        for (const auto& [mk, mv] : value.as_object()) {
          if (!mv.is_string())
            fail("__metadata__ entry '", mk, "' is ", mv.type_name(), ", expected a string");
          metadata_.emplace(mk, mv.as_string());
        }
        continue;
      }
      tensors_.push_back(parse_entry(key, value, data_size));
    }
    // header members come sorted by key already; keep the tensors sorted for binary search
    std::sort(tensors_.begin(), tensors_.end(),
              [](const tensor_info& a, const tensor_info& b) { return a.name < b.name; });

    // no two non-empty tensors may overlap
    std::vector<const tensor_info*> by_offset;
    by_offset.reserve(tensors_.size());
    for (const auto& t : tensors_)
      if (t.end > t.begin) by_offset.push_back(&t);
    std::sort(by_offset.begin(), by_offset.end(), [](const tensor_info* a, const tensor_info* b) {
      return a->begin != b->begin ? a->begin < b->begin : a->end < b->end;
    });
    for (std::size_t i = 1; i < by_offset.size(); ++i) {
      const tensor_info& a = *by_offset[i - 1];
      const tensor_info& b = *by_offset[i];
      if (b.begin < a.end)
        fail("tensors '", a.name, "' [", a.begin, ", ", a.end, ") and '", b.name, "' [", b.begin,
             ", ", b.end, ") overlap in the data region");
    }
  }

  tensor_info parse_entry(const std::string& name, const json& v, std::uint64_t data_size) const {
    tensor_info t;
    t.name = name;
    if (!v.is_object())
      fail("tensor '", name, "': entry is ", v.type_name(), ", expected an object");
    const json* dt = v.find("dtype");
    const json* sh = v.find("shape");
    const json* off = v.find("data_offsets");
    if (dt == nullptr) fail("tensor '", name, "': entry is missing the field 'dtype'");
    if (sh == nullptr) fail("tensor '", name, "': entry is missing the field 'shape'");
    if (off == nullptr) fail("tensor '", name, "': entry is missing the field 'data_offsets'");

    if (!dt->is_string())
      fail("tensor '", name, "': dtype is ", dt->type_name(), ", expected a string");
    const auto parsed = try_parse_dtype(dt->as_string());
    if (!parsed)
      fail("tensor '", name, "': unknown dtype \"", dt->as_string(),
           "\" (known: F32, F16, BF16, F8_E4M3, F8_E5M2, U8, I8, I16, I32, I64)");
    t.dtype = *parsed;

    if (!sh->is_array())
      fail("tensor '", name, "': shape is ", sh->type_name(), ", expected an array");
    const std::size_t esize = dtype_size(t.dtype);
    // product(shape) * dtype_size without overflow: bound it by the data region
    std::uint64_t bytes = esize;
    bool overflow = false;
    for (const auto& d : sh->as_array()) {
      if (!d.is_int())
        fail("tensor '", name, "': shape has a dimension that is ", d.type_name(),
             ", expected a non-negative integer");
      const std::int64_t dim = d.as_int();
      if (dim < 0) fail("tensor '", name, "': shape has a negative dimension ", dim);
      t.shape.push_back(dim);
      std::uint64_t next = 0;
      if (__builtin_mul_overflow(bytes, static_cast<std::uint64_t>(dim), &next)) overflow = true;
      bytes = next;
    }
    if (overflow)
      fail("tensor '", name, "': shape ", t.shape_string(), " of ", dtype_name(t.dtype),
           " overflows a 64-bit byte count");

    if (!off->is_array() || off->size() != 2)
      fail("tensor '", name, "': data_offsets must be an array [begin, end] of two integers");
    const json& b = off->at(std::size_t{0});
    const json& e = off->at(std::size_t{1});
    if (!b.is_int() || !e.is_int() || b.as_int() < 0 || e.as_int() < 0)
      fail("tensor '", name, "': data_offsets must be two non-negative integers");
    t.begin = static_cast<std::uint64_t>(b.as_int());
    t.end = static_cast<std::uint64_t>(e.as_int());
    if (t.begin > t.end)
      fail("tensor '", name, "': data_offsets [", t.begin, ", ", t.end, "] have begin > end");
    if (t.end > data_size)
      fail("tensor '", name, "': data_offsets [", t.begin, ", ", t.end,
           "] are outside the data region (", data_size, " bytes)");
    if (t.end - t.begin != bytes)
      fail("tensor '", name, "': data_offsets [", t.begin, ", ", t.end, "] hold ", t.end - t.begin,
           " bytes, but shape ", t.shape_string(), " of ", dtype_name(t.dtype), " needs ", bytes,
           " bytes (size mismatch)");
    return t;
  }

  void convert_to_f32(const tensor_info& t, std::span<const std::byte> raw, float* out) const {
    const std::size_t n = static_cast<std::size_t>(t.numel());
    const auto* p = reinterpret_cast<const unsigned char*>(raw.data());
    switch (t.dtype) {
      case dtype::F32:
        if (n) std::memcpy(out, p, n * 4);
        return;
      case dtype::F16:
      case dtype::BF16: {
        const bool bf = t.dtype == dtype::BF16;
        for (std::size_t i = 0; i < n; ++i) {
          const auto h = static_cast<std::uint16_t>(p[2 * i] | (p[2 * i + 1] << 8));
          out[i] = bf ? codecs::bf16_to_float(h) : codecs::fp16_to_float(h);
        }
        return;
      }
      case dtype::F8_E4M3:
        for (std::size_t i = 0; i < n; ++i) out[i] = codecs::e4m3_to_float(p[i]);
        return;
      case dtype::F8_E5M2:
        for (std::size_t i = 0; i < n; ++i) out[i] = codecs::e5m2_to_float(p[i]);
        return;
      default:
        fail("tensor '", t.name, "' has dtype ", dtype_name(t.dtype),
             "; conversion to fp32 covers F32, F16, BF16, F8_E4M3 and F8_E5M2 (use values<T>() or "
             "bytes())");
    }
  }

  std::string path_;
  void* map_ = nullptr;
  std::size_t map_size_ = 0;
  bool mapped_ = false;
  std::vector<std::byte> buffer_;
  const std::byte* data_ = nullptr;
  std::uint64_t file_size_ = 0;
  std::uint64_t data_offset_ = 0;
  std::vector<tensor_info> tensors_;
  std::map<std::string, std::string, std::less<>> metadata_;
};

/// One tensor to write: its bytes must be exactly product(shape) * dtype_size(dtype),
/// little-endian.
struct tensor_to_write {
  std::string name;
  ::polymoe::io::dtype dtype = ::polymoe::io::dtype::F32;
  std::vector<std::int64_t> shape;
  std::span<const std::byte> data;
};

/// A tensor_to_write viewing `values` (which must outlive the save call); dtype from T.
template <class T>
[[nodiscard]] tensor_to_write tensor_view(std::string name, std::vector<std::int64_t> shape,
                                          std::span<const T> values) {
  return {std::move(name), dtype_of<T>, std::move(shape), std::as_bytes(values)};
}

namespace detail {
/// Starts a safetensors file in `out`: the 8-byte little-endian length of the JSON header, then the
/// header, padded with spaces to a multiple of 8 bytes.
inline void write_header(atomic_output_file& out, std::string header) {
  while (header.size() % 8 != 0) header.push_back(' ');
  unsigned char len[8];
  std::uint64_t n = header.size();
  for (auto& b : len) {
    b = static_cast<unsigned char>(n & 0xFF);
    n >>= 8;
  }
  out.write(len, 8);
  out.write(header);
}
}  // namespace detail

/// Writes a safetensors file: header entries sorted by name (after __metadata__, when given), data
/// in the same order, the header padded with spaces to a multiple of 8 bytes. Validates names
/// (non-empty, unique, not "__metadata__"), shapes (non-negative) and byte counts first; writes
/// through an atomic_output_file (a fresh temporary beside `path`, renamed into place; an existing
/// `path` must be a regular file). polymoe::error on any failure.
inline void save_safetensors(const std::filesystem::path& path,
                             std::span<const tensor_to_write> tensors,
                             const std::map<std::string, std::string>& metadata = {}) {
  const std::string file = path.string();
  const auto fail = [&](auto&&... parts) {
    throw error(
        ::polymoe::detail::concat("cannot write safetensors file '", file, "': ", parts...));
  };
  std::vector<const tensor_to_write*> order;
  order.reserve(tensors.size());
  for (const auto& t : tensors) order.push_back(&t);
  std::sort(order.begin(), order.end(),
            [](const tensor_to_write* a, const tensor_to_write* b) { return a->name < b->name; });

  std::string header = "{";
  bool first = true;
  if (!metadata.empty()) {
    json meta = json::object();
    for (const auto& [k, v] : metadata) meta.set(k, json(v));
    header += json_quote("__metadata__") + ":" + meta.dump();
    first = false;
  }
  std::uint64_t offset = 0;
  for (std::size_t i = 0; i < order.size(); ++i) {
    const tensor_to_write& t = *order[i];
    if (t.name.empty()) fail("a tensor has an empty name");
    if (t.name == "__metadata__") fail("a tensor may not be named '__metadata__'");
    if (i > 0 && order[i - 1]->name == t.name) fail("duplicate tensor name '", t.name, "'");
    std::uint64_t bytes = dtype_size(t.dtype);
    for (const auto d : t.shape) {
      if (d < 0) fail("tensor '", t.name, "': shape has a negative dimension ", d);
      if (__builtin_mul_overflow(bytes, static_cast<std::uint64_t>(d), &bytes))
        fail("tensor '", t.name, "': shape overflows a 64-bit byte count");
    }
    if (bytes != t.data.size())
      fail("tensor '", t.name, "': ", t.data.size(), " bytes given, but shape ",
           detail::shape_string(t.shape), " of ", dtype_name(t.dtype), " needs ", bytes,
           " (size mismatch)");
    if (!first) header += ",";
    first = false;
    header +=
        json_quote(t.name) + ":{\"dtype\":\"" + std::string(dtype_name(t.dtype)) + "\",\"shape\":[";
    for (std::size_t k = 0; k < t.shape.size(); ++k) {
      if (k) header += ",";
      header += std::to_string(t.shape[k]);
    }
    header += "],\"data_offsets\":[" + std::to_string(offset) + "," +
              std::to_string(offset + bytes) + "]}";
    offset += bytes;
  }
  header += "}";

  atomic_output_file out(path, "cannot write safetensors file '" + detail::printable(path) + "'");
  detail::write_header(out, std::move(header));
  for (const auto* t : order) out.write(t->data);
  out.commit();
}

/// Overload for a braced list or vector of tensors.
inline void save_safetensors(const std::filesystem::path& path,
                             const std::vector<tensor_to_write>& tensors,
                             const std::map<std::string, std::string>& metadata = {}) {
  save_safetensors(path, std::span<const tensor_to_write>(tensors), metadata);
}

}  // namespace polymoe::io
