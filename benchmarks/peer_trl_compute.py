"""relay's step compute against TRL's, in one process, steps interleaved: what is left of
benchmarks/peer_trl.py's comparison once Ray is taken away.

    python benchmarks/peer_trl_compute.py [--steps 60] [--sizes 2,8]

The setting is peer_trl.py's (its model, prompts and TRL). One process holds TRL's GRPOTrainer and
relay's ColocatedWorker (the learner and the rollout worker of `resources.colocate`, as plain
classes); after each TRL step (timed from its trainer's step-begin to step-end callbacks) the
callback runs one relay step (rollout, then update from the samples) and times it. The two
alternate step by step on one core, so machine noise hits both alike. Prints medians over the
steps after the first 5, each phase of relay's step, and relay/TRL. The difference between this
ratio and peer_trl.py's colocated ratio is what the actor calls cost.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from benchmarks.peer_trl import (  # noqa: E402
    CACHE,
    SAMPLES,
    addition_rows,
    relay_setting,
    tiny_plain_model,
    trl_python,
    trl_trainer,
    write_data,
)


def interleaved(prompts: int, steps: int, model: Path, data: Path) -> dict[str, float]:
    """In TRL's environment: TRL's steps and relay's, alternated; median seconds of each."""
    import torch
    from transformers import TrainerCallback

    from actors.colocated import ColocatedWorker
    from relay.config import load_config
    from relay.config.role_settings import ColocatedSettings
    from relay.envs.data import PromptIterator

    torch.set_num_threads(1)
    cfg = load_config(None, [*relay_setting(model, data, prompts), "resources.colocate=true"])
    relay = ColocatedWorker(ColocatedSettings.of(cfg), str(model), 1)
    train_rows = [json.loads(line) for line in (data / "train.jsonl").open()]
    relay_prompts = PromptIterator(train_rows, 0)
    times: dict[str, list[float]] = {"trl": [], "relay": [], "relay rollout": [], "relay update": []}

    class RelayStepAfterEach(TrainerCallback):
        def on_step_begin(self, args, state, control, **kwargs):
            self.start = time.perf_counter()

        def on_step_end(self, args, state, control, **kwargs):
            times["trl"].append(time.perf_counter() - self.start)
            start = time.perf_counter()
            samples, _ = relay.rollout(relay_prompts.take(prompts), state.global_step, 0)
            rolled = time.perf_counter()
            relay.update(samples)
            done = time.perf_counter()
            times["relay"].append(done - start)
            times["relay rollout"].append(rolled - start)
            times["relay update"].append(done - rolled)

    trl_trainer(str(model), data, CACHE / "compute-trl", 0, steps, prompts, RelayStepAfterEach()).train()
    return {k: statistics.median(v[5:]) for k, v in times.items()}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--sizes", default="2,8", help="prompts per step, comma-separated (8 samples each)")
    ap.add_argument("--child", type=int, help=argparse.SUPPRESS)  # prompts per step, in TRL's environment
    a = ap.parse_args()
    model = tiny_plain_model(addition_rows()[0])  # built once by either script, cached
    if a.child:
        print(json.dumps(interleaved(a.child, a.steps, model, CACHE / "data")))
        return 0
    sizes = [int(s) for s in a.sizes.split(",")]
    write_data(sizes, a.steps, rounds=1)
    python, why = trl_python()
    if python is None:
        print(f"peer_trl_compute: TRL is not available: {why}")
        return 2
    print(f"{a.steps} steps per size, TRL and relay alternated step by step in one process; medians after 5\n")
    print("| prompts x samples | TRL s/step | relay s/step (rollout + update) | relay/TRL |\n|---|---|---|---|")
    env = dict(os.environ, OMP_NUM_THREADS="1", HF_HUB_OFFLINE="1")
    for p in sizes:
        cmd = [python, __file__, "--child", str(p), "--steps", str(a.steps)]
        done = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True)
        if done.returncode != 0:
            print(f"{p}x{SAMPLES}: failed: {done.stderr.strip().splitlines()[-3:]}")
            return 1
        t = json.loads(done.stdout.strip().splitlines()[-1])
        print(
            f"| {p}x{SAMPLES} | {t['trl']:.4f} | {t['relay']:.4f} ({t['relay rollout']:.4f} + "
            f"{t['relay update']:.4f}) | {t['relay'] / t['trl']:.2f} |"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
