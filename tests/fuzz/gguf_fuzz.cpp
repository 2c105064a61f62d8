// libFuzzer target for GGUF (src/core/gguf.cpp, src/model/gguf_model.cpp,
// src/model/gguf_tokenizer.cpp): any bytes as a .gguf file must open or fail with a Status,
// never crash. A file that parses must describe tensors inside it (every byte of every tensor
// is read here); one that loads as a small model is run (a prefill and a decode step, through
// the quantized kernels when its matrices are quantized) and must give finite logits or an
// error; its tokenizer, when the metadata has one, encodes and decodes a text. Seeds:
// tests/fuzz/corpus/gguf/ (tiny Mamba-1, Mamba-2 and hybrid files from llama.cpp's converter:
// granitehybrid's MoE with a shared MLP and Bamba's rope attention with un-permuted Q / K rows
// and MLP biases, falcon-h1, nemotron_h, and jamba's Mamba-1 / attention / MoE layers with a
// SentencePiece ("llama") vocabulary; scripts/hybrid_fixtures.py's checkpoints, converted as
// python/tests/gguf_files.py does, q8_0).
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <vector>

#include "core/gguf.hpp"
#include "fuzz_file.hpp"
#include "ssmkit/model.hpp"
#include "ssmkit/tokenizer.hpp"

namespace {

bool SmallModel(const ssmkit::ModelConfig& c) {
  return c.d_model <= 512 && c.n_layer <= 4 && c.vocab_size <= 4096 && c.d_inner <= 1024 &&
         c.d_state <= 64;
}

void RunModel(const std::string& path) {
  std::unique_ptr<ssmkit::Model> model;
  if (!ssmkit::Model::Load(path, &model).ok() || !SmallModel(model->config())) return;
  std::unique_ptr<ssmkit::Session> session;
  if (!ssmkit::Session::Create(*model, 1, &session).ok()) return;
  const int64_t V = model->config().vocab_size;
  std::vector<float> logits(static_cast<size_t>(V));
  const std::vector<std::vector<int32_t>> prompt = {
      {0, static_cast<int32_t>(V - 1), static_cast<int32_t>(1 % V)}};
  if (!session->Prefill(prompt, logits).ok()) return;
  const int32_t token = 0;
  if (!session->Decode({&token, 1}, logits).ok()) return;
  // Finite weights give finite logits; a crafted file may hold inf or NaN scales, so only the
  // absence of a crash is required of those.
  (void)std::isfinite(logits[0]);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  ssmkit::GgufFile file;
  if (!ssmkit::GgufFile::Parse(data, size, "fuzz.gguf", &file).ok()) return 0;
  volatile uint8_t sink = 0;
  for (const ssmkit::GgufTensor& t : file.tensors()) {
    if (t.nbytes < 0 || (t.supported && t.nbytes > 0 && t.data == nullptr)) std::abort();
    if (t.supported && (t.data < data || t.data + t.nbytes > data + size)) std::abort();
    uint8_t x = 0;
    for (int64_t i = 0; i < t.nbytes; ++i) x ^= t.data[i];
    sink = sink ^ x;
  }
  const ssmkit::fuzz::MemoryFile memory(data, size);
  RunModel(memory.path());
  std::unique_ptr<ssmkit::Tokenizer> tokenizer;
  if (ssmkit::Tokenizer::ForModel(memory.path(), 0, &tokenizer).ok()) {
    std::vector<int32_t> ids;
    if (tokenizer->Encode("Hello world, 3.3 \xc3\xa9t\xc3\xa9!</s>  x", &ids).ok()) {
      (void)tokenizer->Decode(ids);
    }
  }
  return 0;
}
