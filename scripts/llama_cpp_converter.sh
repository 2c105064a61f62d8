#!/usr/bin/env bash
# llama.cpp's checkpoint converter (convert_hf_to_gguf.py with its conversion/ package and
# gguf-py), taken from the llama-cpp-python source distribution on PyPI, which vendors
# llama.cpp: the peer that writes the GGUF files the tests load (python/tests/test_gguf.py).
# The sdist (~75 MB) is downloaded once into ~/.cache/ssmkit (or $SSMKIT_CACHE); the three
# parts are unpacked into build/llama-convert/. Prints the converter's path.
# Usage: scripts/llama_cpp_converter.sh [PYTHON]   (PYTHON runs `pip download`; default build/venv's)
set -euo pipefail
cd "$(dirname "$0")/.."
version=0.3.36
python=${1:-build/venv/bin/python}
cache=${SSMKIT_CACHE:-$HOME/.cache/ssmkit}
sdist=$cache/llama_cpp_python-$version.tar.gz
out=build/llama-convert
if [ ! -f "$out/$version/convert_hf_to_gguf.py" ]; then
  if [ ! -f "$sdist" ]; then
    mkdir -p "$cache"
    "$python" -m pip download -q --disable-pip-version-check --no-deps --no-binary :all: \
      -d "$cache" "llama-cpp-python==$version" >&2
  fi
  rm -rf "$out"
  mkdir -p "$out/$version"
  prefix=llama_cpp_python-$version/vendor/llama.cpp
  tar -xzf "$sdist" -C "$out/$version" --strip-components=3 \
    "$prefix/convert_hf_to_gguf.py" "$prefix/conversion" "$prefix/gguf-py"
fi
echo "$PWD/$out/$version/convert_hf_to_gguf.py"
