// `ssmkit check <op>`: runs an op on fresh random inputs against its fp64 oracle and prints
// the relative errors. Ops register themselves from their own file, as the bench suites do.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace ssmkit::check_cli {

struct Options {
  std::vector<int64_t> lengths{60, 1024, 16384};
  std::string algo;   // only this algorithm ("" = all)
  uint64_t seed = 0;  // 0 = fresh (drawn from the clock and printed)
  int64_t dim = 16;   // channels
  double dt_min = 1e-3, dt_max = 1e-1;
  bool json = false;  // one JSON array instead of a table
};

struct Check {
  std::string name;
  std::string help;
  std::function<int(const Options&)> run;
};

inline std::vector<Check>& Checks() {
  static std::vector<Check> checks;
  return checks;
}

struct Registration {
  explicit Registration(Check check) { Checks().push_back(std::move(check)); }
};

}  // namespace ssmkit::check_cli
