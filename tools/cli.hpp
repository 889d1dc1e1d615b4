#pragma once
// The polymoe command-line tool: argument parsing shared by the subcommands, and their entry points.
#include <charconv>
#include <cstdint>
#include <filesystem>
#include <initializer_list>
#include <iostream>
#include <map>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include <polymoe/core/error.hpp>
#include <polymoe/core/types.hpp>
#include <polymoe/io/checkpoint_files.hpp>

namespace polymoe::cli {

/// One subcommand's arguments: `--key value` options, `--flag`s and positional words.
struct args {
  std::string command;
  std::vector<std::string> positional;
  std::map<std::string, std::string, std::less<>> opts;
  std::set<std::string, std::less<>> flags;

  [[nodiscard]] bool has(std::string_view k) const { return opts.find(k) != opts.end(); }
  [[nodiscard]] bool flag(std::string_view k) const { return flags.find(k) != flags.end(); }
  [[nodiscard]] std::string get(std::string_view k, std::string_view fallback = {}) const {
    const auto it = opts.find(k);
    return it == opts.end() ? std::string(fallback) : it->second;
  }
  /// The value of a required option; polymoe::error naming it when absent.
  [[nodiscard]] std::string need(std::string_view k) const {
    const auto it = opts.find(k);
    require(it != opts.end(), command, ": missing the option --", k, " (see polymoe ", command, " --help)");
    return it->second;
  }
  [[nodiscard]] std::int64_t integer(std::string_view k, std::int64_t fallback) const {
    return has(k) ? parse_int(get(k), k) : fallback;
  }
  /// As integer(), and polymoe::error naming the option unless lo <= value <= hi.
  [[nodiscard]] std::int64_t integer_in(std::string_view k, std::int64_t fallback, std::int64_t lo,
                                        std::int64_t hi) const {
    const std::int64_t x = integer(k, fallback);
    require(x >= lo && x <= hi, command, ": --", k, " must be in [", lo, ", ", hi, "], got ", x);
    return x;
  }
  [[nodiscard]] std::int64_t parse_int(const std::string& v, std::string_view k) const {
    std::int64_t x = 0;
    const auto [p, ec] = std::from_chars(v.data(), v.data() + v.size(), x);
    require(ec == std::errc{} && p == v.data() + v.size(), command, ": --", k, " must be an integer, got '", v, "'");
    return x;
  }
};

/// Parses argv[first..argc): options listed in `valued` take a value, those in `switches` do not;
/// anything else starting with "--" is an error naming it. `--help` / `-h` set the flag "help".
inline args parse_args(std::string command, int argc, char** argv, int first, std::set<std::string, std::less<>> valued,
                       std::set<std::string, std::less<>> switches = {}) {
  args a;
  a.command = std::move(command);
  for (int i = first; i < argc; ++i) {
    const std::string_view w = argv[i];
    if (w == "--help" || w == "-h") {
      a.flags.insert("help");
    } else if (w.starts_with("--")) {
      std::string key(w.substr(2));
      std::string value;
      bool inline_value = false;
      if (const auto eq = key.find('='); eq != std::string::npos)
        value = key.substr(eq + 1), key.resize(eq), inline_value = true;
      if (switches.count(key)) {
        require(!inline_value, a.command, ": --", key, " takes no value");
        a.flags.insert(key);
      } else if (valued.count(key)) {
        if (!inline_value) {
          require(i + 1 < argc, a.command, ": --", key, " needs a value");
          value = argv[++i];
        }
        a.opts[key] = value;
      } else {
        throw error(detail::concat(a.command, ": unknown option --", key, " (see polymoe ", a.command, " --help)"));
      }
    } else {
      a.positional.emplace_back(w);
    }
  }
  return a;
}

/// The files of a checkpoint that a command reads: its config.json, index and shards.
inline std::vector<std::filesystem::path> checkpoint_paths(const io::checkpoint_files& checkpoint) {
  std::vector<std::filesystem::path> p = checkpoint.paths();
  p.push_back(checkpoint.dir() / "config.json");
  return p;
}

/// polymoe::error unless `command` may write its output file `out`: a regular file or none
/// (io::require_replaceable), and none of the files it reads, compared by inode with links followed
/// (the checkpoint's, checkpoint_paths, and `inputs`): writing one of those would destroy what is
/// read, whatever path names it. Checked before the work, so that a bad output costs nothing.
inline void require_writable_output(std::string_view command, const std::filesystem::path& out,
                                    const io::checkpoint_files& checkpoint,
                                    std::initializer_list<std::filesystem::path> inputs = {}) {
  io::require_replaceable(out, detail::concat(command, ": cannot write '", io::detail::printable(out), "'"));
  std::vector<std::filesystem::path> read = checkpoint_paths(checkpoint);
  read.insert(read.end(), inputs.begin(), inputs.end());
  io::require_not_overwriting(out, read, detail::concat(command, ": the output '", out.string(), "'"));
}

int cmd_run(int argc, char** argv);
int cmd_quantize(int argc, char** argv);
int cmd_list(int argc, char** argv);
int cmd_make_checkpoint(int argc, char** argv);
int cmd_inspect(int argc, char** argv);
int cmd_compare(int argc, char** argv);

}  // namespace polymoe::cli
