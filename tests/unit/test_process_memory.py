"""benchmarks/process_memory.py: which process is which in a local run's memory table."""

import subprocess
import sys

from benchmarks.process_memory import memory_table, ray_program, role_of, run_memory


def test_actor_titles_name_their_roles():
    assert role_of("ray::RolloutWorker") == "rollout"
    assert role_of("ray::Learner.update") == "learner"
    assert role_of("ray::EnvPool.score") == "env"
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
