#!/usr/bin/env bash
# The main job: build the release preset and generate text with the built-in model
# (models/default: a byte-level Mamba-2 trained by `ssmkit train` on the King James Bible).
# Arguments replace the default ones, e.g. scripts/main.sh --prompt "In the beginning" --max-tokens 400
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install_deps.sh
cmake --preset release >/dev/null
cmake --build --preset release --target ssmkit_cli
if (($#)); then
  ./build/release/ssmkit generate "$@"
else
  ./build/release/ssmkit generate --prompt "And God said unto Moses, " --max-tokens 300 \
    --temperature 0.8 --top-k 40 --seed 1
fi
