// tools/cli.hpp - the subcommands of the `mhc` command, on CLI11 (Debian: libcli11-dev).
//
// Each subcommand registers its options on its CLI::App and returns the action that runs it
// once the whole command line has parsed. Bad flags or values exit with status 2 (main.cpp),
// failures of the run itself with 1.
#pragma once

#include <CLI/CLI.hpp>
#include <functional>
#include <string>

namespace mhc::cli {

using Action = std::function<int()>;

Action setup_run(CLI::App& app);
Action setup_bench(CLI::App& app);
Action setup_inspect(CLI::App& app);
Action setup_variants(CLI::App& app);
Action setup_warmup(CLI::App& app);

/// Accepts only a plain decimal integer ("-12", "40"; not "0x10", "010" read as octal, "1e3",
/// "" or a number beyond 64 bits, which strtoll would saturate), before CLI11 converts it.
const CLI::Validator& decimal();

}  // namespace mhc::cli
