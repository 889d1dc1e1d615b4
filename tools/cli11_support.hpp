#pragma once
// The programs' command lines (the polymoe tool and the benchmarks) on one parser, CLI11: every
// program takes `--key=value` and `--key value`, generates its --help, lists its choices in the help
// and in the error for any other value, and answers --version with its commit and the instruction
// sets compiled in. A bad command line is one line on stderr, "<program>: [<command>: ]<message>",
// like every other error of the programs. Not a library header: only programs include CLI11.
#include <algorithm>
#include <cstdint>
#include <functional>
#include <iostream>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <CLI/CLI.hpp>

#include <polymoe/kernels/tiled/isa.hpp>

namespace polymoe::programs {

/// "a, b, c": names for a message.
inline std::string joined(const std::vector<std::string>& names, std::string_view sep = ", ") {
  std::string s;
  for (const auto& n : names) s += (s.empty() ? "" : std::string(sep)) + n;
  return s;
}

/// The values a choice option takes: listed in --help ("{a,b,c}") and in the error for any other
/// value ("unknown 'x'; valid: a, b, c"). With `normalize`, "-" and "_" are the same in a value
/// (as in policy names), which is rewritten to the listed spelling. Duplicates are listed once.
inline CLI::Validator choice(std::vector<std::string> names, bool normalize = false) {
  std::vector<std::string> unique;
  for (auto& n : names)
    if (std::find(unique.begin(), unique.end(), n) == unique.end()) unique.push_back(std::move(n));
  const auto canonical = [normalize](std::string s) {
    if (normalize) std::replace(s.begin(), s.end(), '-', '_');
    return s;
  };
  return CLI::Validator(
      [unique, canonical](std::string& value) {
        const std::string v = canonical(value);
        for (const auto& n : unique)
          if (canonical(n) == v) {
            value = n;
            return std::string();
          }
        return "unknown '" + value + "'; valid: " + joined(unique);
      },
      "{" + joined(unique, ",") + "}");
}

/// The program and the subcommands its command line selected, joined by `sep` ("polymoe run").
inline std::string command_path(const CLI::App& app, std::string_view sep) {
  std::string path = app.get_name();
  for (const CLI::App* a = &app;;) {
    const auto sub = a->get_subcommands();
    if (sub.empty()) break;
    a = sub.front();
    path += std::string(sep) + a->get_name();
  }
  return path;
}

/// Parses the command line into `app`. --help and --version print to stdout and give 0; a bad
/// command line prints "<program>: [<command>: ]<message> (see <program> [<command>] --help)" as
/// one line on stderr and gives `status`; nullopt when the program is to go on.
inline std::optional<int> parse(CLI::App& app, int argc, char** argv, int status = 1) {
  try {
    app.parse(argc, argv);
    return std::nullopt;
  } catch (const CLI::Success& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::string message = e.what();
    std::replace(message.begin(), message.end(), '\n', ' ');
    std::cerr << command_path(app, ": ") << ": " << message << " (see " << command_path(app, " ") << " --help)"
              << std::endl;
    return status;
  }
}

/// The first lines of every program's --version: its version, the commit it was configured from,
/// the instruction sets the tiled kernels were compiled for and those this machine runs.
inline std::string version_text(std::string_view program, std::string_view version, std::string_view commit) {
  return std::string(program) + " " + std::string(version) + " (commit " + std::string(commit) + ")\n" +
         "  tiled kernels: " + kernels::tiled::compiled_paths() + "\n" +
         "  this machine: " + kernels::tiled::machine_paths();
}

/// A program's App: `--version` (version_text and what `more` adds), and options given twice take
/// the last value (scripts append their own settings to a caller's).
inline void set_up(CLI::App& app, std::string_view version, std::string_view commit,
                   std::function<std::string()> more = {}) {
  const std::string program = app.get_name();
  app.set_version_flag("--version", [program, v = std::string(version), c = std::string(commit), more] {
    return version_text(program, v, c) + (more ? "\n" + more() : std::string());
  }, "print the version, its commit and the instruction sets compiled in, and exit");
  app.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  app.get_formatter()->column_width(28);
}

}  // namespace polymoe::programs
