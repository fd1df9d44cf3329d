// tools/cmd_inspect.cpp - `mhc inspect PATH`: the mHC tensors of a checkpoint.
#include <cstdio>

#include "mhc/error.hpp"
#include "tools/cli.hpp"

namespace mhc::cli {

int cmd_inspect(Args& args) {
  if (args.has("help")) {
    std::puts("usage: mhc inspect PATH\n\n(not implemented yet: issue 6)");
    return 0;
  }
  args.finish("inspect");
  MHC_FAIL("mhc inspect is not implemented yet");
}

}  // namespace mhc::cli
