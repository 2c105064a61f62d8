#!/usr/bin/env bash
# The Python package's tests (python/tests, pytest) in build/venv (scripts/python_venv.sh
# makes it: numpy, jax, PyTorch and transformers, the package built against the release
# build). Needs the release build (scripts/test.sh runs this after it).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/python_venv.sh
build/venv/bin/python -m pytest -q python/tests "$@"
