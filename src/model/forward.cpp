#include "model/forward.hpp"

#include <algorithm>

#include "model/attention_block.hpp"
#include "model/feed_forward_block.hpp"
#include "model/mamba1_block.hpp"
#include "model/mamba2_block.hpp"
#include "model/views.hpp"
#include "ssmkit/linear.hpp"
#include "ssmkit/norm.hpp"

namespace ssmkit::model {
namespace {

int64_t Mamba2Floats(const ModelConfig& c, int64_t T, bool decode) {
  return decode ? Mamba2DecodeFloats(c, T) : Mamba2PrefillFloats(c, T);
}

// Floats one block of this kind needs for its activations.
int64_t BlockFloats(const ModelConfig& c, BlockKind kind, int64_t T, bool decode) {
  const int64_t d = c.d_model;
  switch (kind) {
    case BlockKind::kMamba1:
      return decode ? Mamba1DecodeFloats(c, T) : Mamba1PrefillFloats(c, T);
    case BlockKind::kMamba2:
      return Mamba2Floats(c, T, decode);
    case BlockKind::kAttention:
      return AttentionFloats(c, T);
    case BlockKind::kMlp:
      return MlpFloats(c, T);
    case BlockKind::kMoe:
      return MoeFloats(c, T);
    case BlockKind::kParallelHybrid:  // the scaled input, the attention's output, then either
      return 2 * T * d + std::max(Mamba2Floats(c, T, decode), AttentionFloats(c, T));
    case BlockKind::kSharedTransformer:  // concat and its norm (2d each), attention out, its
                                         // norm, MLP out; then attention or MLP activations
      return 7 * T * d + std::max(AttentionFloats(c, T), MlpFloats(c, T));
  }
  return 0;
}

bool HasSharedBlocks(const ModelWeights& w) {
  return std::any_of(w.blocks.begin(), w.blocks.end(),
                     [](const Block& b) { return b.spec.kind == BlockKind::kSharedTransformer; });
}

// dst (n floats) = src * m.
void Scaled(const float* src, int64_t n, float m, float* dst) {
  for (int64_t i = 0; i < n; ++i) dst[i] = src[i] * m;
}

Status RunMamba2(const ForwardContext& ctx, const Block& block, const SeqBatch& batch, ActBuffer in,
                 ActBuffer acts, ActBuffer out) {
  const ModelConfig& c = ctx.config;
  if (batch.decode) {
    return Mamba2MixerDecode(c, block.mamba2, batch, in, CarveMamba2Decode(c, batch.T, acts),
                             ctx.states, block.ssm_cache, out);
  }
  return Mamba2MixerPrefill(c, block.mamba2, batch, in.f32(),
                            CarveMamba2Prefill(c, batch.T, acts.f32()), ctx.states, block.ssm_cache,
                            out.f32());
}

Status RunAttention(const ForwardContext& ctx, const Block& block, const SeqBatch& batch,
                    const float* in, float* acts, float* out) {
  return AttentionBlockForward(ctx.config, block.attention, batch, in,
                               CarveAttention(ctx.config, batch.T, acts), ctx.kv, block.kv_cache,
                               ctx.kv_rows, out);
}

// Falcon-H1: mamba(x * ssm_in) * ssm_out + attention(x * attention_in) * attention_out.
Status RunParallel(const ForwardContext& ctx, const Block& block, const SeqBatch& batch,
                   const float* in, float* acts, float* out) {
  const Multipliers& m = ctx.config.multipliers;
  const int64_t n = batch.T * ctx.config.d_model;
  float* x = acts;
  float* att = x + n;
  float* inner = att + n;
  Scaled(in, n, m.ssm_in, x);
  SSMKIT_RETURN_IF_ERROR(RunMamba2(ctx, block, batch, HostF32(x), HostF32(inner), HostF32(out)));
  Scaled(in, n, m.attention_in, x);
  SSMKIT_RETURN_IF_ERROR(RunAttention(ctx, block, batch, x, inner, att));
  for (int64_t i = 0; i < n; ++i) out[i] = out[i] * m.ssm_out + att[i] * m.attention_out;
  return Status::Ok();
}

// Zamba2: t = linear(MLP(RMSNorm(attention(RMSNorm(concat(residual, embedding)))))).
Status RunShared(const ForwardContext& ctx, const Block& block, const SeqBatch& batch,
                 const ForwardBuffers& buf, float* out) {
  const ModelConfig& c = ctx.config;
  const int64_t T = batch.T, d = c.d_model;
  float* cat = buf.acts.f32();     // (T, 2d)
  float* cat_n = cat + 2 * T * d;  // (T, 2d)
  float* att = cat_n + 2 * T * d;  // (T, d)
  float* att_n = att + T * d;      // (T, d)
  float* mlp = att_n + T * d;      // (T, d)
  float* inner = mlp + T * d;
  for (int64_t t = 0; t < T; ++t) {
    std::copy_n(buf.residual.f32() + t * d, d, cat + t * 2 * d);
    std::copy_n(buf.embedding.f32() + t * d, d, cat + t * 2 * d + d);
  }
  RmsNormOptions o;
  o.eps = c.norm_eps;
  SSMKIT_RETURN_IF_ERROR(RmsNormForward({Rows(cat, T, 2 * d, 2 * d), block.norm, {}, {}},
                                        Rows(cat_n, T, 2 * d, 2 * d), o));
  SSMKIT_RETURN_IF_ERROR(RunAttention(ctx, block, batch, cat_n, inner, att));
  SSMKIT_RETURN_IF_ERROR(
      RmsNormForward({Rows(att, T, d, d), block.ffn_norm, {}, {}}, Rows(att_n, T, d, d), o));
  SSMKIT_RETURN_IF_ERROR(MlpBlockForward(c, block.ffn, T, att_n, CarveMlp(c, T, inner), mlp));
  return LinearForward({Rows(mlp, T, d, d), block.out_linear, Tensor{}}, Rows(out, T, d, d));
}

// out = block(in): the block's own computation, (T, d) -> (T, d). Only the Mamba mixers' decode
// runs on either device; the rest reads and writes host f32.
Status RunBlock(const ForwardContext& ctx, const Block& block, const SeqBatch& batch,
                const ForwardBuffers& buf, ActBuffer in, ActBuffer out) {
  const ModelConfig& c = ctx.config;
  const int64_t T = batch.T;
  float* acts = buf.acts.f32();
  switch (block.spec.kind) {
    case BlockKind::kMamba1:
      if (batch.decode) {
        return Mamba1MixerDecode(c, block.mamba1, batch, in, CarveMamba1Decode(c, T, buf.acts),
                                 ctx.states, block.ssm_cache, out);
      }
      return Mamba1MixerPrefill(c, block.mamba1, batch, in.f32(), CarveMamba1Prefill(c, T, acts),
                                ctx.states, block.ssm_cache, out.f32());
    case BlockKind::kMamba2:
      return RunMamba2(ctx, block, batch, in, buf.acts, out);
    case BlockKind::kAttention:
      return RunAttention(ctx, block, batch, in.f32(), acts, out.f32());
    case BlockKind::kMlp:
      return MlpBlockForward(c, block.ffn, T, in.f32(), CarveMlp(c, T, acts), out.f32());
    case BlockKind::kMoe:
      return MoeBlockForward(c, block.ffn, T, in.f32(), CarveMoe(c, T, acts), out.f32());
    case BlockKind::kParallelHybrid:
      return RunParallel(ctx, block, batch, in.f32(), acts, out.f32());
    case BlockKind::kSharedTransformer:
      return RunShared(ctx, block, batch, buf, out.f32());
  }
  return Status::Internal("unknown block kind");
}

}  // namespace

int64_t BlockActsElements(const ModelConfig& c, const ModelWeights& w, int64_t T, bool decode) {
  int64_t acts = 0;
  for (const Block& b : w.blocks) acts = std::max(acts, BlockFloats(c, b.spec.kind, T, decode));
  return acts;
}

int64_t ForwardFloats(const ModelConfig& c, const ModelWeights& w, int64_t T, bool decode) {
  const int64_t rows = HasSharedBlocks(w) ? 5 : 3;  // Zamba2 adds scratch and embedding
  return rows * T * c.d_model + BlockActsElements(c, w, T, decode);
}

ForwardBuffers CarveForward(int64_t T, int64_t d, float* base) {
  ForwardBuffers b;
  b.hidden = HostF32(base);
  b.residual = b.hidden + T * d;
  b.normed = b.residual + T * d;
  b.scratch = b.normed + T * d;
  b.embedding = b.scratch + T * d;
  b.acts = b.normed + T * d;  // moved past scratch and embedding when they are used
  return b;
}

Status RunBlocks(const ForwardContext& ctx, const SeqBatch& batch, const ForwardBuffers& buffers) {
  const ModelConfig& c = ctx.config;
  const int64_t T = batch.T, d = c.d_model;
  ForwardBuffers buf = buffers;
  const bool shared = HasSharedBlocks(ctx.weights);
  if (shared) {
    buf.acts = buf.acts + 2 * T * d;
    std::copy_n(buf.hidden.f32(), T * d, buf.embedding.f32());
  }
  AddRmsNormOptions options;
  options.eps = c.norm_eps;
  const Tensor h = buf.hidden.Rows(T, d, d), r = buf.residual.Rows(T, d, d);
  const Tensor n = buf.normed.Rows(T, d, d), scratch = buf.scratch.Rows(T, d, d);
  const float m = c.multipliers.residual;
  if (m != 1.0f && !buf.hidden.on_host()) {
    return Status::Unsupported("forward: a residual multiplier runs on the CPU only");
  }
  bool feed = false;  // hidden holds a shared block's output, for the next block's input only
  for (size_t i = 0; i < ctx.weights.blocks.size(); ++i) {
    const Block& block = ctx.weights.blocks[i];
    if (block.spec.kind == BlockKind::kSharedTransformer) {
      float* hidden = buf.hidden.f32();
      float* residual = buf.residual.f32();
      if (i == 0) {
        std::copy_n(hidden, T * d, residual);
      } else {
        for (int64_t j = 0; j < T * d; ++j) residual[j] += hidden[j];
      }
      SSMKIT_RETURN_IF_ERROR(RunShared(ctx, block, batch, buf, hidden));
      feed = true;
      continue;
    }
    if (feed) {
      // RMSNorm(residual + t), the residual stream itself unchanged.
      SSMKIT_RETURN_IF_ERROR(AddRmsNormForward({h, r, block.norm, {}}, n, scratch, options));
      feed = false;
    } else {
      SSMKIT_RETURN_IF_ERROR(
          AddRmsNormForward({h, i == 0 ? Tensor{} : r, block.norm, {}}, n, r, options));
    }
    SSMKIT_RETURN_IF_ERROR(RunBlock(ctx, block, batch, buf, buf.normed, buf.hidden));
    if (m != 1.0f) {
      float* hidden = buf.hidden.f32();
      for (int64_t j = 0; j < T * d; ++j) hidden[j] *= m;
    }
  }
  return AddRmsNormForward({h, r, ctx.weights.norm_f, Tensor{}}, n, r, options);
}

Status LmHead(const ModelConfig& c, const ModelWeights& w, ActBuffer normed, int64_t rows,
              ActBuffer logits) {
  const int64_t d = c.d_model, V = c.vocab_size;
  SSMKIT_RETURN_IF_ERROR(
      LinearForward({normed.Rows(rows, d, d), w.lm_head, {}}, logits.Rows(rows, V, V)));
  const float m = c.multipliers.logits;
  if (m == 1.0f) return Status::Ok();
  if (!logits.on_host())
    return Status::Unsupported("lm_head: a logits multiplier runs on the CPU only");
  float* out = logits.f32();
  for (int64_t i = 0; i < rows * V; ++i) out[i] *= m;
  return Status::Ok();
}

}  // namespace ssmkit::model
