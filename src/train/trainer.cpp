// The training loop behind ssmkit::Train: sizes, data, optimizer, validation, logging,
// checkpoints and resumption.
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/mapped_file.hpp"
#include "model/config.hpp"
#include "ssmkit/threads.hpp"
#include "ssmkit/train.hpp"
#include "train/checkpoint.hpp"
#include "train/data.hpp"
#include "train/init.hpp"
#include "train/lm.hpp"
#include "train/optimizer.hpp"

namespace ssmkit {

Status TrainSizeConfig(ModelArch arch, const std::string& size, ModelConfig* config) {
  ModelConfig c;
  c.arch = arch;
  c.format = "hf";
  c.vocab_size = c.config_vocab_size = 256;
  c.d_conv = 4;
  c.norm_eps = 1e-5f;
  c.tie_embeddings = true;
  c.ngroups = 1;
  if (size == "tiny") {
    c.d_model = 64;
    c.n_layer = 2;
    c.d_state = 16;
    c.headdim = 32;
    c.chunk_size = 64;
  } else if (size == "small") {
    c.d_model = 256;
    c.n_layer = 6;
    c.d_state = arch == ModelArch::kMamba2 ? 64 : 16;
    c.headdim = 64;
    c.chunk_size = 256;
  } else {
    return Status::InvalidArgument("train: --size: expected tiny or small, given " + size);
  }
  c.d_inner = 2 * c.d_model;
  c.dt_rank = (c.d_model + 15) / 16;
  if (arch == ModelArch::kMamba2) {
    c.nheads = c.d_inner / c.headdim;
  } else {
    c.headdim = 0;
    c.chunk_size = 256;
  }
  SSMKIT_RETURN_IF_ERROR(c.Validate());
  *config = c;
  return Status::Ok();
}

namespace {

using Json = nlohmann::json;
namespace fs = std::filesystem;

Status Bad(const std::string& what, const std::string& expected, const std::string& given) {
  return Status::InvalidArgument("train: " + what + ": expected " + expected + ", given " + given);
}

Status CheckOptions(const TrainOptions& o) {
  if (o.data.empty()) return Bad("--data", "a text file", "nothing");
  if (o.out.empty()) return Bad("--out", "a directory", "nothing");
  if (o.steps < 1) return Bad("--steps", ">= 1", std::to_string(o.steps));
  if (o.batch < 1) return Bad("--batch", ">= 1", std::to_string(o.batch));
  if (o.seqlen < 2) return Bad("--seqlen", ">= 2", std::to_string(o.seqlen));
  if (o.accum < 1) return Bad("--accum", ">= 1", std::to_string(o.accum));
  if (!(o.lr > 0.0) || !(o.min_lr >= 0.0) || o.min_lr > o.lr) {
    return Bad("--lr / --min-lr", "0 <= min_lr <= lr, lr > 0",
               std::to_string(o.lr) + " / " + std::to_string(o.min_lr));
  }
  if (o.warmup < 0) return Bad("--warmup", ">= 0", std::to_string(o.warmup));
  if (o.attention_every < 0) {
    return Bad("--attention-every", ">= 1 (0: no attention layers)",
               std::to_string(o.attention_every));
  }
  if (!(o.weight_decay >= 0.0))
    return Bad("--weight-decay", ">= 0", std::to_string(o.weight_decay));
  if (!(o.clip >= 0.0)) return Bad("--clip", ">= 0", std::to_string(o.clip));
  if (!(o.beta1 >= 0.0 && o.beta1 < 1.0) || !(o.beta2 >= 0.0 && o.beta2 < 1.0)) {
    return Bad("betas", "in [0, 1)", std::to_string(o.beta1) + ", " + std::to_string(o.beta2));
  }
  if (o.eval_every < 1 || o.save_every < 1 || o.eval_windows < 1) {
    return Bad("--eval-every / --save-every / --eval-windows", ">= 1",
               std::to_string(o.eval_every) + " / " + std::to_string(o.save_every) + " / " +
                   std::to_string(o.eval_windows));
  }
  if (o.save_dtype != DType::kF32 && o.save_dtype != DType::kBF16) {
    return Bad("save dtype", "f32 or bf16", DTypeName(o.save_dtype));
  }
  return Status::Ok();
}

// What a resumed run must share with the run that wrote the checkpoint for its loss curve to
// continue the same one.
Json RunIdentity(const TrainOptions& o, const train::ByteCorpus& corpus) {
  Json run = {{"arch", o.attention_every > 0 ? "hybrid" : ModelArchName(o.arch)},
              {"size", o.size},
              {"init", o.init},
              {"steps", o.steps},
              {"batch", o.batch},
              {"seqlen", o.seqlen},
              {"accum", o.accum},
              {"lr", o.lr},
              {"min_lr", o.min_lr},
              {"warmup", o.warmup},
              {"weight_decay", o.weight_decay},
              {"beta1", o.beta1},
              {"beta2", o.beta2},
              {"eps", o.eps},
              {"clip", o.clip},
              {"seed", o.seed},
              {"val_fraction", o.val_fraction},
              {"data_bytes", corpus.train_bytes() + corpus.val_bytes()},
              {"data_fingerprint", std::to_string(corpus.fingerprint())},
              {"threads", NumThreads()}};
  if (o.attention_every > 0) run["attention_every"] = o.attention_every;
  return run;
}

std::string LogHeader() {
  return "step\tlr\tloss\tval_loss\tval_bpb\tgrad_norm\ttokens_per_s\telapsed_s\n";
}

// Keeps the log's header and its lines for steps <= step (a resumed run rewrites the rest).
Status TruncateLog(const std::string& path, int64_t step) {
  std::ifstream in(path);
  std::string kept = LogHeader(), line;
  bool first = true;
  while (std::getline(in, line)) {
    if (first) {
      first = false;
      continue;
    }
    if (!line.empty() && std::stoll(line.substr(0, line.find('\t'))) <= step) kept += line + "\n";
  }
  return train::WriteFileAtomically(path, kept);
}

class Trainer {
 public:
  Trainer(const TrainOptions& o, const std::function<void(const TrainStepInfo&)>& on_step)
      : o_(o), on_step_(on_step) {}

