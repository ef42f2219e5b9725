"""The elastic rollout pool on a one-machine autoscaling cluster, with whole nodes lost mid-step.

    python benchmarks/elastic.py [--steps 12] [--seed 0] [--no-env-kill] [--no-learner-kill]

A head and Ray's autoscaler on the fake multi-node provider (scripts/local_cluster.py: every node a
real raylet on this machine, its CPUs logical), with up to 4 worker nodes: rollout nodes of 2 CPUs
(one rollout worker each), an environment node (the EnvPool that scores every episode,
task.reward_actor) and the learner's node (`learner_node`, resources.learner.node_resource), of
which the autoscaler keeps one up (min_workers 1), as a cluster keeps its training node. The tiny
default task trains with `resources.rollout.count={min: 1, max: 2}` and a reward that takes 0.1 s
an episode (tests/e2e/elastic_rewards.py), so rollout holds each step up and the pool asks for a
second node.

Two runs on the same cluster with the same seeds: `calm`, undisturbed, then `disturbed`. In both,
once the pool first asks for a second worker the loop waits (in its per-step report) until that
worker is up, so it joins after the same step in both runs and their pools, seeds and rewards match
step for step until the pools part. In `disturbed`, once the added worker has rolled out a step:
  1. the node holding the environment pool is killed a third of a rollout into the next step: its
     raylet and every process under it (SIGKILL), so every actor on it dies at once, as when a
     machine fails (not with --no-env-kill);
  2. then, in the step after, the added rollout worker's node is killed the same way;
  3. then, in the step after, the learner's node (not with --no-learner-kill): the run waits for the
     autoscaler's replacement node, and the learner is restored there from its last checkpoint plus
     the updates since (relay_trainer/learner_recovery.py).
Before the first run and after each, the benchmark waits for the autoscaler's own report (the
dashboard's /api/cluster_status, what `ray status` prints) to list the head and the learner node
alone: idle nodes go back, the learner's stays.

Everything counted is read from records: the GCS node and actor tables (nodes added and removed,
which node each worker ran on, when a node joined) and the run folder (benchmarks/elastic_records.py:
each step's trained episodes by group from samples/, each worker's first rollout from
metrics.jsonl, the learner's restores from its faults/learner_restores). One line per run, then the
summary line. Numbers, never assertions.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
# The cluster below runs with token authentication (its own token, set once it is up); Ray reads
# the mode when it is imported, the token when this process first joins.
os.environ["RAY_AUTH_MODE"] = "token"
os.environ.pop("RAY_AUTH_TOKEN", None)

import psutil  # noqa: E402
import ray  # noqa: E402
import yaml  # noqa: E402

from benchmarks.elastic_records import (  # noqa: E402
    comparable_steps,
    first_rollouts,
    lost_and_duplicated,
    pool_at_start,
    read_metrics,
    same_rewards,
    step_episodes,
)
from relay.config import load_config  # noqa: E402
from relay_trainer import loop  # noqa: E402
from scripts.local_cluster import HEAD, REPO, active_types, camel, gcs_nodes, get, start, stop  # noqa: E402

IDLE_TIMEOUT_S = 12  # the autoscaler's idle timeout: short, so the nodes' going back is seen
PROMPTS, N = 4, 4  # a step: 4 prompts x 4 episodes, split over the rolling workers
# what the autoscaler keeps with no run asking for more: the head and one learner node (min_workers)
KEPT = {HEAD: 1, camel("learner_worker"): 1}
RUN_ARGS = [
    "resources.rollout.count={min: 1, max: 2}",
    "resources.rollout.cpus=2",  # a rollout node holds one worker
    "resources.learner.node_resource=learner_node",  # on a node of its own, which a kill can take
    "resources.env={count: 1, cpus: 1, node_resource: env_node}",
    "task.reward_fn=tests.e2e.elastic_rewards:slow_arithmetic",
    "task.reward_actor=true",  # scored in the environment pool: a node kill there loses shards too
    "resources.max_restarts=-1",
    f"training.prompts_per_step={PROMPTS}", f"rollout.n={N}", "task.num_eval_rows=4",
    # a learner lost with its node is restored from the last checkpoint plus the updates kept since:
    # a checkpoint every 4 steps bounds that replay, as a real run's checkpoint.every does
    "training.eval_before=false", "checkpoint.every=4", "checkpoint.save_hf_model=false",
    "logging.samples_every=1", "logging.samples_per_write=1000",  # every trained episode, every step
]  # fmt: skip


def cluster_config() -> dict:
    """cluster.local.yaml with this benchmark's node types: rollout nodes, an environment node and a learner node."""
    config = yaml.safe_load((REPO / "cluster.local.yaml").read_text())
    # the fake provider, but a node whose raylet is killed is reported gone, as a cloud's would be:
    # the autoscaler replaces it instead of waiting on it as a node still starting
    config["provider"].update(type="external", module="scripts.local_provider.LocalProvider")
    config["max_workers"] = 4  # 2 rollout, 1 environment, 1 learner
    head = config["available_node_types"][HEAD]
    config["available_node_types"] = {
        HEAD: head,
        "rollout_worker": {"resources": {"CPU": 2, "rollout_node": 1}, "node_config": {}, "max_workers": 3},
        "env_worker": {"resources": {"CPU": 1, "env_node": 1}, "node_config": {}, "max_workers": 2},
        # one CPU: the learner's (resources.learner.cpus), so no unlabelled actor lands beside it; up
        # before a run asks for it, and replaced when killed, as min_workers asks
        "learner_worker": {"resources": {"CPU": 1, "learner_node": 1}, "node_config": {}, "min_workers": 1, "max_workers": 1},
    }
    return config


