#!/usr/bin/env bash
# The ssmkit.torch benchmarks of docs/benchmarks.md ("PyTorch: ssmkit.torch against
# transformers as shipped"), side by side in one process each: training steps of Mamba-1 and
# Mamba-2 (accelerated, as shipped, mambapy), generate() tokens/s and prefill, and the per-call
# overhead of a small op. Usage: bench/torch_bench.sh [extra torch_bench.py arguments]
set -euo pipefail
cd "$(dirname "$0")/.."
# PyTorch and ssmkit each run a libgomp team; spin-waiting at barriers collapses on a shared
# 2-core machine (docs/benchmarks.md, training section): passive waiting for both.
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-passive}
scripts/install_deps.sh
cmake --preset release >/dev/null
cmake --build --preset release --target ssmkit ssmkit_shared ssmkit_cli
scripts/python_venv.sh
build/venv/bin/python -m pip install -q --disable-pip-version-check mambapy
py=build/venv/bin/python
$py bench/torch_bench.py overhead "$@"
$py bench/torch_bench.py train --arch mamba1 "$@"
$py bench/torch_bench.py train --arch mamba2 "$@"
# generate: the whole 130m shape (24 layers, GPT-NeoX's vocabulary), as a user would run it.
$py bench/torch_bench.py generate --arch mamba1 --layers 24 --vocab 50280 "$@"
$py bench/torch_bench.py generate --arch mamba2 --layers 24 --vocab 50288 "$@"
