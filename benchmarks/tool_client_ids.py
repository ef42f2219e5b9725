"""A good tool-server client beside a hostile one on the same host: its 429s and its waits.

    python benchmarks/tool_client_ids.py [--before REV] [--run-s 1.0] [--slots 2]

The server is relay.tools.server.ToolServer on 127.0.0.1 with a stand-in sandbox whose runs
sleep (code "sleep <s>"), so the numbers are queueing, not CPU. Two cases:

  spoof       the hostile caller sends 6 runs of --run-s * 3 as `X-Relay-Client: worker-7`
              (unsigned) with max_waiting_per_client=4; then the real worker-7 (signed) sends 1
              short run. Printed: its HTTP status and seconds.
  fresh ids   the hostile caller sends 24 runs of --run-s, each under a fresh id; the good
              client (signed) then sends 4 short runs at once. Printed: its slowest wait.

--before REV runs the same against the tool server of git revision REV (extracted to a temporary
folder, never checked out), where ids were taken on trust, so a fix prints its before and after.
"""

from __future__ import annotations

import argparse
import http.client
import inspect
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SECRET = b"benchmark secret, 16+ characters"


def child(run_s: float, slots: int) -> dict:
    import hashlib
    import hmac

    from relay.config import ToolServerConfig
    from relay.tools.sandbox import SandboxResult
    from relay.tools.server import ToolServer

    def runner(code: str) -> SandboxResult:
        time.sleep(float(code.split()[1]))
        return SandboxResult(code, "", 0)

    def signed(client: str) -> dict:  # what relay.tools.client_auth.sign computes; a revision without it ignores it
        mac = hmac.new(SECRET, b"relay tool client id\0" + client.encode(), hashlib.sha256).hexdigest()
        return {"X-Relay-Client": client, "X-Relay-Signature": mac}

    def make(**kw) -> ToolServer:
        cfg = ToolServerConfig(port=0, max_concurrency=slots, **kw)
        extra = {"secret": SECRET} if "secret" in inspect.signature(ToolServer).parameters else {}
        return ToolServer(cfg, runner=runner, **extra).start()

    def post(server, code: str, headers: dict) -> tuple[int, float]:
        t0 = time.monotonic()
        conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=120)
        try:
            conn.request("POST", "/execute", json.dumps({"code": code}), headers)
            resp = conn.getresponse()
            resp.read()
            return resp.status, time.monotonic() - t0
        finally:
            conn.close()

    def background(server, code: str, headers: dict, out: list) -> threading.Thread:
        t = threading.Thread(target=lambda: out.append(post(server, code, headers)))
        t.start()
        return t

    def settle(server, waiting: int) -> None:
        end = time.monotonic() + 10
        while server.health()["waiting"] + server.health()["running"] < waiting and time.monotonic() < end:
            time.sleep(0.01)

    results = {}
    server = make(max_waiting_per_client=4)
    hostile: list = []
    threads = [background(server, f"sleep {3 * run_s}", {"X-Relay-Client": "worker-7"}, hostile) for _ in range(6)]
    settle(server, 6)
    status, seconds = post(server, "sleep 0.05", signed("worker-7"))
    results["spoof"] = {"status": status, "seconds": round(seconds, 2)}
    for t in threads:
        t.join()
    server.stop()

    server = make()
    hostile = []
    threads = [background(server, f"sleep {run_s}", {"X-Relay-Client": f"fresh-{i}"}, hostile) for i in range(24)]
    settle(server, 24)
    good: list = []
    mine = [background(server, "sleep 0.05", signed("worker-1"), good) for _ in range(4)]
    for t in [*threads, *mine]:
        t.join()
    results["fresh ids"] = {
        "statuses": sorted(s for s, _ in good),
        "slowest_s": round(max(s for _, s in good), 2),
        "hostile_last_s": round(max(s for _, s in hostile), 2),
    }
    server.stop()
    return results


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--before", metavar="REV", help="also run against the tool server of this git revision")
    ap.add_argument("--run-s", type=float, default=1.0, help="seconds of one hostile run")
    ap.add_argument("--slots", type=int, default=2)
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        print(json.dumps(child(args.run_s, args.slots)))
        return
    with tempfile.TemporaryDirectory() as tmp:
        sources = {"now": str(REPO)}
        if args.before:
            archive = subprocess.run(["git", "-C", str(REPO), "archive", args.before, "relay"], capture_output=True)
            archive.check_returncode()
            subprocess.run(["tar", "-x", "-C", tmp], input=archive.stdout, check=True)
            sources = {args.before[:10]: tmp, **sources}
        for name, root in sources.items():
            env = {**os.environ, "PYTHONPATH": root, "RELAY_TOOL_SECRET": ""}
            cmd = [sys.executable, __file__, "--child", "--run-s", str(args.run_s), "--slots", str(args.slots)]
            out = subprocess.run(cmd, env=env, capture_output=True, text=True, cwd=root)
            if out.returncode:
                sys.exit(out.stderr)
            print(f"{name:>12}: {out.stdout.strip()}")


if __name__ == "__main__":
    main()
