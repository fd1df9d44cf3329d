// tools/cmd_bench.cpp - `mhc bench` (the benchmark protocol of docs/performance-spec.md).
#include <cstdio>

#include "mhc/error.hpp"
#include "tools/cli.hpp"

namespace mhc::cli {

int cmd_bench(Args& args) {
  if (args.has("help")) {
    std::puts("usage: mhc bench [options]\n\n(not implemented yet: issue 4)");
    return 0;
  }
  args.finish("bench");
  MHC_FAIL("mhc bench is not implemented yet");
}

}  // namespace mhc::cli
