// tools/main.cpp - the `mhc` command: run, bench, inspect, variants.
#include <cstdio>
#include <cstring>
#include <exception>

#include "mhc/error.hpp"
#include "tools/cli.hpp"

namespace mhc::cli {

Args::Args(int argc, char** argv, int first) {
  for (int i = first; i < argc; ++i) {
    std::string a = argv[i];
    if (a.rfind("--", 0) == 0) {
      std::string name = a.substr(2), value = "1";
      const size_t eq = name.find('=');
      if (eq != std::string::npos) {
        value = name.substr(eq + 1);
        name = name.substr(0, eq);
      } else if (i + 1 < argc && std::strncmp(argv[i + 1], "--", 2) != 0 && name != "help") {
        value = argv[++i];
      }
      values_[name] = value;
    } else {
      positional_.push_back(a);
    }
  }
}

bool Args::has(const std::string& name) {
  used_[name] = true;
  return values_.count(name) != 0;
}

std::string Args::get(const std::string& name, const std::string& fallback) {
  used_[name] = true;
  auto it = values_.find(name);
  return it == values_.end() ? fallback : it->second;
}

long long Args::get_int(const std::string& name, long long fallback) {
  const std::string v = get(name, "");
  if (v.empty()) return fallback;
  char* end = nullptr;
  const long long x = std::strtoll(v.c_str(), &end, 10);
  MHC_CHECK(end != nullptr && *end == '\0', "--", name, ": expected an integer, got '", v, "'");
  return x;
}

void Args::finish(const std::string& command) const {
  for (const auto& kv : values_) {
    MHC_CHECK(used_.count(kv.first) != 0, "mhc ", command, ": unknown option --", kv.first,
              " (see mhc ", command, " --help)");
  }
}

std::vector<std::string> positional(const Args& a) { return a.positional_; }

}  // namespace mhc::cli

namespace {

const char* kUsage =
    "mhc - manifold-constrained hyper-connection operators for inference\n"
    "\n"
    "usage: mhc <command> [options]\n"
    "\n"
    "commands:\n"
    "  run       run the mHC residual path of a model (default: DeepSeek-V4-Flash, synthetic weights)\n"
    "  bench     time every operator with the benchmark protocol (docs/performance-spec.md)\n"
    "  inspect   list and check the mHC tensors of a checkpoint\n"
    "  variants  list the kernel variants compiled into this build\n"
    "\n"
    "mhc <command> --help shows each command's options.\n";

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2 || std::strcmp(argv[1], "--help") == 0 || std::strcmp(argv[1], "-h") == 0 ||
      std::strcmp(argv[1], "help") == 0) {
    std::fputs(kUsage, stdout);
    return argc < 2 ? 1 : 0;
  }
  const std::string command = argv[1];
  try {
    mhc::cli::Args args(argc, argv, 2);
    if (command == "run") return mhc::cli::cmd_run(args);
    if (command == "bench") return mhc::cli::cmd_bench(args);
    if (command == "inspect") return mhc::cli::cmd_inspect(args);
    if (command == "variants") return mhc::cli::cmd_variants(args);
    std::fprintf(stderr, "mhc: unknown command '%s'\n\n%s", command.c_str(), kUsage);
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "mhc %s: error: %s\n", command.c_str(), e.what());
    return 1;
  }
}
