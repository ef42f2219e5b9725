"""The fault matrix: a short run with one fault placed at a named point (relay/fault_points.py),
for every point, fault kind, training.mode, layout and weight transport where it applies.

A cell passes when the run completes every step (resumed by resources.auto_resume where the
fault stops it by design), loses no step, trains no sample twice and every step's batch holds
every prompt group once; in sync mode each step's mean reward must also equal the undisturbed
run's (a redone shard samples what the lost one would have). tests/e2e/test_fault_matrix.py runs
it (a sample in the default tier, all of it in the slow tier); benchmarks/chaos.py --matrix prints it.
"""

from __future__ import annotations

import contextlib
import tempfile
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from benchmarks.fault_matrix_nodes import NODE, NODE_ROLES, node_cluster, node_cpus, node_overrides
from relay.config import load_config
from relay.fault_points import KINDS, PROCESS_KINDS, disarm
from relay.run.auto_resume import train_with_auto_resume
from relay_trainer.fault_arming import arm_run

REPO = Path(__file__).resolve().parents[1]
MODES = ("sync", "one_step_off", "async")
LAYOUTS = ("separate", "colocated")
STEPS, ARM_AFTER = 3, 1  # the fault is armed once step 1 is logged: it happens in step 2 (or its checkpoint)
NODE_STEPS = 5
CALL_TIMEOUT_S, ROLLOUT_TIMEOUT_S = 8.0, 20.0  # far above a healthy call of the tiny model here
TASKS = {  # the configuration each point needs, cut to a few seconds a step
    "default": ("configs/default.yaml", []),
    "tool": ("configs/math_tool.yaml", ["tools.executors.count=2"]),
    "kl": ("configs/grpo_kl.yaml", []),
    "critic": ("configs/ppo.yaml", []),
    "reward_model": ("configs/grpo_rm.yaml", []),
}
POINT_TASK = {
    "env.reset": "tool",
    "env.step": "tool",
    "tool.call": "tool",
    "reference.forward": "kl",
    "critic.forward": "critic",
    "reward.model": "reward_model",
}
# Where a fault stops the run by design, and auto_resume resumes it from the last checkpoint
# (written every step here): the critic is not restarted (its state is the run's); a call of the
# learner (or the colocated worker, which is the learner) that raises after its update began may
# have half-changed its state; and a reference whose forward raises would raise again (it is
# frozen). A learner that dies or hangs is restored in place, a reference restarted; a colocated
# step whose rollout raised is redone.
NOT_RESTARTED = ("critic.forward",)
RAISING_STOPS = ("learner.update", "checkpoint.write", "weights.load.colocated", "reference.forward")


@dataclass(frozen=True)
class Cell:
    point: str
    kind: str
    mode: str = "sync"
    layout: str = "separate"
    transport: str = "shared_memory"  # weights: shared_memory, object_store, broadcast (colocated: none)

    @property
    def name(self) -> str:
        return f"{self.point}/{self.kind}/{self.mode}/{self.layout}/{self.transport}"

    @property
    def steps(self) -> int:
        # A lost node in an overlapped mode may take calls made ahead for steps past a 3-step run's
        # end; with more steps the run needs what the node held.
        return NODE_STEPS if self.kind == NODE and self.mode != "sync" else STEPS

    @property
    def task(self) -> str:
        return POINT_TASK.get(self.point, "default")

    def stops_by_design(self) -> bool:
        """Its fault stops the run, which auto_resume resumes (see NOT_RESTARTED)."""
        raises = self.kind == "exception" and self.point in RAISING_STOPS
        return self.point in NOT_RESTARTED or raises

    def ends_the_run(self) -> bool:
        """An exception in the driver's own loop ends the run (the driver is the run; --resume goes on)."""
        return self.point == "producer.queue" and self.kind == "exception"


@dataclass
class Outcome:
    cell: Cell | None
    steps: int = 0
    fired: bool = False
    resumed: int = 0
    rewards: list[float] = field(default_factory=list)
    duplicated: int = 0
    missing_groups: int = 0
    faults: Counter = field(default_factory=Counter)
    error: str = ""
    same_rewards: bool | None = None

    def passed(self) -> bool:
        if self.cell.ends_the_run():
            return self.fired and "InjectedFault" in self.error
        in_place = self.resumed == 0 or self.cell.stops_by_design()
        complete = self.steps == self.cell.steps and not self.duplicated and not self.missing_groups
        seen = self.cell.kind != NODE or any(self.faults.values())  # the run met the loss, not only its end
        return not self.error and self.fired and seen and complete and in_place and self.same_rewards is not False

    def line(self) -> str:
        c = self.cell
        verdict = "passed" if self.passed() else "FAILED"
        how = f"resumed {self.resumed}x" if self.resumed else "in place"
        counts = ", ".join(f"{k.removeprefix('faults/')} {v:g}" for k, v in sorted(self.faults.items()) if v)
        same = "" if self.same_rewards is None else f", same rewards {self.same_rewards}"
        why = f": {self.error}" if self.error else ("" if self.fired else ": the fault never happened")
        return (
            f"{verdict} {c.name}: steps {self.steps}/{c.steps} ({how}), duplicated {self.duplicated}, "
            f"missing groups {self.missing_groups}{same}; {counts or 'no faults counted'}{why}"
        )


