#!/usr/bin/env bash
# Prefill and decode at batch 1 against llama.cpp (docs/benchmarks.md, "Engine decode vs
# llama.cpp"): the same random checkpoints of the docs/targets.md shapes (m1-130m, m2-130m,
# m1-2.8b, granite-4.0-h-350m, falcon-h1-0.5b), converted to GGUF with llama.cpp's own convert_hf_to_gguf.py and, for the
# quantized types, quantized by llama.cpp's own llama-quantize; timed in both engines in one run
# (2 threads, greedy, median of 3, runs interleaved), with a check that both pick the same first
# greedy tokens. ssmkit loads the checkpoint directory for f32 / bf16 and the same GGUF file
# llama.cpp loads for the quantized types.
#
# Everything it fetches or makes stays outside the tracked files: build/venv (scripts/python_venv.sh:
# torch and transformers from the wheelhouse cache), the llama-cpp-python sdist from PyPI (cached in
# ~/.cache/ssmkit), unpacked under build/llama-cpp-peer/ with the llama.cpp it vendors built there
# by CMake (CPU backend, GGML_NATIVE: libllama for llama-cpp-python's ctypes API, read from the
# sdist's own sources, and llama-quantize / llama-bench / llama-batched-bench / llama-server /
# llama-perplexity), the
# checkpoints and their GGUF files. Nothing of llama.cpp is part of this repository. The first run
# takes ~25 minutes on 2 cores (the llama.cpp build); later runs reuse what is there.
#
# Usage: bench/llama_cpp_decode.sh [extra arguments of bench/llama_cpp_decode.py compare,
#        e.g. --runs 5 --prompt-repeat 50 --json FILE]
# Env: LLAMA_CPP_PYTHON_VERSION (default 0.3.36), LLAMA_CPP_DIR (an unpacked sdist to use instead
#      of build/llama-cpp-peer's), THREADS (default 2), CASES (default "mamba1-f32 mamba1-bf16
#      mamba2-f32 mamba2-bf16"; ARCH-WEIGHTS with ARCH mamba1, mamba2, mamba1-2.8b (an 11 GB f32
#      checkpoint, then an 11 GB f32 GGUF: quantized types only), granite-350m or falcon-h1-0.5b
#      and WEIGHTS f32, bf16, q8_0, q4_0, q4_k, q5_k or q6_k; the hybrids only as f32 / bf16, which ssmkit
#      reads from the checkpoint directory); BATCHES (e.g. "1,8": also decode at these batches on
#      each case's GGUF file, `ssmkit bench generate --model FILE` against llama-batched-bench,
#      bench/llama_cpp_decode.py batched; RUNS of them, default 3); LLAMA_NO_REPACK=1 (llama.cpp
#      without its weight repacking, where its repacked AMX path crashes: bench/llama_cpp_decode.py).
set -euo pipefail
cd "$(dirname "$0")/.."
version=${LLAMA_CPP_PYTHON_VERSION:-0.3.36}
threads=${THREADS:-2}
cases=${CASES:-mamba1-f32 mamba1-bf16 mamba2-f32 mamba2-bf16}
work=build/llama-cpp-peer
py=build/venv/bin/python
helper=bench/llama_cpp_decode.py

scripts/install_deps.sh
cmake --preset release >/dev/null
cmake --build --preset release -j2
scripts/python_venv.sh
"$py" -m pip install -q --disable-pip-version-check sentencepiece diskcache jinja2

# llama-cpp-python's sdist: its vendored llama.cpp (library, tools, converter) and its Python API.
sdist_dir=${LLAMA_CPP_DIR:-$work/llama_cpp_python-$version}
if [ ! -d "$sdist_dir" ]; then
  cache=${SSMKIT_CACHE:-$HOME/.cache/ssmkit}
  if [ ! -f "$cache/llama_cpp_python-$version.tar.gz" ]; then
    mkdir -p "$cache"
    "$py" -m pip download -q --disable-pip-version-check --no-deps --no-binary :all: \
      -d "$cache" "llama-cpp-python==$version"
  fi
  mkdir -p "$work"
  tar -xzf "$cache/llama_cpp_python-$version.tar.gz" -C "$work"
fi
llama=$sdist_dir/vendor/llama.cpp
bin=$llama/build/bin
if [ ! -x "$bin/llama-quantize" ] || [ ! -x "$bin/llama-batched-bench" ] || [ ! -f "$bin/libllama.so" ]; then
  cmake -S "$llama" -B "$llama/build" -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=ON -DLLAMA_CURL=OFF \
    -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_TESTS=OFF >/dev/null
  cmake --build "$llama/build" -j2 --target llama-bench llama-batched-bench llama-server llama-quantize \
    llama-perplexity llama-cli
fi
export PYTHONPATH="$sdist_dir${PYTHONPATH:+:$PYTHONPATH}" LLAMA_CPP_LIB_PATH="$bin"

# llama-quantize's names: the K-quants as its _M mixes (the files users download).
declare -A quant_names=([q8_0]=Q8_0 [q4_0]=Q4_0 [q4_k]=Q4_K_M [q5_k]=Q5_K_M [q6_k]=Q6_K)
compare=()
batched=()
for c in $cases; do
  arch=${c%-*} weights=${c##*-}
  dir=$work/$arch
  if [ "$arch" = mamba1-2.8b ]; then  # f32 only: its bf16 copy would be 5.5 GB more
    [ -f "$dir-f32/model.safetensors" ] || "$py" "$helper" checkpoint --arch "$arch" --out "$dir-f32"
  elif [ ! -f "$dir-f32/model.safetensors" ] || [ ! -f "$dir-bf16/model.safetensors" ]; then
    "$py" "$helper" checkpoint --arch "$arch" --out "$dir-f32" --bf16-out "$dir-bf16"
  fi
  case $weights in
    f32 | bf16)
      gguf=$work/$arch-$weights.gguf
      [ -f "$gguf" ] || "$py" "$helper" convert --llama-cpp "$llama" --outtype "$weights" --outfile "$gguf" "$dir-$weights"
      ours=$dir-$weights ;;
    *)
      name=${quant_names[$weights]:?"unknown weights '$weights' in CASES"}
      f32=$work/$arch-f32.gguf
      [ -f "$f32" ] || "$py" "$helper" convert --llama-cpp "$llama" --outtype f32 --outfile "$f32" "$dir-f32"
      gguf=$work/$arch-$weights.gguf
      [ -f "$gguf" ] || "$bin/llama-quantize" "$f32" "$gguf" "$name" "$threads" >/dev/null 2>&1
      ours=$gguf ;;
  esac
  compare+=(--case "$arch,$weights,$ours,$gguf")
  batched+=(--gguf "$gguf")
done
"$py" "$helper" compare --ssmkit build/release/ssmkit --threads "$threads" "${compare[@]}" "$@"
if [ -n "${BATCHES:-}" ]; then
  LD_LIBRARY_PATH="$bin" "$py" "$helper" batched --ssmkit build/release/ssmkit --threads "$threads" \
    --batched-bench "$bin/llama-batched-bench" --batches "$BATCHES" --runs "${RUNS:-3}" "${batched[@]}"
fi
