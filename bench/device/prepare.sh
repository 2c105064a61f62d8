#!/usr/bin/env bash
# Run HERE (the CPU machine), once, before the device calls: fills the two folders that
# run.sh and build_peers.sh carry to the lent GPU machine.
#   .deps/       Debian packages of the libraries ssmkit builds with (~14 MB), unpacked there
#                into /tmp by deps.sh (the GPU image has the compilers but not these).
#   .whl/src/    the peers' source distributions from PyPI (mamba-ssm, causal-conv1d), which
#                build_peers.sh turns into wheels on the GPU machine.
# Both folders are git-ignored and travel only when named in the call's `carry`.
# pip can only fetch an sdist after running its setup.py, which imports torch: a virtual
# environment under build/ gets PyPI's torch (a few GB) for that alone.
set -euo pipefail
cd "$(dirname "$0")/../.."
MAMBA_VERSION=${MAMBA_VERSION:-2.3.2.post1}
CONV_VERSION=${CONV_VERSION:-1.7.0}

mkdir -p .deps .whl/src
(cd .deps && apt-get download libhwy-dev libhwy1 libgtest-dev libcli11-dev nlohmann-json3-dev \
   libopenblas-dev libopenblas-pthread-dev libopenblas0-pthread libgfortran5 libquadmath0 \
   libicu-dev libicu72 libcpp-httplib-dev libcpp-httplib0.11 libbrotli-dev libbrotli1)

venv=build/peer-venv
[ -x "$venv/bin/python" ] || python3 -m venv "$venv"
"$venv/bin/pip" install -q torch setuptools wheel packaging ninja
MAMBA_SKIP_CUDA_BUILD=TRUE CAUSAL_CONV1D_SKIP_CUDA_BUILD=TRUE \
  "$venv/bin/pip" download --no-deps --no-binary :all: --no-build-isolation -d .whl/src \
  "mamba-ssm==$MAMBA_VERSION" "causal-conv1d==$CONV_VERSION"
ls -la .deps .whl/src
