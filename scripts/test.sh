#!/usr/bin/env bash
# Builds and runs every test: the release suite (large int64 cases included), the op tests of
# the aarch64 cross build under qemu-user (scripts/test_arm64.sh), the Python and Elixir
# packages' tests, the AddressSanitizer + UBSan suite, the ThreadSanitizer suite (the thread
# pool, the engine and the C ABI from many threads, the server's scheduler), then every
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
# Each stage's wall time is printed so that CI logs show where the budget goes.
timings=()
stage() {
  local name=$1 start=$SECONDS
  shift
  "$@"
  timings+=("$(printf '%-8s %5d s' "$name" $((SECONDS - start)))")
  echo "== stage $name: $((SECONDS - start)) s"
}
build_and_test() {
  cmake --preset "$1"
  cmake --build --preset "$1" -j "$jobs"
  ctest --preset "$1" -j "$jobs"
}
stage release build_and_test release
stage arm64 scripts/test_arm64.sh
stage python scripts/test_python.sh
stage server scripts/test_server.sh
stage elixir scripts/test_elixir.sh
stage asan build_and_test asan
stage tsan build_and_test tsan
stage fuzz scripts/fuzz.sh "${SSMKIT_FUZZ_SECONDS:-15}"
printf '%s\n' "stage times:" "${timings[@]}"
