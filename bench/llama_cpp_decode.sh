#!/usr/bin/env bash
# Decode at batch 1 against llama.cpp (docs/benchmarks.md, "Engine decode vs llama.cpp"): the
# same random mamba-130m-shaped Hugging Face checkpoint, converted to GGUF with llama.cpp's own
# convert_hf_to_gguf.py, timed in both engines in one run (2 threads, greedy, 256 decode steps,
# median of 3), with a check that both pick the same first greedy tokens.
#
# Everything it fetches or makes stays under build/llama-cpp-peer/ (untracked): a venv with
# torch, transformers, safetensors, gguf and numpy from PyPI, llama-cpp-python built from its
# PyPI sdist (the llama.cpp it vendors, GGML_NATIVE), the checkpoints and their GGUF files.
# Nothing of llama.cpp is part of this repository. The first run takes ~20 minutes on 2 cores
# (the llama.cpp build); later runs reuse what is there.
#
# Usage: bench/llama_cpp_decode.sh [extra arguments of bench/llama_cpp_decode.py compare,
#        e.g. --runs 5 --json FILE]
# Env: LLAMA_CPP_PYTHON_VERSION (default 0.3.36), THREADS (default 2),
#      CASES (default "mamba1-f32 mamba1-bf16 mamba2-f32 mamba2-bf16").
set -euo pipefail
cd "$(dirname "$0")/.."
version=${LLAMA_CPP_PYTHON_VERSION:-0.3.36}
threads=${THREADS:-2}
cases=${CASES:-mamba1-f32 mamba1-bf16 mamba2-f32 mamba2-bf16}
work=build/llama-cpp-peer
venv=$work/venv
py=$venv/bin/python
helper=bench/llama_cpp_decode.py

scripts/install_deps.sh
if [ ! -x "$py" ]; then
  python3 -m venv "$venv"
  "$py" -m pip install -q --disable-pip-version-check --upgrade "pip>=24"
fi
"$py" -m pip install -q --disable-pip-version-check torch transformers safetensors gguf numpy sentencepiece

# llama-cpp-python from its sdist: the same unpacked tree gives the library and the converter.
src=$work/llama_cpp_python-$version
if [ ! -d "$src" ]; then
  "$py" -m pip download -q --disable-pip-version-check --no-deps --no-binary :all: --no-build-isolation \
    -d "$work/sdist" "llama-cpp-python==$version" || \
    "$py" -m pip download -q --disable-pip-version-check --no-deps --no-binary :all: -d "$work/sdist" \
      "llama-cpp-python==$version"
  tar -xzf "$work/sdist/llama_cpp_python-$version.tar.gz" -C "$work"
fi
if [ "$("$py" -c 'import importlib.metadata as m; print(m.version("llama_cpp_python"))' 2>/dev/null)" != "$version" ]; then
  # The CPU backend only, tuned for this machine (as the ggml peer of docs/benchmarks.md);
  # the multimodal library is not needed.
  CMAKE_ARGS="-DGGML_NATIVE=ON -DLLAVA_BUILD=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF" \
    CMAKE_BUILD_PARALLEL_LEVEL=2 "$py" -m pip install -q --disable-pip-version-check "$src"
fi

cmake --preset release >/dev/null
cmake --build --preset release -j2 --target ssmkit_cli

compare=()
for c in $cases; do
  arch=${c%-*} dtype=${c#*-}
  dir=$work/$arch-130m
  if [ ! -f "$dir-f32/model.safetensors" ] || [ ! -f "$dir-bf16/model.safetensors" ]; then
    "$py" "$helper" checkpoint --arch "$arch" --out "$dir-f32" --bf16-out "$dir-bf16"
  fi
  gguf=$work/$arch-130m-$dtype.gguf
  if [ ! -f "$gguf" ]; then
    "$py" "$helper" convert --llama-cpp "$src/vendor/llama.cpp" --outtype "$dtype" --outfile "$gguf" "$dir-$dtype"
  fi
  compare+=(--case "$arch,$dtype,$dir-$dtype,$gguf")
done
"$py" "$helper" compare --ssmkit build/release/ssmkit --threads "$threads" "${compare[@]}" "$@"
