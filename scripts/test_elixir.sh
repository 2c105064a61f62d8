#!/usr/bin/env bash
# The Elixir package's tests (bindings/elixir, ExUnit): Debian's elixir and erlang-dev (and make
# for the NIF), the release build installed into build/install (the NIF links that
# libssmkit.so, found by pkg-config), then mix test. Needs the release build (scripts/test.sh
# runs this after it); SSMKIT_CLI lets the generation test compare with the CLI itself.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install_deps.sh elixir erlang-dev make
cmake --install build/release --prefix build/install >/dev/null
export PKG_CONFIG_PATH="$PWD/build/install/lib/pkgconfig${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}"
export SSMKIT_CLI="$PWD/build/release/ssmkit"
cd bindings/elixir
mix format --check-formatted
MIX_ENV=test mix compile --warnings-as-errors
mix test "$@"
