// The type `ssmkit quantize` chooses for each tensor (model/gguf_tensor_types.hpp): the --type
// names, general.file_type, and llama-quantize's K-quant mixes rule by rule (the tables below
// worked out by hand from llama.cpp's llama_tensor_get_type), then over a whole file whose
// tensors come in another order than llama-quantize visits them. python/tests/
// test_quantize_mixes.py checks whole files against the same rules and, opt-in, against
// llama-quantize itself.
#include "model/gguf_tensor_types.hpp"

#include <set>
#include <string>
#include <utility>
#include <vector>

#include "core/gguf_writer.hpp"
#include "test_util.hpp"

namespace ssmkit::testing {
namespace {

using model::ChooseTensorTypes;
using model::GgufFileType;
using model::MixCounts;
using model::MixedMatrixType;
using model::QuantizeType;
using model::QuantizeTypeFromName;
using model::QuantMix;

constexpr DType kQ4 = DType::kQ4_K, kQ5 = DType::kQ5_K, kQ6 = DType::kQ6_K, kQ8 = DType::kQ8_0;

TEST(QuantizeTypes, NamesAndFileTypes) {
  const std::pair<const char*, uint32_t> mixes[] = {
      {"q4_k_s", 14}, {"q4_k_m", 15}, {"q5_k_s", 16}, {"q5_k_m", 17}};
  for (const auto& [name, file_type] : mixes) {
    QuantizeType t;
    ASSERT_TRUE(QuantizeTypeFromName(name, &t)) << name;
    EXPECT_NE(t.mix, QuantMix::kNone) << name;
    EXPECT_EQ(t.matrices, name[1] == '4' ? kQ4 : kQ5) << name;
    EXPECT_EQ(GgufFileType(t), file_type) << name;
  }
  QuantizeType t;
  ASSERT_TRUE(QuantizeTypeFromName("q4_k", &t));
  EXPECT_EQ(t.mix, QuantMix::kNone);
  EXPECT_EQ(GgufFileType(t), 14u);  // --pure's file type: Q4_K_S's
  ASSERT_TRUE(QuantizeTypeFromName("q8_0", &t));
  EXPECT_EQ(GgufFileType(t), 7u);
  ASSERT_TRUE(QuantizeTypeFromName("f32", &t));
  EXPECT_EQ(GgufFileType(t), 0u);
  for (const char* bad : {"q3_k_m", "q4_k_l", "i32", "i64", "Q4_K_M", ""})
    EXPECT_FALSE(QuantizeTypeFromName(bad, &t)) << bad;
}

// The layers (or positions) in 0..n-1 that llama-quantize's use_more_bits picks, written out.
std::set<int64_t> MoreBitsBy(const std::vector<int64_t>& list) {
  return {list.begin(), list.end()};
}

TEST(QuantizeTypes, FfnDownByLayerCount) {
  // n = 16: n/8 = 2, 7n/8 = 14; between them every third from 2 + 2: 4, 7, 10, 13.
  const std::set<int64_t> more = MoreBitsBy({0, 1, 4, 7, 10, 13, 14, 15});
  const MixCounts counts{16, 0, 0, true};
  for (int64_t i = 0; i < 16; ++i) {
    const std::string name = "blk." + std::to_string(i) + ".ffn_down.weight";
    const bool up = more.count(i) > 0;
    EXPECT_EQ(MixedMatrixType(QuantMix::kQ4_K_M, kQ4, name, 512, i, counts), up ? kQ6 : kQ4) << i;
    EXPECT_EQ(MixedMatrixType(QuantMix::kQ5_K_M, kQ5, name, 512, i, counts), up ? kQ6 : kQ5) << i;
    EXPECT_EQ(MixedMatrixType(QuantMix::kQ4_K_S, kQ4, name, 512, i, counts), i < 2 ? kQ5 : kQ4)
        << i;
    EXPECT_EQ(MixedMatrixType(QuantMix::kQ5_K_S, kQ5, name, 512, i, counts), kQ5) << i;
  }
  // The position among the file's ffn_down tensors decides, not the layer in the name...
  EXPECT_EQ(MixedMatrixType(QuantMix::kQ4_K_M, kQ4, "blk.5.ffn_down.weight", 512, 0, counts), kQ6);
  // ...unless the model has experts: then the name's layer, shared experts alike.
  const MixCounts moe{16, 4, 0, true};
  EXPECT_EQ(MixedMatrixType(QuantMix::kQ4_K_M, kQ4, "blk.5.ffn_down_exps.weight", 512, 0, moe),
            kQ4);
  EXPECT_EQ(MixedMatrixType(QuantMix::kQ4_K_M, kQ4, "blk.13.ffn_down_shexp.weight", 512, 2, moe),
            kQ6);
}

TEST(QuantizeTypes, AttnVByItsPosition) {
  // n = 4 attn_v tensors: n/8 = 0, 7n/8 = 3: positions 3, and 2 ((2 - 0) % 3 == 2).
  const MixCounts counts{10, 0, 4, true};
  const DType m[] = {kQ4, kQ4, kQ6, kQ6};
  for (int64_t i = 0; i < 4; ++i) {
    const std::string name = "blk." + std::to_string(2 * i + 1) + ".attn_v.weight";
    EXPECT_EQ(MixedMatrixType(QuantMix::kQ4_K_M, kQ4, name, 256, i, counts), m[i]) << i;
    EXPECT_EQ(MixedMatrixType(QuantMix::kQ4_K_S, kQ4, name, 256, i, counts), kQ5) << i;
    EXPECT_EQ(MixedMatrixType(QuantMix::kQ5_K_S, kQ5, name, 256, i, counts), kQ5) << i;
  }
  EXPECT_EQ(MixedMatrixType(QuantMix::kQ4_K_S, kQ4, "blk.9.attn_v.weight", 256, 4, counts), kQ4);
  // A fused QKV is of the attn_v kind.
  EXPECT_EQ(MixedMatrixType(QuantMix::kQ5_K_M, kQ5, "blk.0.attn_qkv.weight", 256, 3, counts), kQ6);
  // Q, K and the output projection keep the default.
  for (const char* name :
       {"blk.0.attn_q.weight", "blk.0.attn_k.weight", "blk.0.attn_output.weight"})
    EXPECT_EQ(MixedMatrixType(QuantMix::kQ4_K_M, kQ4, name, 256, 0, counts), kQ4) << name;
}

TEST(QuantizeTypes, HeadAndEmbedding) {
  const MixCounts tied{4, 0, 0, true}, untied{4, 0, 0, false};
  for (QuantMix mix :
       {QuantMix::kQ4_K_S, QuantMix::kQ4_K_M, QuantMix::kQ5_K_S, QuantMix::kQ5_K_M}) {
    const DType base = mix == QuantMix::kQ4_K_S || mix == QuantMix::kQ4_K_M ? kQ4 : kQ5;
    EXPECT_EQ(MixedMatrixType(mix, base, "output.weight", 256, 0, untied), kQ6);
    EXPECT_EQ(MixedMatrixType(mix, base, "output.weight", 96, 0, untied), kQ8);  // not 256-blocks
    EXPECT_EQ(MixedMatrixType(mix, base, "token_embd.weight", 256, 0, untied), base);
    EXPECT_EQ(MixedMatrixType(mix, base, "token_embd.weight", 256, 0, tied), kQ6);
    EXPECT_EQ(MixedMatrixType(mix, base, "blk.0.ssm_in.weight", 256, 0, tied), base);
  }
}

TEST(QuantizeTypes, EightExperts) {
  const MixCounts counts{8, 8, 2, false};
  EXPECT_EQ(MixedMatrixType(QuantMix::kQ4_K_M, kQ4, "blk.1.attn_v.weight", 256, 1, counts), kQ8);
  EXPECT_EQ(MixedMatrixType(QuantMix::kQ5_K_S, kQ5, "blk.1.attn_k.weight", 256, 0, counts), kQ8);
  EXPECT_EQ(MixedMatrixType(QuantMix::kQ4_K_S, kQ4, "blk.1.attn_output.weight", 256, 0, counts),
            kQ5);
  EXPECT_EQ(MixedMatrixType(QuantMix::kQ5_K_M, kQ5, "blk.1.attn_output.weight", 256, 0, counts),
            kQ5);
  const MixCounts seven{8, 7, 2, false};
  EXPECT_EQ(MixedMatrixType(QuantMix::kQ4_K_S, kQ4, "blk.1.attn_k.weight", 256, 0, seven), kQ4);
}

TEST(QuantizeTypes, AWholeFileInAnyOrder) {
  // Eight layers, an MLP in layers 1, 2, 5 and 7 and attention in 3 and 6, listed from the last
  // layer down, as safetensors' name order puts blk.10 before blk.2.
  std::vector<std::pair<std::string, std::vector<int64_t>>> file;
  std::set<std::string> f32;  // the norms, the conv and A: never quantized
  for (int64_t i = 7; i >= 0; --i) {
    const std::string b = "blk." + std::to_string(i) + ".";
    if (i == 1 || i == 2 || i == 5 || i == 7) {
      file.push_back({b + "ffn_up.weight", {512, 256}});
      file.push_back({b + "ffn_down.weight", {256, 512}});
    } else if (i == 3 || i == 6) {
      file.push_back({b + "attn_v.weight", {128, 256}});
      file.push_back({b + "attn_k.weight", {128, 256}});
    } else {
      file.push_back({b + "ssm_in.weight", {1024, 256}});
      for (const char* vector : {"ssm_conv1d.weight", "ssm_a"}) {
        file.push_back({b + vector, {512, 4}});
        f32.insert(b + vector);
      }
    }
    file.push_back({b + "attn_norm.weight", {256}});
    f32.insert(b + "attn_norm.weight");
  }
  file.push_back({"token_embd.weight", {512, 256}});
  file.push_back({"output.weight", {512, 256}});
  QuantizeType q4_k_m;
  ASSERT_TRUE(QuantizeTypeFromName("q4_k_m", &q4_k_m));
  const std::vector<DType> types = ChooseTensorTypes(q4_k_m, file, 8, 0);
  ASSERT_EQ(types.size(), file.size());
  // ffn_down: positions 0..3 (layers 1, 2, 5, 7) of n = 8 layers: MoreBits(0..3, 8) picks 0 and
  // 3 (n/8 = 1: 0 < 1; (3 - 1) % 3 == 2). attn_v: positions 0, 1 (layers 3, 6) of n = 2:
  // 7n/8 = 1 picks 1.
  const std::set<std::string> q6 = {"blk.1.ffn_down.weight", "blk.7.ffn_down.weight",
                                    "blk.6.attn_v.weight", "output.weight"};
  for (size_t i = 0; i < file.size(); ++i) {
    const std::string& name = file[i].first;
    const DType want = f32.count(name) ? DType::kF32 : q6.count(name) ? kQ6 : kQ4;
    EXPECT_EQ(types[i], want) << name;
  }
  // A plain type: every matrix in it, whatever its kind.
  QuantizeType q8;
  ASSERT_TRUE(QuantizeTypeFromName("q8_0", &q8));
  const std::vector<DType> plain = ChooseTensorTypes(q8, file, 8, 0);
  for (size_t i = 0; i < file.size(); ++i)
    EXPECT_TRUE(plain[i] == kQ8 || plain[i] == DType::kF32) << file[i].first;
}

TEST(QuantizeTypes, WriterFindsIntegerKeys) {
  GgufWriter w;
  w.AddString("general.architecture", "mamba");
  w.AddU32("mamba.block_count", 64);
  w.AddI32("mamba.expert_count", 8);
  w.AddF32("mamba.attention.layer_norm_rms_epsilon", 1e-5f);
  int64_t v = -1;
  ASSERT_TRUE(w.FindInteger("mamba.block_count", &v));
  EXPECT_EQ(v, 64);
  ASSERT_TRUE(w.FindInteger("mamba.expert_count", &v));
  EXPECT_EQ(v, 8);
  EXPECT_FALSE(w.FindInteger("mamba.attention.layer_norm_rms_epsilon", &v));  // a float
  EXPECT_FALSE(w.FindInteger("general.architecture", &v));
  EXPECT_FALSE(w.FindInteger("mamba.block", &v));  // a prefix of a key is not the key
}

}  // namespace
}  // namespace ssmkit::testing
