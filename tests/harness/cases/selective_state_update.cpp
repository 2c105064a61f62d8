// selective_state_update, the decode step of the SSM (include/ssmkit/state_update.hpp), in the op
// harness as two ops, one per form, each with its own valid configuration for the bad inputs:
// selective_state_update_mamba1 (state (Bs, D, N)) and selective_state_update_mamba2 (state
// (Bs, H, P, N)). G = 1 and G > 1, B/C as (B, N) or (B, G, N), every optional input on and off,
// f32, bf16 and mixed, odd N (masked tails), strided rows, state_batch_indices with skipped rows,
// out aliasing x, the model shapes on 2 threads, the GPU tests' shapes, and every argument rule
// of src/ops/state_update.cpp (the state, updated in place, untouched on error).
// tests/state_update_test.cpp keeps what a table cannot say: bit-identical unused state rows,
// determinism, the index check after an error.
#include <algorithm>
#include <numeric>
#include <random>

#include "harness/op_spec.hpp"
#include "ref/state_update_ref.hpp"
#include "ssmkit/state_update.hpp"

namespace ssmkit::testing::harness {
namespace {

struct Step {
  bool mamba2 = false;
  int64_t B = 2, H = 8, P = 1, N = 16;  // H is D for Mamba-1 (P = 1)
  int64_t b_groups = 1, c_groups = 1;   // 0: B (or C) in the (B, N) form
  DType dtype = DType::kF32;            // x, dt, z, out
  DType bc_dtype = DType::kF32;         // B, C
  int skip = 0;                         // 0: no D, 1: D (H) / (D), 2: D (H, P)
  bool z = false, dt_bias = false, softplus = false;
  bool indices = false;    // a pool of B + spare_rows state rows, permuted, every third row skipped
  int64_t spare_rows = 3;  // with indices
  int64_t pad = 0;         // strided x, z, out, B, C and state rows
  bool alias = false;      // out = x
  std::string Name() const {
    return std::string(mamba2 ? "mamba2" : "mamba1") + " B=" + std::to_string(B) +
           " H=" + std::to_string(H) + " P=" + std::to_string(P) + " N=" + std::to_string(N) +
           " Gb=" + std::to_string(b_groups) + " Gc=" + std::to_string(c_groups) + " " +
           DTypeName(dtype) + " bc " + DTypeName(bc_dtype) + " skip=" + std::to_string(skip) +
           (z ? " z" : "") + (dt_bias ? " dt_bias" : "") + (softplus ? " softplus" : "") +
           (indices ? " indices Bs=" + std::to_string(StateBatch()) : "") +
           " pad=" + std::to_string(pad) + (alias ? " out=x" : "");
  }
  int64_t StateBatch() const { return indices ? B + spare_rows : B; }
  std::vector<int64_t> XShape() const {
    return mamba2 ? std::vector<int64_t>{B, H, P} : std::vector<int64_t>{B, H};
  }
  std::vector<int64_t> StateShape() const {
    return mamba2 ? std::vector<int64_t>{StateBatch(), H, P, N}
                  : std::vector<int64_t>{StateBatch(), H, N};
  }
  std::vector<int64_t> BCShape(int64_t groups) const {
    return groups == 0 ? std::vector<int64_t>{B, N} : std::vector<int64_t>{B, groups, N};
  }
};

std::string OutName(const Step& p) { return p.alias ? "x" : "out"; }

// A permutation of the pool's rows, every third batch row a pad slot (-1, skipped). Fixed per
// shape: Given takes values, not a draw from the problem's generator.
std::vector<double> Indices(const Step& p) {
  std::vector<int32_t> pool(static_cast<size_t>(p.StateBatch()));
  std::iota(pool.begin(), pool.end(), 0);
  std::shuffle(pool.begin(), pool.end(), std::mt19937(static_cast<uint32_t>(p.B * 31 + p.H)));
  std::vector<double> idx;
  for (int64_t b = 0; b < p.B; ++b) idx.push_back(b % 3 == 1 ? -1.0 : pool[b]);
  return idx;
}

void Make(const Step& p, Problem& prob) {
  const bool f32 = p.dtype == DType::kF32 && p.bc_dtype == DType::kF32;
  prob.DefaultTol(DTypeTol(f32 ? DType::kF32 : DType::kBF16));
  (p.alias ? prob.InOut("x", p.XShape(), p.dtype, p.pad)
           : prob.Input("x", p.XShape(), p.dtype, p.pad))
      .Normal();
  Arg& dt = prob.Input("dt", {p.B, p.H}, p.dtype);
  if (p.softplus) {
    dt.Uniform(-4.0, 1.0).Pin(0, 25.0);  // above softplus' threshold: the identity
  } else {
    dt.Uniform(0.4, 1.0);
  }
  prob.Input("A", p.mamba2 ? std::vector<int64_t>{p.H} : std::vector<int64_t>{p.H, p.N},
             DType::kF32)
      .Uniform(-3.0, -0.2);
  prob.Input("B", p.BCShape(p.b_groups), p.bc_dtype, p.pad).Normal();
  prob.Input("C", p.BCShape(p.c_groups), p.bc_dtype, p.pad).Normal();
  if (p.skip) {
    prob.Input("D", p.skip == 2 ? std::vector<int64_t>{p.H, p.P} : std::vector<int64_t>{p.H},
               DType::kF32)
        .Uniform(-1.0, 1.0);
  }
  if (p.z) prob.Input("z", p.XShape(), p.dtype, p.pad).Normal();
  if (p.dt_bias) prob.Input("dt_bias", {p.H}, DType::kF32).Uniform(-0.3, 0.3);
  if (p.indices) prob.Input("state_batch_indices", {p.B}, DType::kI32).Given(Indices(p));
  // f32 on the CPU whatever the inputs' dtype; the GPU tests have held 1e-4.
  prob.InOut("state", p.StateShape(), DType::kF32, p.pad).Normal().Tol(1e-5, 1e-4);
  if (p.alias) return;
  // A skipped row's out is left as it was: with indices out holds values the oracle keeps
  // (poison would read as "left poisoned"), so a written skipped row shows as an error.
  if (p.indices) {
    prob.InOut("out", p.XShape(), p.dtype, p.pad).Normal();
  } else {
    prob.Output("out", p.XShape(), p.dtype, p.pad);
  }
}

void OracleForward(const Step& p, Values& v) {
  ref::StateUpdateShape s;
  s.batch = p.B;
  s.state_batch = p.StateBatch();
  s.dim = p.H;
  s.headdim = p.P;
  s.dstate = p.N;
  s.b_groups = std::max<int64_t>(1, p.b_groups);
  s.c_groups = std::max<int64_t>(1, p.c_groups);
  s.d_per_p = p.skip == 2;
  s.dt_softplus = p.softplus;
  // From a copy of x: with out = x the oracle's out overwrites it.
  const std::vector<double> x(v["x"], v["x"] + p.B * p.H * p.P);
  std::vector<int32_t> idx;
  if (p.indices) idx.assign(v["state_batch_indices"], v["state_batch_indices"] + p.B);
  const ref::StateUpdateInputs in{x.data(), v["dt"],      v["A"],
                                  v["B"],   v["C"],       v["D"],
                                  v["z"],   v["dt_bias"], p.indices ? idx.data() : nullptr};
  (p.mamba2 ? ref::SelectiveStateUpdate2 : ref::SelectiveStateUpdate1)(s, in, v["state"],
                                                                       v[OutName(p)]);
}

Status Forward(const Step& p, Bound& b) {
  const StateUpdateInputs in{b["x"],    b["dt"],      b["A"],
                             b["B"],    b["C"],       b["D"],
                             b["z"],    b["dt_bias"], b["state_batch_indices"],
                             p.softplus};
  return SelectiveStateUpdate(in, b["state"], b[OutName(p)]);
}

// Every option on, as the models call it.
Step Full(bool mamba2, int64_t B, int64_t H, int64_t P, int64_t N, DType dtype) {
  return {.mamba2 = mamba2,
          .B = B,
          .H = H,
          .P = P,
          .N = N,
          .dtype = dtype,
          .bc_dtype = dtype,
          .skip = 1,
          .z = true,
          .dt_bias = true,
          .softplus = true};
}

std::vector<Case<Step>> AllCases() {
  std::vector<Step> grid, mixed, indexed, aliased, models, targets, gpu;
  // Each combination of D, z, dt_bias and softplus with the group layouts and odd N.
  for (int64_t N : {16, 5, 37}) {
    for (auto [gb, gc] : std::vector<std::pair<int64_t, int64_t>>{{0, 0}, {1, 1}, {3, 2}, {0, 6}}) {
      for (int options = 0; options < 16; ++options) {
        for (DType dtype : {DType::kF32, DType::kBF16}) {
          Step s = Full(false, 3, 24, 1, N, dtype);
          s.b_groups = gb;
          s.c_groups = gc;
          s.skip = options & 1;
          s.z = options & 2;
          s.dt_bias = options & 4;
          s.softplus = options & 8;
          s.pad = options % 3;
          grid.push_back(s);
        }
      }
    }
  }
  for (auto [P, N] :
       std::vector<std::pair<int64_t, int64_t>>{{8, 16}, {13, 7}, {4, 128}, {1, 33}}) {
    for (auto [gb, gc] : std::vector<std::pair<int64_t, int64_t>>{{1, 1}, {2, 3}, {6, 6}}) {
      for (int options = 0; options < 16; ++options) {
        for (DType dtype : {DType::kF32, DType::kBF16}) {
          Step s = Full(true, 2, 6, P, N, dtype);
          s.b_groups = gb;
          s.c_groups = gc;
          s.skip = options % 3;
          s.z = options & 2;
          s.dt_bias = options & 4;
          s.softplus = options & 8;
          s.pad = options % 2 ? 0 : 3;
          grid.push_back(s);
        }
      }
    }
  }
  for (bool mamba2 : {false, true}) {
    const int64_t P = mamba2 ? 16 : 1;
    for (auto [io, bc] : std::vector<std::pair<DType, DType>>{{DType::kF32, DType::kBF16},
                                                              {DType::kBF16, DType::kF32}}) {
      Step s = Full(mamba2, 2, 8, P, 16, io);
      s.bc_dtype = bc;
      mixed.push_back(s);
    }
    for (int64_t B : {1, 2, 7}) {
      for (bool alias : {false, true}) {
        Step s = Full(mamba2, B, mamba2 ? 4 : 20, mamba2 ? 8 : 1, mamba2 ? 32 : 16, DType::kF32);
        s.b_groups = s.c_groups = 2;
        s.indices = true;
        s.alias = alias;
        s.pad = alias ? 0 : 2;
        indexed.push_back(s);
      }
    }
    for (DType dtype : {DType::kF32, DType::kBF16}) {
      Step s = Full(mamba2, 2, 8, P, 16, dtype);
      s.dt_bias = s.softplus = false;
      s.alias = true;
      aliased.push_back(s);
    }
    for (int64_t N : {16, 11, 40}) {
      for (DType dtype : {DType::kF32, DType::kBF16}) {
        Step s = Full(mamba2, 2, 12, mamba2 ? 5 : 1, N, dtype);
        s.b_groups = 3;
        s.indices = N == 11;
        targets.push_back(s);
      }
    }
  }
  // mamba-130m (D = 1536, N = 16); a wide Mamba-1 (D = 5120); mamba2-130m (H = 24, P = 64,
  // N = 128); mamba2-2.7b (H = 80); a batch of 3. Threaded, and (H * P > the segment size)
  // several segments per block.
  struct Shape {
    bool mamba2;
    int64_t B, H, P, N;
  };
  for (const Shape& m :
       {Shape{false, 1, 1536, 1, 16}, Shape{false, 2, 5120, 1, 16}, Shape{true, 1, 24, 64, 128},
        Shape{true, 1, 80, 64, 128}, Shape{true, 3, 24, 64, 128}}) {
    for (DType dtype : {DType::kF32, DType::kBF16}) {
      Step s = Full(m.mamba2, m.B, m.H, m.P, m.N, dtype);
      s.indices = m.B == 3;
      models.push_back(s);
    }
  }
  // tests/gpu/state_update_gpu_test.cpp's: N from 1 to 256, bf16, no options with G = 1, an
  // indexed pool of 6 rows for 4; the m1/m2 decode shapes at batch 1 and 16.
  for (bool mamba2 : {false, true}) {
    const int64_t P = mamba2 ? 8 : 1;
    auto base = [&](int64_t N, DType dtype) {
      Step s = Full(mamba2, 3, 4, P, N, dtype);
      s.b_groups = s.c_groups = 2;
      return s;
    };
    for (int64_t N : {1, 5, 16, 64, 128, 256}) gpu.push_back(base(N, DType::kF32));
    gpu.push_back(base(16, DType::kBF16));
    Step bare = base(16, DType::kF32);
    bare.skip = 0;
    bare.z = bare.dt_bias = bare.softplus = false;
    bare.b_groups = bare.c_groups = 1;
    gpu.push_back(bare);
    Step pool = base(16, DType::kF32);
    pool.B = 4;
    pool.indices = true;
    pool.spare_rows = 2;
    gpu.push_back(pool);
    for (int64_t B : {1, 16})
      gpu.push_back(mamba2 ? Full(true, B, 24, 64, 128, DType::kF32)
                           : Full(false, B, 1536, 1, 16, DType::kF32));
  }
  return {
      {"grid", grid},
      {"mixed_dtypes", mixed},
      {"indices_skipped_rows", indexed},
      {"out_aliases_x", aliased},
      {"model_shapes", models, {.threads = 2}},
      {"targets", targets},
      {"gpu_shapes", gpu},
  };
}

// The cases of one form.
std::vector<Case<Step>> Cases(bool mamba2) {
  std::vector<Case<Step>> cases;
  for (Case<Step>& c : AllCases()) {
    std::erase_if(c.configs, [mamba2](const Step& s) { return s.mamba2 != mamba2; });
    if (!c.configs.empty()) cases.push_back(std::move(c));
  }
  return cases;
}

using Bad = BadInput<Step>;
constexpr Call kFwd = Call::kForward;
constexpr const char* kState = "selective_state_update: state:";

// Mamba-1: B = 2, D = 6, N = 4, B as (B, G = 3, N), C as (B, N), no indices.
Step Valid1() {
  Step s = Full(false, 2, 6, 1, 4, DType::kF32);
  s.b_groups = 3;
  s.c_groups = 0;
  return s;
}

// Mamba-2: B = 2, H = 4, P = 3, N = 5, G = 2, D (H, P), indices into Bs = 5 rows.
Step Valid2() {
  Step s = Full(true, 2, 4, 3, 5, DType::kF32);
  s.b_groups = s.c_groups = 2;
  s.skip = 2;
  s.indices = true;
  return s;
}

// Two indices written into a spare tensor bound in place of state_batch_indices.
void SetIndices(Bound& b, int32_t first, int32_t second) {
  Tensor t = b.Spare({2}, DType::kI32);
  static_cast<int32_t*>(t.data)[0] = first;
  static_cast<int32_t*>(t.data)[1] = second;
  b["state_batch_indices"] = t;
}

std::vector<Bad> BadInputs1() {
  return {
      {"StateNull",
       kFwd,
       [](Step&, Bound& b) { b["state"].data = nullptr; },
       {kState, "expected a tensor (Bs, D, N) or (Bs, H, P, N)", "given null"}},
      {"StateSizeTooLarge",
       kFwd,
       [](Step&, Bound& b) { b["state"].shape[2] = 257; },
       {kState, "expected state size N in [1, 256]", "given N = 257"}},
      {"StateBatchMustBeBWithoutIndices",
       kFwd,
       [](Step&, Bound& b) { b["state"].shape[0] = 3; },
       {kState, "expected shape (B, D, N) = (2, 6, 4)", "given (3, 6, 4)"}},
      {"StateOnCuda",
       kFwd,
       [](Step&, Bound& b) { b["state"].device = Device::kCuda; },
       {kState, "expected a CPU tensor", "given a CUDA tensor"}},
      {"XZeroBatch",
       kFwd,
       [](Step&, Bound& b) { b["x"].shape[0] = 0; },
       {"selective_state_update: x:", "expected batch B >= 1", "given B = 0"}},
      {"XDtype",
       kFwd,
       [](Step&, Bound& b) { b["x"].dtype = DType::kF16; },
       {"selective_state_update: x:", "expected dtype f32 or bf16", "given f16"}},
      {"DtNull",
       kFwd,
       [](Step&, Bound& b) { b["dt"].data = nullptr; },
       {"selective_state_update: dt:", "expected a tensor of shape (B, D) = (2, 6)", "given null"}},
      {"AShapeMamba1",
       kFwd,
       [](Step&, Bound& b) { b["A"] = b["D"]; },  // (D): Mamba-1 takes A (D, N)
       {"selective_state_update: A:", "expected shape (D, N) = (6, 4)", "given (6,)"}},
      {"ADtype",
       kFwd,
       [](Step&, Bound& b) { b["A"].dtype = DType::kBF16; },
       {"selective_state_update: A:", "expected dtype f32", "given bf16"}},
      {"BNull",
       kFwd,
       [](Step&, Bound& b) { b["B"].data = nullptr; },
       {"selective_state_update: B:", "expected a tensor (B, N) or (B, G, N)", "given null"}},
      {"GroupsNotDividingD",
       kFwd,
       [](Step&, Bound& b) { b["B"].shape[1] = 4; },
       {"selective_state_update: B:", "expected a group count G dividing D = 6", "given G = 4"}},
      {"CShape",
       kFwd,
       [](Step&, Bound& b) { b["C"].shape[1] = 5; },
       {"selective_state_update: C:", "expected shape (B, N) = (2, 4)", "given (2, 5)"}},
      {"DShapeMamba1",
       kFwd,
       [](Step&, Bound& b) { b["D"].shape[0] = 5; },
       {"selective_state_update: D:", "expected shape (D) = (6,)", "given (5,)"}},
      {"DDtype",
       kFwd,
       [](Step&, Bound& b) { b["D"].dtype = DType::kBF16; },
       {"selective_state_update: D:", "expected dtype f32", "given bf16"}},
      {"ZDtype",
       kFwd,
       [](Step&, Bound& b) { b["z"].dtype = DType::kI64; },
       {"selective_state_update: z:", "expected dtype f32 or bf16", "given i64"}},
      {"DtBiasDtype",
       kFwd,
       [](Step&, Bound& b) { b["dt_bias"].dtype = DType::kBF16; },
       {"selective_state_update: dt_bias:", "expected dtype f32", "given bf16"}},
      {"OutNull",
       kFwd,
       [](Step&, Bound& b) { b["out"].data = nullptr; },
       {"selective_state_update: out:", "expected a tensor of shape (B, D) = (2, 6)",
        "given null"}},
      {"OutDtypeMustMatchX",
       kFwd,
       [](Step&, Bound& b) { b["out"].dtype = DType::kBF16; },
       {"selective_state_update: out:", "expected dtype f32", "given bf16"}},
  };
}

std::vector<Bad> BadInputs2() {
  return {
      {"StateRank",
       kFwd,
       [](Step&, Bound& b) { b["state"].rank = 2; },
       {kState, "expected rank 3 or 4", "given rank 2"}},
      {"StateZeroHeads",
       kFwd,
       [](Step&, Bound& b) { b["state"].shape[1] = 0; },
       {kState, "expected every dimension >= 1", "given (5, 0, 3, 5)"}},
      {"StateSizeZero",
       kFwd,
       [](Step&, Bound& b) { b["state"].shape[3] = 0; },
       {kState, "expected state size N in [1, 256]", "given N = 0"}},
      {"StateDtype",
       kFwd,
       [](Step&, Bound& b) { b["state"].dtype = DType::kBF16; },
       {kState, "expected dtype f32", "given bf16"}},
      {"StateNotContiguous",
       kFwd,
       [](Step&, Bound& b) { b["state"].strides[3] = 2; },
       {kState, "expected stride 1 on the last dimension", "given stride 2"}},
      {"XNull",
       kFwd,
       [](Step&, Bound& b) { b["x"].data = nullptr; },
       {"selective_state_update: x:", "expected a tensor (B, H, P)", "given null"}},
      {"XRankMustMatchTheForm",
       kFwd,
       [](Step&, Bound& b) {
         b["x"] = b.Spare({2, 6}, DType::kF32);
       },
       {"selective_state_update: x:", "expected rank 3", "given rank 2"}},
      {"XShape",
       kFwd,
       [](Step&, Bound& b) { b["x"].shape[2] = 2; },
       {"selective_state_update: x:", "expected shape (B, H, P) = (2, 4, 3)", "given (2, 4, 2)"}},
      {"XNegativeStride",
       kFwd,
       [](Step&, Bound& b) { b["x"].strides[0] = -12; },
       {"selective_state_update: x:", "expected non-negative strides",
        "given stride -12 on dimension 0"}},
      {"DtPerHeadInMamba2",
       kFwd,
       [](Step&, Bound& b) { b["dt"] = b["x"]; },  // (B, H, P): one dt per head
       {"selective_state_update: dt:", "expected shape (B, H) = (2, 4)", "given (2, 4, 3)"}},
      {"DtDtype",
       kFwd,
       [](Step&, Bound& b) { b["dt"].dtype = DType::kI32; },
       {"selective_state_update: dt:", "expected dtype f32 or bf16", "given i32"}},
      {"ANull",
       kFwd,
       [](Step&, Bound& b) { b["A"].data = nullptr; },
       {"selective_state_update: A:", "expected a tensor of shape (H) = (4,)", "given null"}},
      {"AShapeMamba2",
       kFwd,
       [](Step&, Bound& b) { b["A"] = b["D"]; },  // (H, P): one A per head
       {"selective_state_update: A:", "expected shape (H) = (4,)", "given (4, 3)"}},
      {"BRank",
       kFwd,
       [](Step&, Bound& b) { b["B"].rank = 4; },
       {"selective_state_update: B:", "expected rank 2 or 3", "given rank 4"}},
      {"GroupsNotDividingH",
       kFwd,
       [](Step&, Bound& b) { b["C"].shape[1] = 3; },
       {"selective_state_update: C:", "expected a group count G dividing H = 4", "given G = 3"}},
      {"GroupedBShape",
       kFwd,
       [](Step&, Bound& b) { b["B"].shape[0] = 1; },
       {"selective_state_update: B:", "expected shape (B, G, N) = (2, 2, 5)", "given (1, 2, 5)"}},
      {"CDtype",
       kFwd,
       [](Step&, Bound& b) { b["C"].dtype = DType::kF16; },
       {"selective_state_update: C:", "expected dtype f32 or bf16", "given f16"}},
      {"DRankMamba2",
       kFwd,
       [](Step&, Bound& b) { b["D"] = b["x"]; },
       {"selective_state_update: D:", "expected rank 1 or 2", "given rank 3"}},
      {"DPerHeadDimShape",
       kFwd,
       [](Step&, Bound& b) { b["D"].shape[1] = 2; },
       {"selective_state_update: D:", "expected shape (H, P) = (4, 3)", "given (4, 2)"}},
      {"ZShape",
       kFwd,
       [](Step&, Bound& b) { b["z"].shape[1] = 5; },
       {"selective_state_update: z:", "expected shape (B, H, P) = (2, 4, 3)", "given (2, 5, 3)"}},
      {"DtBiasShape",
       kFwd,
       [](Step&, Bound& b) { b["dt_bias"].shape[0] = 2; },
       {"selective_state_update: dt_bias:", "expected shape (H) = (4,)", "given (2,)"}},
      {"IndicesDtype",
       kFwd,
       [](Step&, Bound& b) { b["state_batch_indices"].dtype = DType::kI64; },
       {"selective_state_update: state_batch_indices:", "expected dtype i32", "given i64"}},
      {"IndicesShape",
       kFwd,
       [](Step&, Bound& b) { b["state_batch_indices"].shape[0] = 3; },
       {"selective_state_update: state_batch_indices:", "expected shape (B) = (2,)", "given (3,)"}},
      {"IndexOutOfRange",
       kFwd,
       [](Step&, Bound& b) { SetIndices(b, 1, 5); },
       {"selective_state_update: state_batch_indices:",
        "expected indices < Bs = 5 (the state's batch), or negative to skip a row",
        "given 5 at row 1"}},
      {"IndexRepeated",
       kFwd,
       [](Step&, Bound& b) { SetIndices(b, 2, 2); },
       {"selective_state_update: state_batch_indices:", "expected distinct non-negative indices",
        "given 2 at rows 0 and 1"}},
      {"OutShape",
       kFwd,
       [](Step&, Bound& b) { b["out"].shape[0] = 1; },
       {"selective_state_update: out:", "expected shape (B, H, P) = (2, 4, 3)", "given (1, 4, 3)"}},
  };
}

OpSpec<Step> Spec(bool mamba2) {
  return {.name = mamba2 ? "selective_state_update_mamba2" : "selective_state_update_mamba1",
          .make = Make,
          .oracle_forward = OracleForward,
          .forward = Forward,
          .cases = Cases(mamba2),
          .valid = mamba2 ? Valid2() : Valid1(),
          .bad_inputs = mamba2 ? BadInputs2() : BadInputs1()};
}

OpSpec<Step> Mamba1Spec() { return Spec(false); }
OpSpec<Step> Mamba2Spec() { return Spec(true); }

}  // namespace

SSMKIT_HARNESS_OP(Mamba1Spec);
SSMKIT_HARNESS_OP(Mamba2Spec);

}  // namespace ssmkit::testing::harness
