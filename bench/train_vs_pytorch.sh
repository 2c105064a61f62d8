#!/usr/bin/env bash
# The training benchmark of docs/benchmarks.md: ssmkit's trainer against PyTorch training
# transformers' MambaForCausalLM (and Mamba2ForCausalLM) on the CPU, the same tiny byte-level
# model, initial weights, batches (8 x 256 bytes) and optimizer, side by side in one run.
# Usage: bench/train_vs_pytorch.sh [--write-fixtures] [extra train_vs_pytorch.py arguments]
# --write-fixtures also refreshes tests/fixtures/train/{mamba1,mamba2} (the CI parity test).
set -euo pipefail
cd "$(dirname "$0")/.."
# Both trainers run on libgomp (ours directly, PyTorch through its bundled copy). Its default
# spin-waiting at barriers collapses when the two cores are shared with other processes (the
# tiny model's ~20k tokens/s became ~2.5k at 2 threads on a loaded machine, 50k with passive
# waiting: docs/benchmarks.md). Passive waiting is set for both, unless the caller chose.
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-passive}
fixtures=0
if [ "${1:-}" = "--write-fixtures" ]; then fixtures=1; shift; fi
scripts/install_deps.sh
bench/venv.sh
scripts/make_corpus.sh build/corpus/kjv.txt
# The first 64 KiB of the corpus: small enough to commit as the fixture's data; the timing
# does not depend on the file's size.
head -c 65536 build/corpus/kjv.txt > build/corpus/kjv-64k.txt
cmake --preset release >/dev/null
cmake --build --preset release --target ssmkit_cli
for arch in mamba1 mamba2; do
  extra=()
  [ "$fixtures" = 1 ] && extra=(--write-fixture "tests/fixtures/train/$arch")
  build/venv-torch/bin/python bench/train_vs_pytorch.py --arch "$arch" --data build/corpus/kjv-64k.txt "${extra[@]}" "$@"
done
