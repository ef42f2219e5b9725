"""Continuous batching in one rollout call (AgentLoop.stream, rollout.max_live_episodes), without
Ray or a learner: textgame (1-4 turns per episode) on the warm-started tiny model, the HF engine
and the environments in this process. For each cap on live episodes, one step's prompts (16 rows
x rollout.n 8) run as one call: seconds for the whole call, model tokens/s, when the first
quarter of the groups was out (what an async trainer could start on) and the median group's
time, generate calls and their mean batch. The caps alternate over --repeats, same seeds.
Numbers, never assertions.

    python benchmarks/continuous_batching.py [--caps 0 32 64] [--rows 16] [--repeats 3] [--threads 1]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import torch  # noqa: E402

from relay.agent.loop import AgentLimits, AgentLoop  # noqa: E402
from relay.config import load_config, resolve_dotted  # noqa: E402
from relay.config.role_settings import EngineSettings  # noqa: E402
from relay.engines import make_engine  # noqa: E402
from relay.envs.base import EnvRunner  # noqa: E402
from relay.envs.contract import EnvMaker  # noqa: E402
from relay.run.model_source import resolve_model_path  # noqa: E402
from relay.run.rows import task_rows  # noqa: E402


class CountingEngine:
    """The engine, counting generate calls and the prompts in each."""

    def __init__(self, engine):
        self.engine, self.batches = engine, []
        self.tokenizer, self.weight_version = engine.tokenizer, 0

    def generate(self, prompts, sampling):
        self.batches.append(len(prompts))
        return self.engine.generate(prompts, sampling)


def one_call(cfg, engine, rows, cap: int, seed: int) -> dict:
    t = cfg.task
    runner = EnvRunner(EnvMaker(resolve_dotted(t.env), t.env_config))
    counting = CountingEngine(engine)
    loop = AgentLoop(
        counting,
        engine.tokenizer,
        AgentLimits.of(cfg.rollout, cfg.tools),
        env_reset=runner.reset,
        env_step=runner.step,
        env_close=runner.close,
        system_prompt=t.system_prompt,
        prompt_format=t.prompt_format,
    )
    sampling = make_sampling(cfg, seed)
    start, arrivals, tokens = time.perf_counter(), [], 0
    for group in loop.stream(rows, sampling, max_live=cap):
        arrivals.append(time.perf_counter() - start)
        tokens += sum(s.num_model_tokens for s in group)
    quarter = arrivals[max(len(arrivals) // 4 - 1, 0)]
    return {
        "seconds": arrivals[-1],
        "tokens_per_s": tokens / arrivals[-1],
        "first_quarter_s": quarter,
        "median_group_s": statistics.median(arrivals),
        "calls": len(counting.batches),
        "mean_batch": statistics.fmean(counting.batches),
    }


def make_sampling(cfg, seed: int):
    from relay.engines.base import SamplingParams

    r = cfg.rollout
    return SamplingParams(
        n=r.n, temperature=r.temperature, top_p=r.top_p, top_k=r.top_k, max_tokens=r.max_new_tokens, seed=seed
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--caps", type=int, nargs="+", default=[0, 32, 64], help="rollout.max_live_episodes values")
    parser.add_argument("--rows", type=int, default=16, help="prompts in the call (rollout.n episodes each)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1, help="torch threads (a rollout worker's CPU share)")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    cfg = load_config(REPO / "configs/textgame.yaml", [])
    path = resolve_model_path(cfg.model, cfg.task, cfg.tools, cfg.critic, cfg.reward_model)
    engine = make_engine(EngineSettings.of(cfg), path)
    rows, _ = task_rows(cfg.task, cfg.tools, cfg.run.seed)
    results: dict[int, list[dict]] = {cap: [] for cap in args.caps}
    one_call(cfg, engine, rows[: args.rows], args.caps[0], seed=0)  # warm-up
    for k in range(args.repeats):
        caps = args.caps[k % len(args.caps) :] + args.caps[: k % len(args.caps)]  # alternate who runs first
        for cap in caps:
            results[cap].append(one_call(cfg, engine, rows[k * args.rows : (k + 1) * args.rows], cap, seed=k))
    print(f"textgame, {args.rows} rows x n={cfg.rollout.n}, {args.repeats} repeats, {args.threads} thread(s); means:")
    print(f"{'max_live':>9}{'seconds':>9}{'tok/s':>8}{'1st 25% s':>11}{'median s':>10}{'calls':>7}{'batch':>7}")
    for cap, runs in results.items():
        m = {key: statistics.fmean(r[key] for r in runs) for key in runs[0]}
        print(
            f"{cap:>9}{m['seconds']:>9.2f}{m['tokens_per_s']:>8.0f}{m['first_quarter_s']:>11.2f}"
            f"{m['median_group_s']:>10.2f}{m['calls']:>7.1f}{m['mean_batch']:>7.1f}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
