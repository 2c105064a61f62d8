#!/usr/bin/env bash
# Builds and runs every test: the release suite (large int64 cases included), the Python and
# Elixir packages' tests, the AddressSanitizer + UBSan suite, the ThreadSanitizer suite (the
# thread pool, the engine and the C ABI from many threads, the server's scheduler), then every
# libFuzzer target for a short budget (scripts/fuzz.sh; docs/testing.md says what each covers).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install_deps.sh
scripts/check_format.sh
# Compiler results cached across runs and checkouts (~/.cache/ccache): a CI run on a machine
# that built before recompiles only what changed. Paths are taken relative to the checkout so
# two clones share entries.
export CMAKE_CXX_COMPILER_LAUNCHER=ccache CMAKE_CUDA_COMPILER_LAUNCHER=ccache
export CCACHE_BASEDIR="$PWD" CCACHE_NOHASHDIR=1
jobs=$(nproc)
cmake --preset release
cmake --build --preset release -j "$jobs"
ctest --preset release -j "$jobs"
scripts/test_python.sh
scripts/test_server.sh
scripts/test_elixir.sh
cmake --preset asan
cmake --build --preset asan -j "$jobs"
ctest --preset asan -j "$jobs"
cmake --preset tsan
cmake --build --preset tsan -j "$jobs"
ctest --preset tsan -j "$jobs"
scripts/fuzz.sh "${SSMKIT_FUZZ_SECONDS:-15}"
