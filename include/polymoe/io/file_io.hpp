#pragma once
// polymoe::io — the one way polymoe opens files to read and replaces files it writes.
//
// Reading: open_regular_file opens a path only when it names a regular file (links followed). It
// stats the path before opening it, opens with O_NONBLOCK (a FIFO put there in between never blocks
// the open) and checks fstat's S_ISREG before a byte is read, so a FIFO, a device (a link to
// /dev/zero), a directory or a socket is an error naming the file and what it is, never a hang or
// an endless read. read_regular_file reads such a file whole, up to a bound: JSON and text files
// (config.json, model.safetensors.index.json) are read through read_text_file, bounded by
// max_text_file_bytes (64 MiB). The safetensors reader opens its files the same way.
//
// Writing: atomic_output_file replaces a file so that its path names either the old file or the
// complete new one, never a part of it. The data go to a fresh temporary beside the target,
// "NAME.XXXXXX.tmp", created with O_CREAT | O_EXCL | O_NOFOLLOW (an existing file or link of that
// name is never opened, let alone followed) and mode 0666 less the umask; commit() fsyncs it and
// renames it over the target. Any failure, or destruction before commit(), removes the temporary.
// An existing target must be a regular file (links followed): a device, FIFO, directory or socket
// is refused, never replaced.
//
//   polymoe::io::atomic_output_file out("result.bin");
//   out.write(bytes);          // as often as needed
//   out.commit();              // result.bin is now the new file
//
// same_file / require_not_overwriting compare paths by inode (links followed), so an output that
// is one of the files a command reads is refused whatever path names it.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <span>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>

#include <polymoe/core/error.hpp>

namespace polymoe::io {

/// The largest JSON or text file polymoe reads (config.json, model.safetensors.index.json).
inline constexpr std::uint64_t max_text_file_bytes = std::uint64_t{64} << 20;

namespace detail {

/// The text of errno value `e` ("No such file or directory").
[[nodiscard]] inline std::string errno_text(int e) { return std::generic_category().message(e); }

/// What a file that is not a regular file is: "a FIFO", "a directory", ...
[[nodiscard]] inline const char* file_kind(mode_t m) noexcept {
  if (S_ISDIR(m)) return "a directory";
  if (S_ISFIFO(m)) return "a FIFO";
  if (S_ISCHR(m)) return "a character device";
  if (S_ISBLK(m)) return "a block device";
  if (S_ISSOCK(m)) return "a socket";
  if (S_ISLNK(m)) return "a symbolic link";
  return "of an unknown kind";
}

/// "64 MiB (67108864 bytes)" for a multiple of a MiB, else "N bytes".
[[nodiscard]] inline std::string byte_limit_text(std::uint64_t n) {
  if (n >= (std::uint64_t{1} << 20) && n % (std::uint64_t{1} << 20) == 0)
    return std::to_string(n >> 20) + " MiB (" + std::to_string(n) + " bytes)";
  return std::to_string(n) + " bytes";
}

/// `p` for a message, a NUL byte shown as a backslash and 0 (what() would end at the byte).
[[nodiscard]] inline std::string printable(const std::filesystem::path& p) {
  std::string s;
  for (const char c : p.native()) {
    if (c == '\0')
      s += "\\0";
    else
      s += c;
  }
  return s;
}

/// polymoe::error "<what>: <cause>" when `p` cannot name a file: empty, or with a NUL byte (which
/// the system would take as the end of the name, so that another file would be opened).
inline void require_usable_name(const std::filesystem::path& p, std::string_view what) {
  require(!p.native().empty(), what, ": the file name is empty");
  require(p.native().find('\0') == std::string::npos, what, ": the file name contains a NUL byte");
}

}  // namespace detail

/// A file descriptor, closed on destruction. Move-only.
class unique_fd {
 public:
  unique_fd() = default;
  explicit unique_fd(int fd) noexcept : fd_(fd) {}
  unique_fd(unique_fd&& o) noexcept : fd_(std::exchange(o.fd_, -1)) {}
  unique_fd& operator=(unique_fd&& o) noexcept {
    if (this != &o) reset(std::exchange(o.fd_, -1));
    return *this;
  }
  unique_fd(const unique_fd&) = delete;
  unique_fd& operator=(const unique_fd&) = delete;
  ~unique_fd() { reset(); }

  [[nodiscard]] int get() const noexcept { return fd_; }
  [[nodiscard]] explicit operator bool() const noexcept { return fd_ >= 0; }
  void reset(int fd = -1) noexcept {
    if (fd_ >= 0) ::close(fd_);
    fd_ = fd;
  }
  /// Closes the descriptor; the errno of a failed close(), else 0.
  [[nodiscard]] int close() noexcept {
    const int fd = std::exchange(fd_, -1);
    return fd >= 0 && ::close(fd) != 0 ? errno : 0;
  }

