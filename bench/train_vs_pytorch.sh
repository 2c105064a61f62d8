#!/usr/bin/env bash
# The training benchmark of docs/benchmarks.md: ssmkit's trainer against PyTorch training
# transformers' MambaForCausalLM (and Mamba2ForCausalLM) on the CPU, the same tiny byte-level
# model, initial weights, batches (8 x 256 bytes) and optimizer, side by side in one run.
# Usage: bench/train_vs_pytorch.sh [--write-fixtures] [extra train_vs_pytorch.py arguments]
# --write-fixtures also refreshes tests/fixtures/train/{mamba1,mamba2} (the CI parity test).
set -euo pipefail
cd "$(dirname "$0")/.."
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
