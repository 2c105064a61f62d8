// Dispatch by device, on any machine: a mix of CPU and CUDA tensors is an error naming the odd
// tensor out; an all-CUDA call without a usable GPU (no CUDA backend, or no device, as in CI)
// returns a clear non-ok Status and touches nothing. The GPU results themselves are tested in
// tests/gpu/ (label 'gpu'), which need a GPU.
#include <gtest/gtest.h>

#include <string>

#include "ssmkit/conv1d.hpp"
#include "ssmkit/cuda.hpp"
#include "ssmkit/linear.hpp"
#include "ssmkit/norm.hpp"
#include "ssmkit/selective_scan.hpp"
#include "ssmkit/ssd.hpp"
#include "ssmkit/state_update.hpp"
#include "test_util.hpp"

namespace ssmkit::testing {
namespace {

Tensor OnCuda(HostTensor& t) {
  Tensor v = t.view();
  v.device = Device::kCuda;
  return v;
}

// Every op, every tensor on the GPU: without a usable GPU each must refuse with a Status.
class AllOnCuda : public ::testing::Test {
 protected:
  void SetUp() override {
    if (CudaDeviceCount() > 0) GTEST_SKIP() << "a GPU is present: tests/gpu/ covers the CUDA path";
  }
  // Without the backend: Unsupported, naming the backend; with it but no device: a CUDA error.
  static void ExpectRefused(const Status& s, const char* op) {
    EXPECT_FALSE(s.ok()) << op;
    // A valid call: refused for want of a GPU, not for its arguments.
    EXPECT_NE(s.code(), StatusCode::kInvalidArgument) << s.message();
    if (!CudaBuilt()) {
      EXPECT_EQ(s.code(), StatusCode::kUnsupported) << s.message();
      EXPECT_NE(s.message().find("CUDA backend"), std::string::npos) << s.message();
    }
    EXPECT_NE(s.message().find(op), std::string::npos) << s.message();
  }
};

TEST_F(AllOnCuda, SelectiveScan) {
  HostTensor u({1, 4, 8}, DType::kF32), delta = u, out = u, A({4, 2}, DType::kF32),
                                        B({1, 2, 8}, DType::kF32);
  HostTensor C = B, dout = u, du = u;
  SelectiveScanInputs in;
  in.u = OnCuda(u);
  in.delta = OnCuda(delta);
  in.A = OnCuda(A);
  in.B = OnCuda(B);
  in.C = OnCuda(C);
  ExpectRefused(SelectiveScanForward(in, OnCuda(out), Tensor{}), "selective_scan");
  SelectiveScanGrads g;
  g.du = OnCuda(du);
  ExpectRefused(SelectiveScanBackward(in, OnCuda(dout), Tensor{}, g), "selective_scan");
}

TEST_F(AllOnCuda, Ssd) {
  HostTensor x({1, 8, 2, 4}, DType::kF32), dt({1, 8, 2}, DType::kF32), A({2}, DType::kF32);
  HostTensor B({1, 8, 1, 4}, DType::kF32), C = B, out = x;
  SsdInputs in;
  in.x = OnCuda(x);
  in.dt = OnCuda(dt);
  in.A = OnCuda(A);
  in.B = OnCuda(B);
  in.C = OnCuda(C);
  ExpectRefused(SsdForward(in, OnCuda(out), Tensor{}), "ssd");
}

TEST_F(AllOnCuda, StateUpdateConvAndNorms) {
  HostTensor x({2, 4}, DType::kF32), dt = x, A({4, 3}, DType::kF32), B({2, 3}, DType::kF32), C = B;
  HostTensor state({2, 4, 3}, DType::kF32), out = x;
  StateUpdateInputs su;
  su.x = OnCuda(x);
  su.dt = OnCuda(dt);
  su.A = OnCuda(A);
  su.B = OnCuda(B);
  su.C = OnCuda(C);
  ExpectRefused(SelectiveStateUpdate(su, OnCuda(state), OnCuda(out)), "selective_state_update");

  HostTensor cx({1, 4, 9}, DType::kF32), w({4, 4}, DType::kF32), cout = cx,
                                                                 cstate({2, 4, 3}, DType::kF32);
  CausalConv1dInputs ci;
  ci.x = OnCuda(cx);
  ci.weight = OnCuda(w);
  ExpectRefused(CausalConv1dForward(ci, OnCuda(cout), Tensor{}), "causal_conv1d");
  CausalConv1dUpdateInputs cu;
  cu.x = OnCuda(x);
  cu.weight = OnCuda(w);
  ExpectRefused(CausalConv1dUpdate(cu, OnCuda(cstate), OnCuda(out)), "causal_conv1d_update");

  HostTensor nx({3, 8}, DType::kF32), nw({8}, DType::kF32), nout = nx, rout = nx;
  RmsNormInputs ni;
  ni.x = OnCuda(nx);
  ni.weight = OnCuda(nw);
  ExpectRefused(RmsNormForward(ni, OnCuda(nout)), "rmsnorm");
  AddRmsNormInputs ai;
  ai.x = OnCuda(nx);
  ai.weight = OnCuda(nw);
  ExpectRefused(AddRmsNormForward(ai, OnCuda(nout), OnCuda(rout)), "add_rmsnorm");
}

// The engine's GEMM: bf16 x and weight, f32 out (cuBLAS on CUDA).
TEST_F(AllOnCuda, Linear) {
  HostTensor x({2, 8}, DType::kBF16), w({4, 8}, DType::kBF16), out({2, 4}, DType::kF32);
  ExpectRefused(LinearForward({OnCuda(x), OnCuda(w), Tensor{}}, OnCuda(out)), "linear");
}

// Most tensors on the GPU, one on the CPU: the CPU one is named.
TEST(MixedDevices, TheOddTensorOutIsNamed) {
  HostTensor u({1, 4, 8}, DType::kF32), delta = u, out = u, A({4, 2}, DType::kF32),
                                        B({1, 2, 8}, DType::kF32);
  HostTensor C = B;
  SelectiveScanInputs in;
  in.u = OnCuda(u);
  in.delta = OnCuda(delta);
  in.A = OnCuda(A);
  in.B = B.view();  // the odd one out
  in.C = OnCuda(C);
  const Status s = SelectiveScanForward(in, OnCuda(out), Tensor{});
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), "selective_scan: B: expected a CUDA tensor, given a CPU tensor");

  HostTensor nx({3, 8}, DType::kF32), nw({8}, DType::kF32), nout = nx;
  RmsNormInputs ni;
  ni.x = OnCuda(nx);
  ni.weight = OnCuda(nw);
  const Status n = RmsNormForward(ni, nout.view());
  EXPECT_EQ(n.message(), "rmsnorm: out: expected a CUDA tensor, given a CPU tensor");
}

TEST(MixedDevices, AnUnknownDeviceIsRejected) {
  HostTensor nx({3, 8}, DType::kF32), nw({8}, DType::kF32), nout = nx;
  RmsNormInputs ni;
  ni.x = nx.view();
  ni.weight = nw.view();
  ni.weight.device = static_cast<Device>(7);
  const Status n = RmsNormForward(ni, nout.view());
  EXPECT_EQ(n.message(),
            "rmsnorm: weight: expected a CPU tensor, given a tensor on unknown device 7");
}

}  // namespace
}  // namespace ssmkit::testing
