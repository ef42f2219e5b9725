"""chat_tool's greedy held-out accuracy per expression shape, for model folders (a run's
final_model): which shapes imitation carried and which reward taught.

    python benchmarks/chat_tool_shapes.py MODEL [MODEL ...] [--seed 0] [--rows 128] [--wrong 2]

In one process, no Ray: the driver's agent loop, hermes parser and bubblewrap sandbox with
configs/smol_tool_few_demos.yaml's limits, greedy, on the held-out problems run.seed=SEED
evaluates (relay.envs.chat_tool.make_rows). Per model it prints the accuracy over all of them and
per shape (relay.envs.chat_tool.SHAPES), then the code of the first --wrong failures per shape.
Numbers, never assertions.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from actors.tools import ToolExecutor  # noqa: E402  (plain class, no Ray needed)
from relay.agent.loop import AgentLimits, AgentLoop  # noqa: E402
from relay.config import load_config  # noqa: E402
from relay.engines.base import SamplingParams  # noqa: E402
from relay.engines.hf import HFEngine  # noqa: E402
from relay.envs import chat_tool  # noqa: E402
from relay.envs.tool_tasks import tool_answer_reward  # noqa: E402
from relay.tools.parsers import get_parser  # noqa: E402

CONFIG = Path(__file__).resolve().parents[1] / "configs/smol_tool_few_demos.yaml"


def first_code(sample) -> str:
    """The code of the episode's first tool call, or what it did instead."""
    for call in sample.tool_calls:
        args = call["arguments"]
        return str(args.get("code")) if isinstance(args, dict) else f"(a call that did not parse: {call['error']})"
    return "(no tool call)"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("models", nargs="+")
    parser.add_argument("--seed", type=int, default=0, help="the run.seed whose held-out problems to ask")
    parser.add_argument("--rows", type=int, default=128)
    parser.add_argument("--wrong", type=int, default=2, help="failures shown per shape")
    args = parser.parse_args()
    cfg = load_config(CONFIG, [f"run.seed={args.seed}"])
    _, rows = chat_tool.make_rows(0, args.rows, args.seed)
    executor = ToolExecutor(cfg.tools.sandbox_limits, cfg.tools.sandbox, max_workers=cfg.tools.max_workers)
    for model in args.models:
        engine = HFEngine(model, attn_implementation=cfg.model.attn_implementation)
        loop = AgentLoop(
            engine,
            engine.tokenizer,
            AgentLimits.of(cfg.rollout, cfg.tools),
            parser=get_parser(cfg.tools.parser),
            run_tools=executor.run_batch,
        )
        samples = loop.run(rows, SamplingParams(n=1, temperature=0.0, max_tokens=cfg.rollout.max_new_tokens, seed=0))
        by_shape: dict[str, list[tuple[float, dict, object]]] = {name: [] for name in chat_tool.SHAPES}
        for row, sample in zip(rows, samples):
            by_shape[row["shape"]].append((tool_answer_reward(sample), row, sample))
        right = sum(r for results in by_shape.values() for r, _, _ in results) / len(rows)
        cells = "  ".join(
            f"{name} {sum(r for r, _, _ in v) / max(len(v), 1):.3f} ({len(v)})" for name, v in by_shape.items()
        )
        print(f"{model}: held-out {right:.3f} | {cells}")
        for name, results in by_shape.items():
            for _, row, sample in [x for x in results if x[0] < 1][: args.wrong]:
                print(f"    {name}: {row['messages'][-1]['content']} -> {first_code(sample)}")


if __name__ == "__main__":
    torch.set_num_threads(2)
    main()
