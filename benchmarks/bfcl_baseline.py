"""An instruct model's BFCL score per category, on the held-out rows a run would evaluate.

    python benchmarks/bfcl_baseline.py [--model smollm2-135m] [--rows 64] [CATEGORY ...]

In one process, no Ray: the driver's agent loop with configs/smol_bfcl.yaml's prompt, call format
(tools.parser) and token limit, greedy, on each category's held-out rows (relay/envs/bfcl.py: the
split is fixed by row id, so every run's held-out rows are among these). Each reply is scored by
BFCL's AST checker (task.name=bfcl's reward). Per category it prints the accuracy, the share of
replies with at least one parsed call, the share the token limit cut, and the seconds taken.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from relay.agent.loop import AgentLimits, AgentLoop  # noqa: E402
from relay.config import load_config  # noqa: E402
from relay.engines.base import SamplingParams  # noqa: E402
from relay.engines.hf import HFEngine  # noqa: E402
from relay.envs.bfcl import bfcl_reward, calls_in  # noqa: E402
from relay.run.model_source import resolve_model_path  # noqa: E402
from relay.run.rows import task_rows  # noqa: E402

CONFIG = Path(__file__).resolve().parents[1] / "configs" / "smol_bfcl.yaml"


def score(engine: HFEngine, category: str, model: str, rows: int) -> dict[str, float]:
    overrides = [f"model.path={model}", f"task.categories=[{category}]", f"task.num_eval_rows={rows}"]
    cfg = load_config(CONFIG, [*overrides, "task.num_train_rows=1"])
    held_out = task_rows(cfg.task, cfg.tools, cfg.run.seed)[1]
    loop = AgentLoop(
        engine, engine.tokenizer, AgentLimits.of(cfg.rollout, cfg.tools), prompt_format=cfg.task.prompt_format
    )
    start = time.perf_counter()
    samples = loop.run(held_out, SamplingParams(n=1, temperature=0.0, max_tokens=cfg.rollout.max_new_tokens, seed=0))
    return {
        "accuracy": statistics.fmean(bfcl_reward(s) for s in samples),
        "called": statistics.fmean(bool(calls_in(s.final_text, cfg.tools.parser)) for s in samples),
        "cut": statistics.fmean(s.finish_reason == "length" for s in samples),
        "seconds": time.perf_counter() - start,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("categories", nargs="*", default=["simple_python", "multiple", "parallel"])
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--rows", type=int, default=64)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    cfg = load_config(CONFIG, [f"model.path={args.model}"])
    path = resolve_model_path(cfg.model, cfg.task, cfg.tools, cfg.critic, cfg.reward_model)
    engine = HFEngine(path, attn_implementation=cfg.model.attn_implementation)
    print(f"model {args.model}, {args.rows} held-out rows per category, greedy, tools.parser={cfg.tools.parser}")
    for category in args.categories:
        r = score(engine, category, args.model, args.rows)
        print(
            f"{category:24s} accuracy {r['accuracy']:.3f}  called {r['called']:.3f}  cut {r['cut']:.3f}  "
            f"{r['seconds']:.0f} s",
            flush=True,
        )


if __name__ == "__main__":
    main()
