// `make check`: loads libssmkit_exla.so the way EXLA's load_dylib does (dlopen, RTLD_NOW |
// RTLD_GLOBAL) into a program that stands in for libxla_extension: it defines
// xla::ffi::GetXlaFfiApi with an API whose handler registration only records its arguments.
// Checks that loading registers every target of python/src/ffi_targets.hpp for "Host" (and
// "CUDA" with the CUDA backend), each with the handler symbol of its name. Not a test of EXLA
// (none on the project's machines): of what this library does when EXLA loads it.
#include <dlfcn.h>

#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "ffi_targets.hpp"  // the target list (the handlers themselves are in the library)
#include "xla/ffi/api/c_api.h"

namespace {

struct Registration {
  std::string name, platform;
  void* execute;
};
std::vector<Registration> registrations;

XLA_FFI_Error* Record(XLA_FFI_Handler_Register_Args* args) {
  registrations.push_back({std::string(args->name.ptr, args->name.len),
                           std::string(args->platform.ptr, args->platform.len),
                           reinterpret_cast<void*>(args->bundle.execute)});
  return nullptr;  // success
}

XLA_FFI_Api MakeApi() {
  XLA_FFI_Api api;
  std::memset(&api, 0, sizeof api);
  api.struct_size = sizeof api;
  api.XLA_FFI_Handler_Register = Record;
  return api;
}

}  // namespace

namespace xla::ffi {
__attribute__((visibility("default"))) const XLA_FFI_Api* GetXlaFfiApi() {
  static const XLA_FFI_Api api = MakeApi();
  return &api;
}
}  // namespace xla::ffi

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s libssmkit_exla.so\n", argv[0]);
    return 2;
  }
  void* lib = dlopen(argv[1], RTLD_NOW | RTLD_GLOBAL);
  if (lib == nullptr) {
    std::fprintf(stderr, "dlopen: %s\n", dlerror());
    return 1;
  }
#define SSMKIT_CHECK_TARGET(name, Body, Binding) {name, "Ssmkit" #Body},
  const std::vector<std::pair<std::string, std::string>> targets = {
      SSMKIT_FFI_TARGETS(SSMKIT_CHECK_TARGET)};
  int failures = 0;
  for (const auto& [name, symbol] : targets) {
    for (const char* platform : {"Host", "CUDA"}) {
      const std::string sym = symbol + (std::string(platform) == "CUDA" ? "Cuda" : "");
      void* handler = dlsym(lib, sym.c_str());
      if (handler == nullptr) continue;  // no CUDA handlers without the CUDA backend
      bool found = false;
      for (const Registration& r : registrations) {
        found = found || (r.name == name && r.platform == platform && r.execute == handler);
      }
      std::printf("%s %-32s %-5s -> %s\n", found ? "ok     " : "MISSING", name.c_str(), platform,
                  sym.c_str());
      failures += found ? 0 : 1;
    }
  }
  std::printf("%zu registrations, %d missing\n", registrations.size(), failures);
  return failures == 0 && !registrations.empty() ? 0 : 1;
}
