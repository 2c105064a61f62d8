#!/usr/bin/env bash
# Creates build/venv-torch (once): PyTorch (CPU use), transformers, safetensors and matplotlib
# from PyPI, for the training benchmark against transformers' MambaForCausalLM, the loss-curve
# fixture and the loss-curve plot. Nothing in scripts/test.sh needs it.
set -euo pipefail
cd "$(dirname "$0")/.."
venv=build/venv-torch
if [ ! -x "$venv/bin/python" ]; then
  scripts/install_deps.sh python3-venv
  python3 -m venv "$venv"
fi
"$venv/bin/pip" install -q torch transformers safetensors numpy matplotlib
"$venv/bin/python" -c "import torch, transformers; print('torch', torch.__version__, 'transformers', transformers.__version__)"