 private:
  int fd_ = -1;
};

/// A regular file opened read-only, and its size when opened.
struct regular_file {
  unique_fd fd;
  std::uint64_t size = 0;
};

/// Opens `path` read-only when it is a regular file (links followed); otherwise polymoe::error
/// "<what>: <cause>" ("cannot open: No such file or directory", "not a regular file (a FIFO)").
[[nodiscard]] inline regular_file open_regular_file(const std::filesystem::path& path, std::string_view what) {
  detail::require_usable_name(path, what);
  const auto not_regular = [&](mode_t m) {
    throw error(::polymoe::detail::concat(what, ": not a regular file (", detail::file_kind(m),
                                          "); only regular files are read"));
  };
  struct stat st {};
  // stat first: a device or FIFO is refused without being opened at all
  if (::stat(path.c_str(), &st) == 0 && !S_ISREG(st.st_mode)) not_regular(st.st_mode);
  int fd = -1;
  do fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
  while (fd < 0 && errno == EINTR);
  if (fd < 0) {
    const int e = errno;
    throw error(::polymoe::detail::concat(what, ": cannot open: ", detail::errno_text(e)));
  }
  regular_file f{unique_fd(fd)};
  if (::fstat(fd, &st) != 0) {
    const int e = errno;
    throw error(::polymoe::detail::concat(what, ": cannot stat: ", detail::errno_text(e)));
  }
  if (!S_ISREG(st.st_mode)) not_regular(st.st_mode);  // replaced between the stat and the open
  f.size = static_cast<std::uint64_t>(st.st_size);
  return f;
}

/// The whole of the regular file `path`, at most `max_bytes` of it; polymoe::error "<what>: <cause>"
/// otherwise (the cause names the limit).
[[nodiscard]] inline std::string read_regular_file(const std::filesystem::path& path, std::string_view what,
                                                   std::uint64_t max_bytes) {
  regular_file f = open_regular_file(path, what);
  const auto too_large = [&](std::uint64_t n, const char* at_least) {
    throw error(::polymoe::detail::concat(what, ": the file holds ", at_least, n, " bytes, more than the limit of ",
                                          detail::byte_limit_text(max_bytes)));
  };
  if (f.size > max_bytes) too_large(f.size, "");
  std::string text;
  text.reserve(static_cast<std::size_t>(f.size));
  char buf[65536];
  for (;;) {  // to the end of the file, which may have grown since fstat: bounded all the same
    const ::ssize_t r = ::read(f.fd.get(), buf, sizeof buf);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) {
      const int e = errno;
      throw error(::polymoe::detail::concat(what, ": cannot read: ", detail::errno_text(e)));
    }
    if (r == 0) break;
    text.append(buf, static_cast<std::size_t>(r));
    if (text.size() > max_bytes) too_large(text.size(), "at least ");
  }
  return text;
}

/// The text of a JSON or text file (at most max_text_file_bytes); polymoe::error naming the file
/// and the cause.
[[nodiscard]] inline std::string read_text_file(const std::filesystem::path& p) {
  return read_regular_file(p, ::polymoe::detail::concat("cannot read '", detail::printable(p), "'"),
                           max_text_file_bytes);
}

/// True when `a` and `b` both exist and are the same file: same device and inode, links followed.
[[nodiscard]] inline bool same_file(const std::filesystem::path& a, const std::filesystem::path& b) noexcept {
  struct stat sa {}, sb {};
  return ::stat(a.c_str(), &sa) == 0 && ::stat(b.c_str(), &sb) == 0 && sa.st_dev == sb.st_dev &&
         sa.st_ino == sb.st_ino;
}

/// polymoe::error when the output `out` is one of `sources` (by inode, links followed): writing it
/// would destroy a file that is read. `what` names the output ("run: --output 'x'").
inline void require_not_overwriting(const std::filesystem::path& out, std::span<const std::filesystem::path> sources,
                                    std::string_view what) {
  for (const auto& s : sources)
    require(!same_file(out, s), what, " is the file '", s.string(),
            "' (the same file, links followed), which is read: refusing to overwrite it");
}

/// polymoe::error "<what>: <cause>" unless `target` may be replaced by a regular file: a usable file
/// name (not empty, no NUL byte, not ending in '/') that names nothing yet or a regular file (links
/// followed). A device, FIFO, directory or socket is never replaced. atomic_output_file checks this
/// first; a command may check it before its work too.
inline void require_replaceable(const std::filesystem::path& target, std::string_view what) {
  detail::require_usable_name(target, what);
  require(target.has_filename(), what, ": the path names a directory, not a file");
  struct stat st {};
  if (::stat(target.c_str(), &st) == 0) {
    require(S_ISREG(st.st_mode), what, ": it is ", detail::file_kind(st.st_mode),
            ", not a regular file; only regular files are replaced");
  } else if (errno != ENOENT) {
    const int e = errno;
    throw error(::polymoe::detail::concat(what, ": ", detail::errno_text(e)));
  }
}

