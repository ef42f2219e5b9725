"""Resident memory of a local relay run, per process: the driver, each actor named by its role,
and Ray's own processes (GCS, raylet, agents, idle workers). Read with psutil while the run's
actors are alive; benchmarks print it, nothing asserts on it.

RSS counts a shared library's pages once in every process that maps them; PSS splits shared
pages between their processes, so PSS totals add up to what the machine holds.
"""

from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass

import psutil

# Ray titles an actor's process `ray::<Class>` (idle) or `ray::<Class>.<method>` (busy).
ROLES = {
    "RolloutWorker": "rollout",
    "Learner": "learner",
    "ColocatedWorker": "learner+rollout",  # resources.colocate (actors/colocated.py)
    "Reference": "reference",
    "Critic": "critic",
    "EnvPool": "env",
    "ToolExecutor": "tools",
}


@dataclass
class ProcessMemory:
    pid: int
    kind: str  # driver | actor | ray
    name: str  # the role for actors (rollout, learner, ...), the program for Ray's processes
    rss_mb: float
    peak_rss_mb: float  # VmHWM: the highest RSS the process reached
    pss_mb: float


def role_of(title: str) -> str | None:
    """The relay role of a process titled `title` (its first cmdline word), None if not an actor."""
    if not title.startswith("ray::"):
        return None
    return ROLES.get(title[len("ray::") :].split(".")[0].split(":")[0].split(" ")[0])


def ray_program(cmdline: list[str]) -> str:
    """A short name for one of Ray's own processes: gcs_server, raylet, agent.py, ray::IDLE, ..."""
    if cmdline and cmdline[0].startswith("ray::"):
        return cmdline[0]
    scripts = [os.path.basename(a) for a in cmdline if a.endswith(".py")]
    return scripts[0] if scripts else os.path.basename(cmdline[0]) if cmdline else "?"


def _peak_rss_mb(pid: int) -> float:
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return float("nan")


def _measure(proc: psutil.Process, kind: str, name: str) -> ProcessMemory:
    try:
        full = proc.memory_full_info()
        rss, pss = full.rss, getattr(full, "pss", float("nan"))
    except psutil.AccessDenied:
        rss, pss = proc.memory_info().rss, float("nan")
    return ProcessMemory(proc.pid, kind, name, rss / 2**20, _peak_rss_mb(proc.pid), pss / 2**20)


def run_memory(driver_pid: int | None = None) -> list[ProcessMemory]:
    """The driver and every process it started: a Ray that ray.init started locally (GCS, raylet,
    agents, workers) descends from the driver, so other runs on the same machine are left out."""
    driver = psutil.Process(driver_pid or os.getpid())
    found = [_measure(driver, "driver", "driver")]
    for proc in driver.children(recursive=True):
        try:
            cmdline = proc.cmdline()
            role = role_of(cmdline[0] if cmdline else "")
            found.append(_measure(proc, "actor", role) if role else _measure(proc, "ray", ray_program(cmdline)))
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
    return found


def memory_table(rows: list[ProcessMemory]) -> str:
    """One line per process, then the totals per kind and overall."""
    lines = [f"{'process':<34}{'RSS MB':>9}{'peak MB':>9}{'PSS MB':>9}"]
    order = {"driver": 0, "actor": 1, "ray": 2}
    for r in sorted(rows, key=lambda r: (order[r.kind], r.name, r.pid)):
        label = f"{r.kind}: {r.name} (pid {r.pid})"
        lines.append(f"{label:<34}{r.rss_mb:>9,.0f}{r.peak_rss_mb:>9,.0f}{r.pss_mb:>9,.0f}")
    for kind in ("driver", "actor", "ray"):
        part = [r for r in rows if r.kind == kind]
        lines.append(
            f"{'total ' + kind + ' (' + str(len(part)) + ')':<34}{sum(r.rss_mb for r in part):>9,.0f}"
            f"{sum(r.peak_rss_mb for r in part):>9,.0f}{sum(r.pss_mb for r in part):>9,.0f}"
        )
    lines.append(
        f"{'total, all processes':<34}{sum(r.rss_mb for r in rows):>9,.0f}"
        f"{sum(r.peak_rss_mb for r in rows):>9,.0f}{sum(r.pss_mb for r in rows):>9,.0f}"
    )
    return "\n".join(lines)


class PeakTreeMemory:
    """The peaks of the RSS sum and of the PSS sum over a process and everything below it, sampled
    every `every_s` seconds in a thread while the `with` block runs (bytes: .rss, .pss)."""

    def __init__(self, pid: int, every_s: float = 0.1):
        self.root, self.every_s, self.rss, self.pss = psutil.Process(pid), every_s, 0, 0
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._sample, daemon=True)

    def __enter__(self) -> PeakTreeMemory:
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.done.set()
        self.thread.join()

    def _sample(self) -> None:
        while not self.done.is_set():
            rss = pss = 0
            try:
                tree = [self.root, *self.root.children(recursive=True)]
            except psutil.NoSuchProcess:
                return
            for proc in tree:
                try:
                    full = proc.memory_full_info()  # PSS from /proc/<pid>/smaps_rollup
                    rss, pss = rss + full.rss, pss + full.pss
                except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
                    pass  # ended between listing and reading
            self.rss, self.pss = max(self.rss, rss), max(self.pss, pss)
            time.sleep(self.every_s)
