#!/usr/bin/env bash
# The main job: build the release preset and run the selective-scan benchmark.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install_deps.sh
cmake --preset release >/dev/null
cmake --build --preset release --target ssmkit_cli
./build/release/ssmkit bench scan "$@"
