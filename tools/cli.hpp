// tools/cli.hpp - the tiny flag parser and the subcommand entry points of the `mhc` command.
#pragma once

#include <map>
#include <string>
#include <vector>

namespace mhc::cli {

/// Parsed "--name value" / "--flag" arguments. Unknown flags are an error (see finish()).
class Args {
 public:
  Args(int argc, char** argv, int first);
  bool has(const std::string& name);                       // a bare flag, e.g. --help
  std::string get(const std::string& name, const std::string& fallback);
  long long get_int(const std::string& name, long long fallback);
  /// Throws mhc::Error naming every argument no get()/has() asked for.
  void finish(const std::string& command) const;

 private:
  std::map<std::string, std::string> values_;
  std::map<std::string, bool> used_;
  std::vector<std::string> positional_;
  friend std::vector<std::string> positional(const Args&);
};
std::vector<std::string> positional(const Args& a);

int cmd_run(Args& args);
int cmd_bench(Args& args);
int cmd_inspect(Args& args);
int cmd_variants(Args& args);

}  // namespace mhc::cli
