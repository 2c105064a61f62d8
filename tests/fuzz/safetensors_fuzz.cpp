// libFuzzer target for the safetensors reader (src/core/safetensors.cpp): any bytes as a
// .safetensors file must open or fail with a Status, never crash; a file that opens must only
// describe tensors inside it (every byte of every tensor is read here, so an offset past the
// mapping faults). Seeds: tests/fuzz/corpus/safetensors/.
#include <cstddef>
#include <cstdint>
#include <cstdlib>

#include "core/safetensors.hpp"
#include "fuzz_file.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const ssmkit::fuzz::MemoryFile file(data, size);
  ssmkit::SafetensorsCheckpoint checkpoint;
  if (!ssmkit::SafetensorsCheckpoint::OpenFile(file.path(), &checkpoint).ok()) return 0;
  volatile uint8_t sink = 0;
  for (const auto& [name, tensor] : checkpoint.tensors()) {
    if (tensor.nbytes < 0) std::abort();
    if (tensor.nbytes > 0 && tensor.data == nullptr) std::abort();
    uint8_t x = 0;
    for (int64_t i = 0; i < tensor.nbytes; ++i) x ^= tensor.data[i];
    sink = sink ^ x;
    if (tensor.float_dtype) (void)tensor.view();
    (void)tensor.shape_string();
  }
  (void)checkpoint.description();
  return 0;
}
