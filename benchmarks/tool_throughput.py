"""Sandboxed code runs per second and latency through the tool server, at 1, 8 and 64 concurrent calls.

    python benchmarks/tool_throughput.py [--requests 128] [--slots 0] [--concurrency 1 8 64]

Starts `python -m relay.tools.server` on a free loopback port (as a separate process, as in a
deployment), sends `--requests` snippets per concurrency level from that many client threads,
and prints runs/s and p50/p99 latency (client-side, request sent to answer received). With
more concurrent calls than server slots (default: two per CPU core) the rest wait in line, so
latency grows while throughput stays at what the slots can run. The first row is the sandbox
alone (run_code in this process, no HTTP) for reference. Needs root (cgroups) and bubblewrap.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from relay.tools.sandbox import SandboxConfig, run_code, sandbox_available  # noqa: E402

SNIPPET = "import math\nprint(sum(math.isqrt(i) for i in range(20000)))"


def post(url: str, code: str) -> float:
    t0 = time.perf_counter()
    req = urllib.request.Request(
        url + "/execute",
        data=json.dumps({"code": code}).encode(),
        headers={"Content-Type": "application/json"},
        method="POST",
    )
    with urllib.request.urlopen(req, timeout=120) as resp:
        body = json.loads(resp.read())
    assert body["ok"], body
    return time.perf_counter() - t0


def pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(q * (len(xs) - 1))))]


def row(label: str, conc: int, slots: str, n: int, wall: float, lat: list[float]) -> str:
    return (
        f"{label:<14}{conc:>6}{slots:>7}{n:>9}{n / wall:>10.1f}{statistics.median(lat) * 1e3:>10.1f}"
        f"{pct(lat, 0.99) * 1e3:>10.1f}"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--requests", type=int, default=128, help="requests per concurrency level")
    ap.add_argument("--slots", type=int, default=0, help="server --max-concurrency (0: two per CPU core)")
    ap.add_argument("--concurrency", type=int, nargs="+", default=[1, 8, 64])
    a = ap.parse_args()
    ok, why = sandbox_available()
    if not ok:
        sys.exit(f"sandbox unavailable: {why}")

    print(f"# {os.cpu_count()} CPU cores; snippet: {SNIPPET!r}")
    print(f"{'path':<14}{'conc':>6}{'slots':>7}{'requests':>9}{'runs/s':>10}{'p50 ms':>10}{'p99 ms':>10}")

    cfg = SandboxConfig()
    run_code(SNIPPET, cfg)  # warm-up
    lat = []
    t0 = time.perf_counter()
    for _ in range(min(a.requests, 64)):
        t = time.perf_counter()
        assert run_code(SNIPPET, cfg).ok
        lat.append(time.perf_counter() - t)
    print(row("run_code", 1, "-", len(lat), time.perf_counter() - t0, lat))

    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "relay.tools.server",
            "--port",
            "0",
            "--max-concurrency",
            str(a.slots),
            "--log-level",
            "WARNING",
        ],
        cwd=REPO,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        line = proc.stdout.readline()
        m = re.search(r"listening on (\S+) \(sandbox=\w+, slots=(\d+)\)", line)
        if not m:
            sys.exit(f"server did not start: {line!r}")
        url, slots = m.group(1), m.group(2)
        post(url, SNIPPET)  # warm-up
        for conc in a.concurrency:
            with ThreadPoolExecutor(conc) as pool:
                t0 = time.perf_counter()
                lat = list(pool.map(lambda _: post(url, SNIPPET), range(a.requests)))
                wall = time.perf_counter() - t0
            print(row("tool server", conc, slots, a.requests, wall, lat))
    finally:
        proc.terminate()
        proc.wait(timeout=60)
        proc.stdout.close()


if __name__ == "__main__":
    main()
