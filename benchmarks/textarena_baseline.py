"""An instruct model's win rate on textarena games, on the held-out games a run would evaluate.

    python benchmarks/textarena_baseline.py [--model smollm2-135m] [--episodes 64] [GAME ...]

In one process, no Ray: the driver's agent loop, TextArenaEnv and configs/smol_textarena.yaml's
limits (rollout.max_turns and the token budgets), greedy, on the held-out seeds of run.seed=0
(relay/run/rows.py task_rows). GAME is `ID` or `ID:ARG=VALUE,...` (the game's env_args); a
two-player game plays task.opponent=random. Per game it prints the win rate (reward >= 1), the mean
return, invalid moves per episode, the share of games an invalid move ended, the share of episodes
relay's limits cut, and the seconds taken.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from relay.agent.loop import AgentLimits, AgentLoop  # noqa: E402
from relay.config import load_config  # noqa: E402
from relay.config.textarena import player_count  # noqa: E402
from relay.engines.base import SamplingParams  # noqa: E402
from relay.engines.hf import HFEngine  # noqa: E402
from relay.envs.base import EnvRunner  # noqa: E402
from relay.envs.contract import EnvMaker  # noqa: E402
from relay.envs.textarena import TextArenaEnv, invalid_move_metrics  # noqa: E402
from relay.run.model_source import resolve_model_path  # noqa: E402
from relay.run.rows import task_rows  # noqa: E402

CONFIG = Path(__file__).resolve().parents[1] / "configs" / "smol_textarena.yaml"
# Turn limits under the recipe's rollout.max_turns (6): a game relay cuts short is not a win.
GAMES = (
    "GuessTheNumber-v0:min_number=1,max_number=10,max_turns=5",  # the recipe's game
    "GuessTheNumber-v0:max_turns=5",
    "Mastermind-v0:max_turns=5",
    "TowerOfHanoi-v0:num_disks=2,max_turns=5",  # 3 moves solve it
    "FrozenLake-v0:size=3,num_holes=1",  # 4 moves reach the goal
    "Minesweeper-v0-small:max_turns=5",
)


def game_overrides(game: str) -> list[str]:
    """A two-player game plays task.opponent=random."""
    from textarena.envs.registration import ENV_REGISTRY

    env_id, _, args = game.partition(":")
    env_args = {k: yaml.safe_load(v) for k, _, v in (a.partition("=") for a in args.split(",") if a)}
    two = env_id in ENV_REGISTRY and player_count(ENV_REGISTRY[env_id].entry_point) == 2
    args_yaml = yaml.safe_dump(env_args, default_flow_style=True).strip()
    return [f"task.env_id={env_id}", f"task.env_args={args_yaml}", *(["task.opponent=random"] if two else [])]


def play(engine: HFEngine, game: str, model: str, episodes: int) -> dict[str, float]:
    cfg = load_config(CONFIG, [f"model.path={model}", f"task.num_eval_rows={episodes}", *game_overrides(game)])
    held_out = task_rows(cfg.task, cfg.tools, cfg.run.seed)[1]
    envs = EnvRunner(EnvMaker(TextArenaEnv, cfg.task.env_config))
    loop = AgentLoop(
        engine,
        engine.tokenizer,
        AgentLimits.of(cfg.rollout, cfg.tools),
        env_reset=envs.reset,
        env_step=envs.step,
        env_close=envs.close,
    )
    start = time.perf_counter()
    samples = loop.run(held_out, SamplingParams(n=1, temperature=0.0, max_tokens=cfg.rollout.max_new_tokens, seed=0))
    returns = [sum((s.meta.get("env") or {}).get("rewards") or []) for s in samples]
    cut = [not any((s.meta.get("env") or {}).get("dones") or []) for s in samples]
    return {
        "win_rate": statistics.fmean(r >= cfg.task.success_threshold for r in returns),
        "mean_return": statistics.fmean(returns),
        **invalid_move_metrics(samples, ""),
        "cut_by_limits": statistics.fmean(cut),
        "seconds": time.perf_counter() - start,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("games", nargs="*", default=list(GAMES))
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--episodes", type=int, default=64)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    cfg = load_config(CONFIG, [f"model.path={args.model}"])
    path = resolve_model_path(cfg.model, cfg.task, cfg.tools, cfg.critic, cfg.reward_model)
    engine = HFEngine(path, attn_implementation=cfg.model.attn_implementation)
    print(f"model {args.model}, {args.episodes} held-out games each, greedy")
    for game in args.games:
        r = play(engine, game, args.model, args.episodes)
        print(
            f"{game:36s} win {r['win_rate']:.3f}  return {r['mean_return']:.3f}  "
            f"invalid/ep {r['invalid_moves']:.2f}  invalid endings {r['invalid_endings']:.3f}  "
            f"cut {r['cut_by_limits']:.3f}  {r['seconds']:.0f} s",
            flush=True,
        )


if __name__ == "__main__":
    main()
