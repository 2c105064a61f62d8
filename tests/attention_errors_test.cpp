// Bad input to the paged attention ops (AttentionPagedForward, PagedKvAppend): one check per
// rule of src/ops/attention.cpp for them. Each must return kInvalidArgument with a message naming
// the argument, the expected and the given value, and leave every output untouched; CUDA tensors
// give kUnsupported. The dense ops' rules are bad inputs of the op harness
// (tests/harness/cases/attention.cpp).
#include <string>
#include <vector>

#include "attention_fixture.hpp"
#include "ssmkit/attention.hpp"

namespace ssmkit::testing {
namespace {

// B = 2, L = 3, H = 4, Hk = 2, E = 8, Ev = 6 (q from a dense problem of S = 5); a cache of 6
// blocks of 4 rows.
constexpr int64_t kB = 2, kL = 3, kS = 5, kH = 4, kHk = 2, kE = 8, kEv = 6;
constexpr int64_t kBlocks = 6, kBlockSize = 4, kMaxBlocks = 3;

class AttentionErrors : public ::testing::Test {
 protected:
  AttentionErrors()
      : rng_(FreshSeed()), prob_(AttnCase{"errors", kB, kL, kS, kH, kHk, kE, kEv}, rng_) {
    out_ = View::Dense({kB, kL, kH, kEv}, DType::kF32);
    k_blocks_ = View::Dense({kBlocks, kBlockSize, kHk, kE}, DType::kF32);
    v_blocks_ = View::Dense({kBlocks, kBlockSize, kHk, kEv}, DType::kF32);
    table_ = View::Dense({1, 1, kB, kMaxBlocks}, DType::kI32, 2);
    table_.Fill({4, 0, 2, 1, 5, 3});
    seq_lens_ = View::Dense({1, 1, 1, kB}, DType::kI32, 1);
    seq_lens_.Fill({5, 9});
    new_k_ = View::Dense({kB, kL, kHk, kE}, DType::kF32);
    new_v_ = View::Dense({kB, kL, kHk, kEv}, DType::kF32);
    new_k_.Fill(rng_.NormalVec(new_k_.numel()));
    new_v_.Fill(rng_.NormalVec(new_v_.numel()));
    Snapshot();
  }

  void Snapshot() {
    before_.clear();
    for (const View* v : Outputs()) before_.push_back(v->bytes());
  }
  std::vector<const View*> Outputs() const { return {&out_, &k_blocks_, &v_blocks_}; }
  // kInvalidArgument whose message contains `text`, and no output changed.
  void Expect(const Status& status, const std::string& text,
              StatusCode code = StatusCode::kInvalidArgument) {
    EXPECT_EQ(status.code(), code) << status.message();
    EXPECT_NE(status.message().find(text), std::string::npos)
        << "message: " << status.message() << "\nexpected to contain: " << text;
    const std::vector<const View*> outputs = Outputs();
    for (size_t i = 0; i < outputs.size(); ++i) {
      EXPECT_EQ(outputs[i]->bytes(), before_[i]) << "output " << i << " was written";
    }
  }

  PagedKv Kv() const {
    return {k_blocks_.tensor(), v_blocks_.tensor(), table_.tensor(), seq_lens_.tensor()};
  }

