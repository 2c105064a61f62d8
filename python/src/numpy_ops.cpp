// The array binding: one function per op direction, each taking a dict of arrays and options
// (built by ssmkit/_numpy.py and ssmkit/torch with mamba_ssm's argument names) and writing the
// output arrays it is given, in place. Argument checking is the C++ ops' own.
#include "numpy_ops.hpp"

#include "array_args.hpp"
#include "op_tensors.hpp"

namespace ssmkit::python {
namespace {

// The struct an ssmkit/op_tensors.hpp list describes, each listed member a view of the array
// under its name: read-only for inputs, writable for gradients.
template <class Entry, size_t N>
auto InputStruct(ArrayArgs& a, const Entry (&list)[N]) {
  return StructFromList(list, a.Inputs(Names(list)));
}
template <class Entry, size_t N>
auto GradStruct(ArrayArgs& a, const Entry (&list)[N]) {
  return StructFromList(list, a.Outputs(Names(list)));
}

template <class Entry, size_t N>
nb::list NameList(const Entry (&list)[N]) {
  nb::list names;
  for (const Entry& e : list) names.append(e.name);
  return names;
}

SelectiveScanOptions ScanOptions(const ArrayArgs& a) {
  SelectiveScanOptions o;
  ThrowIfError(ParseScanAlgorithm(a.String("algorithm"), &o.algorithm));
  o.chunk_length = a.Integer("chunk_length");
  return o;
}

SsdOptions SsdOptionsOf(const ArrayArgs& a) {
  SsdOptions o;
  ThrowIfError(ParseSsdAlgorithm(a.String("algorithm"), &o.algorithm));
  o.chunk_size = a.Integer("chunk_size");
  return o;
}

SsdInputs SsdArgs(ArrayArgs& a) {
  return SsdInputsOf(a.Inputs(kSsdInputs), a.Flag("dt_softplus"), a.Real("dt_min"),
                     a.Real("dt_max"));
}

void SelectiveScanFwd(nb::dict args) {
  ArrayArgs a("selective_scan_fn", args);
  const std::vector<Tensor> in = a.Inputs(kScanInputs);
  // chunk_states (optional): what a later selective_scan_bwd reads instead of rerunning the scan.
  const SelectiveScanOutputs outputs{a.Output("out"), a.Output("final_state"),
                                     a.Output("chunk_states"), a.Output("varlen_states")};
  const SelectiveScanOptions options = ScanOptions(a);
  const SelectiveScanInputs inputs = ScanInputs(in, a.Flag("delta_softplus"));
  RunReleased([&] { return SelectiveScanForward(inputs, outputs, options); });
}

void SelectiveScanBwd(nb::dict args) {
  ArrayArgs a("selective_scan_bwd", args);
  const std::vector<Tensor> in = a.Inputs(kScanInputs);
  const SelectiveScanGrads grads = GradStruct(a, SelectiveScanTensors::grads);
  const SelectiveScanOutputGrads dout{a.Input("dout"), a.Input("dfinal_state"),
                                      a.Input("dvarlen_states")};
  const Tensor chunk_states = a.Input("chunk_states");
  const SelectiveScanOptions options = ScanOptions(a);
  const SelectiveScanInputs inputs = ScanInputs(in, a.Flag("delta_softplus"));
  RunReleased([&] { return SelectiveScanBackward(inputs, dout, chunk_states, grads, options); });
}

void SsdFwd(nb::dict args) {
  ArrayArgs a("mamba_chunk_scan_combined", args);
  const SsdInputs inputs = SsdArgs(a);
  const SsdOutputs outputs{a.Output("out"), a.Output("final_states"), a.Output("varlen_states")};
  const SsdOptions options = SsdOptionsOf(a);
  RunReleased([&] { return SsdForward(inputs, outputs, options); });
}

void SsdBwd(nb::dict args) {
  ArrayArgs a("mamba_chunk_scan_combined_bwd", args);
  const SsdInputs inputs = SsdArgs(a);
  const SsdGrads grads = GradStruct(a, SsdTensors::grads);
  const SsdOutputGrads dout{a.Input("dout"), a.Input("dfinal_states"), a.Input("dvarlen_states")};
  const SsdOptions options = SsdOptionsOf(a);
  RunReleased([&] { return SsdBackward(inputs, dout, grads, options); });
}

void StateUpdate(nb::dict args) {
  ArrayArgs a("selective_state_update", args);
  const StateUpdateInputs inputs =
      StateUpdateInputsOf(a.Inputs(kStateUpdateInputs), a.Flag("dt_softplus"));
  const Tensor state = a.Output("state"), out = a.Output("out");
  RunReleased([&] { return SelectiveStateUpdate(inputs, state, out); });
}

void ConvFwd(nb::dict args) {
  ArrayArgs a("causal_conv1d_fn", args);
  const CausalConv1dInputs inputs = ConvInputs(a.Inputs(kConvInputs), a.Flag("silu"));
  const Tensor out = a.Output("out"), final_states = a.Output("final_states");
  RunReleased([&] { return CausalConv1dForward(inputs, out, final_states); });
}

void ConvBwd(nb::dict args) {
  ArrayArgs a("causal_conv1d_bwd", args);
  const CausalConv1dInputs inputs = ConvInputs(a.Inputs(kConvInputs), a.Flag("silu"));
  const CausalConv1dGrads grads = GradStruct(a, CausalConv1dTensors::grads);
  const Tensor dout = a.Input("dout"), dfinal_states = a.Input("dfinal_states");
  RunReleased([&] { return CausalConv1dBackward(inputs, dout, dfinal_states, grads); });
}

void ConvUpdate(nb::dict args) {
  ArrayArgs a("causal_conv1d_update", args);
  const CausalConv1dUpdateInputs inputs =
      ConvUpdateInputs(a.Inputs(kConvUpdateInputs), a.Flag("silu"));
  const Tensor conv_state = a.Output("conv_state"), out = a.Output("out");
  RunReleased([&] { return CausalConv1dUpdate(inputs, conv_state, out); });
}

RmsNormOptions NormOptions(const ArrayArgs& a) {
  return RmsNormOptionsOf(a.Real("eps"), a.Integer("group_size"), a.Flag("norm_before_gate"));
}

void RmsNormFwd(nb::dict args) {
  ArrayArgs a("rmsnorm_fn", args);
  const RmsNormInputs inputs = InputStruct(a, RmsNormTensors::inputs);
  const Tensor out = a.Output("out");
  const RmsNormOptions options = NormOptions(a);
  RunReleased([&] { return RmsNormForward(inputs, out, options); });
}

void RmsNormBwd(nb::dict args) {
  ArrayArgs a("rmsnorm_bwd", args);
  const RmsNormInputs inputs = InputStruct(a, RmsNormTensors::inputs);
  const RmsNormGrads grads = GradStruct(a, RmsNormTensors::grads);
  const Tensor dout = a.Input("dout");
  const RmsNormOptions options = NormOptions(a);
  RunReleased([&] { return RmsNormBackward(inputs, dout, grads, options); });
}

void AddRmsNormFwd(nb::dict args) {
  ArrayArgs a("rms_norm_fn", args);
  const AddRmsNormInputs inputs = InputStruct(a, AddRmsNormTensors::inputs);
  const Tensor out = a.Output("out"), residual_out = a.Output("residual_out");
  AddRmsNormOptions options;
  options.eps = a.Real("eps");
  RunReleased([&] { return AddRmsNormForward(inputs, out, residual_out, options); });
}

void AddRmsNormBwd(nb::dict args) {
  ArrayArgs a("rms_norm_bwd", args);
  const AddRmsNormInputs inputs = InputStruct(a, AddRmsNormTensors::inputs);
  const AddRmsNormGrads grads = GradStruct(a, AddRmsNormTensors::grads);
  const Tensor dout = a.Input("dout"), dresidual_out = a.Input("dresidual_out");
  AddRmsNormOptions options;
  options.eps = a.Real("eps");
  RunReleased([&] { return AddRmsNormBackward(inputs, dout, dresidual_out, grads, options); });
}

void LinearFwd(nb::dict args) {
  ArrayArgs a("linear", args);
  const LinearInputs inputs = InputStruct(a, LinearTensors::inputs);
  const Tensor out = a.Output("out");
  RunReleased([&] { return LinearForward(inputs, out); });
}

void LinearBwd(nb::dict args) {
  ArrayArgs a("linear_bwd", args);
  const LinearInputs inputs = InputStruct(a, LinearTensors::inputs);
  const LinearGrads grads = GradStruct(a, LinearTensors::grads);
  const Tensor dout = a.Input("dout");
  RunReleased([&] { return LinearBackward(inputs, dout, grads); });
}

}  // namespace

void RegisterNumpyOps(nb::module_& m) {
  m.def("selective_scan_fwd", &SelectiveScanFwd);
  // Q of chunk_length = 0: chunk_states is (B, D, ceil(L / Q), N).
  m.attr("scan_default_chunk_length") = kDefaultScanChunkLength;
  m.def("selective_scan_bwd", &SelectiveScanBwd);
  m.def("ssd_fwd", &SsdFwd);
  m.def("ssd_bwd", &SsdBwd);
  m.def("selective_state_update", &StateUpdate);
  m.def("causal_conv1d_fwd", &ConvFwd);
  m.def("causal_conv1d_bwd", &ConvBwd);
  m.def("causal_conv1d_update", &ConvUpdate);
  m.def("rmsnorm_fwd", &RmsNormFwd);
  m.def("rmsnorm_bwd", &RmsNormBwd);
  m.def("add_rmsnorm_fwd", &AddRmsNormFwd);
  m.def("add_rmsnorm_bwd", &AddRmsNormBwd);
  m.def("linear_fwd", &LinearFwd);
  m.def("linear_bwd", &LinearBwd);
  // Rows up to which LinearForward reads the weight once for all rows (decode batches).
  m.attr("linear_gemv_max_rows") = kLinearGemvMaxRows;
  // Each op's gradient names, in order (ssmkit/op_tensors.hpp): the fields of the gradient
  // tuples ssmkit/_numpy.py returns and the keys ssmkit.torch passes the buffers under.
  nb::dict op_grads;
  op_grads["selective_scan"] = NameList(SelectiveScanTensors::grads);
  op_grads["ssd"] = NameList(SsdTensors::grads);
  op_grads["causal_conv1d"] = NameList(CausalConv1dTensors::grads);
  op_grads["rmsnorm"] = NameList(RmsNormTensors::grads);
  op_grads["add_rmsnorm"] = NameList(AddRmsNormTensors::grads);
  op_grads["linear"] = NameList(LinearTensors::grads);
  m.attr("op_grads") = op_grads;
}

}  // namespace ssmkit::python
