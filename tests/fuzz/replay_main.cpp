// Runs a libFuzzer target over files without libFuzzer: every file named on the command line,
// or inside a directory named there, goes through LLVMFuzzerTestOneInput once. The seed corpora
// and the regression inputs (tests/fuzz/regressions/<target>/, one per crash the fuzzer found)
// run this way in every ctest preset, the sanitizer one included, so a fixed crash stays fixed
// without clang or libFuzzer.
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

namespace {

int RunFile(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    std::fprintf(stderr, "replay: cannot read %s\n", path.c_str());
    return 1;
  }
  const std::vector<char> bytes((std::istreambuf_iterator<char>(in)),
                                std::istreambuf_iterator<char>());
  std::fprintf(stderr, "replay: %s (%zu bytes)\n", path.c_str(), bytes.size());
  LLVMFuzzerTestOneInput(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  int inputs = 0, failures = 0;
  for (int i = 1; i < argc; ++i) {
    const std::filesystem::path arg(argv[i]);
    if (std::filesystem::is_directory(arg)) {
      for (const auto& entry : std::filesystem::recursive_directory_iterator(arg)) {
        if (!entry.is_regular_file()) continue;
        failures += RunFile(entry.path());
        ++inputs;
      }
    } else if (std::filesystem::exists(arg)) {
      failures += RunFile(arg);
      ++inputs;
    }
  }
  std::fprintf(stderr, "replay: %d inputs\n", inputs);
  if (inputs == 0) {
    std::fprintf(stderr, "replay: no inputs found\n");
    return 1;
  }
  return failures == 0 ? 0 : 1;
}
