#!/usr/bin/env bash
# Builds every libFuzzer target of tests/fuzz (the `fuzz` preset: clang, AddressSanitizer +
# UBSan, leak checking on) and runs each for SECONDS (default 60) from its seeds: its corpus
# (tests/fuzz/corpus/<target>/), the fixtures tests/fuzz/fixture_seeds.txt names, and what
# earlier runs found (build/fuzz/corpus/<target>/, kept). Fails when any target crashes, leaks,
# times out (25 s on one input) or runs out of memory (2 GB); the input that did it is left in
# build/fuzz/crashes/<target>/. Fix the defect, then copy the input to
# tests/fuzz/regressions/<target>/ so that the replay test (ctest fuzz_replay_<target>) keeps
# it fixed. Prints each target's coverage (libFuzzer's cov: edges and ft: features).
# Usage: scripts/fuzz.sh [SECONDS] [TARGET...]   (TARGET: e.g. safetensors, jinja)
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-60}
shift || true
scripts/install_deps.sh clang libclang-rt-14-dev
export CMAKE_CXX_COMPILER_LAUNCHER=ccache CMAKE_C_COMPILER_LAUNCHER=ccache
export CCACHE_BASEDIR="$PWD" CCACHE_NOHASHDIR=1
cmake --preset fuzz >/dev/null
cmake --build --preset fuzz -j "$(nproc)"

targets=("$@")
if ((${#targets[@]} == 0)); then
  for source in tests/fuzz/*_fuzz.cpp; do
    name=$(basename "$source" _fuzz.cpp)
    targets+=("$name")
  done
fi

failed=()
summary=()
for name in "${targets[@]}"; do
  binary=build/fuzz/tests/fuzz/${name}_fuzz
  work=build/fuzz/corpus/$name
  crashes=build/fuzz/crashes/$name
  mkdir -p "$work" "$crashes"
  seeds=()
  while read -r target pattern; do
    [ "$target" = "$name" ] || continue
    for file in tests/$pattern; do [ -f "$file" ] && seeds+=("$file"); done
  done < <(grep -E '^[a-z_]+ ' tests/fuzz/fixture_seeds.txt)
  seed_option=()
  if ((${#seeds[@]})); then seed_option=("-seed_inputs=$(IFS=,; echo "${seeds[*]}")"); fi
  log=build/fuzz/$name.log
  echo "fuzz: $name for ${seconds}s"
  if ASAN_OPTIONS=detect_leaks=1 "$binary" -max_total_time="$seconds" -timeout=25 \
      -rss_limit_mb=2048 -print_final_stats=1 -artifact_prefix="$crashes/" "${seed_option[@]}" \
      "$work" "tests/fuzz/corpus/$name" >"$log" 2>&1; then
    outcome=ok
  else
    outcome=FAILED
    failed+=("$name")
    tail -40 "$log"
  fi
  last=$(grep -E '^#[0-9]+' "$log" | tail -1 || true)
  runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log")
  cov=$(sed -n 's/.*cov: \([0-9]*\).*/\1/p' <<<"$last")
  ft=$(sed -n 's/.*ft: \([0-9]*\).*/\1/p' <<<"$last")
  summary+=("$(printf '%-20s %-7s runs %-9s cov %-6s ft %s' "$name" "$outcome" "${runs:-?}" \
    "${cov:-?}" "${ft:-?}")")
done
printf '%s\n' "${summary[@]}"
if ((${#failed[@]})); then
  echo "fuzz: FAILED: ${failed[*]} (inputs in build/fuzz/crashes/)"
  exit 1
fi
echo "fuzz: ${#targets[@]} targets, ${seconds}s each, no crash, leak or timeout"
