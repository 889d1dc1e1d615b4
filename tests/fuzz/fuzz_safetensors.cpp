// libFuzzer target: polymoe::io::safetensors_file::open on arbitrary bytes, then every accessor on
// every tensor it accepts. Any crash, sanitizer report or exception other than polymoe::error is
// a bug. The input is handed over as a file (a memfd, opened through /proc/self/fd) because the
// reader maps files.
#include <sys/mman.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <string>

#include <polymoe/io/safetensors.hpp>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static const int fd = memfd_create("polymoe_fuzz", 0);
  static const std::string path = "/proc/self/fd/" + std::to_string(fd);
  if (fd < 0 || ftruncate(fd, 0) != 0) return 0;
  std::size_t done = 0;
  while (done < size) {
    const ssize_t w = pwrite(fd, data + done, size - done, static_cast<off_t>(done));
    if (w <= 0) return 0;
    done += static_cast<std::size_t>(w);
  }
  try {
    const auto f = polymoe::io::safetensors_file::open(path);
    volatile unsigned sink = 0;
    for (const auto& t : f.tensors()) {
      const auto raw = f.bytes_of(t);
      for (const std::byte b : raw) sink = sink + static_cast<unsigned>(b);
      using polymoe::io::dtype;
      if (t.dtype == dtype::F32 || t.dtype == dtype::F16 || t.dtype == dtype::BF16 || t.dtype == dtype::F8_E4M3 ||
          t.dtype == dtype::F8_E5M2) {
        const auto v = f.to_f32(t.name);
        if (!v.empty()) sink = sink + static_cast<unsigned>(v[0] == v[0]);
        if (t.rank() <= 2) sink = sink + static_cast<unsigned>(f.matrix(t.name).size());
      }
    }
    for (const auto& [k, v] : f.metadata()) sink = sink + static_cast<unsigned>(k.size() + v.size());
  } catch (const polymoe::error&) {
  }
  return 0;
}
