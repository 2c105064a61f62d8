#!/usr/bin/env bash
# Run HERE before a short device call: builds the GPU tests and the CUDA benchmark (sm_90) in
# build/cuda and packs them, with the shared libraries they load that the GPU machine lacks,
# into .prebuilt/prebuilt.tar.xz (git-ignored; ~15 MB). run.sh with SSMKIT_PREBUILT=1 then
# unpacks and runs them instead of configuring and building there, which saves the build's
# minute or two of device time (carry [".prebuilt"] instead of [".deps"]).
# The binaries need glibc >= 2.34 and GCC 12's libstdc++ there; run.sh checks that they start.
set -euo pipefail
cd "$(dirname "$0")/../.."
build=build/cuda
export CMAKE_CXX_COMPILER_LAUNCHER=ccache CMAKE_CUDA_COMPILER_LAUNCHER=ccache
export CCACHE_BASEDIR="$PWD" CCACHE_NOHASHDIR=1
[ -f "$build/build.ninja" ] || cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_CXX_FLAGS=-O3 -DSSMKIT_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90-real
targets=(ssmkit_cuda_bench)
for t in tests/gpu/*_gpu_test.cpp; do targets+=("$(basename "${t%.cpp}")"); done
cmake --build "$build" -j "$(nproc)" --target "${targets[@]}"
stage=$(mktemp -d)
mkdir -p "$stage/tests/gpu" "$stage/bench" "$stage/lib"
cp "$build"/tests/gpu/*_gpu_test "$stage/tests/gpu/"
cp "$build/bench/ssmkit_cuda_bench" "$stage/bench/"
for so in $(ldd "$build/bench/ssmkit_cuda_bench" "$build"/tests/gpu/*_gpu_test |
            awk '/libhwy|libopenblas|libgfortran|libquadmath/ {print $3}' | sort -u); do
  cp -L "$so" "$stage/lib/"
done
mkdir -p .prebuilt
tar -C "$stage" -cJf .prebuilt/prebuilt.tar.xz .
rm -rf "$stage"
ls -la .prebuilt
