#pragma once
// The polymoe command-line tool: what the subcommands share, and their entry points.
#include <filesystem>
#include <functional>
#include <initializer_list>
#include <string>
#include <string_view>
#include <vector>

#include <polymoe/core/error.hpp>
#include <polymoe/core/types.hpp>
#include <polymoe/io/checkpoint_files.hpp>

#include "cli11_support.hpp"
#include "progress.hpp"

namespace polymoe::cli {

/// A subcommand: its CLI11 App (its options bound to settings it owns) and what runs it once the
/// command line is parsed.
struct command {
  CLI::App* app;
  std::function<int()> run;
};

/// A subcommand's --quiet and --progress, and the progress mode they ask for.
struct progress_flags {
  bool quiet = false, from_start = false;
  void add_to(CLI::App& app) {
    app.add_flag("--quiet", quiet, "no progress and no summary");
    app.add_flag("--progress", from_start, "show the progress of every long step from its start");
  }
  [[nodiscard]] progress::mode mode() const {
    return quiet ? progress::mode::off : from_start ? progress::mode::always : progress::mode::after_a_second;
  }
};

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

// Each adds its subcommand to the tool's App.
command add_run(CLI::App& polymoe, char* argv0);
command add_quantize(CLI::App& polymoe);
command add_list(CLI::App& polymoe);
command add_make_checkpoint(CLI::App& polymoe);
command add_inspect(CLI::App& polymoe);
command add_compare(CLI::App& polymoe);

}  // namespace polymoe::cli
