// Selective-scan forward against the fp64 oracle: every algorithm, dtype, B/C form and
// optional input, on fresh random inputs with poisoned outputs.
#include <cstring>
#include <string>

#include "selective_scan_fixture.hpp"
#include "ssmkit/threads.hpp"

namespace ssmkit::testing {
namespace {

struct ForwardResult {
  double out_error = 0, state_error = 0;
};

ForwardResult RunForward(const ScanCase& sc, ScanAlgorithm algorithm, int64_t chunk, uint64_t seed) {
  Rng rng(seed);
  ScanProblem prob(sc, rng);
  HostTensor out({sc.batch, sc.dim, sc.seqlen}, sc.dtype);
  HostTensor final_state({sc.batch, sc.dim, sc.dstate}, DType::kF32);
  out.Poison();
  final_state.Poison();
  SelectiveScanOptions options;
  options.algorithm = algorithm;
  options.chunk_length = chunk;
  const Status status = SelectiveScanForward(prob.Inputs(), out.view(), final_state.view(), options);
  EXPECT_TRUE(status.ok()) << status.message();
  std::vector<double> ref_out(prob.SeqSize()), ref_state(prob.StateSize());
  ref::SelectiveScanForward(prob.Shape(), prob.RefInputs(), ref_out.data(), ref_state.data());
  if (sc.dtype != DType::kF32) {  // the kernel's output is rounded to its dtype too
    HostTensor rounded({sc.batch, sc.dim, sc.seqlen}, sc.dtype);
    ref_out = rounded.Fill(ref_out);
  }
  return {RelativeError(out.ToDouble(), ref_out), RelativeError(final_state.ToDouble(), ref_state)};
}

constexpr ScanAlgorithm kAllAlgorithms[] = {ScanAlgorithm::kSequential, ScanAlgorithm::kChunked,
                                            ScanAlgorithm::kBlelloch, ScanAlgorithm::kHillisSteele,
                                            ScanAlgorithm::kLogSpace};

// Shapes where every algorithm, log-space included, is numerically sane in f32: the summed
// decay sum(dt * A) stays far above -88 (see docs/numerics.md for where log-space breaks).
std::vector<ScanCase> ShortCases() {
  std::vector<ScanCase> cases;
  for (int64_t L : {1, 2, 7, 37, 61}) {
    for (int64_t N : {1, 4, 16}) {
      ScanCase c;
      c.seqlen = L;
      c.dstate = N;
      c.dim = 5;
      cases.push_back(c);
    }
  }
  ScanCase grouped;
  grouped.batch = 2;
  grouped.dim = 6;
  grouped.groups = 3;
  grouped.b_form = grouped.c_form = BCForm::kGrouped;
  grouped.seqlen = 29;
  cases.push_back(grouped);
  ScanCase constant = grouped;
  constant.b_form = constant.c_form = BCForm::kConstant;
  cases.push_back(constant);
  ScanCase mixed = grouped;
  mixed.b_form = BCForm::kConstant;
  mixed.c_form = BCForm::kVariable;
  cases.push_back(mixed);
  return cases;
}

std::string Describe(const ScanCase& c, ScanAlgorithm a) {
  return std::string(ScanAlgorithmName(a)) + " B=" + std::to_string(c.batch) + " D=" + std::to_string(c.dim) +
         " L=" + std::to_string(c.seqlen) + " N=" + std::to_string(c.dstate) + " G=" + std::to_string(c.groups) +
         " dtype=" + DTypeName(c.dtype);
}

TEST(SelectiveScanForward, EveryAlgorithmMatchesOracleOnShortSequences) {
  const uint64_t seed = FreshSeed();
  SCOPED_TRACE(SeedTrace(seed));
  uint64_t k = 0;
  for (const ScanCase& c : ShortCases()) {
    for (ScanAlgorithm a : kAllAlgorithms) {
      const ForwardResult r = RunForward(c, a, 8, seed + k++);
      EXPECT_LE(r.out_error, 1e-5) << Describe(c, a);
      EXPECT_LE(r.state_error, 1e-5) << Describe(c, a);
    }
  }
}

TEST(SelectiveScanForward, LongSequencesAndLargeStatesMatchOracle) {
  const uint64_t seed = FreshSeed();
  SCOPED_TRACE(SeedTrace(seed));
  uint64_t k = 0;
  for (int64_t N : {16, 64, 256}) {
    ScanCase c;
    c.batch = 2;
    c.dim = 3;
    c.seqlen = 301;
    c.dstate = N;
    for (ScanAlgorithm a : {ScanAlgorithm::kSequential, ScanAlgorithm::kChunked, ScanAlgorithm::kBlelloch,
                            ScanAlgorithm::kHillisSteele}) {
      const ForwardResult r = RunForward(c, a, 0, seed + k++);
      EXPECT_LE(r.out_error, 1e-5) << Describe(c, a);
      EXPECT_LE(r.state_error, 1e-5) << Describe(c, a);
    }
  }
}

// D / G a multiple of the vector width (8 or 16 floats) with variable B/C takes the
// channel-tiled path; the other shapes above take the per-row path.
TEST(SelectiveScanForward, ChannelTiledPathMatchesOracle) {
  const uint64_t seed = FreshSeed();
  SCOPED_TRACE(SeedTrace(seed));
  uint64_t k = 0;
  for (int64_t N : {1, 5, 16, 64}) {
    for (DType dtype : {DType::kF32, DType::kBF16}) {
      ScanCase c;
      c.batch = 2;
      c.dim = 64;
      c.groups = 2;
      c.b_form = BCForm::kGrouped;
      c.c_form = BCForm::kVariable;
      c.seqlen = 53;
      c.dstate = N;
      c.dtype = dtype;
      const ForwardResult r = RunForward(c, ScanAlgorithm::kSequential, 0, seed + k++);
      EXPECT_LE(r.out_error, dtype == DType::kF32 ? 1e-5 : 1e-2) << Describe(c, ScanAlgorithm::kSequential);
      EXPECT_LE(r.state_error, 1e-5) << Describe(c, ScanAlgorithm::kSequential);
    }
  }
}

TEST(SelectiveScanForward, EveryOptionalInputOnAndOff) {
  const uint64_t seed = FreshSeed();
  SCOPED_TRACE(SeedTrace(seed));
  for (int mask = 0; mask < 32; ++mask) {
    ScanCase c;
    c.batch = 2;
    c.dim = __builtin_popcount(mask) % 2 ? 4 : 32;  // per-row and channel-tiled paths
    c.seqlen = 45;
    c.dstate = 16;
    c.has_D = mask & 1;
    c.has_z = mask & 2;
    c.has_delta_bias = mask & 4;
    c.has_h0 = mask & 8;
    c.softplus = mask & 16;
    const ForwardResult r = RunForward(c, ScanAlgorithm::kSequential, 0, seed + mask);
    EXPECT_LE(r.out_error, 1e-5) << "option mask " << mask;
    EXPECT_LE(r.state_error, 1e-5) << "option mask " << mask;
  }
}

TEST(SelectiveScanForward, SoftplusIdentityAboveTwenty) {
  const uint64_t seed = FreshSeed();
  SCOPED_TRACE(SeedTrace(seed));
  ScanCase c;
  c.seqlen = 40;
  c.dim = 6;
  c.dstate = 8;
  c.big_delta_fraction = 0.1;
  const ForwardResult r = RunForward(c, ScanAlgorithm::kSequential, 0, seed);
  EXPECT_LE(r.out_error, 1e-5);
}

TEST(SelectiveScanForward, ChunkLengthsThatDoNotDivideL) {
  const uint64_t seed = FreshSeed();
  SCOPED_TRACE(SeedTrace(seed));
  ScanCase c;
  c.seqlen = 100;
  c.dstate = 16;
  for (int64_t chunk : {1, 3, 7, 64, 99, 100, 101, 1000}) {
    const ForwardResult r = RunForward(c, ScanAlgorithm::kChunked, chunk, seed + chunk);
    EXPECT_LE(r.out_error, 1e-5) << "chunk " << chunk;
  }
}

TEST(SelectiveScanForward, Bf16InputsWithinOnePercent) {
  const uint64_t seed = FreshSeed();
  SCOPED_TRACE(SeedTrace(seed));
  uint64_t k = 0;
  for (BCForm form : {BCForm::kConstant, BCForm::kVariable, BCForm::kGrouped}) {
    ScanCase c;
    c.batch = 2;
    c.dim = 4;
    c.groups = 2;
    c.seqlen = 77;
    c.dstate = 16;
    c.b_form = c.c_form = form;
    c.dtype = DType::kBF16;
    for (ScanAlgorithm a : {ScanAlgorithm::kSequential, ScanAlgorithm::kChunked}) {
      const ForwardResult r = RunForward(c, a, 0, seed + k++);
      EXPECT_LE(r.out_error, 1e-2) << Describe(c, a);
      EXPECT_LE(r.state_error, 1e-5) << Describe(c, a);  // the state is f32 from the same inputs
    }
  }
}

TEST(SelectiveScanForward, StridedInputsAndNoFinalState) {
  const uint64_t seed = FreshSeed();
  SCOPED_TRACE(SeedTrace(seed));
  Rng rng(seed);
  ScanCase c;
  c.batch = 2;
  c.dim = 3;
  c.seqlen = 20;
  c.dstate = 4;
  ScanProblem prob(c, rng);
  // u placed in a wider buffer: batch stride 2*D*L, channel stride L + 5.
  const int64_t sd = c.seqlen + 5, sb = 2 * c.dim * sd;
  std::vector<float> wide(c.batch * sb, 7.0f);
  for (int64_t b = 0; b < c.batch; ++b)
    for (int64_t d = 0; d < c.dim; ++d)
      for (int64_t l = 0; l < c.seqlen; ++l)
        wide[b * sb + d * sd + l] = static_cast<float>(prob.u_d[(b * c.dim + d) * c.seqlen + l]);
  SelectiveScanInputs in = prob.Inputs();
  in.u.data = wide.data();
  in.u.strides = {sb, sd, 1};
  HostTensor out({c.batch, c.dim, c.seqlen}, DType::kF32);
  out.Poison();
  ASSERT_TRUE(SelectiveScanForward(in, out.view(), Tensor{}).ok());
  std::vector<double> ref_out(prob.SeqSize());
  ref::SelectiveScanForward(prob.Shape(), prob.RefInputs(), ref_out.data(), nullptr);
  EXPECT_LE(RelativeError(out.ToDouble(), ref_out), 1e-5);
}

TEST(SelectiveScanForward, DeterministicBits) {
  const uint64_t seed = FreshSeed();
  SCOPED_TRACE(SeedTrace(seed));
  for (int threads : {1, 2}) {
    SetNumThreads(threads);
    ScanCase c;
    c.batch = 2;
    c.dim = 16;
    c.seqlen = 130;
    c.dstate = 16;
    Rng rng(seed);
    ScanProblem prob(c, rng);
    HostTensor out1({c.batch, c.dim, c.seqlen}, DType::kF32), out2({c.batch, c.dim, c.seqlen}, DType::kF32);
    out1.Poison();
    out2.Poison();
    ASSERT_TRUE(SelectiveScanForward(prob.Inputs(), out1.view(), Tensor{}).ok());
    ASSERT_TRUE(SelectiveScanForward(prob.Inputs(), out2.view(), Tensor{}).ok());
    EXPECT_EQ(out1.bytes(), out2.bytes()) << threads << " threads";
  }
  SetNumThreads(0);
}

}  // namespace
}  // namespace ssmkit::testing
