#include "train_command.hpp"

#include <unistd.h>

#include <cmath>
#include <csignal>
#include <cstdio>
#include <memory>
#include <string>

#include "ssmkit/threads.hpp"
#include "ssmkit/train.hpp"

namespace ssmkit::cli {
namespace {

volatile std::sig_atomic_t g_stop = 0;

void OnSignal(int) { g_stop = 1; }

std::string Duration(double seconds) {
  const long s = std::lround(std::max(0.0, seconds));
  char buf[32];
  if (s >= 3600)
    std::snprintf(buf, sizeof buf, "%ldh%02ldm", s / 3600, (s / 60) % 60);
  else
    std::snprintf(buf, sizeof buf, "%ldm%02lds", s / 60, s % 60);
  return buf;
}

struct Args {
  TrainOptions options;
  std::string arch = "mamba2";
  int64_t attention_every = 2;
  std::string save_dtype = "f32";
};

// A progress bar on a terminal (redrawn in place); one line per validation otherwise, so that
// a log file under nohup stays short.
class Progress {
 public:
  Progress() : tty_(isatty(STDERR_FILENO) != 0) {}
  void Update(const TrainStepInfo& s) {
    // ETA from this process's mean seconds per step (a resumed run's past steps excluded).
    if (first_step_ < 0) {
      first_step_ = s.step;
      first_elapsed_ = s.elapsed_s;
    }
    const int64_t done = s.step - first_step_;
    const std::string eta =
        done > 0 ? Duration((s.elapsed_s - first_elapsed_) / static_cast<double>(done) *
                            static_cast<double>(s.total_steps - s.step))
                 : "?";
    char val[48] = "";
    if (s.has_val)
      std::snprintf(val, sizeof val, "  val %.4f (%.3f bpb)", s.val_loss,
                    s.val_loss / std::log(2.0));
    if (tty_) {
      constexpr int kWidth = 24;
      const int filled = static_cast<int>(kWidth * s.step / std::max<int64_t>(1, s.total_steps));
      std::string bar(filled, '#');
      bar.append(kWidth - filled, '-');
      std::fprintf(stderr, "\r[%s] %lld/%lld  loss %.4f%s  %.0f tok/s  ETA %s   ", bar.c_str(),
                   static_cast<long long>(s.step), static_cast<long long>(s.total_steps), s.loss,
                   s.has_val ? val : last_val_.c_str(), s.tokens_per_s, eta.c_str());
      if (s.has_val) last_val_ = val;
      if (s.step == s.total_steps) std::fprintf(stderr, "\n");
    } else if (s.has_val || s.step == 1) {
      std::fprintf(stderr, "step %lld/%lld  loss %.4f%s  lr %.2e  %.0f tok/s  elapsed %s  ETA %s\n",
                   static_cast<long long>(s.step), static_cast<long long>(s.total_steps), s.loss,
                   val, s.lr, s.tokens_per_s, Duration(s.elapsed_s).c_str(), eta.c_str());
    }
  }

