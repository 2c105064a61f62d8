// The CUDA runtime pieces the engine drives from the host (src/model/gpu_decoder.cpp): device and
// pinned host memory, a stream, a captured graph, asynchronous copies. Plain C++ (no CUDA types)
// so that src/model/ compiles without nvcc; streams are passed as void* (a cudaStream_t). Built
// from src/cuda/device_runtime.cu, or src/cuda/stubs.cpp (each answering Unsupported) without
// the CUDA backend.
#pragma once

#include <cstdint>

#include "ssmkit/status.hpp"

namespace ssmkit::cuda {

// Device memory from cudaMalloc (not the stream-ordered pool: it lives as long as its owner),
// freed on destruction. Move-only.
class DeviceMemory {
 public:
  DeviceMemory() = default;
  DeviceMemory(DeviceMemory&& other) noexcept;
  DeviceMemory& operator=(DeviceMemory&& other) noexcept;
  DeviceMemory(const DeviceMemory&) = delete;
  DeviceMemory& operator=(const DeviceMemory&) = delete;
  ~DeviceMemory();

  // `bytes` (> 0) of device memory; a previous allocation is freed first. `what` names it in
  // the error (an OutOfMemory when the device is full).
  Status Allocate(const char* what, int64_t bytes);
  void* data() const { return data_; }
  int64_t bytes() const { return bytes_; }

 private:
  void* data_ = nullptr;
  int64_t bytes_ = 0;
};

// Page-locked host memory (cudaMallocHost): what asynchronous copies need to overlap nothing
// on the host. Freed on destruction. Move-only.
class PinnedMemory {
 public:
  PinnedMemory() = default;
  PinnedMemory(PinnedMemory&& other) noexcept;
  PinnedMemory& operator=(PinnedMemory&& other) noexcept;
  PinnedMemory(const PinnedMemory&) = delete;
  PinnedMemory& operator=(const PinnedMemory&) = delete;
  ~PinnedMemory();

  Status Allocate(const char* what, int64_t bytes);
  void* data() const { return data_; }

 private:
  void* data_ = nullptr;
};

// A stream of its own (non-blocking with respect to the legacy default stream), which a graph
// can be captured on. Destroyed on destruction.
class Stream {
 public:
  Stream() = default;
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;
  ~Stream();

  Status Create();
  void* get() const { return stream_; }

 private:
  void* stream_ = nullptr;
};

// A CUDA graph: the kernels launched on a stream between BeginCapture and EndCapture, recorded
// (not run) and instantiated, then replayed with Launch. Everything the recorded kernels read
// and write must stay where it was when they were recorded.
class Graph {
 public:
  Graph() = default;
  Graph(Graph&& other) noexcept;
  Graph& operator=(Graph&& other) noexcept;
  Graph(const Graph&) = delete;
  Graph& operator=(const Graph&) = delete;
  ~Graph();

  // Starts recording `stream` (thread-local mode: a call that could synchronise, such as
  // cudaMalloc, fails on this thread until EndCapture; other threads are not affected).
  static Status BeginCapture(void* stream);
  // Ends the recording of `stream` and instantiates it into this graph (replacing any). Always
  // ends the capture, even when instantiating fails, so the stream is usable again.
  Status EndCapture(void* stream);
  Status Launch(void* stream) const;
  bool ready() const { return exec_ != nullptr; }

 private:
  void* exec_ = nullptr;  // cudaGraphExec_t
};

// Asynchronous copies on `stream` (from or to pinned host memory they overlap the host; from or
// to pageable memory they return once the copy is done).
Status CopyToDevice(void* dst, const void* src, int64_t bytes, void* stream);
Status CopyToHost(void* dst, const void* src, int64_t bytes, void* stream);
Status CopyOnDevice(void* dst, const void* src, int64_t bytes, void* stream);
// dst[0, bytes) = 0 on `stream`.
Status ZeroOnDevice(void* dst, int64_t bytes, void* stream);
// Waits for `stream`; returns the first error its kernels raised.
Status SynchronizeStream(void* stream);

}  // namespace ssmkit::cuda
