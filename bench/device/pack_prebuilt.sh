#!/usr/bin/env bash
# Run HERE before a short device call: builds the GPU tests, the CUDA benchmark and the ssmkit CLI
# (for `bench generate --device cuda`; sm_90) in build/cuda and packs them, with the shared libraries they load that the GPU machine lacks,
# into .prebuilt/prebuilt.tar.xz (git-ignored; ~15 MB). run.sh with SSMKIT_PREBUILT=1 then
# unpacks and runs them instead of configuring and building there, which saves the build's
# minute or two of device time (carry [".prebuilt"] instead of [".deps"]).
# The binaries need glibc >= 2.34 and GCC 12's libstdc++ there, and the machine's CUDA toolkit
# for cuBLAS (run.sh puts its lib64 on LD_LIBRARY_PATH); run.sh checks that they start.
set -euo pipefail
cd "$(dirname "$0")/../.."
build=build/cuda
export CMAKE_CXX_COMPILER_LAUNCHER=ccache CMAKE_CUDA_COMPILER_LAUNCHER=ccache
export CCACHE_BASEDIR="$PWD" CCACHE_NOHASHDIR=1
[ -f "$build/build.ninja" ] || cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_CXX_FLAGS=-O3 -DSSMKIT_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90-real
targets=(ssmkit_cuda_bench ssmkit_cli harness_test)
for t in tests/gpu/*_gpu_test.cpp; do targets+=("$(basename "${t%.cpp}")"); done
cmake --build "$build" -j "$(nproc)" --target "${targets[@]}"
stage=$(mktemp -d)
mkdir -p "$stage/tests/gpu" "$stage/bench" "$stage/bin" "$stage/lib"
cp "$build"/tests/gpu/*_gpu_test "$stage/tests/gpu/"
# The op harness: its CUDA cases (every kernel variant of an op) run there.
mkdir -p "$stage/tests/harness" && cp "$build/tests/harness/harness_test" "$stage/tests/harness/"
cp "$build/bench/ssmkit_cuda_bench" "$stage/bench/"
cp "$build/ssmkit" "$stage/bin/"
# The libraries the GPU image lacks (the CLI adds ICU for its tokenizer, cpp-httplib and brotli
# for `ssmkit serve`: ~13 MB of the package's ~24); not cuBLAS (~600 MB): the image's toolkit
# has it.
for so in $(ldd "$build/bench/ssmkit_cuda_bench" "$build"/tests/gpu/*_gpu_test "$build/tests/harness/harness_test" "$build/ssmkit" |
            awk '/libhwy|libopenblas|libgfortran|libquadmath|libicu|libcpp-httplib|libbrotli/ {print $3}' |
            sort -u); do
  cp -L "$so" "$stage/lib/"
done
mkdir -p .prebuilt
tar -C "$stage" -cJf .prebuilt/prebuilt.tar.xz .
rm -rf "$stage"
ls -la .prebuilt