  Rng rng_;
  AttnProblem prob_;
  View out_, k_blocks_, v_blocks_, table_, seq_lens_, new_k_, new_v_;
  std::vector<std::vector<uint8_t>> before_;
};

TEST_F(AttentionErrors, PagedOptions) {
  Expect(AttentionPagedForward(prob_.q.tensor(), Kv(), out_.tensor(), {0.0f, -1}),
         "attention_paged: options.window");
}

TEST_F(AttentionErrors, PagedCache) {
  const Tensor q = prob_.q.tensor();
  PagedKv kv = Kv();
  kv.v_blocks.dtype = DType::kBF16;
  Expect(AttentionPagedForward(q, kv, out_.tensor()),
         "attention_paged: kv.v_blocks: expected dtype f32, given bf16");
  kv = Kv();
  kv.block_table.dtype = DType::kI64;
  Expect(AttentionPagedForward(q, kv, out_.tensor()),
         "attention_paged: kv.block_table: expected dtype i32");
  kv = Kv();
  kv.k_blocks.shape[3] = kE + 2;
  kv.v_blocks.shape[3] = kEv;
  Expect(AttentionPagedForward(q, kv, out_.tensor()),
         "attention_paged: q: expected shape (B, L, H, E) = (2, 3, 4, 10), given (2, 3, 4, 8)");
  kv = Kv();
  kv.seq_lens = Tensor{};
  Expect(AttentionPagedForward(q, kv, out_.tensor()),
         "attention_paged: kv.seq_lens: expected a tensor of shape (B) = (2,), given null");
  seq_lens_.Fill({5, 13});  // capacity 3 blocks x 4 = 12
  Expect(AttentionPagedForward(q, Kv(), out_.tensor()),
         "attention_paged: kv.seq_lens: expected values in [0, max_blocks_per_seq * block_size] = "
         "[0, 12], given 13 at b = 1");
  seq_lens_.Fill({5, 9});
  table_.Fill({4, 6, 2, 1, 5, 3});  // block 6 of 6, used by sequence 0's tokens 4..7
  Expect(AttentionPagedForward(q, Kv(), out_.tensor()),
         "attention_paged: kv.block_table: expected block ids in [0, num_blocks) = [0, 6) for the "
         "blocks a sequence uses, given 6 at (b, i) = (0, 1)");
  table_.Fill({4, 0, -1, 1, 5, 3});  // -1 past sequence 0's 5 tokens: never read, allowed
  Snapshot();
  EXPECT_TRUE(AttentionPagedForward(q, Kv(), out_.tensor()).ok());
  Tensor out = k_blocks_.tensor();  // out over the cache
  out.shape = {kB, kL, kH, kEv};
  out.strides = {kL * kH * kEv, kH * kEv, kEv, 1};
  Snapshot();
  Expect(AttentionPagedForward(q, Kv(), out),
         "attention_paged: out: expected memory not overlapping kv.k_blocks");
}

TEST_F(AttentionErrors, PagedAppend) {
  Tensor k = new_k_.tensor();
  k.shape[2] = 1;
  Expect(PagedKvAppend(k, new_v_.tensor(), Kv()),
         "paged_kv_append: k: expected shape (B, L, Hk, E) = (2, 3, 2, 8), given (2, 3, 1, 8)");
  table_.Fill({4, 0, 2, 1, 0, 3});  // block 0 written by both sequences
  Snapshot();
  Expect(PagedKvAppend(new_k_.tensor(), new_v_.tensor(), Kv()),
         "paged_kv_append: kv.block_table: expected blocks written by one sequence only, given "
         "block 0 written by b = 0 and b = 1");
  table_.Fill({4, 0, 2, 1, 5, 3});
  Tensor over = k_blocks_.tensor();  // new keys read from the cache they are written to
  over.shape = {kB, kL, kHk, kE};
  over.strides = {kL * kHk * kE, kHk * kE, kE, 1};
  Expect(PagedKvAppend(over, new_v_.tensor(), Kv()),
         "paged_kv_append: kv.k_blocks: expected memory not overlapping k");
  seq_lens_.Fill({-1, 9});
  Expect(PagedKvAppend(new_k_.tensor(), new_v_.tensor(), Kv()),
         "paged_kv_append: kv.seq_lens: expected values in [0, max_blocks_per_seq * block_size] = "
         "[0, 12], given -1 at b = 0");
  seq_lens_.Fill({5, 9});
  EXPECT_TRUE(PagedKvAppend(new_k_.tensor(), new_v_.tensor(), Kv()).ok());
  PagedKv kv = Kv();
  for (Tensor* t : {&kv.k_blocks, &kv.v_blocks, &kv.block_table, &kv.seq_lens})
    t->device = Device::kCuda;
  Tensor ck = new_k_.tensor(), cv = new_v_.tensor();
  ck.device = cv.device = Device::kCuda;
  Snapshot();
  Expect(PagedKvAppend(ck, cv, kv), "paged_kv_append: CUDA tensors are not supported yet",
         StatusCode::kUnsupported);
}

}  // namespace
}  // namespace ssmkit::testing
