#!/usr/bin/env bash
# Set up (idempotent) and run the test suite's default tier (every test not marked slow; pyproject.toml).
# GPU tests run only where a GPU is present. `bash scripts/test.sh -m slow` runs the slow tier.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
# Each test process compiles bytecode once instead of re-reading torch's sources every run.
export PYTHONDONTWRITEBYTECODE=
.venv/bin/ruff check --quiet .  # lint (pyproject.toml [tool.ruff]): fails the run before the tests start
# -n 2 --dist loadfile: two pytest processes, each taking whole files (a file's tests share its
# fixtures and its local Ray). Much of a test's wall time is a Ray or driver process starting, or a
# run waiting on one actor, so one process alone keeps about one of two cores busy.
# --durations: the slowest tests are named in every CI log, so the default tier's cost stays visible.
exec .venv/bin/python -m pytest -q -n 2 --dist loadfile --durations=25 "$@"
