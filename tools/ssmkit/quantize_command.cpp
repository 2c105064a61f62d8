// `ssmkit quantize`: a checkpoint directory or GGUF file to a GGUF file whose matrices are TYPE.
#include "quantize_command.hpp"

#include <cstdio>
#include <memory>
#include <string>

#include "model/gguf_export.hpp"
#include "ssmkit/threads.hpp"

namespace ssmkit::cli {

void AddQuantizeCommand(CLI::App& app, const int& threads, int& exit_code) {
  struct Options {
    std::string type, input, output;
  };
  auto o = std::make_shared<Options>();
  CLI::App* sub = app.add_subcommand(
      "quantize",
      "write a Mamba-1, Mamba-2, GraniteMoeHybrid, Bamba, Falcon-H1, Nemotron-H or Jamba "
      "checkpoint (a "
      "Hugging Face directory or a GGUF file) as a GGUF file that llama.cpp and ssmkit load, its "
      "matrices in TYPE (docs/gguf.md, docs/quantization.md)");
  sub->add_option("--type", o->type,
                  std::string(model::kQuantizeTypes) +
                      ". A plain type is every matrix's (llama-quantize --pure); a mix keeps most "
                      "in q4_k or q5_k and gives the LM head, and some attn_v and ffn_down "
                      "matrices, more bits, choosing each as llama-quantize's Q4_K_M, Q4_K_S, "
                      "Q5_K_M or Q5_K_S does")
      ->required();
  sub->add_option("input", o->input, "checkpoint directory or .gguf file")->required();
  sub->add_option("output", o->output, "the .gguf file to write")->required();
  sub->callback([o, &threads, &exit_code] {
    SetNumThreads(threads);
    model::QuantizeType type;
    if (!model::QuantizeTypeFromName(o->type, &type)) {
      std::fprintf(stderr, "quantize: --type %s: expected %s\n", o->type.c_str(),
                   model::kQuantizeTypes);
      exit_code = 2;
      return;
    }
    model::QuantizeReport r;
    const Status s = model::QuantizeToGguf(o->input, type, o->output, &r);
    if (!s.ok()) {
      std::fprintf(stderr, "quantize: %s\n", s.message().c_str());
      exit_code = 1;
      return;
    }
    std::string types;
    for (const auto& [dtype, n] : r.matrix_types)
      types += (types.empty() ? "" : ", ") + std::to_string(n) + " " + DTypeName(dtype);
    std::printf(
        "%s: %lld tensors, %lld matrices %s, %lld fallen back (rows not whole blocks): %s; %.1f "
        "MB of tensors -> %.1f MB\n",
        o->output.c_str(), static_cast<long long>(r.tensors), static_cast<long long>(r.quantized),
        o->type.c_str(), static_cast<long long>(r.fallback), types.c_str(), r.bytes_in / 1e6,
        r.bytes_out / 1e6);
  });
}

}  // namespace ssmkit::cli
