// The RMS norms on the GPU against the fp64 oracle: gated RMSNorm (z before or after the norm,
// groups, bias) and residual add + RMSNorm (with and without a residual), forward and backward,
// f32 and bf16, feature counts below and above one block, many rows (several dweight tiles).
// Fresh random inputs, outputs poisoned. Bounds: f32 1e-5 (1e-4 for the row sums), bf16 1e-2;
// held on an H100 (2026-11-23).
#include "gpu_test_util.hpp"
#include "ref/norm_ref.hpp"
#include "ssmkit/norm.hpp"
#include "test_util.hpp"

namespace ssmkit::testing {
namespace {

struct NormCase {
  int64_t rows = 37, features = 96, group_size = 0;
  bool bias = true, z = true, before = true;
  DType dtype = DType::kF32;
  std::string Name() const {
    return "M" + std::to_string(rows) + " E" + std::to_string(features) + " S" +
           std::to_string(group_size) + (bias ? " bias" : "") +
           (z ? (before ? " z-after-norm" : " z-before-norm") : "") + " " + DTypeName(dtype);
  }
};

double Bound(DType dtype) { return dtype == DType::kF32 ? 1e-5 : 1e-2; }

void CheckGated(const NormCase& c, uint64_t seed) {
  SCOPED_TRACE(c.Name());
  SCOPED_TRACE(SeedTrace(seed));
  Rng rng(seed);
  const int64_t M = c.rows, E = c.features;
  HostTensor x({M, E}, c.dtype), z({M, E}, c.dtype), w({E}, DType::kF32), b({E}, DType::kF32),
      dout({M, E}, c.dtype);
  const auto x_d = x.Fill(rng.NormalVec(M * E));
  const auto z_d = z.Fill(rng.NormalVec(M * E));
  const auto w_d = w.Fill(rng.UniformVec(E, 0.5, 1.5));
  const auto b_d = b.Fill(rng.NormalVec(E));
  const auto dout_d = dout.Fill(rng.NormalVec(M * E));
  HostTensor out({M, E}, c.dtype), dx({M, E}, c.dtype), dz({M, E}, c.dtype), dw({E}, DType::kF32),
      db({E}, DType::kF32);
  for (HostTensor* t : {&out, &dx, &dz, &dw, &db}) t->Poison();
  Mirrors m;
  RmsNormInputs in;
  in.x = m.In(x.view());
  in.weight = m.In(w.view());
  if (c.bias) in.bias = m.In(b.view());
  if (c.z) in.z = m.In(z.view());
  RmsNormOptions opt;
  opt.group_size = c.group_size;
  opt.norm_before_gate = c.before;
  ASSERT_TRUE(RmsNormForward(in, m.Out(out.view()), opt).ok());
  RmsNormGrads g;
  g.dx = m.Out(dx.view());
  g.dweight = m.Out(dw.view());
  if (c.bias) g.dbias = m.Out(db.view());
  if (c.z) g.dz = m.Out(dz.view());
  const Status s = RmsNormBackward(in, m.In(dout.view()), g, opt);
  ASSERT_TRUE(s.ok()) << s.message();
  SSMKIT_CUDA_OK(m.CopyBack());
  ref::NormShape rs;
  rs.rows = M;
  rs.features = E;
  rs.group_size = c.group_size;
  rs.norm_before_gate = c.before;
  ref::RmsNormInputs ri{x_d.data(), w_d.data(), c.bias ? b_d.data() : nullptr,
                        c.z ? z_d.data() : nullptr};
  std::vector<double> r_out(M * E), r_dx(M * E), r_dz(M * E), r_dw(E), r_db(E);
  ref::RmsNormForward(rs, ri, r_out.data());
  ref::RmsNormGrads rg{r_dx.data(), r_dw.data(), c.bias ? r_db.data() : nullptr,
                       c.z ? r_dz.data() : nullptr};
  ref::RmsNormBackward(rs, ri, dout_d.data(), rg);
  EXPECT_LE(RelativeError(out.ToDouble(), r_out), Bound(c.dtype));
  EXPECT_LE(RelativeError(dx.ToDouble(), r_dx), Bound(c.dtype));
  EXPECT_LE(RelativeError(dw.ToDouble(), r_dw), 1e-4);
  if (c.bias) EXPECT_LE(RelativeError(db.ToDouble(), r_db), 1e-4);
  if (c.z) EXPECT_LE(RelativeError(dz.ToDouble(), r_dz), Bound(c.dtype));
}

void CheckAdd(const NormCase& c, bool with_residual, uint64_t seed) {
  SCOPED_TRACE(c.Name() + (with_residual ? " residual" : " no-residual"));
  SCOPED_TRACE(SeedTrace(seed));
  Rng rng(seed);
  const int64_t M = c.rows, E = c.features;
  HostTensor x({M, E}, c.dtype), res({M, E}, DType::kF32), w({E}, DType::kF32), b({E}, DType::kF32);
  HostTensor dout({M, E}, c.dtype), dres_out({M, E}, DType::kF32);
  const auto x_d = x.Fill(rng.NormalVec(M * E));
  const auto res_d = res.Fill(rng.NormalVec(M * E));
  const auto w_d = w.Fill(rng.UniformVec(E, 0.5, 1.5));
  const auto b_d = b.Fill(rng.NormalVec(E));
  const auto dout_d = dout.Fill(rng.NormalVec(M * E));
  const auto dres_out_d = dres_out.Fill(rng.NormalVec(M * E));
  HostTensor out({M, E}, c.dtype), rout({M, E}, DType::kF32), dx({M, E}, c.dtype),
      dres({M, E}, DType::kF32);
  HostTensor dw({E}, DType::kF32), db({E}, DType::kF32);
  for (HostTensor* t : {&out, &rout, &dx, &dres, &dw, &db}) t->Poison();
  Mirrors m;
  AddRmsNormInputs in;
  in.x = m.In(x.view());
  if (with_residual) in.residual = m.In(res.view());
  in.weight = m.In(w.view());
  in.bias = m.In(b.view());
  ASSERT_TRUE(AddRmsNormForward(in, m.Out(out.view()), m.Out(rout.view())).ok());
  AddRmsNormGrads g;
  g.dx = m.Out(dx.view());
  if (with_residual) g.dresidual = m.Out(dres.view());
  g.dweight = m.Out(dw.view());
  g.dbias = m.Out(db.view());
  const Status s = AddRmsNormBackward(in, m.In(dout.view()), m.In(dres_out.view()), g);
  ASSERT_TRUE(s.ok()) << s.message();
  SSMKIT_CUDA_OK(m.CopyBack());
  ref::NormShape rs;
  rs.rows = M;
  rs.features = E;
  ref::AddRmsNormInputs ri{x_d.data(), with_residual ? res_d.data() : nullptr, w_d.data(),
                           b_d.data()};
  std::vector<double> r_out(M * E), r_rout(M * E), r_dx(M * E), r_dres(M * E), r_dw(E), r_db(E);
  ref::AddRmsNormForward(rs, ri, r_out.data(), r_rout.data());
  ref::AddRmsNormGrads rg{r_dx.data(), with_residual ? r_dres.data() : nullptr, r_dw.data(),
                          r_db.data()};
  ref::AddRmsNormBackward(rs, ri, dout_d.data(), dres_out_d.data(), rg);
  EXPECT_LE(RelativeError(out.ToDouble(), r_out), Bound(c.dtype));
  EXPECT_LE(RelativeError(rout.ToDouble(), r_rout), 1e-6);
  EXPECT_LE(RelativeError(dx.ToDouble(), r_dx), Bound(c.dtype));
  if (with_residual) EXPECT_LE(RelativeError(dres.ToDouble(), r_dres), 1e-5);
  EXPECT_LE(RelativeError(dw.ToDouble(), r_dw), 1e-4);
  EXPECT_LE(RelativeError(db.ToDouble(), r_db), 1e-4);
}

TEST(NormGpu, GatedMatchesTheOracle) {
  SSMKIT_REQUIRE_GPU();
  const uint64_t seed = FreshSeed();
  NormCase base;
  CheckGated(base, seed);
  NormCase before = base;
  before.before = false;
  CheckGated(before, seed);
  NormCase groups = base;
  groups.group_size = 24;
  CheckGated(groups, seed);
  NormCase bare = base;
  bare.bias = bare.z = false;
  CheckGated(bare, seed);
  NormCase wide = base;  // m2-130m's gated norm: E = 1536, many rows
  wide.rows = 300;
  wide.features = 1536;
  CheckGated(wide, seed);
  wide.dtype = DType::kBF16;
  CheckGated(wide, seed);
}

TEST(NormGpu, AddMatchesTheOracle) {
  SSMKIT_REQUIRE_GPU();
  const uint64_t seed = FreshSeed();
  NormCase c;
  c.z = false;
  c.rows = 50;
  c.features = 768;
  CheckAdd(c, true, seed);
  CheckAdd(c, false, seed);
  c.dtype = DType::kBF16;
  CheckAdd(c, true, seed);
}

}  // namespace
}  // namespace ssmkit::testing
