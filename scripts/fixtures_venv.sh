#!/usr/bin/env bash
# Regenerates the engine's test fixtures (tests/fixtures/) with transformers, torch (CPU) and
# tokenizers from PyPI, in a venv under build/. Not part of the test run: the tests read the
# committed fixtures. Needs python3-venv (Debian) and network access to PyPI.
set -euo pipefail
cd "$(dirname "$0")/.."
venv=build/venv
if [ ! -x "$venv/bin/python" ]; then
  python3 -m venv "$venv"
fi
"$venv/bin/pip" install -q torch transformers tokenizers safetensors numpy
"$venv/bin/python" scripts/make_model_fixtures.py "$@"
