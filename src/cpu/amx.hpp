// Intel AMX (Advanced Matrix Extensions: Sapphire Rapids and later Xeons) for the CPU kernels:
// whether this process may use its tile multiplies, and a switch to turn them off. The kernels
// that use them: the quantized products of a few rows (quant_amx_x86-inl.h, 8-bit tiles: Q8_0
// from 2 rows, Q4_K and Q5_K from kAmxMinRowsKQuant) and the opt-in bf16 products
// (linear_bf16.cpp, bf16 tiles).
#pragma once

namespace ssmkit::cpu {

// AMX's tiles with 8-bit (AMX-INT8) and bf16 (AMX-BF16) multiplies, on a CPU that has them,
// an OS that enables their state (XCR0), and with Linux's permission for this process, asked
// for once, the first time this is called (arch_prctl ARCH_REQ_XCOMP_PERM). The permission
// makes every signal frame of the process 8 KB larger, so that no thread may then install a
// smaller alternate signal stack: SSMKIT_AMX=0 in the environment keeps the library from asking
// (and off AMX), for a host program that needs small signal stacks.
struct AmxSupport {
  bool int8 = false, bf16 = false;
};
AmxSupport AmxAvailable();

// Whether the kernels use AMX's 8-bit / bf16 tiles now: AmxAvailable()'s, unless SetAmx(false)
// turned them off (the tests run both ways; `ssmkit bench --target avx3-noamx`). SetAmx(true)
// restores AmxAvailable()'s; returns whether either is used from now on.
bool SetAmx(bool enable);
bool AmxInt8();
bool AmxBf16();

}  // namespace ssmkit::cpu
