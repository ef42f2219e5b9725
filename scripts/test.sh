#!/usr/bin/env bash
# Set up (idempotent) and run the test suite. GPU tests run only where a GPU is present.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
# Each test process compiles bytecode once instead of re-reading torch's sources every run.
export PYTHONDONTWRITEBYTECODE=
exec .venv/bin/python -m pytest -q "$@"