  Status Run(const volatile std::sig_atomic_t* stop, TrainResult* result);

 private:
  Status Setup(TrainResult* result);
  // The first eval_windows validation sequences, or all of them (whole).
  Status Validate(bool whole, double* loss);
  Status Save(int64_t step, double elapsed_s);

  const TrainOptions& o_;
  const std::function<void(const TrainStepInfo&)>& on_step_;
  ModelConfig config_;
  train::ByteCorpus corpus_;
  std::unique_ptr<train::TrainModel> model_;
  std::unique_ptr<train::AdamW> optimizer_;
  Json identity_;
  int64_t start_step_ = 0;
  double elapsed_before_ = 0.0;  // seconds spent before a resume
  std::string log_path_;
};

Status Trainer::Setup(TrainResult* result) {
  SSMKIT_RETURN_IF_ERROR(CheckOptions(o_));
  SSMKIT_RETURN_IF_ERROR(
      train::ByteCorpus::Load(o_.data, o_.val_fraction, o_.seqlen + 1, &corpus_));
  if (!o_.init.empty()) {
    std::string text;
    const std::string path = (fs::path(o_.init) / "config.json").string();
    SSMKIT_RETURN_IF_ERROR(ReadTextFile(path, &text));
    SSMKIT_RETURN_IF_ERROR(model::ParseModelConfig(text, path, &config_));
  } else if (o_.attention_every > 0) {
    if (o_.arch != ModelArch::kMamba2) {
      return Bad("--arch hybrid", "Mamba-2 mixers", ModelArchName(o_.arch));
    }
    SSMKIT_RETURN_IF_ERROR(TrainHybridSizeConfig(o_.size, o_.attention_every, &config_));
  } else {
    SSMKIT_RETURN_IF_ERROR(TrainSizeConfig(o_.arch, o_.size, &config_));
  }
  if (config_.vocab_size < 256) {
    return Bad("model vocab", ">= 256 (byte-level)", std::to_string(config_.vocab_size));
  }
  SSMKIT_RETURN_IF_ERROR(train::TrainModel::Create(config_, &model_));
  train::AdamWOptions ao;
  ao.beta1 = static_cast<float>(o_.beta1);
  ao.beta2 = static_cast<float>(o_.beta2);
  ao.eps = static_cast<float>(o_.eps);
  ao.weight_decay = static_cast<float>(o_.weight_decay);
  optimizer_ = std::make_unique<train::AdamW>(model_->table(), ao);
  identity_ = RunIdentity(o_, corpus_);
  result->parameters = model_->table().total();

  std::error_code ec;
  fs::create_directories(o_.out, ec);
  if (ec)
    return Bad("--out", "a directory that can be created", o_.out + " (" + ec.message() + ")");
  log_path_ = (fs::path(o_.out) / "log.tsv").string();
  const std::string state_path = (fs::path(o_.out) / "trainer_state.json").string();
  if (o_.resume && fs::exists(state_path)) {
    std::string text;
    SSMKIT_RETURN_IF_ERROR(ReadTextFile(state_path, &text));
    const Json state = Json::parse(text, nullptr, false);
    if (state.is_discarded() || !state.contains("step") || !state.contains("run")) {
      return Status::InvalidArgument(state_path + ": not a trainer state (step, run)");
    }
    for (const auto& [key, value] : identity_.items()) {
      if (!state["run"].contains(key) || state["run"][key] != value) {
        return Status::InvalidArgument(
            "train: --resume: " + key + " differs from the checkpoint's run: expected " +
            (state["run"].contains(key) ? state["run"][key].dump() : "(absent)") + ", given " +
            value.dump());
      }
    }
    start_step_ = state["step"].get<int64_t>();
    elapsed_before_ = state.value("elapsed_s", 0.0);
    SSMKIT_RETURN_IF_ERROR(train::LoadModelParams(o_.out, model_.get()));
    SSMKIT_RETURN_IF_ERROR(train::LoadOptimizer(
        model_->table(), (fs::path(o_.out) / "optimizer.safetensors").string(), optimizer_.get()));
    if (optimizer_->step() != start_step_) {
      return Status::InvalidArgument(state_path + ": step " + std::to_string(start_step_) +
                                     " but optimizer.safetensors holds step " +
                                     std::to_string(optimizer_->step()));
    }
    SSMKIT_RETURN_IF_ERROR(TruncateLog(log_path_, start_step_));
    result->resumed_from = start_step_;
    result->steps_done = start_step_;
    return Status::Ok();
  }
  if (!o_.init.empty()) {
    SSMKIT_RETURN_IF_ERROR(train::LoadModelParams(o_.init, model_.get()));
  } else {
    train::InitParams(config_, model_->table(), o_.seed, model_->params().data());
  }
  return train::WriteFileAtomically(log_path_, LogHeader());
}

Status Trainer::Validate(bool whole, double* loss) {
  const int64_t available = corpus_.val_windows(o_.seqlen);
  const int64_t windows = whole ? available : std::min(o_.eval_windows, available);
  std::vector<int32_t> tokens;
  double sum = 0.0;
  int64_t count = 0;
  for (int64_t first = 0; first < windows; first += o_.batch) {
    const int64_t rows =
        corpus_.ValBatch(first, std::min(o_.batch, windows - first), o_.seqlen, &tokens);
    double part = 0.0;
    SSMKIT_RETURN_IF_ERROR(model_->Loss(tokens, rows, o_.seqlen, &part));
    sum += part;
    count += rows * o_.seqlen;
  }
  *loss = sum / static_cast<double>(std::max<int64_t>(1, count));
  return Status::Ok();
}

Status Trainer::Save(int64_t step, double elapsed_s) {
  SSMKIT_RETURN_IF_ERROR(train::SaveOptimizer(
      model_->table(), *optimizer_, (fs::path(o_.out) / "optimizer.safetensors").string()));
  SSMKIT_RETURN_IF_ERROR(train::SaveModel(*model_, o_.out, o_.save_dtype));
  Json state = {{"step", step}, {"elapsed_s", elapsed_s}, {"run", identity_}};
  return train::WriteFileAtomically((fs::path(o_.out) / "trainer_state.json").string(),
                                    state.dump(2) + "\n");
}

Status Trainer::Run(const volatile std::sig_atomic_t* stop, TrainResult* result) {
  SSMKIT_RETURN_IF_ERROR(Setup(result));
  if (o_.save_dtype == DType::kBF16 && o_.resume) {
    // A bf16 model file would round the weights a resumed run continues from.
    return Bad("--resume with a bf16 checkpoint", "f32 checkpoints", "bf16");
  }
  const train::Schedule schedule{o_.lr, o_.min_lr, o_.warmup, o_.steps};
  const double tokens_per_step = static_cast<double>(o_.batch * o_.seqlen * o_.accum);
  const float grad_scale = static_cast<float>(1.0 / tokens_per_step);
  std::vector<int32_t> tokens;
  const auto t0 = std::chrono::steady_clock::now();
  auto seconds = [&] {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  };
  int64_t step = start_step_;
  while (step < o_.steps) {
    const double step_start = seconds();
    model_->ZeroGrads();
    double loss_sum = 0.0;
    for (int64_t k = 0; k < o_.accum; ++k) {
      corpus_.TrainBatch(o_.seed, step, o_.accum, k, o_.batch, o_.seqlen, &tokens);
      double part = 0.0;
      SSMKIT_RETURN_IF_ERROR(
          model_->ForwardBackward(tokens, o_.batch, o_.seqlen, grad_scale, &part));
      loss_sum += part;
    }
    const double lr = train::LearningRate(schedule, step);
    TrainStepInfo info;
    info.grad_norm = train::ClipGradNorm(model_->grads(), o_.clip);
    optimizer_->Step(static_cast<float>(lr), model_->params(), model_->grads());
    ++step;
    info.step = step;
    info.total_steps = o_.steps;
    info.lr = lr;
    info.loss = loss_sum / tokens_per_step;
    info.tokens_per_s = tokens_per_step / std::max(1e-9, seconds() - step_start);
    if (!std::isfinite(info.loss)) {
      return Status::Internal("train: the loss became " + std::to_string(info.loss) + " at step " +
                              std::to_string(step) + " (try a lower --lr)");
    }
    const bool last = step == o_.steps;
    if (last || step % o_.eval_every == 0) {
      SSMKIT_RETURN_IF_ERROR(Validate(last, &info.val_loss));
      info.has_val = true;
      result->final_val_loss = info.val_loss;
    }
    info.elapsed_s = elapsed_before_ + seconds();
    result->final_loss = info.loss;
    result->steps_done = step;
    {
      std::ofstream log(log_path_, std::ios::app);
      log.precision(9);  // enough digits to compare curves with another trainer's
      log << step << '\t' << lr << '\t' << info.loss << '\t';
      if (info.has_val)
        log << info.val_loss << '\t' << info.val_loss / std::log(2.0);
      else
        log << "\t";
      log << '\t' << info.grad_norm << '\t' << info.tokens_per_s << '\t' << info.elapsed_s << '\n';
    }
    if (on_step_) on_step_(info);
    const bool stopping = stop != nullptr && *stop != 0;
    if (last || stopping || step % o_.save_every == 0) {
      SSMKIT_RETURN_IF_ERROR(Save(step, elapsed_before_ + seconds()));
    }
    if (stopping && !last) {
      result->interrupted = true;
      return Status::Ok();
    }
  }
  return Status::Ok();
}

}  // namespace

Status Train(const TrainOptions& options, const std::function<void(const TrainStepInfo&)>& on_step,
             const volatile std::sig_atomic_t* stop, TrainResult* result) {
  *result = TrainResult{};
  Trainer trainer(options, on_step);
  return trainer.Run(stop, result);
}

}  // namespace ssmkit
