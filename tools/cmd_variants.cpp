// tools/cmd_variants.cpp - `mhc variants`: the explicit variant list of this build.
#include <cstdio>

#include "mhc/ops.hpp"
#include "tools/cli.hpp"

namespace mhc::cli {

namespace {

int cmd_variants() {
  std::printf("%-32s %-6s %-8s %s\n", "id", "device", "family", "kernels (the plan) / supports");
  for (const VariantInfo& v : list_variants()) {
    std::printf("%-32s %-6s %-8s %s\n%-48s supports: %s\n", v.id.c_str(), v.device.c_str(), v.family.c_str(),
                v.kernels.c_str(), "", v.envelope.c_str());
  }
  std::printf("\nCUDA device available: %s\n", cuda_available() ? "yes" : "no");
  return 0;
}

}  // namespace

Action setup_variants(CLI::App& app) {
  app.footer("Lists every kernel variant compiled into this build, in dispatch priority order, with its\n"
             "device and the shapes its supports() predicate accepts. An id can be forced with\n"
             "Exec::variant (C++), variant= (Python) or --variant (bench).");
  return [] { return cmd_variants(); };
}

}  // namespace mhc::cli
