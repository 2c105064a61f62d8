#!/usr/bin/env bash
# The Python package's tests (python/tests, pytest): a virtual environment in build/venv with
# python/requirements-test.txt, the release build installed into build/install (the package
# links that library instead of compiling it again), `pip install ./python`, then pytest.
# Needs the release build (scripts/test.sh runs this after it) and python3-venv, python3-dev.
set -euo pipefail
cd "$(dirname "$0")/.."
venv=build/venv
if [ ! -x "$venv/bin/python" ]; then
  python3 -m venv "$venv"
fi
# Debian 12's venv pip (23.0) predates options the build uses; a current one comes first.
"$venv/bin/python" -m pip install -q --disable-pip-version-check --upgrade "pip>=24"
"$venv/bin/python" -m pip install -q --disable-pip-version-check -r python/requirements-test.txt
cmake --install build/release --prefix build/install >/dev/null
# No build isolation: the venv already has the build requirements (scikit-build-core,
# nanobind, jaxlib for the XLA FFI headers).
"$venv/bin/python" -m pip install -q --disable-pip-version-check --no-build-isolation \
  --config-settings=cmake.define.CMAKE_PREFIX_PATH="$PWD/build/install" ./python
"$venv/bin/python" -m pytest -q python/tests "$@"
