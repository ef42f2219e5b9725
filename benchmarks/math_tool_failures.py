"""Why math_tool's greedy held-out episodes fail: each one sorted into what went wrong.

    python benchmarks/math_tool_failures.py [MODEL ...] [--seed 0] [--rows 256] [--held-out]

MODEL: a model folder (a run's final_model) or `tiny` (the shipped warm start). In one process,
no Ray: the same agent loop, tag parser and bubblewrap sandbox as the driver's held-out
evaluation (greedy, configs/math_tool.yaml's limits), on ROWS training questions (drawn with
seed SEED + 7919), or with `--held-out` on the first ROWS of the 128 products no run trains on
(what the driver's held-out evaluation asks). Per model it prints the share of episodes of each outcome
(relay.envs.math_tool.episode_outcome) and, for the teacher-forced correct episode (tool call, result, exact answer), the mean log
likelihood of its answer tokens, the share of answer tokens that greedy decoding would pick, and
the share of rows whose whole answer it would (copy_accuracy). `--sign-noise 3e-4` first moves
every weight by +-3e-4 with random signs: the size of AdamW's first step at lr 3e-4, in a
direction that has nothing to do with the loss.
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from actors.tools import ToolExecutor  # noqa: E402  (plain class, no Ray needed)
from relay.agent.loop import AgentLimits, AgentLoop  # noqa: E402
from relay.config import load_config  # noqa: E402
from relay.engines.base import SamplingParams  # noqa: E402
from relay.engines.hf import HFEngine  # noqa: E402
from relay.envs.base import EnvRunner  # noqa: E402
from relay.envs.chat import ChatFormat, ScriptedEpisode, ScriptedTurn, encode_scripted  # noqa: E402
from relay.envs.math_tool import OUTCOMES, MathToolEnv, episode_outcome  # noqa: E402
from relay.models.shipped import tiny_model  # noqa: E402
from relay.tools.parsers import get_parser  # noqa: E402

CONFIG = Path(__file__).resolve().parents[1] / "configs/math_tool.yaml"


def teacher_forced(tokenizer, rows: list[dict]) -> tuple[list[list[int]], list[list[int]], list[list[int]]]:
    """Each row's right episode (the right tool call, its result, the exact answer) as the agent
    loop lays it out: prompt ids, response ids, loss masks."""
    fmt = ChatFormat(tokenizer)
    out = [], [], []
    for row in rows:
        expr = row["prompt"].split("What is ")[1].split("?")[0]
        truth = row["ground_truth"]
        call = ScriptedTurn(f"<tool>print({expr})</tool>", eos=False, observation=f"\n<result>\n{truth}\n</result>\n")
        episode = ScriptedEpisode([{"role": "user", "content": row["prompt"]}], [call, ScriptedTurn(truth)])
        for part, ids in zip(out, encode_scripted(fmt, episode)):
            part.append(ids)
    return out


def answer_start(mask: list[int]) -> int:
    """Where the final answer starts: after the last observation token."""
    return max(i for i, m in enumerate(mask) if m == 0) + 1


@torch.no_grad()
def answer_likelihood(engine: HFEngine, rows: list[dict]) -> tuple[float, float, float]:
    """Teacher-forced right episodes: mean log p of the answer tokens (EOS included), the share of
    them that are the argmax, and the share of rows whose whole answer is (greedy copy accuracy:
    the held-out accuracy if every tool call were right)."""
    logps, argmax_hits, rows_right = [], [], []
    for prompt, response, mask in zip(*teacher_forced(engine.tokenizer, rows)):
        logp = torch.log_softmax(engine.model(input_ids=torch.tensor([prompt + response])).logits[0].float(), -1)
        hits = []
        for i in range(answer_start(mask), len(response)):
            pos = len(prompt) + i - 1  # the column that predicts response token i
            logps.append(logp[pos, response[i]].item())
            hits.append(float(logp[pos].argmax().item() == response[i]))
        argmax_hits += hits
        rows_right.append(float(all(hits)))
    return statistics.fmean(logps), statistics.fmean(argmax_hits), statistics.fmean(rows_right)


def agent_loop(engine: HFEngine, cfg, executor: ToolExecutor) -> AgentLoop:
    """The driver's agent loop for math_tool, in this process: its limits, parser, sandbox and env."""
    envs = EnvRunner(MathToolEnv)
    return AgentLoop(
        engine,
        engine.tokenizer,
        AgentLimits.of(cfg.rollout, cfg.tools),
        parser=get_parser(cfg.tools.parser),
        run_tools=executor.run_batch,
        env_reset=envs.reset,
        env_step=envs.step,
        env_close=envs.close,
    )


def add_sign_noise(model: torch.nn.Module, size: float, seed: int) -> None:
    """Every weight moved by +-size, signs drawn at random: a step as large, weight by weight, as
    AdamW's first step at lr=size (m/sqrt(v) = sign(g) then), in a direction unrelated to the loss."""
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(size * torch.randint(0, 2, p.shape, generator=generator).mul(2).sub(1).to(p.dtype))


def evaluate(model: str, rows: list[dict], cfg, executor: ToolExecutor, sign_noise: float = 0.0) -> dict[str, float]:
    path = tiny_model(cfg.task.env) if model == "tiny" else model
    engine = HFEngine(str(path))
    if sign_noise:
        add_sign_noise(engine.model, sign_noise, seed=0)
    loop = agent_loop(engine, cfg, executor)
    samples = loop.run(rows, SamplingParams(n=1, temperature=0.0, max_tokens=cfg.rollout.max_new_tokens, seed=0))
    counts = {k: 0 for k in OUTCOMES}
    for s in samples:
        counts[episode_outcome(s)] += 1
    out = {k: v / len(samples) for k, v in counts.items()}
    out["answer_logp"], out["answer_argmax"], out["copy_accuracy"] = answer_likelihood(engine, rows)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("models", nargs="*", default=["tiny"])
    parser.add_argument("--seed", type=int, default=0, help="draws the training questions with seed SEED + 7919")
    parser.add_argument("--rows", type=int, default=256)
    parser.add_argument("--held-out", action="store_true", help="the products no run trains on (at most 128)")
    parser.add_argument(
        "--sign-noise", type=float, default=0.0, help="move every weight by +-this first (random signs)"
    )
    args = parser.parse_args()
    torch.set_num_threads(1)
    cfg = load_config(CONFIG, [f"run.seed={args.seed}", f"task.num_eval_rows={args.rows}"])
    if args.held_out:
        rows = MathToolEnv.make_eval_rows(args.rows, args.seed)
    else:
        rows = MathToolEnv.make_rows(args.rows, args.seed + 7_919)
    executor = ToolExecutor(cfg.tools.sandbox_limits, cfg.tools.sandbox, max_workers=cfg.tools.max_workers)
    print(
        f"{'model':<40} " + " ".join(f"{k:>10}" for k in (*OUTCOMES, "answer_logp", "answer_argmax", "copy_accuracy"))
    )
    for model in args.models:
        r = evaluate(model, rows, cfg, executor, args.sign_noise)
        right = r["copied"] + r["guessed"]
        se = math.sqrt(right * (1 - right) / len(rows))
        cells = " ".join(f"{r[k]:>10.3f}" for k in (*OUTCOMES, "answer_logp", "answer_argmax", "copy_accuracy"))
        print(f"{model[-40:]:<40} {cells}   (right {right:.3f} +- {se:.3f} s.e.)")


if __name__ == "__main__":
    main()
