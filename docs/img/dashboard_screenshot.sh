#!/usr/bin/env bash
# Takes docs/img/dashboard_actors.png: the Ray dashboard's Actors page 10 steps into the default run
# with separate actors (resources.colocate=false: a RolloutWorker and a Learner; without it, the
# default run's one ColocatedWorker)
# (headless Debian chromium: apt-get install -y chromium). Token authentication is turned off for
# this local run only, so the headless browser needs no login.
set -euo pipefail
cd "$(dirname "$0")/../.."
log=$(mktemp)
RAY_AUTH_MODE=disabled .venv/bin/python driver.py run.name=dashboard-shot resources.dashboard=true \
    resources.colocate=false training.steps=200 checkpoint.every=0 >"$log" 2>&1 &
run=$!
trap 'kill -INT $run 2>/dev/null || true; wait $run 2>/dev/null || true; rm -f "$log"' EXIT
until grep -q '^step 10/' "$log"; do
    kill -0 $run 2>/dev/null || { cat "$log"; exit 1; }
    sleep 2
done
chromium --headless --no-sandbox --disable-gpu --hide-scrollbars --window-size=1130,640 \
    --virtual-time-budget=20000 --screenshot=docs/img/dashboard_actors.png 'http://127.0.0.1:8265/#/actors'
