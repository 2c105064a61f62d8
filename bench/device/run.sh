#!/usr/bin/env bash
# The device benchmark, in ONE call on a lent GPU machine (<= 10 minutes): builds ssmkit with the
# CUDA backend for sm_90, runs the GPU tests, times ssmkit's ops (bench/cuda_bench.cpp) and the
# peers (mamba_ssm, causal-conv1d; bench/device/compare.py) side by side, prints the table.
# bench/device/README.md says how a session prepares what it carries (.deps/, .whl/).
#
#   run   command: bash bench/device/run.sh
#         carry:   [".deps", ".whl"]
#
# The peers: wheels carried in .whl/*.whl are installed; without them, the sdists in .whl/src/
# are built into wheels by build_peers.sh in the background while ssmkit builds and tests (the
# wheels stay in /tmp/wheels for later calls on the same warm machine).
#
# $OUT gets build.log, gpu_tests.log, sanitize.log, generate_cuda.txt, ours.jsonl, peers.jsonl,
# peers.err, peers_build.log and table.txt; the table is printed last.
# Options (environment): SSMKIT_SKIP_TESTS=1 (neither the GPU tests nor the op harness's CUDA
# cases), SSMKIT_SANITIZE=1 (adds scripts/sanitize_gpu.sh,
# a few minutes; SSMKIT_SANITIZE_ONLY='*Parallel*' narrows it to some tests), SSMKIT_ARCH
# (default 90-real), SSMKIT_SKIP_PEERS=1 (ssmkit alone: no peers' build, no comparison),
# SSMKIT_PREBUILT=1 (run the binaries bench/device/pack_prebuilt.sh packed here into
# .prebuilt/, carried instead of .deps/: no configure or build there), SSMKIT_PROFILE=1 (Nsight
# Compute on the kernels behind the missed bars, bench/device/profile.sh: $OUT/profile.txt),
# SSMKIT_SKIP_BENCH=1 (no op timings and no peers: tests, the engine and the profile only).
# For a call about one op: SSMKIT_GPU_TESTS='conv1d varlen' (those tests/gpu/*_gpu_test only),
# SSMKIT_HARNESS_FILTER (a gtest filter of the harness's CUDA cases, default '*/CUDA*'),
# SSMKIT_BENCH_CASES (a regex of the cases ssmkit times; compare.py times the peers of those).
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/ssmkit-out}
mkdir -p "$OUT"
start=$(date +%s)
stamp() { echo "[$(( $(date +%s) - start )) s] $*"; }

stamp "machine"
nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.sm,clocks.max.sm --format=csv
nvcc --version | tail -1

peer_wheels=/tmp/wheels
peers_in=()
if [ "${SSMKIT_SKIP_PEERS:-0}" = 1 ]; then
  :
elif compgen -G ".whl/*.whl" > /dev/null; then
  peer_wheels=.whl
elif ! compgen -G "$peer_wheels/*.whl" > /dev/null && compgen -G ".whl/src/*.tar.gz" > /dev/null; then
  stamp "building the peers' wheels in the background (bench/device/build_peers.sh)"
  OUT=/tmp/peer-out bash bench/device/build_peers.sh > /tmp/peer-build.log 2>&1 &
  peer_build=$!
  # Meanwhile mamba_ssm's Triton SSD kernels compile from its unpacked Python files (the first
  # call of each takes tens of seconds, which would otherwise land in the timing phase).
  if compgen -G ".whl/src/mamba_ssm-*.tar.gz" > /dev/null; then
    mkdir -p /tmp/peer-py && tar xzf .whl/src/mamba_ssm-*.tar.gz -C /tmp/peer-py
    (PYTHONPATH=$(echo /tmp/peer-py/mamba_ssm-*) timeout 400 python3 bench/device/compare.py --warm \
       > /tmp/triton-warm.log 2>&1) &
    triton_warm=$!
  fi
fi

# cuBLAS (the engine's GEMMs) is linked as a shared library from the toolkit, too large to
# carry: the machine's own CUDA lib directory, wherever the toolkit put it.
for cuda_lib in /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib; do
  [ -d "$cuda_lib" ] && export LD_LIBRARY_PATH="$cuda_lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
done

if [ "${SSMKIT_PREBUILT:-0}" = 1 ]; then
  # Binaries built here by bench/device/pack_prebuilt.sh, carried in .prebuilt/.
  build=/tmp/ssmkit-prebuilt
  mkdir -p "$build" && tar -C "$build" -xJf .prebuilt/prebuilt.tar.xz
  export LD_LIBRARY_PATH="$build/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  cli="$build/bin/ssmkit"
  "$build/tests/gpu/conv1d_gpu_test" --gtest_list_tests > /dev/null \
    || { stamp "the prebuilt binaries do not start here: run without SSMKIT_PREBUILT"; exit 1; }
  stamp "prebuilt binaries unpacked"
