// Bad input to the attention ops: one test per rule of src/ops/attention.cpp (and the shared
// ones of src/ops/check.cpp and src/ops/tensor_span.cpp). Each must return kInvalidArgument with
// a message naming the argument, the expected and the given value, and leave every output
// untouched; CUDA tensors give kUnsupported.
#include <string>
#include <vector>

#include "attention_fixture.hpp"
#include "ssmkit/attention.hpp"

namespace ssmkit::testing {
namespace {

// B = 2, L = 3, S = 5, H = 4, Hk = 2, E = 8, Ev = 6; a cache of 6 blocks of 4 rows.
constexpr int64_t kB = 2, kL = 3, kS = 5, kH = 4, kHk = 2, kE = 8, kEv = 6;
constexpr int64_t kBlocks = 6, kBlockSize = 4, kMaxBlocks = 3;

class AttentionErrors : public ::testing::Test {
 protected:
  AttentionErrors()
      : rng_(FreshSeed()), prob_(AttnCase{"errors", kB, kL, kS, kH, kHk, kE, kEv, 0, true}, rng_) {
    out_ = View::Dense({kB, kL, kH, kEv}, DType::kF32);
    lse_ = View::Dense({1, kB, kH, kL}, DType::kF32, 3);
    dout_ = View::Dense({kB, kL, kH, kEv}, DType::kF32);
    dout_.Fill(rng_.NormalVec(dout_.numel()));
    dq_ = View::Dense({kB, kL, kH, kE}, DType::kF32);
    dk_ = View::Dense({kB, kS, kHk, kE}, DType::kF32);
    dv_ = View::Dense({kB, kS, kHk, kEv}, DType::kF32);
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
    // The forward's outputs, for the backward's inputs.
    EXPECT_TRUE(AttentionForward(prob_.Inputs(), out_.tensor(), lse_.tensor()).ok());
    Snapshot();
  }

  void Snapshot() {
    before_.clear();
    for (const View* v : Outputs()) before_.push_back(v->bytes());
  }
  std::vector<const View*> Outputs() const {
    return {&out_, &lse_, &dq_, &dk_, &dv_, &k_blocks_, &v_blocks_};
  }
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

  AttentionInputs In() const { return prob_.Inputs(); }
  Status Forward(const AttentionInputs& in, const AttentionOptions& o = {}) {
    return AttentionForward(in, out_.tensor(), lse_.tensor(), o);
  }
  Status Backward(const AttentionInputs& in, const Tensor& lse, const Tensor& dout,
                  const AttentionGrads& grads) {
    return AttentionBackward(in, out_.tensor(), lse, dout, grads);
  }
  AttentionGrads Grads() const { return {dq_.tensor(), dk_.tensor(), dv_.tensor()}; }
  PagedKv Kv() const {
    return {k_blocks_.tensor(), v_blocks_.tensor(), table_.tensor(), seq_lens_.tensor()};
  }

