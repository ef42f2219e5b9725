"""An instruct model's held-out score on reasoning-gym datasets and single-player textarena games.

    python benchmarks/task_libraries.py [--model smollm2-135m] [--rows 64] [--few-shot 0] [--threads 1] [--show 0] [NAME ...]

In one process, no Ray; greedy. NAME is a dataset or game of the lists below (default: all).

reasoning-gym: configs/smol_reasoning_gym.yaml's prompt, sizes and token limit with
task.dataset=NAME (its arguments as listed) and task.few_shot=--few-shot (0: the instruction
alone; K: K worked examples before each question), the held-out rows of run.seed=0 (relay/run/rows.py
task_rows), the driver's agent loop with all rows in one generate call, scored by the run's
reward function through relay's Scorer; accuracy is the run's eval/accuracy (rewards >=
task.success_threshold), beside the mean reward (partial credit) and the share the token limit cut.

textarena: benchmarks/textarena_baseline.py's play() (configs/smol_textarena.yaml's limits), its
win rate (eval/success_rate) and the share of episodes relay's limits cut.

One markdown table row per dataset or game, with the seconds it took; --show N prints the first N
replies of each reasoning-gym dataset.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.textarena_baseline import play  # noqa: E402
from relay.agent.loop import AgentLimits, AgentLoop  # noqa: E402
from relay.config import load_config, resolve_dotted  # noqa: E402
from relay.engines.base import SamplingParams  # noqa: E402
from relay.engines.hf import HFEngine  # noqa: E402
from relay.envs.scoring import Scorer  # noqa: E402
from relay.run.model_source import resolve_model_path  # noqa: E402
from relay.run.rows import task_rows  # noqa: E402
from relay.run.step_metrics import eval_metrics  # noqa: E402

CONFIG = Path(__file__).resolve().parents[1] / "configs" / "smol_reasoning_gym.yaml"
# (dataset, its generator arguments): the package's defaults, and two easy variants of defaults a
# 135M model cannot start on (products of up to 5 digits, sums of up to 6 terms of up to 4 digits).
DATASETS = (
    ("products", {"max_digits": 1}),
    ("basic_arithmetic", {}),
    ("chain_sum", {"max_terms": 2, "max_digits": 1}),
    ("simple_equations", {}),
    ("gcd", {}),
    ("lcm", {}),
    ("count_bits", {}),
    ("spell_backward", {}),
    ("fraction_simplification", {}),
    ("prime_factorization", {}),
    ("letter_counting", {}),
    ("time_intervals", {}),
    ("calendar_arithmetic", {}),
    ("caesar_cipher", {}),
    ("syllogism", {}),
    ("aiw", {}),
    ("leg_counting", {}),
    ("family_relationships", {}),
    ("ransom_note", {}),
    ("isomorphic_strings", {}),
)
# Single-player games, under configs/smol_textarena.yaml's 6 turns (a game relay cuts is not a win).
GAMES = (
    "GuessTheNumber-v0:min_number=1,max_number=10,max_turns=5",  # configs/smol_textarena.yaml's game
    "Mastermind-v0:max_turns=5",
    "TowerOfHanoi-v0:num_disks=2,max_turns=5",  # 3 moves solve it
    "FrozenLake-v0:size=3,num_holes=1",  # 4 moves reach the goal
    "Minesweeper-v0-small:max_turns=5",
)


def dataset_overrides(name: str, args: dict, model: str, rows: int, few_shot: int) -> list[str]:
    dataset = ["task.datasets={}", f"task.dataset={name}", *(f"task.dataset_args.{k}={v}" for k, v in args.items())]
    return [f"model.path={model}", f"task.num_eval_rows={rows}", f"task.few_shot={few_shot}", *dataset]


def score_dataset(
    engine: HFEngine, name: str, args: dict, model: str, rows: int, few_shot: int, show: int
) -> dict[str, float]:
    cfg = load_config(CONFIG, dataset_overrides(name, args, model, rows, few_shot))
    held_out = task_rows(cfg.task, cfg.tools, cfg.run.seed)[1]
    loop = AgentLoop(
        engine, engine.tokenizer, AgentLimits.of(cfg.rollout, cfg.tools), prompt_format=cfg.task.prompt_format
    )
    start = time.perf_counter()
    samples = loop.run(held_out, SamplingParams(n=1, temperature=0.0, max_tokens=cfg.rollout.max_new_tokens, seed=0))
    seconds = time.perf_counter() - start
    rewards, _, _ = Scorer(resolve_dotted(cfg.task.reward_fn_path)).score(samples)
    for s, r in list(zip(samples, rewards))[:show]:
        print(f"  {name} reward {r:.2f} answer {s.ground_truth['entry']['answer']!r}: {s.final_text!r}", flush=True)
    return {
        "accuracy": eval_metrics(cfg.task, rewards)["eval/accuracy"],
        "mean_reward": statistics.fmean(rewards),
        "cut": statistics.fmean(s.finish_reason == "length" for s in samples),
        "max_new_tokens": cfg.rollout.max_new_tokens,
        "seconds": seconds,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("names", nargs="*", help="datasets or games (default: all of both lists)")
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--rows", type=int, default=64, help="held-out rows (episodes) per dataset and game")
    parser.add_argument("--few-shot", type=int, default=0, help="worked examples before each reasoning-gym question")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--show", type=int, default=0, help="print the first N replies of each dataset")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    cfg = load_config(CONFIG, [f"model.path={args.model}"])
    path = resolve_model_path(cfg.model, cfg.task, cfg.tools, cfg.critic, cfg.reward_model)
    engine = HFEngine(path, attn_implementation=cfg.model.attn_implementation)
    chosen = set(args.names)
    total = time.perf_counter()
    print(
        f"model {args.model}, {args.rows} held-out rows each, {args.few_shot} worked examples, greedy, "
        f"{args.threads} torch thread(s)"
    )
    print("| reasoning-gym dataset (args) | accuracy | mean reward | cut at max_new_tokens | seconds |")
    print("|---|---|---|---|---|")
    for name, dataset_args in DATASETS:
        if chosen and name not in chosen:
            continue
        r = score_dataset(engine, name, dataset_args, args.model, args.rows, args.few_shot, args.show)
        shown = f"{name} ({', '.join(f'{k}={v}' for k, v in dataset_args.items())})" if dataset_args else name
        print(
            f"| {shown} | {r['accuracy']:.3f} | {r['mean_reward']:.3f} | {r['cut']:.3f} of {r['max_new_tokens']} "
            f"| {r['seconds']:.0f} |",
            flush=True,
        )
    print("| textarena game (env_args) | win rate | mean return | cut by relay's limits | seconds |")
    print("|---|---|---|---|---|")
    for game in GAMES:
        if chosen and game.partition(":")[0] not in chosen and game not in chosen:
            continue
        r = play(engine, game, args.model, args.rows)
        print(
            f"| {game} | {r['win_rate']:.3f} | {r['mean_return']:.3f} | {r['cut_by_limits']:.3f} | {r['seconds']:.0f} |",
            flush=True,
        )
    print(f"total {time.perf_counter() - total:.0f} s")


if __name__ == "__main__":
    main()
