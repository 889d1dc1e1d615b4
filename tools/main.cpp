// polymoe: the command-line tool. Subcommands run, quantize, list, make-checkpoint, inspect,
// compare; each has --help. Errors are one line starting with "polymoe: " and exit status 1.
#include <cstdio>
#include <exception>
#include <iostream>
#include <new>
#include <string_view>

#include <polymoe/kernels/tiled/isa.hpp>

#include "cli.hpp"
#include "selection.hpp"

namespace polymoe::cli {

int cmd_list(int argc, char** argv) {
  const args a = parse_args("list", argc, argv, 2, {});
  if (a.flag("help")) {
    std::cout << "usage: polymoe list\n\nPrints every valid (a2a, quant, kernel) triple of the pairing table\n"
                 "(the names `polymoe run` accepts for --a2a, --quant and --kernel).\n";
    return 0;
  }
  const auto all = all_triple_names();
  std::printf("%-16s %-24s %s\n", "a2a", "quant", "kernel");
  for (const auto& t : all)
    std::printf("%-16s %-24s %s\n", std::string(t.a2a).c_str(), std::string(t.quant).c_str(),
                std::string(t.kernel).c_str());
  std::printf("(%zu valid triples)\n", all.size());
  return 0;
}

/// `polymoe --version`: the version, the commit it was configured from, the instruction sets the
/// kernels were compiled for, and whether this machine runs the AMX tiles.
int cmd_version() {
  std::printf("polymoe %s (commit %s)\n", POLYMOE_VERSION_STRING, POLYMOE_GIT_COMMIT);
  std::printf("  tiled kernels: %s\n", kernels::tiled::compiled_paths().c_str());
  std::printf("  this machine: %s\n", kernels::tiled::machine_paths().c_str());
  std::printf("  --kernel auto runs %s for bf16\n", std::string(auto_kernel("local", "bf16")).c_str());
  return 0;
}

}  // namespace polymoe::cli

namespace {
constexpr const char* usage = R"(usage: polymoe <command> [options]    (polymoe <command> --help for each)

commands:
  run              run one MoE layer of a checkpoint on an input file
  quantize         write a quantized copy of a checkpoint (the schemes with a checkpoint layout)
  list             print the valid (a2a, quant, kernel) triples
  make-checkpoint  write a synthetic checkpoint in Hugging Face layout (tiny, mixtral-8x7b, ...)
  inspect          print a checkpoint's family, shapes, quantization and tensors per layer
  compare          compare a tensor of two safetensors files (relative max error)
  --version        the version, its commit and the instruction sets compiled in
)";
}

int main(int argc, char** argv) {
  using namespace polymoe::cli;
  if (argc < 2) {
    std::cerr << usage;
    return 2;
  }
  const std::string_view cmd = argv[1];
  try {
    if (cmd == "--help" || cmd == "-h" || cmd == "help") {
      std::cout << usage;
      return 0;
    }
    if (cmd == "--version" || cmd == "version") return cmd_version();
    if (cmd == "run") return cmd_run(argc, argv);
    if (cmd == "quantize") return cmd_quantize(argc, argv);
    if (cmd == "list") return cmd_list(argc, argv);
    if (cmd == "make-checkpoint") return cmd_make_checkpoint(argc, argv);
    if (cmd == "inspect") return cmd_inspect(argc, argv);
    if (cmd == "compare") return cmd_compare(argc, argv);
    std::cerr << "polymoe: unknown command '" << cmd << "'\n" << usage;
    return 2;
  } catch (const polymoe::error& e) {
    std::cerr << e.what() << "\n";
  } catch (const std::bad_alloc&) {
    std::cerr << "polymoe: out of memory\n";
  } catch (const std::exception& e) {
    std::cerr << "polymoe: " << e.what() << "\n";
  }
  return 1;
}
