// Argument checks shared by the MLP and MoE ops (src/ops/mlp.cpp, src/ops/moe.cpp), in the
// message format of ops/check.hpp. Names of per-expert tensors ("experts[3].gate") are built
// only when a check fails: the checks run on every decode step, which must not allocate.
// Dimension legend: T rows, d model width, F hidden width.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "params/mlp_params.hpp"
#include "ssmkit/mlp.hpp"
#include "ssmkit/status.hpp"
#include "ssmkit/tensor.hpp"

namespace ssmkit::check {

// A row-strided matrix's row stride; any stride serves a single row.
inline int64_t RowStride(const ssmkit::Tensor& t, int64_t cols) {
  return t.shape[0] == 1 ? cols : t.strides[0];
}

// An op's activation input x (T, d): present, rank 2, T >= 1, d >= 1, f32, rows apart.
Status InputRows(const char* op, const ssmkit::Tensor& x, int64_t* rows, int64_t* cols);

// A (rows, cols) f32 matrix: rank 2, last stride 1, rows not overlapping (row stride >= cols
// when rows > 1). `legend` names the dimensions, e.g. "(T, d)".
Status Rows(const char* op, const char* name, const ssmkit::Tensor& t, const char* legend,
            int64_t rows, int64_t cols);
Status OptionalRows(const char* op, const char* name, const ssmkit::Tensor& t, const char* legend,
                    int64_t rows, int64_t cols);

// A weight matrix (rows, cols): f32 | bf16 | f16 or a quantized type (rows of whole blocks),
// row-major contiguous.
Status WeightMatrix(const char* op, const char* name, const ssmkit::Tensor& t, const char* legend,
                    int64_t rows, int64_t cols);

// Where a weight set sits in the op's arguments: "weights", "experts" (with an index) or
// "shared_expert"; failure messages read "<op>: <prefix>[<index>].<field>: ...".
struct WeightsName {
  const char* prefix;
  int64_t index = -1;  // -1: no index
};

// One MLP's weights for model width d: up (F, d) fixes F; gate (F, d) optional; down (d, F);
// biases f32 of their rows. Each weight as WeightMatrix takes it. Returns F.
Status MlpWeightsFor(const char* op, WeightsName name, const MlpWeights& w, int64_t d,
                     int64_t* hidden);

// The backward's restriction: none of `w`'s matrices quantized.
Status FloatMlpWeights(const char* op, WeightsName name, const MlpWeights& w);

// Gradients of `w`'s weights: absent when the weight is, else its shape, f32, contiguous.
Status MlpWeightGradsFor(const char* op, WeightsName name, const MlpWeightGrads& g,
                         const MlpWeights& w);

// Activation in range, multipliers finite, gate_multiplier 1 without a gate.
Status MlpOptionsFor(const char* op, const char* prefix, const MlpOptions& options, bool gated);

// A tensor argument, for the checks that look at all of an op's tensors at once: named
// "<prefix>[<index>].<field>" (index -1: no "[...]"; field null: "<prefix>" alone), the name
// built only for a message.
struct Arg {
  const char* prefix;
  int64_t index;
  const char* field;
  const ssmkit::Tensor* tensor;
  std::string Name() const;
};
void AddWeights(std::vector<Arg>& args, const char* prefix, int64_t index, const MlpWeights& w);
void AddGrads(std::vector<Arg>& args, const char* prefix, int64_t index, const MlpWeightGrads& g);

// The ops run on the CPU only: all defined tensors on CUDA is kUnsupported; a mix is a mismatch
// naming the first tensor off the majority's device.
Status CpuOnly(const char* op, const std::vector<Arg>& inputs, const std::vector<Arg>& outputs);

// No output overlaps an input or an earlier output.
Status NoOverlaps(const char* op, const std::vector<Arg>& inputs, const std::vector<Arg>& outputs);

// Whether two tensors share a byte (absent ones share none). Exact for two row-strided
// matrices with the same row stride in bytes (the column blocks of one fused buffer, e.g. a
// (T, 2F) adapter output split into gate and up halves, do not overlap); otherwise whether the
// byte ranges they span meet.
bool Overlap(const ssmkit::Tensor& a, const ssmkit::Tensor& b);

// "<op>: <name>: expected memory not overlapping <other>, given an overlapping tensor".
Status Overlapping(const char* op, const char* name, const char* other);

}  // namespace ssmkit::check
