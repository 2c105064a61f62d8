#!/usr/bin/env bash
# Run ON THE GPU MACHINE, in one device call before run.sh (the peers' CUDA extensions take
# minutes to compile, too long to share run.sh's 10 minutes):
#   command: bash bench/device/build_peers.sh      carry: [".whl"]
# Builds wheels from the sdists in .whl/src against the image's torch, for sm_90 only, and
# leaves them in $OUT (split into 15 MiB parts when larger: the tool returns files of at most
# 16 MiB). Back here: cat each wheel's parts together into .whl/ (README.md).
# Both setup.py files append -gencode flags for nine architectures (sm_75 .. sm_121) whatever
# TORCH_CUDA_ARCH_LIST says, which would take far longer than a call and give wheels too big
# to carry: keep90.py rewrites each of those appends to `pass` except sm_90's, in the unpacked
# copy in /tmp (the build configuration only; no source file of the peers is changed).
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/ssmkit-out}
mkdir -p "$OUT" /tmp/wheels
# mamba-ssm's ~13 CUDA files take minutes each (its backward instantiations): all of them at
# once, so the build takes about as long as the slowest file; causal-conv1d's few are quick.
export TORCH_CUDA_ARCH_LIST=9.0
mamba_jobs=$(nproc) conv_jobs=$(( $(nproc) / 4 > 1 ? $(nproc) / 4 : 1 ))
# causal-conv1d alone (a call about conv1d carries only its sdist) takes every core.
compgen -G ".whl/src/mamba_ssm-*.tar.gz" > /dev/null || conv_jobs=$(nproc)
# Build locally instead of looking for prebuilt wheels (no network there).
export MAMBA_FORCE_BUILD=TRUE MAMBA_KEEP_CUDA_BUILD=TRUE CAUSAL_CONV1D_FORCE_BUILD=TRUE
python3 -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda)"
rm -rf /tmp/peer-src && mkdir -p /tmp/peer-src
for sdist in .whl/src/causal_conv1d-*.tar.gz .whl/src/mamba_ssm-*.tar.gz; do
  tar xzf "$sdist" -C /tmp/peer-src
done
python3 bench/device/keep90.py /tmp/peer-src/*/setup.py
# Both in parallel (each uses MAX_JOBS compile jobs; the machine has 16 cores).
for dir in /tmp/peer-src/*/; do
  name=$(basename "$dir")
  echo "== $name"
  case $name in mamba*) jobs=$mamba_jobs ;; *) jobs=$conv_jobs ;; esac
  (MAX_JOBS=$jobs timeout 560 python3 -m pip wheel --no-deps --no-build-isolation --no-index -w /tmp/wheels "$dir" \
     > "$OUT/$name.log" 2>&1 || { echo "$name failed:"; tail -20 "$OUT/$name.log"; }) &
done
wait
cd /tmp/wheels
for w in *.whl; do
  if [ "$(stat -c %s "$w")" -gt $((15 * 1024 * 1024)) ]; then
    split -b 15M -d "$w" "$OUT/$w.part"
  else
    cp "$w" "$OUT/"
  fi
done
ls -la "$OUT"
