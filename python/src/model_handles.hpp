// What the Python classes of the inference engine hold (ssmkit._ssmkit._Model, _Session,
// _Tokenizer, _Generator): the C++ objects of include/ssmkit/model.hpp, generate.hpp and
// tokenizer.hpp, shared so that each Python object keeps alive what it reads (a session its
// model, a generator its session and tokenizer) whatever order Python frees them in.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>

#include "array_args.hpp"
#include "ssmkit/model.hpp"
#include "ssmkit/tokenizer.hpp"

namespace ssmkit::python {

struct ModelHandle {
  std::shared_ptr<const Model> model;
  std::string dir;  // where it was loaded from (its tokenizer.json)
};

// A Session is not thread-safe and the GIL is released while it computes: every use holds mu.
// epoch counts the prefills and decodes made through the Python session, so that a generator
// notices when its session was moved on by someone else and refuses to continue.
struct SessionState {
  std::shared_ptr<const Model> model;
  std::unique_ptr<Session> session;
  std::mutex mu;
  uint64_t epoch = 0;
};

struct SessionHandle {
  std::shared_ptr<SessionState> state;
};

// Runs fn on the session with the GIL released and the session's lock held, then raises its
// error, if any.
template <class Fn>
void RunOnSession(SessionState& state, Fn&& fn) {
  Status status;
  {
    nb::gil_scoped_release release;
    std::lock_guard<std::mutex> lock(state.mu);
    status = fn();
  }
  ThrowIfError(status);
}

struct TokenizerHandle {
  std::shared_ptr<const Tokenizer> tokenizer;
};

}  // namespace ssmkit::python
