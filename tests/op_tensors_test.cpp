// The tensor lists of include/ssmkit/op_tensors.hpp against the structs they describe: every
// C++ inputs / grads struct and every C ABI args / grads struct has exactly the listed tensors,
// in the listed order, and each op's gradients pair with its inputs. A tensor added to a struct
// but not to its list (or the reverse, or reordered) fails here, since the bindings and checks
// that loop over a list would otherwise skip it without a word.
#include "ssmkit/op_tensors.hpp"

#include <gtest/gtest.h>

#include <cstddef>
#include <string>
#include <utility>
#include <vector>

#include "ssmkit/ssmkit.h"

namespace ssmkit {
namespace {

// Aggregate-initialisation probes, the only way C++20 has to count a struct's members: Any
// converts to every member type; Only<T> to T alone, so S{Any x i, Only<T>} compiles exactly
// when member i has type T.
struct Any {
  template <class T>
  operator T() const;  // NOLINT: implicit on purpose; declared only, used in unevaluated probes
};
template <class T>
struct Only {
  operator T() const;  // NOLINT: as above
};

template <class S, class... Args>
constexpr bool kInitializable = requires {
  S{std::declval<Args>()...};
};

template <class S, size_t... I>
constexpr bool InitializableWithAnys(std::index_sequence<I...>) {
  return kInitializable<S, decltype((void)I, Any{})...>;
}

// The number of members of aggregate S.
template <class S, size_t N = 0>
constexpr size_t MemberCount() {
  if constexpr (!InitializableWithAnys<S>(std::make_index_sequence<N + 1>{})) {
    return N;
  } else {
    return MemberCount<S, N + 1>();
  }
}

template <class S, class T, size_t... I>
constexpr bool MemberHasType(std::index_sequence<I...>) {
  return kInitializable<S, decltype((void)I, Any{})..., Only<T>>;
}

// How many members of S have type T.
template <class S, class T, size_t... I>
constexpr size_t CountMembersOfType(std::index_sequence<I...>) {
  return (size_t{0} + ... + (MemberHasType<S, T>(std::make_index_sequence<I>{}) ? 1 : 0));
}
template <class S, class T>
constexpr size_t MembersOfType() {
  return CountMembersOfType<S, T>(std::make_index_sequence<MemberCount<S>()>{});
}

// The probes themselves, on a struct shaped like the ones under test.
struct Probe {
  Tensor a;
  bool flag = false;
  Tensor b;
  float value = 0.0f;
};
static_assert(MemberCount<Probe>() == 4);
static_assert(MembersOfType<Probe, Tensor>() == 2);

template <class S, class M>
ptrdiff_t OffsetOf(M S::*member) {
  static const S object{};
  return reinterpret_cast<const char*>(&(object.*member)) - reinterpret_cast<const char*>(&object);
}

// The listed members of S, in list order, lie at increasing offsets: the list is in declaration
// order and names no member twice.
template <class S, class M>
void ExpectIncreasing(const std::vector<M S::*>& members, const char* what) {
  for (size_t i = 1; i < members.size(); ++i) {
    EXPECT_LT(OffsetOf(members[i - 1]), OffsetOf(members[i])) << what << ": entry " << i;
  }
}

template <class Entry, size_t N>
auto Members(const Entry (&list)[N]) {
  std::vector<decltype(list[0].member)> members;
  for (const Entry& e : list) members.push_back(e.member);
  return members;
}

template <class OpTensors>
void ExpectInputsMatch(const char* what) {
  using Inputs = typename OpTensors::Inputs;
  EXPECT_EQ(std::size(OpTensors::inputs), (MembersOfType<Inputs, Tensor>())) << what;
  ExpectIncreasing(Members(OpTensors::inputs), what);
}

// Gradients: as many as the inputs that are not indices, each named d<input> after its input,
// in the inputs' order, and the grads struct holds exactly them.
template <class OpTensors>
void ExpectGradsMatch(const char* what) {
  using Grads = typename OpTensors::Grads;
  EXPECT_EQ(std::size(OpTensors::grads), (MembersOfType<Grads, Tensor>())) << what;
  ExpectIncreasing(Members(OpTensors::grads), what);
  std::vector<std::string> differentiable;
  for (const auto& in : OpTensors::inputs) {
    if (in.role != TensorRole::kIndex) differentiable.push_back(in.name);
  }
  ASSERT_EQ(std::size(OpTensors::grads), differentiable.size()) << what;
  for (size_t i = 0; i < differentiable.size(); ++i) {
    const auto& g = OpTensors::grads[i];
    EXPECT_EQ(g.input_name, differentiable[i]) << what;
    EXPECT_EQ(std::string(g.name), "d" + differentiable[i]) << what;
    EXPECT_EQ(OpTensors::inputs[i].member, g.input) << what << ": " << g.name;
  }
}

// The inputs list of an op and, where it has a backward, its grads list.
template <class OpTensors>
void ExpectListsMatch(const char* what) {
  ExpectInputsMatch<OpTensors>(what);
  if constexpr (requires { OpTensors::grads; }) ExpectGradsMatch<OpTensors>(what);
}

TEST(OpTensors, CppListsMatchTheirStructs) {
  ExpectListsMatch<SelectiveScanTensors>("SelectiveScanTensors");
  ExpectListsMatch<SsdTensors>("SsdTensors");
  ExpectListsMatch<StateUpdateTensors>("StateUpdateTensors");
  ExpectListsMatch<CausalConv1dTensors>("CausalConv1dTensors");
  ExpectListsMatch<CausalConv1dUpdateTensors>("CausalConv1dUpdateTensors");
  ExpectListsMatch<RmsNormTensors>("RmsNormTensors");
  ExpectListsMatch<AddRmsNormTensors>("AddRmsNormTensors");
  ExpectListsMatch<LinearTensors>("LinearTensors");
  ExpectListsMatch<Mamba1MixerTensors>("Mamba1MixerTensors");
}

// The C ABI's structs, member by member from the same lists (the names are shared), checked the
// same way: the C ABI converts through these lists, so a C member left out of one would never
// reach the op.
template <class CStruct>
void ExpectCStructMatches(const std::vector<ssmkit_tensor CStruct::*>& members, const char* what) {
  EXPECT_EQ(members.size(), (MembersOfType<CStruct, ssmkit_tensor>())) << what;
  ExpectIncreasing(members, what);
}

#define SSMKIT_C_MEMBER_(name, ...) &CStruct::name,
#define SSMKIT_EXPECT_C_STRUCT_MATCHES_(CType, LIST)                              \
  {                                                                               \
    using CStruct = CType;                                                        \
    ExpectCStructMatches<CStruct>({LIST(SSMKIT_C_MEMBER_)}, #CType " vs " #LIST); \
  }

TEST(OpTensors, CAbiStructsMatchTheLists) {
  SSMKIT_EXPECT_C_STRUCT_MATCHES_(ssmkit_selective_scan_args, SSMKIT_SELECTIVE_SCAN_INPUTS);
  SSMKIT_EXPECT_C_STRUCT_MATCHES_(ssmkit_selective_scan_grads, SSMKIT_SELECTIVE_SCAN_GRADS);
  SSMKIT_EXPECT_C_STRUCT_MATCHES_(ssmkit_ssd_args, SSMKIT_SSD_INPUTS);
  SSMKIT_EXPECT_C_STRUCT_MATCHES_(ssmkit_ssd_grads, SSMKIT_SSD_GRADS);
  SSMKIT_EXPECT_C_STRUCT_MATCHES_(ssmkit_state_update_args, SSMKIT_STATE_UPDATE_INPUTS);
  SSMKIT_EXPECT_C_STRUCT_MATCHES_(ssmkit_conv1d_args, SSMKIT_CAUSAL_CONV1D_INPUTS);
  SSMKIT_EXPECT_C_STRUCT_MATCHES_(ssmkit_conv1d_grads, SSMKIT_CAUSAL_CONV1D_GRADS);
  SSMKIT_EXPECT_C_STRUCT_MATCHES_(ssmkit_conv1d_update_args, SSMKIT_CAUSAL_CONV1D_UPDATE_INPUTS);
  SSMKIT_EXPECT_C_STRUCT_MATCHES_(ssmkit_rmsnorm_args, SSMKIT_RMSNORM_INPUTS);
  SSMKIT_EXPECT_C_STRUCT_MATCHES_(ssmkit_rmsnorm_grads, SSMKIT_RMSNORM_GRADS);
  SSMKIT_EXPECT_C_STRUCT_MATCHES_(ssmkit_add_rmsnorm_args, SSMKIT_ADD_RMSNORM_INPUTS);
  SSMKIT_EXPECT_C_STRUCT_MATCHES_(ssmkit_add_rmsnorm_grads, SSMKIT_ADD_RMSNORM_GRADS);
  SSMKIT_EXPECT_C_STRUCT_MATCHES_(ssmkit_linear_args, SSMKIT_LINEAR_INPUTS);
  SSMKIT_EXPECT_C_STRUCT_MATCHES_(ssmkit_linear_grads, SSMKIT_LINEAR_GRADS);
  SSMKIT_EXPECT_C_STRUCT_MATCHES_(ssmkit_mamba1_mixer_args, SSMKIT_MAMBA1_MIXER_INPUTS);
}

#undef SSMKIT_EXPECT_C_STRUCT_MATCHES_
#undef SSMKIT_C_MEMBER_

}  // namespace
}  // namespace ssmkit
