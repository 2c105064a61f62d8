#!/usr/bin/env bash
# Run ON THE GPU MACHINE, in one device call before run.sh (the peers' CUDA extensions take
# minutes to compile, too long to share run.sh's 10 minutes):
#   command: bash bench/device/build_peers.sh      carry: [".whl"]
# Builds wheels from the sdists in .whl/src against the image's torch, for sm_90 only, and
# leaves them in $OUT (split into 15 MiB parts when larger: the tool returns files of at most
# 16 MiB). Back here: cat each wheel's parts together into .whl/ (README.md).
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/ssmkit-out}
mkdir -p "$OUT" /tmp/wheels
export TORCH_CUDA_ARCH_LIST=9.0 MAX_JOBS=$(nproc)
# Build locally instead of looking for prebuilt wheels (no network there).
export MAMBA_FORCE_BUILD=TRUE MAMBA_KEEP_CUDA_BUILD=TRUE CAUSAL_CONV1D_FORCE_BUILD=TRUE
python3 -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda)"
for sdist in .whl/src/causal_conv1d-*.tar.gz .whl/src/mamba_ssm-*.tar.gz; do
  echo "== $sdist"
  timeout 560 python3 -m pip wheel --no-deps --no-build-isolation --no-index -w /tmp/wheels "$sdist" \
    > "$OUT/$(basename "$sdist").log" 2>&1 || { echo "failed:"; tail -20 "$OUT/$(basename "$sdist").log"; }
done
cd /tmp/wheels
for w in *.whl; do
  if [ "$(stat -c %s "$w")" -gt $((15 * 1024 * 1024)) ]; then
    split -b 15M -d "$w" "$OUT/$w.part"
  else
    cp "$w" "$OUT/"
  fi
done
ls -la "$OUT"