@dataclass
class Kill:
    what: str  # "rollout-1's node", "env-0's node", "learner-0's node"
    node: str
    step: int  # the step it was aimed at; `describe` reads the step it landed in from the run's timeline
    at: float  # unix time
    processes: int


def node_of(run: str, actor: str) -> str | None:
    """The node an actor of the run is on now (GCS actor table), None if it is not alive."""
    for entry in ray._private.state.state.actor_table(None).values():  # noqa: SLF001  (no public table of pids and nodes)
        if entry["Name"] == f"{run}/{actor}" and entry["State"] == "ALIVE":
            return entry["Address"]["NodeID"]
    return None


def kill_node(node_id: str) -> int:
    """SIGKILL a node's raylet and every process under it (its workers, so its actors, and its
    agents) at once; returns how many processes. The raylet is found by its socket, one per node."""
    socket = next(n["RayletSocketName"] for n in ray.nodes() if n["NodeID"] == node_id)
    raylets = [p for p in psutil.process_iter(["cmdline"]) if any(socket in a for a in p.info["cmdline"] or [])]
    raylets = [p for p in raylets if "raylet" in " ".join(p.info["cmdline"][:1])]
    procs = [q for p in raylets for q in [p, *p.children(recursive=True)]]
    for proc in procs:
        try:
            proc.send_signal(signal.SIGKILL)
        except psutil.NoSuchProcess:
            pass
    return len(procs)