 private:
  bool tty_;
  int64_t first_step_ = -1;
  double first_elapsed_ = 0.0;
  std::string last_val_;
};

int Run(const Args& args, int threads) {
  SetNumThreads(threads);
  TrainOptions o = args.options;
  o.arch = args.arch == "mamba1" ? ModelArch::kMamba1 : ModelArch::kMamba2;
  if (args.arch == "hybrid") o.attention_every = args.attention_every;
  o.save_dtype = args.save_dtype == "bf16" ? DType::kBF16 : DType::kF32;
  std::signal(SIGINT, OnSignal);
  std::signal(SIGTERM, OnSignal);
  Progress progress;
  TrainResult result;
  std::fprintf(
      stderr,
      "ssmkit train: %s %s, batch %lld x %lld bytes x %lld accum, %lld steps, %d threads -> %s\n",
      o.init.empty() ? args.arch.c_str() : "from", o.init.empty() ? o.size.c_str() : o.init.c_str(),
      static_cast<long long>(o.batch), static_cast<long long>(o.seqlen),
      static_cast<long long>(o.accum), static_cast<long long>(o.steps), NumThreads(),
      o.out.c_str());
  const Status st = Train(
      o, [&](const TrainStepInfo& s) { progress.Update(s); }, &g_stop, &result);
  if (!st.ok()) {
    std::fprintf(stderr, "\nssmkit train: %s\n", st.message().c_str());
    return 1;
  }
  if (result.resumed_from > 0 && result.resumed_from == o.steps) {
    std::printf("nothing to do: %s already holds all %lld steps\n", o.out.c_str(),
                static_cast<long long>(o.steps));
    return 0;
  }
  if (result.resumed_from > 0) {
    std::fprintf(stderr, "resumed from step %lld\n", static_cast<long long>(result.resumed_from));
  }
  if (result.interrupted) {
    std::fprintf(
        stderr,
        "\ninterrupted at step %lld: checkpoint saved in %s; rerun with --resume to continue\n",
        static_cast<long long>(result.steps_done), o.out.c_str());
    return 130;
  }
  std::printf(
      "trained %lld parameters for %lld steps: loss %.4f, validation %.4f nats/byte = %.4f "
      "bits/byte\n",
      static_cast<long long>(result.parameters), static_cast<long long>(result.steps_done),
      result.final_loss, result.final_val_loss, result.final_val_loss / std::log(2.0));
  std::printf("checkpoint: %s (config.json + model.safetensors)\n", o.out.c_str());
  return 0;
}

}  // namespace

void AddTrainCommand(CLI::App& app, const int& threads, int& exit_code) {
  auto args = std::make_shared<Args>();
  TrainOptions& o = args->options;
  CLI::App* sub = app.add_subcommand(
      "train", "train a byte-level Mamba or hybrid language model on a text file");
  sub->add_option("--data", o.data, "text file; every byte is a token")->required();
  sub->add_option("--out", o.out, "checkpoint directory (config.json, model.safetensors, log.tsv)")
      ->required();
  sub->add_option("--arch", args->arch,
                  "mamba1, mamba2 or hybrid (Mamba-2 and attention layers, each followed by a "
                  "SwiGLU MLP; saved as GraniteMoeHybridForCausalLM)")
      ->check(CLI::IsMember({"mamba1", "mamba2", "hybrid"}))
      ->capture_default_str();
  sub->add_option("--attention-every", args->attention_every,
                  "hybrid: layer i is attention when (i + 1) % N == 0, else Mamba-2")
      ->capture_default_str();
  sub->add_option("--size", o.size, "tiny or small")
      ->check(CLI::IsMember({"tiny", "small"}))
      ->capture_default_str();
  sub->add_option("--init", o.init, "start from this checkpoint directory's weights and config");
  sub->add_option("--steps", o.steps, "optimizer steps")->capture_default_str();
  sub->add_flag("--resume", o.resume, "continue from the checkpoint in --out if there is one");
  sub->add_option("--batch", o.batch, "sequences per micro-batch")->capture_default_str();
  sub->add_option("--seqlen", o.seqlen, "bytes per sequence")->capture_default_str();
  sub->add_option("--accum", o.accum, "micro-batches per optimizer step")->capture_default_str();
  sub->add_option("--lr", o.lr, "peak learning rate")->capture_default_str();
  sub->add_option("--min-lr", o.min_lr, "final learning rate of the cosine")->capture_default_str();
  sub->add_option("--warmup", o.warmup, "linear warmup steps")->capture_default_str();
  sub->add_option("--weight-decay", o.weight_decay, "AdamW decoupled weight decay (matrices)")
      ->capture_default_str();
  sub->add_option("--beta1", o.beta1, "AdamW beta1")->capture_default_str();
  sub->add_option("--beta2", o.beta2, "AdamW beta2")->capture_default_str();
  sub->add_option("--clip", o.clip, "gradient-norm clip, 0 = none")->capture_default_str();
  sub->add_option("--seed", o.seed, "initialisation and batch-sampling seed")
      ->capture_default_str();
  sub->add_option("--val-fraction", o.val_fraction, "end of the file held out for validation")
      ->capture_default_str();
  sub->add_option("--eval-every", o.eval_every, "steps between validations")->capture_default_str();
  sub->add_option("--eval-windows", o.eval_windows,
                  "validation sequences (the final validation reads the whole held-out part)")
      ->capture_default_str();
  sub->add_option("--save-every", o.save_every, "steps between checkpoints")->capture_default_str();
  sub->add_option("--save-dtype", args->save_dtype, "f32 or bf16 model.safetensors")
      ->check(CLI::IsMember({"f32", "bf16"}))
      ->capture_default_str();
  sub->callback([args, &threads, &exit_code] { exit_code = Run(*args, threads); });
}

}  // namespace ssmkit::cli
