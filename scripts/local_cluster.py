"""Stop the one-machine autoscaling cluster of cluster.local.yaml, and nothing else.

    python scripts/local_cluster.py stop /tmp/relay-local      # the head's --temp-dir

Ends every process of the Ray started with that --temp-dir: the head's daemons (GCS, raylet,
autoscaler, dashboard), the nodes the autoscaler added (their raylets name the head's session
folder), and every process they started (agents, actors, the drivers of submitted jobs).
`ray stop` would end them too, but also every other Ray on the machine: another cluster, or a
run started with a plain `python driver.py`.
"""

from __future__ import annotations

import os
import sys

# isort: off
import ray  # noqa: F401  (first: it puts its own psutil, in ray/thirdparty_files, on the path)
import psutil
# isort: on


def names_folder(cmdline: list[str], folder: str) -> bool:
    """Whether a command line names `folder` or a path inside it (not /tmp/relay-local2 for /tmp/relay-local)."""
    return any(arg == folder or arg.endswith("=" + folder) or folder + "/" in arg for arg in cmdline)


def cluster_processes(temp_dir: str) -> list[psutil.Process]:
    """The processes whose command line names `temp_dir`, with all their descendants (Ray renames
    its workers `ray::...`, so only their ancestors name the folder); never this process or its
    ancestors (the shell that ran this script names the folder too)."""
    folder = os.path.realpath(temp_dir)
    me = psutil.Process()
    spared = {me.pid, *(p.pid for p in me.parents())}
    found: dict[int, psutil.Process] = {}
    for proc in psutil.process_iter(["cmdline"]):
        if proc.pid not in spared and names_folder(proc.info["cmdline"] or [], folder):
            found[proc.pid] = proc
            try:
                found.update((child.pid, child) for child in proc.children(recursive=True))
            except psutil.NoSuchProcess:
                pass
    return [p for pid, p in found.items() if pid not in spared]


def stop(temp_dir: str, grace_s: float = 10.0) -> int:
    """SIGTERM every process of the cluster, SIGKILL what is left after `grace_s`; returns how many there were."""
    procs = cluster_processes(temp_dir)
    for proc in procs:
        try:
            proc.terminate()
        except psutil.NoSuchProcess:
            pass
    _, alive = psutil.wait_procs(procs, timeout=grace_s)
    for proc in alive:
        try:
            proc.kill()
        except psutil.NoSuchProcess:
            pass
    psutil.wait_procs(alive, timeout=5)
    return len(procs)


def main(argv: list[str]) -> int:
    if len(argv) != 2 or argv[0] != "stop":
        print(__doc__.strip(), file=sys.stderr)
        return 2
    if not os.path.isdir(argv[1]):
        print(f"relay: {argv[1]} is not a folder: give the head's --temp-dir", file=sys.stderr)
        return 1
    print(f"relay: stopped {stop(argv[1])} processes of the cluster in {argv[1]}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
