"""The learner's forward with each distinct prompt run once (relay/update/policy.py:
shared_prompt_logits) against every row running its prompt, on one step of a recipe: its
training.prompts_per_step prompts from the task's rows, each rollout.n times, with responses of
rollout.max_new_tokens tokens (random ids: the cost does not depend on them), in micro-batches of
training.micro_batch_size rows. One round is the forward and backward of the whole step (what the
update does before its optimizer step); the two take turns, who goes first alternating. Prints
medians, their ratio, and the largest |logprob| difference between the two. Numbers, never
assertions.

    python benchmarks/shared_prompt_update.py                                   # the default task
    python benchmarks/shared_prompt_update.py --config configs/smol_arith.yaml  # SmolLM2-135M-Instruct
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

from relay.config import load_config  # noqa: E402
from relay.envs.chat import ChatFormat  # noqa: E402
from relay.envs.data import row_messages  # noqa: E402
from relay.models.loading import load_model, load_tokenizer  # noqa: E402
from relay.run.model_source import resolve_model_path  # noqa: E402
from relay.run.rows import task_rows  # noqa: E402
from relay.types import Batch, Sample  # noqa: E402
from relay.update.policy import _response_columns, shared_prompt_logits  # noqa: E402


def step_batch(cfg, tokenizer, rows: list, seed: int) -> Batch:
    fmt = ChatFormat(tokenizer, prompt_format=cfg.task.prompt_format)
    g = torch.Generator().manual_seed(seed)
    length, samples = cfg.rollout.max_new_tokens, []
    for row in rows:
        prompt = fmt.prompt_ids(row_messages(row, cfg.task.system_prompt))
        for _ in range(cfg.rollout.n):
            response = torch.randint(3, len(tokenizer), (length,), generator=g).tolist()
            samples.append(Sample(prompt, response, loss_mask=[1] * length, rollout_logprobs=[0.0] * length))
    return Batch.from_samples(samples, pad_id=tokenizer.pad_token_id or 0)


def forward_backward(model, batch: Batch, micro: int, shared: bool) -> tuple[float, torch.Tensor]:
    """Seconds for the step's forward and backward, and the response logprobs [B,R]."""
    start, logprobs = time.perf_counter(), []
    for first in range(0, len(batch), micro):
        part = batch.select(list(range(first, min(first + micro, len(batch)))))
        width = part.responses.shape[1] + 1
        logits = shared_prompt_logits(model, part) if shared else _response_columns(model, part, logits_to_keep=width)
        lp = torch.log_softmax(logits.float(), -1).gather(-1, part.responses.unsqueeze(-1)).squeeze(-1)
        lp.sum().backward()
        logprobs.append(lp.detach())
    model.zero_grad(set_to_none=True)
    return time.perf_counter() - start, torch.cat(logprobs)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", default=str(REPO / "configs/default.yaml"))
    parser.add_argument("--rounds", type=int, default=6, help="alternated rounds, each on new prompts")
    parser.add_argument("--threads", type=int, default=2, help="torch threads (the learner's, in a sync step)")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    cfg = load_config(args.config, [])
    path = resolve_model_path(cfg.model, cfg.task, cfg.tools, cfg.critic, cfg.reward_model)
    tokenizer = load_tokenizer(path, cfg.model.trust_remote_code)
    model = load_model(path, "float32", cfg.model.trust_remote_code).eval()  # the learner's: dropout off
    rows, _ = task_rows(cfg.task, cfg.tools, cfg.run.seed)
    per_step, micro = cfg.training.prompts_per_step, cfg.training.micro_batch_size
    seconds: dict[str, list[float]] = {"full": [], "shared": []}
    largest = 0.0
    for k in range(args.rounds + 1):  # round 0 warms up
        step_rows = [rows[(k * per_step + i) % len(rows)] for i in range(per_step)]
        batch = step_batch(cfg, tokenizer, step_rows, seed=k)
        out = {}
        for name in ("full", "shared") if k % 2 == 0 else ("shared", "full"):
            elapsed, out[name] = forward_backward(model, batch, micro, shared=name == "shared")
            if k:
                seconds[name].append(elapsed)
        largest = max(largest, float((out["full"] - out["shared"]).abs().max()))
    full, shared = (statistics.median(seconds[name]) for name in ("full", "shared"))
    print(
        f"{Path(args.config).name}: {per_step} prompts x {cfg.rollout.n} rows, prompt {batch.prompt_width} "
        f"and response {batch.responses.shape[1]} tokens, micro-batches of {micro}, {args.threads} thread(s), "
        f"{args.rounds} alternated rounds"
    )
    print(f"forward+backward of the step (median): every row's prompt {full:.2f} s, each prompt once {shared:.2f} s")
    print(f"ratio {shared / full:.2f}; largest |logprob difference| {largest:.1e}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
