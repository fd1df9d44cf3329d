// tools/main.cpp - the `mhc` command: run, bench, inspect, variants, warmup.
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <new>
#include <string>

#include "mhc/error.hpp"
#include "mhc/mhc.hpp"
#include "tools/cli.hpp"

namespace mhc::cli {

const CLI::Validator& decimal() {
  static const CLI::Validator v(
      [](std::string& text) -> std::string {
        const size_t digits = !text.empty() && text[0] == '-' ? 1 : 0;
        bool ok = text.size() > digits && text.find_first_not_of("0123456789", digits) == std::string::npos;
        // CLI11 converts with base 0: drop leading zeros so that "010" is ten, not octal eight.
        while (ok && text.size() > digits + 1 && text[digits] == '0') text.erase(digits, 1);
        if (ok) {
          errno = 0;
          char* end = nullptr;
          if (digits) {
            (void)std::strtoll(text.c_str(), &end, 10);
          } else {
            (void)std::strtoull(text.c_str(), &end, 10);
          }
          ok = errno == 0;
        }
        return ok ? std::string() : "expected a decimal integer of at most 64 bits, got '" + text + "'";
      },
      "");
  return v;
}

}  // namespace mhc::cli

int main(int argc, char** argv) {
  CLI::App app("mhc - manifold-constrained hyper-connection operators for inference", "mhc");
  app.set_version_flag("--version", std::string("mhc ") + mhc::version(), "print the version and exit");
  app.require_subcommand(1, 1);
  app.footer("mhc COMMAND --help shows each command's options. Exit status: 0 success, 1 failure, 2 bad\n"
             "command line.");
  mhc::cli::Action action;
  auto add = [&](const char* name, const char* what, mhc::cli::Action (*setup)(CLI::App&)) {
    CLI::App* sub = app.add_subcommand(name, what);
    sub->set_version_flag("--version", std::string("mhc ") + mhc::version(), "print the version and exit");
    mhc::cli::Action a = setup(*sub);
    sub->final_callback([&action, a] { action = a; });
  };
  add("run", "run the mHC residual path of a model (default: DeepSeek-V4-Flash, synthetic weights)",
      mhc::cli::setup_run);
  add("bench", "time every operator with the benchmark protocol (docs/performance-spec.md)", mhc::cli::setup_bench);
  add("inspect", "list and check the mHC tensors of a checkpoint", mhc::cli::setup_inspect);
  add("variants", "list the kernel variants compiled into this build", mhc::cli::setup_variants);
  add("warmup", "time Workspace::create with its warmup (every kernel loaded) and the first calls",
      mhc::cli::setup_warmup);

  std::string command = "mhc";
  for (int i = 1; i < argc; ++i) {
    if (argv[i][0] != '-') {
      command += std::string(" ") + argv[i];
      break;
    }
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return app.exit(e);  // --help, -h, --version
    std::fprintf(stderr, "%s: error: %s\n(see %s --help)\n", command.c_str(), e.what(), command.c_str());
    return 2;
  }
  try {
    return action ? action() : 2;
  } catch (const std::bad_alloc&) {
    std::fprintf(stderr, "%s: error: out of memory (the sizes asked for do not fit in this machine)\n",
                 command.c_str());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s: error: %s\n", command.c_str(), e.what());
    return 1;
  }
}