else
  source bench/device/deps.sh
  build=build/device
  stamp "configure"
  cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DSSMKIT_CUDA=ON \
    -DCMAKE_CUDA_ARCHITECTURES="${SSMKIT_ARCH:-90-real}" "${SSMKIT_DEPS_CMAKE_ARGS[@]}" > "$OUT/build.log" 2>&1 \
    || { tail -30 "$OUT/build.log"; stamp "configure failed (log in \$OUT/build.log)"; exit 1; }
  stamp "build"
  cli="$build/ssmkit"
  targets=(ssmkit_cuda_bench ssmkit_cli harness_test)
  for t in tests/gpu/*_gpu_test.cpp; do targets+=("$(basename "${t%.cpp}")"); done
  cmake --build "$build" -j "$(nproc)" --target "${targets[@]}" >> "$OUT/build.log" 2>&1 \
    || { grep -E "error|FAILED" "$OUT/build.log" | head -30; stamp "build failed (log in \$OUT/build.log)"; exit 1; }
fi

if [ "${SSMKIT_SKIP_TESTS:-0}" != 1 ]; then
  stamp "GPU tests"
  for t in "$build"/tests/gpu/*_gpu_test; do
    name=$(basename "$t" _gpu_test)
    [ -z "${SSMKIT_GPU_TESTS:-}" ] || [[ " $SSMKIT_GPU_TESTS " == *" $name "* ]] || continue
    timeout 240 "$t" --gtest_brief=1 2>&1 | tee -a "$OUT/gpu_tests.log" | grep -E "FAILED|PASSED|SKIPPED|Failure|error|seed|SSMKIT_CUDA" | head -40
  done
  stamp "the op harness's CUDA cases (every variant combination of each op)"
  timeout 300 "$build/tests/harness/harness_test" --gtest_filter="${SSMKIT_HARNESS_FILTER:-*/CUDA*}" \
    --gtest_brief=1 2>&1 \
    | tee -a "$OUT/gpu_tests.log" | grep -E "FAILED|PASSED|SKIPPED|Failure|seed|tests? from" | head -40
  stamp "harness exit ${PIPESTATUS[0]}"
fi
if [ "${SSMKIT_SANITIZE:-0}" = 1 ]; then
  stamp "compute-sanitizer"
  timeout "${SSMKIT_SANITIZE_TIMEOUT:-300}" scripts/sanitize_gpu.sh "$build" > "$OUT/sanitize.log" 2>&1; stamp "sanitizer exit $?"
  grep -E "SUMMARY|reported errors|clean on every" "$OUT/sanitize.log" | sort | uniq -c
fi

if [ -n "${triton_warm:-}" ]; then  # its GPU work must not overlap our timings
  stamp "waiting for mamba_ssm's Triton compilation"
  wait "$triton_warm"
  tail -2 /tmp/triton-warm.log
fi
if [ -x "$cli" ] && ! "$cli" --help > /dev/null 2>&1; then
  stamp "the ssmkit CLI does not start here (a library missing?):"
  ldd "$cli" | grep "not found"
elif [ -x "$cli" ]; then
  # The engine on the GPU (docs/cuda.md): decode tokens/s at batch 1 and 64, m1-130m and
  # m2-130m, bf16 random weights; if the graph-replayed step fails, the eager one's numbers.
  stamp "ssmkit bench generate --device cuda"
  timeout 120 "$cli" bench generate --device cuda 2>&1 | tee "$OUT/generate_cuda.txt"
  if [ "${PIPESTATUS[0]}" != 0 ]; then
    stamp "again with SSMKIT_CUDA_GRAPHS=0 (every step launched eagerly)"
    SSMKIT_CUDA_GRAPHS=0 timeout 120 "$cli" bench generate --device cuda 2>&1 | tee -a "$OUT/generate_cuda.txt"
  fi
fi
if [ "${SSMKIT_PROFILE:-0}" = 1 ]; then
  stamp "Nsight Compute profiles (bench/device/profile.sh)"
  bash bench/device/profile.sh "$build" "$cli"
fi
if [ "${SSMKIT_SKIP_BENCH:-0}" = 1 ]; then
  stamp "done (SSMKIT_SKIP_BENCH: no op timings, no peers)"
  exit 0
fi
stamp "ssmkit benchmark"
"$build/bench/ssmkit_cuda_bench" --cases "${SSMKIT_BENCH_CASES:-.}" | tee "$OUT/ours.jsonl"

if [ "${SSMKIT_SKIP_PEERS:-0}" = 1 ]; then
  stamp "done (SSMKIT_SKIP_PEERS: no comparison)"
  exit 0
fi
if [ -n "${triton_warm:-}" ]; then
  # mamba_ssm's Triton ops need no compiled extension: timed while the wheels build.
  stamp "mamba_ssm's Triton ops (while the peers' wheels build)"
  PYTHONPATH=$(echo /tmp/peer-py/mamba_ssm-*) PYTHONUNBUFFERED=1 timeout 240 python3 bench/device/compare.py \
    --ours "$OUT/ours.jsonl" --cases '^(ssd|step)' --peers-out "$OUT/peers_triton.jsonl" \
    > /dev/null 2> /tmp/peers_triton.err || tail -5 /tmp/peers_triton.err
  peers_in=(--peers-in "$OUT/peers_triton.jsonl")
fi
if [ -n "${peer_build:-}" ]; then
  stamp "waiting for the peers' wheels"
  wait "$peer_build"
  cat /tmp/peer-out/*.log /tmp/peer-build.log > /tmp/peers_build.log 2>/dev/null
  ls "$peer_wheels"/*.whl 2>/dev/null || { stamp "no peer wheel was built:"; tail -20 /tmp/peers_build.log; }
fi
if compgen -G "$peer_wheels/*.whl" > /dev/null; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site "$peer_wheels"/*.whl \
    && export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH} || stamp "could not install the peers' wheels"
else
  stamp "no peers' wheels: their columns will say so"
fi
stamp "peers and the table"
PYTHONUNBUFFERED=1 timeout 300 python3 bench/device/compare.py --ours "$OUT/ours.jsonl" \
  "${peers_in[@]}" --peers-out "$OUT/peers.jsonl" 2> /tmp/peers.err > "$OUT/table.txt"
tail -5 /tmp/peers.err
stamp "done"
cat "$OUT/table.txt"
