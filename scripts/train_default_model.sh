#!/usr/bin/env bash
# Trains the default model shipped in models/default: a byte-level Mamba-2 ("small": d_model
# 256, 6 layers, N 64, 2.66M parameters) on the King James Bible from Debian's bible-kjv-text
# (scripts/make_corpus.sh). One thread: the run is meant to share a 2-core machine. Rerunning
# the script resumes an interrupted run from its last checkpoint (every 100 steps) and, once
# training is done, copies config.json and model.safetensors into models/default.
# docs/default_model.md records the run this produced.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install_deps.sh
scripts/make_corpus.sh build/corpus/kjv.txt
cmake --preset release >/dev/null
cmake --build --preset release --target ssmkit_cli
# A private copy of the binary, so that rebuilding during a long run does not touch it.
mkdir -p build/train-bin
cp build/release/ssmkit build/train-bin/ssmkit.new && mv build/train-bin/ssmkit.new build/train-bin/ssmkit
out=build/default-model-run
./build/train-bin/ssmkit --threads 1 train --data build/corpus/kjv.txt --out "$out" \
  --arch mamba2 --size small --steps 1200 --batch 16 --seqlen 256 \
  --lr 3e-3 --min-lr 2e-4 --warmup 80 --weight-decay 0.1 --clip 1.0 --seed 1 \
  --eval-every 200 --eval-windows 200 --save-every 100 --resume
mkdir -p models/default
cp "$out/config.json" "$out/model.safetensors" models/default/
cp "$out/log.tsv" docs/default_model_log.tsv
echo "models/default updated from $out"
