// Model: loading a checkpoint directory (config.json + safetensors), binding tensors in memory
// or making random weights.
#include <new>

#include "core/dtype.hpp"
#include "model/checkpoint_source.hpp"
#include "model/config.hpp"
#include "model/model_impl.hpp"

namespace ssmkit {

Model::Model(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Model::~Model() = default;

Status Model::Load(const std::string& dir, std::unique_ptr<Model>* model) {
  try {
    auto impl = std::make_unique<Impl>();
    SSMKIT_RETURN_IF_ERROR(model::OpenCheckpoint(dir, &impl->config, &impl->source));
    SSMKIT_RETURN_IF_ERROR(model::BindWeights(impl->config, *impl->source, &impl->weights));
    impl->source_name = impl->source->description();
    model->reset(new Model(std::move(impl)));
    return Status::Ok();
  } catch (const std::bad_alloc&) {
    return Status::OutOfMemory(dir + ": out of memory while loading the model");
  }
}

Status Model::FromTensors(const std::string& config_json,
                          const std::map<std::string, Tensor>& tensors,
                          std::unique_ptr<Model>* model) {
  try {
    auto impl = std::make_unique<Impl>();
    SSMKIT_RETURN_IF_ERROR(model::ParseModelConfig(config_json, "config_json", &impl->config));
    SSMKIT_RETURN_IF_ERROR(model::MemoryWeightSource::Create(tensors, &impl->source));
    SSMKIT_RETURN_IF_ERROR(model::BindWeights(impl->config, *impl->source, &impl->weights));
    impl->source_name = impl->source->description();
    model->reset(new Model(std::move(impl)));
    return Status::Ok();
  } catch (const std::bad_alloc&) {
    return Status::OutOfMemory("model from tensors: out of memory");
  }
}

Status Model::Random(const ModelConfig& config, DType weight_dtype, uint64_t seed,
                     std::unique_ptr<Model>* model) {
  try {
    auto impl = std::make_unique<Impl>();
    impl->config = config;
    SSMKIT_RETURN_IF_ERROR(model::RandomWeights(config, weight_dtype, seed, &impl->weights));
    impl->source_name = "random";
    model->reset(new Model(std::move(impl)));
    return Status::Ok();
  } catch (const std::bad_alloc&) {
    return Status::OutOfMemory("random model: out of memory");
  }
}

const ModelConfig& Model::config() const { return impl_->config; }

int64_t Model::parameter_count() const { return impl_->weights.parameter_count; }

int64_t Model::decode_weight_bytes() const {
  return model::DecodeWeightBytes(impl_->config, impl_->weights);
}

std::string Model::weight_dtype_name() const {
  const model::ModelWeights& w = impl_->weights;
  const DType dtype = w.lm_head.dtype;
  bool mixed = w.embedding.dtype != dtype;
  auto check = [&](const Tensor& t) { mixed |= t.defined() && t.dtype != dtype; };
  for (const model::Block& b : w.blocks) {
    for (const Tensor* t :
         {&b.mamba1.in_proj, &b.mamba1.x_proj, &b.mamba1.dt_proj, &b.mamba1.out_proj,
          &b.mamba2.in_proj, &b.mamba2.out_proj, &b.attention.q, &b.attention.k, &b.attention.v,
          &b.attention.o, &b.ffn.mlp.up, &b.ffn.mlp.down, &b.ffn.router, &b.out_linear})
      check(*t);
    for (const MlpWeights& e : b.ffn.experts) check(e.up);
  }
  return mixed ? "mixed" : DTypeName(dtype);
}

std::string Model::source() const { return impl_->source_name; }

}  // namespace ssmkit
