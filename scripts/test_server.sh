#!/usr/bin/env bash
# The server's tests (tests/server, pytest): the official `openai` client against
# `ssmkit serve` with the built-in model on loopback (completions, chat, streaming, stop
# strings, seeds, errors, parity with `ssmkit generate`, batching invariance, a 64-client load
# test, client faults, SIGTERM), the same for the hybrid checkpoints of tests/fixtures/models
# (batching and the prefix cache with their KV rows), and the chat-template renderer against
# jinja2. Uses the venv scripts/test_python.sh makes (build/venv; created here when missing)
# and the release build.
set -euo pipefail
cd "$(dirname "$0")/.."
venv=build/venv
if [ ! -x "$venv/bin/python" ]; then
  python3 -m venv "$venv"
fi
"$venv/bin/python" -m pip install -q --disable-pip-version-check -r tests/server/requirements.txt
SSMKIT_BIN="$PWD/build/release/ssmkit" "$venv/bin/python" -m pytest -q tests/server "$@"
