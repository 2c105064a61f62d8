// `ssmkit quantize`: a checkpoint directory or GGUF file to a GGUF file whose matrices are TYPE.
#include "quantize_command.hpp"

#include <cstdio>
#include <memory>
#include <string>

#include "model/gguf_export.hpp"
#include "ssmkit/quant.hpp"
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
      "matrices in TYPE (docs/gguf.md)");
  sub->add_option("--type", o->type,
                  "f32, f16, bf16, q8_0, q4_0, q4_1, q5_0, q5_1, q4_k, q5_k or q6_k")
      ->required();
  sub->add_option("input", o->input, "checkpoint directory or .gguf file")->required();
  sub->add_option("output", o->output, "the .gguf file to write")->required();
  sub->callback([o, &threads, &exit_code] {
    SetNumThreads(threads);
    DType type;
    if (!DTypeFromName(o->type, &type)) {
      std::fprintf(stderr,
                   "quantize: --type %s: expected f32, f16, bf16, q8_0, q4_0, q4_1, q5_0, q5_1, "
                   "q4_k, q5_k or q6_k\n",
                   o->type.c_str());
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
    std::printf(
        "%s: %lld tensors, %lld matrices %s, %lld fallen back (rows not whole blocks); %.1f MB "
        "of tensors -> %.1f MB\n",
        o->output.c_str(), static_cast<long long>(r.tensors), static_cast<long long>(r.quantized),
        o->type.c_str(), static_cast<long long>(r.fallback), r.bytes_in / 1e6, r.bytes_out / 1e6);
  });
}

}  // namespace ssmkit::cli
