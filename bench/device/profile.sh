#!/usr/bin/env bash
# Nsight Compute on the kernels behind the bars the H200 run missed (docs/benchmarks.md, "CUDA on
# an H200"), on a lent GPU machine: run.sh calls it with SSMKIT_PROFILE=1 after its timings, or
# alone:  bash bench/device/profile.sh BUILD_DIR CLI   ($OUT/profile.txt gets everything).
# SSMKIT_PROFILE_PARTS='decode conv ssd' (the default) names the parts below to run.
#   1. The engine's decode step (m1-130m and m2-130m, batch 1, launched eagerly: no graph): the
#      duration of every kernel of two steps, summed by kernel name, against the step's time.
#   2. Causal conv1d `unrolled` at m1-2.8b bf16, forward and backward: speed of light, occupancy,
#      launch statistics and warp stall reasons.
#   3. SSD `mma` at m2-2.7b: the same for each of its kernels, forward and backward.
# The clocks are left as they are (--clock-control none: METHOD.md of the device tool).
set -uo pipefail
cd "$(dirname "$0")/../.."
build=$1 cli=$2
OUT=${OUT:-/tmp/ssmkit-out}
log="$OUT/profile.txt"
ncu_base=(ncu --clock-control none)
sections=(--section SpeedOfLight --section Occupancy --section LaunchStats --section WarpStateStats
          --section MemoryWorkloadAnalysis)

# 1. Kernel durations of the eager decode step. A prompt's tokens run through the decode step, so
# launches 3000..3350 of a run are about two steps of its prefill.
parts=" ${SSMKIT_PROFILE_PARTS:-decode conv ssd} "
[[ $parts == *" decode "* ]] && for shape in m1-130m m2-130m; do
  echo "== decode step kernels, $shape batch 1 (eager)" | tee -a "$log"
  SSMKIT_CUDA_GRAPHS=0 timeout 150 "${ncu_base[@]}" --metrics gpu__time_duration.sum --csv \
    --print-units base --launch-skip 3000 --launch-count 350 \
    "$cli" bench generate --device cuda --shape "$shape" --runs 1 > /tmp/decode_ncu.csv 2>&1
  python3 - "$shape" /tmp/decode_ncu.csv <<'EOF' | tee -a "$log"
import csv, collections, sys
rows = [r for r in csv.reader(l for l in open(sys.argv[2]) if l.startswith('"'))]
if len(rows) < 2:
    print("no kernel rows; ncu said:")
    print(open(sys.argv[2]).read()[-3000:])
    sys.exit(0)
head, body = rows[0], rows[1:]
if "Kernel Name" not in head or "Metric Value" not in head:
    print("unexpected columns:", head)
    sys.exit(0)
name, value = head.index("Kernel Name"), head.index("Metric Value")
per = collections.defaultdict(lambda: [0, 0.0])
for r in body:
    k = r[name].split("(")[0][:90]
    per[k][0] += 1
    per[k][1] += float(r[value].replace(",", "")) / 1e3  # ns -> us
total = sum(v[1] for v in per.values())
print(f"{len(body)} kernels, {total:.1f} us of kernel time ({total / len(body):.2f} us each)")
for k, (n, us) in sorted(per.items(), key=lambda kv: -kv[1][1]):
    print(f"{us:9.1f} us {n:5d} x {us / n:7.2f} us  {k}")
EOF
done

# 2 and 3: one launch of each kernel (matched by its demangled name, template arguments
# included), after the case's warm-up calls.
profile() {  # title, cases regex, kernel regex, launches to skip, launches to profile
  echo "== $1" | tee -a "$log"
  timeout 150 "${ncu_base[@]}" "${sections[@]}" --kernel-name-base demangled -k "regex:$3" \
    --launch-skip "$4" --launch-count "$5" "$build/bench/ssmkit_cuda_bench" --cases "$2" >> "$log" 2>&1
  echo "ncu exit $?" | tee -a "$log"
}
if [[ $parts == *" conv "* ]]; then
  # ncu names the instantiation Conv1dForwardVectorKernel<__nv_bfloat16, (int)4>.
  for kernel in Forward Backward; do
    profile "conv1d $kernel unrolled, m1-2.8b bf16" '^conv m1-2.8b' \
      "${kernel}VectorKernel<__nv_bfloat16, \(int\)4>" 2 1
  done
fi
if [[ $parts == *" ssd "* ]]; then
  profile "SSD mma forward, m2-2.7b" '^ssd m2-2.7b' 'Mma' 6 3
  profile "SSD mma backward, m2-2.7b" '^ssd m2-2.7b' 'MmaChunkBackward|SumSlices' 2 2
fi
grep -E "^== |Duration|Memory Throughput|DRAM Throughput|Compute \(SM\) Throughput|Achieved Occupancy|Registers Per|Theoretical Occupancy|Block Limit|ncu exit" "$log" | tail -80
