// polymoe: the command-line tool. Subcommands run, quantize, list, make-checkpoint, inspect,
// compare; each has --help. Errors are one line starting with "polymoe: " and exit status 1; no
// command or an unknown one is exit status 2.
#include <algorithm>
#include <cstdio>
#include <exception>
#include <iostream>
#include <new>
#include <string_view>

#include <polymoe/kernels/tiled/isa.hpp>

#include "cli.hpp"
#include "selection.hpp"

namespace polymoe::cli {

command add_list(CLI::App& polymoe) {
  CLI::App* app = polymoe.add_subcommand("list", "print the valid (a2a, quant, kernel) triples");
  app->footer("Prints every valid (a2a, quant, kernel) triple of the pairing table\n"
              "(the names `polymoe run` accepts for --a2a, --quant and --kernel).");
  return {app, [] {
            const auto all = all_triple_names();
            std::printf("%-16s %-24s %s\n", "a2a", "quant", "kernel");
            for (const auto& t : all)
              std::printf("%-16s %-24s %s\n", std::string(t.a2a).c_str(), std::string(t.quant).c_str(),
                          std::string(t.kernel).c_str());
            std::printf("(%zu valid triples)\n", all.size());
            return 0;
          }};
}

}  // namespace polymoe::cli

int main(int argc, char** argv) {
  using namespace polymoe::cli;
  CLI::App app("polymoe: Mixture-of-Experts layers of Hugging Face checkpoints from the command line", "polymoe");
  // `--version` also says which kernel `--kernel auto` picks for bf16 on this machine
  polymoe::programs::set_up(app, POLYMOE_VERSION_STRING, POLYMOE_GIT_COMMIT, [] {
    return "  --kernel auto runs " + std::string(auto_kernel("local", "bf16")) + " for bf16";
  });
  app.footer("polymoe <command> --help describes each command and its options.");
  const std::vector<command> commands{add_run(app, argv[0]),     add_quantize(app), add_list(app),
                                      add_make_checkpoint(app), add_inspect(app),  add_compare(app)};
  app.require_subcommand(1);
  if (argc < 2) {
    std::cerr << app.help();
    return 2;
  }
  const std::string_view first = argv[1];
  if (first == "help") {
    std::cout << app.help();
    return 0;
  }
  if (!first.starts_with("-") &&
      std::none_of(commands.begin(), commands.end(), [&](const command& c) { return c.app->get_name() == first; })) {
    std::cerr << "polymoe: unknown command '" << first << "' (see polymoe --help)\n";
    return 2;
  }
  try {
    if (const auto status = polymoe::programs::parse(app, argc, argv)) return *status;
    for (const auto& c : commands)
      if (c.app->parsed()) return c.run();
    return 2;  // unreachable: require_subcommand(1)
  } catch (const polymoe::error& e) {
    std::cerr << e.what() << "\n";
  } catch (const std::bad_alloc&) {
    std::cerr << "polymoe: out of memory\n";
  } catch (const std::exception& e) {
    std::cerr << "polymoe: " << e.what() << "\n";
  }
  return 1;
}
