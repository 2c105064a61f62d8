#!/usr/bin/env bash
# Sourced by run.sh: unpacks the Debian packages carried in .deps/ (prepare.sh downloads them)
# into /tmp/ssmkit-deps, outside /, and exports what CMake and the loader need to find them.
# The lent GPU machine has nvcc, CMake, ninja and a C++ compiler but not ssmkit's libraries
# (Highway, OpenBLAS, GoogleTest, CLI11, nlohmann-json, ICU), and cannot download them.
deps_root=/tmp/ssmkit-deps
if compgen -G ".deps/*.deb" > /dev/null; then
  mkdir -p "$deps_root"
  for deb in .deps/*.deb; do dpkg -x "$deb" "$deps_root"; done
  lib="$deps_root/usr/lib/x86_64-linux-gnu"
  export CMAKE_PREFIX_PATH="$deps_root/usr${CMAKE_PREFIX_PATH:+:$CMAKE_PREFIX_PATH}"
  export LD_LIBRARY_PATH="$lib:$lib/openblas-pthread${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  # libopenblas.so is an alternatives link in Debian, dangling when unpacked by hand.
  SSMKIT_DEPS_CMAKE_ARGS=(-DBLAS_LIBRARIES="$lib/openblas-pthread/libopenblas.so"
                          -DCMAKE_CXX_FLAGS="-O3 -isystem $deps_root/usr/include")
else
  SSMKIT_DEPS_CMAKE_ARGS=()
fi