/// A file written whole, then put in place of `target` at once (see the top of this header).
class atomic_output_file {
 public:
  /// Checks `target` and creates its temporary. `what` names the target in errors; by default
  /// "cannot write '<target>'".
  explicit atomic_output_file(std::filesystem::path target, std::string what = {})
      : target_(std::move(target)), what_(what.empty() ? "cannot write '" + detail::printable(target_) + "'" : std::move(what)) {
    require_replaceable(target_, what_);
    create_temporary();
  }
  atomic_output_file(const atomic_output_file&) = delete;
  atomic_output_file& operator=(const atomic_output_file&) = delete;
  ~atomic_output_file() { discard(); }

  [[nodiscard]] const std::filesystem::path& target() const noexcept { return target_; }
  /// The temporary file the data go to until commit().
  [[nodiscard]] const std::filesystem::path& temporary() const noexcept { return tmp_; }

  /// Appends `n` bytes; polymoe::error (the temporary removed) when they cannot be written.
  void write(const void* data, std::size_t n) {
    require(static_cast<bool>(fd_), what_, ": write after commit or failure");
    const char* p = static_cast<const char*>(data);
    while (n > 0) {
      const ::ssize_t r = ::write(fd_.get(), p, n);
      if (r < 0 && errno == EINTR) continue;
      if (r <= 0) fail_with(r < 0 ? errno : EIO, "write failed");
      p += r;
      n -= static_cast<std::size_t>(r);
    }
  }
  void write(std::span<const std::byte> bytes) { write(bytes.data(), bytes.size()); }
  void write(std::string_view text) { write(text.data(), text.size()); }

  /// fsyncs the temporary and renames it over the target; polymoe::error (the temporary removed,
  /// the target as it was) on failure.
  void commit() {
    require(static_cast<bool>(fd_), what_, ": commit after commit or failure");
    if (::fsync(fd_.get()) != 0) fail_with(errno, "fsync failed");
    if (const int e = fd_.close(); e != 0) fail_with(e, "close failed");
    if (::rename(tmp_.c_str(), target_.c_str()) != 0)
      fail_with(errno, "renaming it into place failed");
    tmp_.clear();
    const auto dir = target_.parent_path().empty() ? std::filesystem::path(".") : target_.parent_path();
    if (unique_fd d(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC)); d) (void)::fsync(d.get());
  }

 private:
  void create_temporary() {
    const auto dir = target_.parent_path();
    // the target's name (at most 200 bytes of it, so that the temporary's stays a valid name),
    // 6 random letters, ".tmp"
    const std::string stem = target_.filename().string().substr(0, 200) + ".";
    static constexpr char letters[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
    std::uint64_t state = static_cast<std::uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count()) ^
                          (static_cast<std::uint64_t>(::getpid()) << 32) ^ reinterpret_cast<std::uintptr_t>(this);
    int e = 0;
    for (int attempt = 0; attempt < 100; ++attempt) {
      std::string name = stem;
      for (int i = 0; i < 6; ++i) {
        state = state * 6364136223846793005ull + 1442695040888963407ull;
        name += letters[(state >> 33) % (sizeof letters - 1)];
      }
      const std::filesystem::path tmp = dir / (name + ".tmp");
      const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0666);
      if (fd >= 0) {
        fd_.reset(fd);
        tmp_ = tmp;
        return;
      }
      e = errno;
      if (e != EEXIST && e != EINTR) break;
    }
    throw error(::polymoe::detail::concat(what_, ": cannot create a temporary file in '",
                                          dir.empty() ? std::string(".") : dir.string(), "': ", detail::errno_text(e)));
  }

  /// Closes and removes the temporary (when not yet renamed into place).
  void discard() noexcept {
    fd_.reset();
    if (!tmp_.empty()) ::unlink(tmp_.c_str());
    tmp_.clear();
  }

  [[noreturn]] void fail_with(int e, std::string_view step) {
    const std::string tmp = tmp_.string();
    discard();
    throw error(::polymoe::detail::concat(what_, ": ", step, " (temporary file '", tmp, "'): ", detail::errno_text(e),
                                          e == ENOSPC || e == EIO || e == EDQUOT ? " (disk full or I/O error)" : ""));
  }

  std::filesystem::path target_;
  std::string what_;
  std::filesystem::path tmp_;
  unique_fd fd_;
};

/// Writes `text` to `p` through an atomic_output_file; polymoe::error naming the file and the cause.
inline void write_text_file(const std::filesystem::path& p, std::string_view text) {
  atomic_output_file out(p);
  out.write(text);
  out.commit();
}

}  // namespace polymoe::io