  Rng rng_;
  AttnProblem prob_;
  View out_, lse_, dout_, dq_, dk_, dv_, k_blocks_, v_blocks_, table_, seq_lens_, new_k_, new_v_;
  std::vector<std::vector<uint8_t>> before_;
};

TEST_F(AttentionErrors, Options) {
  for (float scale : {-1.0f, NAN, INFINITY}) {
    Expect(Forward(In(), {scale, 0}), "attention: options.scale: expected a finite value >= 0");
  }
  Expect(Forward(In(), {0.0f, -3}),
         "attention: options.window: expected a window >= 0 (0: none), given -3");
  Expect(AttentionPagedForward(prob_.q.tensor(), Kv(), out_.tensor(), {0.0f, -1}),
         "attention_paged: options.window");
}

TEST_F(AttentionErrors, QueryShape) {
  AttentionInputs in = In();
  in.q = Tensor{};
  Expect(Forward(in), "attention: q: expected a tensor (B, L, H, E), given null");
  in = In();
  in.q.rank = 3;
  Expect(Forward(in), "attention: q: expected rank 4");
  in = In();
  in.q.shape[1] = 0;
  Expect(Forward(in), "attention: q: expected every dimension of (B, L, H, E) >= 1");
  in = In();
  in.q.strides[3] = 2;
  Expect(Forward(in), "attention: q: expected stride 1 on the last dimension, given stride 2");
  in = In();
  in.q.dtype = DType::kF16;
  Expect(Forward(in), "attention: q: expected dtype f32 or bf16, given f16");
}

TEST_F(AttentionErrors, KeyAndValueShapes) {
  AttentionInputs in = In();
  in.q.shape[1] = kS + 1;  // L > S
  Expect(Forward(in), "attention: k: expected key length S in [L, 2^31 - 1]");
  in = In();
  in.q.shape[2] = 3;  // H = 3 with Hk = 2
  Expect(Forward(in), "attention: k: expected kv heads Hk dividing H = 3, given Hk = 2");
  in = In();
  in.k.shape[3] = kE + 1;
  Expect(Forward(in),
         "attention: k: expected shape (B, S, Hk, E) = (2, 5, 2, 8), given (2, 5, 2, 9)");
  in = In();
  in.v.shape[1] = kS - 1;
  Expect(Forward(in),
         "attention: v: expected shape (B, S, Hk, Ev) = (2, 5, 2, 6), given (2, 4, 2, 6)");
  in = In();
  in.v.strides[0] = -1;
  Expect(Forward(in), "attention: v: expected non-negative strides");
}

TEST_F(AttentionErrors, KvStart) {
  AttentionInputs in = In();
  in.kv_start.dtype = DType::kF32;
  Expect(Forward(in), "attention: kv_start: expected dtype i32, given f32");
  in = In();
  in.kv_start.shape[0] = 3;
  Expect(Forward(in), "attention: kv_start: expected shape (B) = (2,), given (3,)");
  for (double bad : {-1.0, 6.0}) {
    View start = View::Dense({1, 1, 1, kB}, DType::kI32, 1);
    start.Fill({0.0, bad});
    in = In();
    in.kv_start = start.tensor();
    Expect(Forward(in), "attention: kv_start: expected values in [0, S] = [0, 5], given " +
                            std::to_string(static_cast<int>(bad)) + " at b = 1");
  }
}

TEST_F(AttentionErrors, Outputs) {
  Tensor out = out_.tensor();
  out.shape[3] = kE;
  Expect(AttentionForward(In(), out, lse_.tensor()),
         "attention: out: expected shape (B, L, H, Ev) = (2, 3, 4, 6), given (2, 3, 4, 8)");
  out = out_.tensor();
  out.strides[1] = 0;
  Expect(AttentionForward(In(), out, lse_.tensor()),
         "attention: out: expected strides that give every element its own address");
  Tensor lse = lse_.tensor();
  lse.dtype = DType::kBF16;
  Expect(AttentionForward(In(), out_.tensor(), lse),
         "attention: lse: expected dtype f32, given bf16");
  lse = lse_.tensor();
  lse.shape[2] = kL + 1;
  Expect(AttentionForward(In(), out_.tensor(), lse),
         "attention: lse: expected shape (B, H, L) = (2, 4, 3)");
  // out written over q, lse over out.
  Tensor over_q = prob_.q.tensor();
  over_q.shape[3] = kEv;
  Expect(AttentionForward(In(), over_q, lse_.tensor()),
         "attention: out: expected memory not overlapping q");
  Tensor lse_over_out = out_.tensor();
  lse_over_out.rank = 3;
  lse_over_out.shape = {kB, kH, kL};
  lse_over_out.strides = {kH * kL, kL, 1};
  Expect(AttentionForward(In(), out_.tensor(), lse_over_out),
         "attention: lse: expected memory not overlapping out");
}

TEST_F(AttentionErrors, Devices) {
  AttentionInputs in = In();
  in.q.device = Device::kCuda;
  Expect(Forward(in), "attention: q: expected a CPU tensor, given a CUDA tensor");
  in = In();
  Tensor out = out_.tensor(), lse = lse_.tensor();
  for (Tensor* t : {&in.q, &in.k, &in.v, &in.kv_start, &out, &lse}) t->device = Device::kCuda;
  Expect(AttentionForward(in, out, lse), "attention: CUDA tensors are not supported yet",
         StatusCode::kUnsupported);
}

TEST_F(AttentionErrors, Backward) {
  Expect(Backward(In(), Tensor{}, dout_.tensor(), Grads()),
         "attention_backward: lse: expected a tensor of shape (B, H, L) = (2, 4, 3), given null");
  Tensor dout = dout_.tensor();
  dout.shape[2] = 2;
  Expect(Backward(In(), lse_.tensor(), dout, Grads()), "attention_backward: dout: expected shape");
  AttentionGrads g = Grads();
  g.dq.dtype = DType::kBF16;
  Expect(Backward(In(), lse_.tensor(), dout_.tensor(), g),
         "attention_backward: dq: expected dtype f32, given bf16");
  g = Grads();
  g.dk = dq_.tensor();  // dk where dq is: wrong shape first
  Expect(Backward(In(), lse_.tensor(), dout_.tensor(), g),
         "attention_backward: dk: expected shape");
  g = Grads();
  g.dv = prob_.v.tensor();  // written over its own input
  Expect(Backward(In(), lse_.tensor(), dout_.tensor(), g),
         "attention_backward: dv: expected memory not overlapping v");
  g = Grads();  // dq inside dk's memory
  View big = View::Dense({kB, kS, kHk, kE}, DType::kF32);
  g.dq = big.tensor();
  g.dq.shape = {kB, kL, kH, kE};
  g.dq.strides = {kL * kH * kE, kH * kE, kE, 1};
  g.dk = big.tensor();
  Expect(Backward(In(), lse_.tensor(), dout_.tensor(), g),
         "attention_backward: dk: expected memory not overlapping dq");
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
