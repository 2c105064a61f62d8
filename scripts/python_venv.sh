#!/usr/bin/env bash
# The Python environment of the package's tests and benchmarks, build/venv: the packages of
# python/requirements-test.txt, PyTorch and transformers (python/requirements-torch.txt), the
# release build installed into build/install (the package links that library instead of
# compiling it again), and `pip install ./python`. Needs the release build (scripts/test.sh
# makes it) and python3-venv, python3-dev.
#
# PyTorch's wheel from PyPI brings ~3 GB of CUDA wheels with it. They are kept in a wheelhouse
# outside the clone, filled here on first use ($SSMKIT_WHEELHOUSE, default
# ~/.cache/ssmkit/wheelhouse): later runs on the same machine (CI's fresh clones included)
# install from it without downloading.
set -euo pipefail
cd "$(dirname "$0")/.."
venv=build/venv
pip_quiet=(-q --disable-pip-version-check)
if [ ! -x "$venv/bin/python" ]; then
  python3 -m venv "$venv"
fi
# Debian 12's venv pip (23.0) predates options the build uses; a current one comes first.
"$venv/bin/python" -m pip install "${pip_quiet[@]}" --upgrade "pip>=24"
"$venv/bin/python" -m pip install "${pip_quiet[@]}" -r python/requirements-test.txt
if ! "$venv/bin/python" -c "import torch, transformers" 2>/dev/null; then
  wheelhouse=${SSMKIT_WHEELHOUSE:-$HOME/.cache/ssmkit/wheelhouse}
  mkdir -p "$wheelhouse"
  offline=(--no-index --find-links "$wheelhouse" -r python/requirements-torch.txt)
  if ! "$venv/bin/python" -m pip install "${pip_quiet[@]}" "${offline[@]}" 2>/dev/null; then
    echo "python_venv: downloading PyTorch and transformers into $wheelhouse (~3 GB, once)"
    "$venv/bin/python" -m pip download "${pip_quiet[@]}" -d "$wheelhouse" \
      -r python/requirements-torch.txt
    "$venv/bin/python" -m pip install "${pip_quiet[@]}" "${offline[@]}"
  fi
fi
cmake --install build/release --prefix build/install >/dev/null
# No build isolation: the venv already has the build requirements (scikit-build-core,
# nanobind, and jaxlib, whose XLA FFI headers the JAX handlers need).
"$venv/bin/python" -m pip install "${pip_quiet[@]}" --no-build-isolation \
  --config-settings=cmake.define.CMAKE_PREFIX_PATH="$PWD/build/install" ./python
