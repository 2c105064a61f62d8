#!/usr/bin/env bash
# The aarch64 cross build and its op tests under qemu-user (the arm64 preset,
# cmake/aarch64-linux-gnu.cmake; docs/testing.md, "ARM"): Debian's cross compiler, qemu-user and
# the arm64 -dev libraries (dpkg's arm64 architecture added on first use), then libssmkit and
# the op tests (label cpu-op) built and run, each on every SIMD target the library builds there.
set -euo pipefail
cd "$(dirname "$0")/.."
# cpp-httplib: configuring the project needs it (cmake/server.cmake), though no server is built.
scripts/install_deps.sh g++-aarch64-linux-gnu qemu-user libhwy-dev:arm64 libopenblas-dev:arm64 \
  libicu-dev:arm64 libgtest-dev:arm64 libgmock-dev:arm64 libcpp-httplib-dev:arm64
cmake --preset arm64
cmake --build --preset arm64 -j "$(nproc)"
ctest --preset arm64 -j "$(nproc)"
