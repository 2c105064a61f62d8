#!/usr/bin/env bash
# Installs the Debian 12 packages ssmkit builds with, and any named as arguments, only those
# missing. A package named PKG:ARCH (scripts/test_arm64.sh's libhwy-dev:arm64) is another
# architecture's: ARCH is added to dpkg's foreign architectures first.
set -euo pipefail
packages=(g++ cmake ninja-build pkg-config libhwy-dev libgtest-dev libgmock-dev libcli11-dev
          nlohmann-json3-dev libopenblas-dev libicu-dev clang-format ccache)
packages+=(libcpp-httplib-dev)  # ssmkit serve (src/server)
packages+=(python3 python3-venv python3-dev)  # the Python package and its tests
packages+=("$@")  # extra packages a caller needs (e.g. scripts/make_corpus.sh's corpus)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "installing: ${missing[*]}"
  sudo_cmd=()
  [ "$(id -u)" -ne 0 ] && sudo_cmd=(sudo)
  for p in "${missing[@]}"; do
    arch=${p##*:}
    if [ "$arch" != "$p" ] && ! dpkg --print-foreign-architectures | grep -qx "$arch"; then
      "${sudo_cmd[@]}" dpkg --add-architecture "$arch"
    fi
  done
  "${sudo_cmd[@]}" apt-get update -qq
  DEBIAN_FRONTEND=noninteractive "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