def applies(cell: Cell) -> bool:
    """Whether the cell exists: its point is reached in that mode and layout, and the transport is
    one that point can meet (weight loads: each transport; every other point: the default one). A
    node-loss cell's role has a node of its own: with the rollout workers or the learner there,
    weights go through the object store."""
    p, colocated = cell.point, cell.layout == "colocated"
    if cell.kind == NODE:
        if p not in NODE_ROLES or colocated:
            return False
        remote = NODE_ROLES[p][0] in ("rollout", "learner")
        return cell.transport == ("object_store" if remote else "shared_memory")
    if colocated and (cell.mode != "sync" or cell.transport != "none"):
        return False  # one module, trained and generated from in turn: sync only
    if p.startswith("weights.load."):
        return p.removeprefix("weights.load.") == ("colocated" if colocated else cell.transport)
    if p == "producer.queue" and (cell.mode == "sync" or cell.kind in PROCESS_KINDS):
        return False  # the producer runs in the driver: no process of its own to kill
    return cell.transport == ("none" if colocated else "shared_memory")


def all_cells() -> list[Cell]:
    from relay.fault_points import POINTS

    cells = [
        Cell(point, kind, mode, layout, transport)
        for point in POINTS
        for kind in (*KINDS, NODE)
        for mode in MODES
        for layout in LAYOUTS
        for transport in ("shared_memory", "object_store", "broadcast", "none")
    ]
    return [c for c in cells if applies(c)]


def cell_config(cell: Cell, out: Path, name: str, faulty: bool, seed: int = 0):
    config, task = TASKS[cell.task]
    overrides = [
        *task,
        f"training.steps={cell.steps}",
        "training.prompts_per_step=4",
        "rollout.n=4" if cell.task != "tool" else "rollout.n=2",
        "task.num_eval_rows=4",
        "training.eval_before=false",
        "checkpoint.every=1",
        "checkpoint.keep_last_n=2",
        "checkpoint.save_hf_model=false",
        "logging.console=false",
        f"run.output_dir={out}",
        f"run.name={name}",
        f"run.seed={seed}",
        f"training.mode={cell.mode}",
        "resources.rollout.count=2" if cell.layout == "separate" else "resources.colocate=true",
        "resources.max_restarts=-1",
        f"resources.call_timeout_s={CALL_TIMEOUT_S}",
        f"resources.rollout_timeout_s={ROLLOUT_TIMEOUT_S}",
        f"resources.update_timeout_s={ROLLOUT_TIMEOUT_S}",
        f"resources.auto_resume={1 if faulty else 0}",
    ]
    if cell.transport == "broadcast":
        overrides.append("resources.weight_sync=broadcast")
    if cell.kind == NODE:
        overrides += node_overrides(cell.point)
    return load_config(REPO / config, overrides)


@contextlib.contextmanager
def recorded_batches(batches: dict):
    """Every step's trained samples as (group, index) keys; a step redone after a resume replaces
    its earlier record (that run's weights were dropped with it)."""
    import relay_trainer.loop as loop
    from relay_trainer.steps import OneCall

    original = loop.step_plan

    def recording_plan(*args, **kwargs):
        plan = original(*args, **kwargs)
        name = "rollout_and_update" if isinstance(plan, OneCall) else "take_samples"
        take = getattr(plan, name)

        def recorded(step, timer):
            out = take(step, timer)
            batches[step] = [(s.group_id, s.meta.get("episode_id", "").rsplit("-", 1)[-1]) for s in out[0]]
            return out

        setattr(plan, name, recorded)
        return plan

    loop.step_plan = recording_plan
    try:
        yield
    finally:
        loop.step_plan = original


@contextlib.contextmanager
def object_store_only(on: bool):
    """transport object_store: no shared-memory weights, as for workers on other nodes."""
    import relay_trainer.pools as pools

    original = pools.open_shared_memory
    if on:
        pools.open_shared_memory = lambda learner, workers, tag: [False] * len(workers)
    try:
        yield
    finally:
        pools.open_shared_memory = original


