// The harness's checks, each run inside one GoogleTest test (runner.cpp registers them).
#pragma once

#include "harness/backend.hpp"
#include "harness/op_spec.hpp"

namespace ssmkit::testing::harness {

// Every configuration of the case on `backend`: outputs poisoned, forward (and backward)
// against the oracle within each output's tolerance, nothing left poisoned, padding and inputs
// untouched; then what the case's Checks ask. With `perf`, also the median time of each call.
void RunCase(const ErasedOp& op, const ErasedCase& c, Backend& backend, bool perf);

// The op's valid configuration: every call succeeds (so each bad input's failure is its own).
void RunValid(const ErasedOp& op);

// The mutation is refused with its code, every piece in the message, no tensor written.
void RunBadInput(const ErasedOp& op, const ErasedBadInput& bad);

}  // namespace ssmkit::testing::harness
