"""benchmarks/process_memory.py: which process is which in a local run's memory table."""

import os
import subprocess
import sys
import time

import psutil

from benchmarks.process_memory import PeakTreeMemory, memory_table, ray_program, role_of, run_memory


def test_actor_titles_name_their_roles():
    assert role_of("ray::RolloutWorker") == "rollout"
    assert role_of("ray::Learner.update") == "learner"
    assert role_of("ray::EnvPool.score") == "env"
    assert role_of("ray::ColocatedWorker.rollout") == "learner+rollout"
    assert role_of("ray::IDLE") is None and role_of("/usr/bin/python") is None


def test_ray_processes_get_short_names():
    assert ray_program(["/venv/lib/python3.11/site-packages/ray/core/src/ray/gcs/gcs_server", "--x"]) == "gcs_server"
    assert ray_program(["/venv/bin/python", "-u", "/venv/lib/ray/dashboard/agent.py", "--a"]) == "agent.py"
    assert ray_program(["ray::IDLE"]) == "ray::IDLE"


def test_the_table_counts_the_driver_and_its_children():
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        rows = run_memory()
        assert rows[0].kind == "driver" and any(r.pid == child.pid and r.kind == "ray" for r in rows)
        table = memory_table(rows)
        assert "total, all processes" in table and f"pid {child.pid}" in table
    finally:
        child.kill()
        child.wait()


def test_the_tree_peak_counts_a_child_once_by_pss():
    """Two processes share the interpreter's pages: the PSS sum splits them, the RSS sum counts them twice."""
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        with PeakTreeMemory(os.getpid(), every_s=0.01) as peak:
            while peak.rss == 0:  # at least one whole sample of the tree
                time.sleep(0.01)
        alone = psutil.Process(os.getpid()).memory_full_info()
        assert peak.rss > alone.rss and 0 < peak.pss < peak.rss
    finally:
        child.kill()
        child.wait()
