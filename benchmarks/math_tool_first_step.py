"""What one GRPO update does to math_tool's warm start, and which tokens' loss does it.

    python benchmarks/math_tool_first_step.py [--batches 2] [--lr 3e-4] [--rows 256]

In one process, no Ray. Each batch is 16 training prompts x 8 episodes sampled at T=1 from the
shipped warm start through the agent loop and the sandbox (as a training step rolls them out),
rewarded by MathToolEnv, with GRPO advantages (relay.algos). For the policy-gradient loss
(token-mean, ratio 1 as in a first update) on every model token, on the tool-call turns only,
and on the final answer turn only, it prints
  cos(g, h)       the cosine between the batch gradient g (ascent) and h, the gradient of the mean
                  log-likelihood of the right answers on the held-out rows (the right call and its
                  result teacher-forced): how much of the step points where held-out copying improves;
  cos(sign g, h)  the same for sign(g), AdamW's first step;
  copy accuracy   after ONE AdamW step at --lr from the warm start: the share of held-out rows whose
                  whole answer greedy decoding copies right (benchmarks/math_tool_failures.py).
Then cos(g, h) for the gradient summed over all the batches: the signal a larger batch would carry.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import math_tool_failures as failures  # noqa: E402  (the loop, the held-out rows, copy accuracy)

from actors.tools import ToolExecutor  # noqa: E402
from relay.algos.advantages import compute_advantages  # noqa: E402
from relay.config import load_config  # noqa: E402
from relay.engines.base import SamplingParams  # noqa: E402
from relay.engines.hf import HFEngine  # noqa: E402
from relay.envs.math_tool import MathToolEnv  # noqa: E402
from relay.models.loading import load_model  # noqa: E402
from relay.models.shipped import tiny_model  # noqa: E402

PARTS = ("all", "tool_call", "answer")


def part_mask(sample, part: str) -> list[int]:
    """The sample's loss mask kept on `part`'s model turns only."""
    spans = {"all": sample.turn_spans, "tool_call": sample.turn_spans[:-1], "answer": sample.turn_spans[-1:]}[part]
    if part == "answer" and len(sample.turn_spans) < 2:
        spans = []  # a direct answer is not an answer copied from a tool result
    mask = [0] * len(sample.response_ids)
    for start, end in spans:
        mask[start:end] = sample.loss_mask[start:end]
    return mask


def flat_grad(model) -> torch.Tensor:
    return torch.cat([(p.grad if p.grad is not None else torch.zeros_like(p)).reshape(-1) for p in model.parameters()])


def held_out_gradient(path: str, engine: HFEngine, rows: list[dict]) -> torch.Tensor:
    model = load_model(path)
    prompts, responses, masks = failures.teacher_forced(engine.tokenizer, rows)
    n = sum(len(r) - failures.answer_start(m) for r, m in zip(responses, masks))
    for prompt, response, mask in zip(prompts, responses, masks):
        logp = token_logprobs(model, prompt, response)
        (logp[failures.answer_start(mask) :].sum() / n).backward()
    return flat_grad(model)


def token_logprobs(model, prompt: list[int], response: list[int]) -> torch.Tensor:
    logits = model(input_ids=torch.tensor([prompt + response])).logits[0, len(prompt) - 1 : -1].float()
    return torch.log_softmax(logits, -1).gather(-1, torch.tensor(response)[:, None])[:, 0]


def batch_gradient(model, samples, advantages: torch.Tensor, part: str) -> torch.Tensor:
    masks = [part_mask(s, part) for s in samples]
    total = sum(map(sum, masks))
    for s, a, mask in zip(samples, advantages.tolist(), masks):
        if a != 0 and any(mask):
            logp = token_logprobs(model, s.prompt_ids, s.response_ids)
            ((a * logp * torch.tensor(mask, dtype=logp.dtype)).sum() / total).backward()
    return flat_grad(model)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batches", type=int, default=2)
    parser.add_argument("--lr", type=float, default=3e-4)
    parser.add_argument("--rows", type=int, default=256, help="held-out rows (of run.seed 0)")
    args = parser.parse_args()
    torch.set_num_threads(1)
    cfg = load_config(failures.CONFIG, [])
    path = str(tiny_model(cfg.task.env))
    engine = HFEngine(path)
    executor = ToolExecutor(cfg.tools.sandbox_limits, cfg.tools.sandbox, max_workers=cfg.tools.max_workers)
    loop = failures.agent_loop(engine, cfg, executor)
    held_out = MathToolEnv.make_rows(args.rows, 7_919)
    h = held_out_gradient(path, engine, held_out)
    print(f"warm start: copy accuracy {failures.answer_likelihood(engine, held_out)[2]:.3f}")
    summed = {part: torch.zeros_like(h) for part in PARTS}
    cos = torch.nn.functional.cosine_similarity
    for b in range(args.batches):
        rows = MathToolEnv.make_rows(cfg.training.prompts_per_step, 1_000 + b)
        sampling = SamplingParams(n=cfg.rollout.n, temperature=cfg.rollout.temperature, max_tokens=32, seed=b)
        samples = loop.run(rows, sampling, episode_prefix=f"batch{b}")
        for s in samples:
            s.reward = float(sum(s.meta["env"]["rewards"]))
        advantages, _ = compute_advantages(
            "grpo",
            rewards=torch.tensor([s.reward for s in samples]),
            loss_mask=torch.ones(len(samples), 1),
            group_ids=torch.tensor([s.group_id for s in samples]),
        )
        advantages = advantages[:, 0]
        for part in PARTS:
            model = load_model(path)
            g = batch_gradient(model, samples, advantages, part)
            summed[part] += g
            torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.training.grad_clip)
            torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.0).step()
            stepped = HFEngine.sharing(model.eval(), engine.tokenizer)
            accuracy = failures.answer_likelihood(stepped, held_out)[2]
            print(
                f"batch {b} {part:<9} cos(g, h) {cos(g, h, dim=0).item():+.3f}  "
                f"cos(sign g, h) {cos(g.sign(), h, dim=0).item():+.3f}  copy accuracy after one step {accuracy:.3f}"
            )
    for part in PARTS:
        g = summed[part]
        print(
            f"all {args.batches} batches {part:<9} cos(g, h) {cos(g, h, dim=0).item():+.3f}  "
            f"cos(sign g, h) {cos(g.sign(), h, dim=0).item():+.3f}"
        )


if __name__ == "__main__":
    main()
