// Training a byte-level Mamba-1, Mamba-2 or hybrid (Mamba-2 + attention + MLP) language model
// on a text file: the library's whole
// model backward (src/train), AdamW with decoupled weight decay, gradient clipping, warmup +
// cosine schedule, gradient accumulation, validation, checkpoints in Hugging Face's format
// (config.json + model.safetensors, loadable by transformers and by ssmkit::Model::Load) and
// exact resumption. docs/training.md describes the method and its checks.
#pragma once

#include <csignal>
#include <cstdint>
#include <functional>
#include <string>

#include "ssmkit/model.hpp"
#include "ssmkit/status.hpp"
#include "ssmkit/tensor.hpp"

namespace ssmkit {

// The named model sizes of `ssmkit train --size` (byte vocab 256, tied head):
//   tiny   d_model 64, 2 layers, d_inner 128, N 16 (Mamba-2: P 32, H 4), conv 4
//   small  d_model 256, 6 layers, d_inner 512, Mamba-1: N 16, dt_rank 16; Mamba-2: N 64, P 64, H 8
Status TrainSizeConfig(ModelArch arch, const std::string& size, ModelConfig* config);

// `ssmkit train --arch hybrid`: the Mamba-2 size above with layer i an attention layer when
// (i + 1) % attention_every == 0 (else Mamba-2), each followed by a SwiGLU MLP of width
// 2 d_model; attention with 4 heads, 2 key-value heads, head dim d_model / 4, rope (theta
// 10000), scale 1 / sqrt(head dim); the other multipliers 1. A GraniteMoeHybrid config
// without experts: checkpoints load as GraniteMoeHybridForCausalLM.
Status TrainHybridSizeConfig(const std::string& size, int64_t attention_every, ModelConfig* config);

struct TrainOptions {
  std::string data;  // the text file; every byte is a token
  std::string out;   // checkpoint directory
  ModelArch arch = ModelArch::kMamba2;
  std::string size = "tiny";
  // > 0: the hybrid of TrainHybridSizeConfig with this attention period (arch must be Mamba-2).
  int64_t attention_every = 0;
  std::string init;      // optional: start from this checkpoint directory's weights instead
  int64_t steps = 1000;  // optimizer steps
  int64_t batch = 16;    // sequences per micro-batch
  int64_t seqlen = 256;  // tokens per sequence
  int64_t accum = 1;     // micro-batches per optimizer step
  double lr = 3e-3, min_lr = 3e-4;
  int64_t warmup = 100;
  double weight_decay = 0.1, beta1 = 0.9, beta2 = 0.95, eps = 1e-8;
  double clip = 1.0;  // global gradient-norm limit; 0 = none
  uint64_t seed = 1;
  double val_fraction = 0.05;      // the end of the file held out for validation
  int64_t eval_every = 100;        // steps between validations (and at the last step)
  int64_t eval_windows = 64;       // validation sequences of seqlen tokens (the last step: all)
  int64_t save_every = 200;        // steps between checkpoints (and at the last step)
  DType save_dtype = DType::kF32;  // model.safetensors: kF32 or kBF16
  bool resume = false;             // continue from out/trainer_state.json when it exists
};

struct TrainStepInfo {
  int64_t step = 0;  // optimizer steps done
  int64_t total_steps = 0;
  double lr = 0.0;
  double loss = 0.0;       // mean training loss of the step, nats per byte
  double grad_norm = 0.0;  // before clipping
  double tokens_per_s = 0.0;
  double elapsed_s = 0.0;
  bool has_val = false;
  double val_loss = 0.0;  // nats per byte
};

struct TrainResult {
  int64_t steps_done = 0;
  int64_t resumed_from = 0;  // 0 for a fresh run
  bool interrupted = false;  // stopped by the stop flag (a checkpoint was saved first)
  double final_loss = 0.0, final_val_loss = 0.0;
  int64_t parameters = 0;
};

// Runs (or resumes) a training run. on_step is called after every optimizer step; `stop`,
// when set by another thread or a signal handler, makes the run save a checkpoint and return
// at the next step boundary with result->interrupted.
Status Train(const TrainOptions& options, const std::function<void(const TrainStepInfo&)>& on_step,
             const volatile std::sig_atomic_t* stop, TrainResult* result);

}  // namespace ssmkit