@dataclass
class Pacer:
    """Both runs: once the pool first asks for a second worker, the loop waits (in its report) until
    that worker is up, so that it joins at the same step in both runs: their pools then match step
    for step until a kill, and so do their seeds and rewards. Then the disturbed run's kills, each
    armed from the step metrics and fired a while into the next step, inside its rollout (a third
    of the median step's rollout seconds), in the order of `plan`:
      1. ("env-0") once the added worker has rolled out a step: the environment pool's node;
      2. ("rollout-1") after that step (or, first, the same condition): the added worker's node;
      3. ("learner-0") after the step of the kill before: the learner's node."""

    run: str
    plan: list[str]  # the actors whose nodes are killed, in order; none: the calm run
    kills: list[Kill] = field(default_factory=list)
    workers: list[int] = field(default_factory=list)  # rollout/workers after each step
    threads: list[threading.Thread] = field(default_factory=list)
    rollout_s: list[float] = field(default_factory=list)  # time/rollout_s of each step
    held_s: float = 0.0

    def after_step(self, step: int, metrics: dict) -> None:
        self.workers.append(int(metrics["rollout/workers"]))
        if metrics["rollout/workers_wanted"] > 1 and max(self.workers) == 1 and not self.held_s:
            self.held_s = self._hold("rollout-1")
        if len(self.kills) == len(self.plan):
            return
        whole = self.workers[-2:] == [2, 2]  # the added worker rolled out the last step
        self.rollout_s.append(metrics["time/rollout_s"])
        delay = 0.35 * sorted(self.rollout_s)[len(self.rollout_s) // 2]  # a kill's own long step does not count
        actor = self.plan[len(self.kills)]
        if actor == "learner-0":  # any step after the kill before: the learner is always there to kill
            ready = not self.kills or self.kills[-1].step <= step
        else:  # the added worker must be rolling out, so that its node and the pool's matter
            ready = (not self.kills or self.kills[-1].step == step) and whole
        if ready:
            self._fire(step + 1, actor, delay)

    def _hold(self, actor: str, limit_s: float = 300.0) -> float:
        t0 = time.monotonic()
        while node_of(self.run, actor) is None and time.monotonic() - t0 < limit_s:
            time.sleep(0.5)
        return time.monotonic() - t0

    def _fire(self, step: int, actor: str, delay: float) -> None:
        node = node_of(self.run, actor)
        if node is None:
            return
        self.kills.append(Kill(f"{actor}'s node", node, step, 0.0, 0))

        def kill(record=self.kills[-1]):
            time.sleep(delay)
            record.at, record.processes = time.time(), kill_node(node)
            print(f"elastic: killed {record.what} {node[-6:]} in step {step} ({record.processes} processes)", flush=True)

        self.threads.append(threading.Thread(target=kill, daemon=True))
        self.threads[-1].start()


def run(cluster, name: str, steps: int, seed: int, out: Path, pacer: Pacer) -> dict:
    cfg = load_config(
        REPO / "configs/local_cluster.yaml",
        [*RUN_ARGS, f"training.steps={steps}", f"run.seed={seed}", f"run.name={name}", f"run.output_dir={out}",
         f"resources.ray_address={cluster.gcs_address}"],
    )  # fmt: skip
    started, stopped = time.time(), None
    try:
        loop.train(cfg, report=pacer.after_step)
    except Exception as e:  # the run stopped: what it recorded so far is what the line reports
        stopped = f"{type(e).__name__}: {str(e)[:300]}"
        print(f"elastic {name}: the run stopped: {stopped}", flush=True)
    for thread in pacer.threads:
        thread.join()
    ended = time.time()
    went_back = wait_kept(cluster)
    return dict(name=name, started=started, ended=ended, went_back=went_back, stopped=stopped, run_dir=out / name)


def wait_kept(cluster, limit_s: float = 300) -> float | None:
    """Seconds until the autoscaler's report lists the head and the learner node alone (None: not within limit_s)."""
    t0 = time.monotonic()
    while time.monotonic() - t0 < limit_s:
        if active_types(cluster) == KEPT:
            return time.monotonic() - t0
        time.sleep(1)
    return None


def describe(cluster, result: dict, kills: list[Kill]) -> dict:
    """The run's numbers from the GCS tables and its run folder."""
    name, run_dir = result["name"], result["run_dir"]
    nodes = [n for n in gcs_nodes(cluster) if not n["is_head_node"]]
    mine = [n for n in nodes if result["started"] <= n["start_time_ms"] / 1000 <= result["ended"]]
    killed = {k.node for k in kills}
    removed = [n for n in mine if n["state"] == "DEAD" and n["node_id"] not in killed]
    actors = get(cluster, "/api/v0/actors?detail=true&limit=1000")["result"]["result"]
    workers = {a["name"].split("-")[-1]: a["node_id"] for a in actors if a["name"].startswith(f"{name}/rollout-")}
    started = {n["node_id"]: n["start_time_ms"] / 1000 for n in mine}
    metrics = read_metrics(run_dir)
    for kill in kills:  # the step whose start is the last before the kill (metrics: unix seconds)
        kill.step = sum(m["timeline/step_start_at"] <= kill.at for m in metrics) or kill.step
    firsts = first_rollouts(metrics)
    join_to_first = {
        int(i): firsts[int(i)] - started[node] for i, node in workers.items() if int(i) in firsts and node in started
    }
    episodes = step_episodes(run_dir)
    lost, duplicated = lost_and_duplicated(episodes, PROMPTS, N)
    counted = ("faults/retried_shards", "faults/restarts", "faults/learner_restores")
    faults = {k: sum(m.get(k, 0.0) for m in metrics) for k in counted}
    step_s = {k.step: metrics[k.step - 1]["time/step_s"] for k in kills if k.step <= len(metrics)}
    return dict(
        steps=len(metrics), added=len(mine), removed=len(removed), kills=len(kills), lost=lost,
        duplicated=duplicated, join_to_first=join_to_first, faults=faults, episodes=episodes,
        pools=pool_at_start(metrics, 1), workers=[int(m["rollout/workers"]) for m in metrics],
        step_s=step_s, median_step_s=sorted(m["time/step_s"] for m in metrics)[len(metrics) // 2] if metrics else 0.0,
    )  # fmt: skip


def line(name: str, d: dict, result: dict, steps: int) -> str:
    joins = ", ".join(f"rollout-{i} {s:.1f} s" for i, s in sorted(d["join_to_first"].items())) or "none"
    back = result["went_back"]
    return (
        f"elastic {name}: steps {d['steps']}/{steps}, workers per step {''.join(map(str, d['workers']))}, "
        f"nodes added {d['added']}, nodes removed {d['removed']}, node kills {d['kills']}, lost samples {d['lost']}, "
        f"duplicated samples {d['duplicated']}, retried shards {d['faults']['faults/retried_shards']:g}, "
        f"restarts {d['faults']['faults/restarts']:g}, learner restores {d['faults']['faults/learner_restores']:g}; "
        f"node join to first rollout: {joins}; "
        + "".join(f"kill step {k} took {v:.1f} s (median step {d['median_step_s']:.1f} s); " for k, v in d["step_s"].items())
        + (f"head and learner node alone {back:.1f} s after the run" if back is not None else "other nodes up at 300 s")
        + (f"; stopped: {result['stopped']}" if result["stopped"] else "")
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=12)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--no-env-kill", action="store_true", help="do not kill the environment pool's node")
    parser.add_argument("--no-learner-kill", action="store_true", help="do not kill the learner's node")
    parser.add_argument("--keep", action="store_true", help="keep the run folders and the cluster's logs")
    args = parser.parse_args()
    out = Path(f"/tmp/relay-elastic-{os.getpid()}")
    cluster = start(cluster_config(), idle_timeout_s=IDLE_TIMEOUT_S)
    os.environ["RAY_AUTH_TOKEN_PATH"] = cluster.env["RAY_AUTH_TOKEN_PATH"]
    try:
        if wait_kept(cluster) is None:  # both runs start with the learner node up, not waiting for it
            print("elastic: the learner node was not up within 300 s", flush=True)
        calm = run(cluster, "calm", args.steps, args.seed, out, Pacer("calm", []))
        plan = ["env-0"] * (not args.no_env_kill) + ["rollout-1"] + ["learner-0"] * (not args.no_learner_kill)
        disturber = Pacer("disturbed", plan)
        disturbed = run(cluster, "disturbed", args.steps, args.seed, out, disturber)
        c, d = describe(cluster, calm, []), describe(cluster, disturbed, disturber.kills)
        print(line("calm", c, calm, args.steps), flush=True)
        print(line("disturbed", d, disturbed, args.steps), flush=True)
        k = comparable_steps(c["pools"], d["pools"])
        same = same_rewards(c["episodes"], d["episodes"], k)
        kill_steps = ", ".join(f"{kill.what} in step {kill.step}" for kill in disturber.kills) or "no kill"
        covered = [kill.what for kill in disturber.kills if kill.step <= k]
        joins = [s for s in d["join_to_first"].values()]
        print(
            f"elastic: nodes added {d['added']}, nodes removed {d['removed']}, node kills {d['kills']}, "
            f"lost samples {d['lost']}, duplicated samples {d['duplicated']}, "
            f"learner restores {d['faults']['faults/learner_restores']:g}; node join to first rollout "
            + (f"{min(joins):.1f}-{max(joins):.1f} s" if joins else "n/a")
            + f"; kills: {kill_steps}; rewards equal the calm run's group by group on its first {k} steps "
            f"(the pools matched there; kill steps among them: {', '.join(covered) or 'none'}): {same}",
            flush=True,
        )
    finally:
        ray.shutdown()
        if args.keep:
            shutil.copytree(Path(cluster.temp_dir) / "session_latest" / "logs", out / "ray-logs", dirs_exist_ok=True)
            print(f"elastic: run folders and logs in {out}", flush=True)
        stop(cluster.temp_dir, grace_s=5)
        shutil.rmtree(cluster.temp_dir, ignore_errors=True)
        if not args.keep:
            shutil.rmtree(out, ignore_errors=True)


if __name__ == "__main__":
    main()