def run_cell(cell: Cell, out: Path, faulty: bool = True, log=print, seed: int = 0) -> Outcome:
    """One run of the cell's configuration; with `faulty`, the fault is armed after step ARM_AFTER.
    A node-loss cell runs on a cluster of its own (benchmarks/fault_matrix_nodes.py)."""
    if cell.kind != NODE:
        return run_cell_on(None, cell, out, faulty, log, seed)
    cpus = node_cpus(cell_config(cell, out, "sizing", faulty, seed), cell.point)
    with node_cluster(cell.point, cpus) as loss:
        return run_cell_on(loss, cell, out, faulty, log, seed)


def run_cell_on(loss, cell: Cell, out: Path, faulty: bool, log, seed: int) -> Outcome:
    from relay_trainer.loop import train

    name = f"cell-{abs(hash((cell, faulty, out))) % 10**8}"
    cfg = cell_config(cell, out, name, faulty, seed)
    outcome, batches, tokens = Outcome(cell), {}, []
    rewards: dict[int, float] = {}

    def report(step, metrics):
        rewards[step] = metrics["reward/mean"]
        outcome.faults.update({k: v for k, v in metrics.items() if k.startswith("faults/")})
        if faulty and step == ARM_AFTER and not tokens:
            # slow: past every deadline the point can be under (a rollout shard's, an update's)
            kind = "hang" if loss else cell.kind  # the actor stops at the point; then its node dies
            tokens.append(arm_run(name, cell.point, kind, out, slow_s=ROLLOUT_TIMEOUT_S + 5))
            if loss:
                loss.lose_on(tokens[0])

    def run(c, resume=False):
        return train(c, resume=resume, report=report)

    def named(run_name):
        return cell_config(cell, out, run_name, faulty, seed)

    resumes = []
    with recorded_batches(batches), object_store_only(cell.transport == "object_store" and not loss):
        try:
            train_with_auto_resume(run, cfg, False, [], named, log=lambda line: (resumes.append(line), log(line)))
        except Exception as e:  # the cell's verdict names it
            outcome.error = f"{type(e).__name__}: {str(e).splitlines()[0][:300] if str(e) else ''}"
        finally:
            disarm()
    outcome.resumed = sum("auto_resume" in line for line in resumes)
    outcome.fired = not faulty or bool(tokens and tokens[0].exists())
    outcome.steps = len(rewards)
    outcome.rewards = [rewards[s] for s in sorted(rewards)]
    per_step = cfg.training.prompts_per_step * cfg.rollout.n
    keys = [k for step in sorted(batches) for k in batches[step]]
    if cell.mode == "sync":  # group ids start again at 0 every step
        outcome.duplicated = sum(len(b) - len(set(b)) for b in batches.values())
    else:
        outcome.duplicated = len(keys) - len(set(keys))
    groups = [len({g for g, _ in b}) for b in batches.values()]
    outcome.missing_groups = sum(cfg.training.prompts_per_step - n for n in groups) + sum(
        per_step - len(b) for b in batches.values() if cell.mode == "sync"
    )
    return outcome


def judged_cell(cell: Cell, out: Path, baselines: dict, log=print, seed: int = 0) -> Outcome:
    """run_cell; in sync mode its rewards against its configuration's undisturbed run, made once
    per `baselines` (configuration -> rewards)."""
    outcome = run_cell(cell, out, log=log, seed=seed)
    if cell.mode == "sync" and not outcome.error:
        key = (cell.task, cell.layout, cell.transport, seed, cell.kind == NODE and NODE_ROLES[cell.point][0])
        if key not in baselines:
            baselines[key] = run_cell(cell, out, faulty=False, log=log, seed=seed).rewards
        outcome.same_rewards = outcome.rewards == baselines[key]
    return outcome


def run_cells(cells: list[Cell], log=print, seed: int = 0) -> list[Outcome]:
    """Every cell judged, every run seeded `seed` (run.seed); one line per cell. The cells of one
    task share a Ray, started for the first of them: it holds the CPUs that task's roles need."""
    import ray

    baselines: dict = {}
    outcomes = []
    with tempfile.TemporaryDirectory(prefix="relay-faults-") as tmp:
        for i, cell in enumerate(cells):
            if i and cell.task != cells[i - 1].task:
                ray.shutdown()
            outcomes.append(judged_cell(cell, Path(tmp), baselines, log, seed))
            log(outcomes[-1].line())
    return outcomes
