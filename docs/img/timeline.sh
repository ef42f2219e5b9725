#!/usr/bin/env bash
# Draws docs/img/timeline_sync.png and docs/img/timeline_async.png: 8 steps of the default run in
# training.mode sync and async (python -m relay.run.plot --timeline), the runs in a temporary folder.
set -euo pipefail
cd "$(dirname "$0")/../.."
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
for mode in sync async; do
    .venv/bin/python driver.py run.output_dir="$out" run.name="timeline-$mode" training.mode="$mode" training.steps=8
    .venv/bin/python -m relay.run.plot --timeline "$out/timeline-$mode" -o "docs/img/timeline_$mode.png"
done
