"""The HF engine's shared prefill (relay/engines/hf_prefill.py): generate time with rows of one
prompt prefilling it once against every row prefilling it (`share_prefill=False`), on the default
task's step (configs/default.yaml: training.prompts_per_step x rollout.n rows, rollout.max_new_tokens
new tokens) and on a larger one (--large-prompts x rollout.n rows). Both engines generate from one
module, one call each per round, taking turns (who goes first alternates), each round on new
prompts and a new seed; the rows reach the engine as the agent loop hands them over (each prompt
rollout.n times, n=1). Prints medians, their ratio, and whether every token id and logprob was
identical in every round. Numbers, never assertions.

    python benchmarks/shared_prefill.py [--rounds 20] [--large-prompts 32] [--threads 1]
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
from relay.config.role_settings import EngineSettings  # noqa: E402
from relay.engines import make_engine  # noqa: E402
from relay.engines.base import SamplingParams  # noqa: E402
from relay.engines.hf import HFEngine  # noqa: E402
from relay.envs.chat import ChatFormat  # noqa: E402
from relay.envs.data import row_messages  # noqa: E402
from relay.run.model_source import resolve_model_path  # noqa: E402
from relay.run.rows import task_rows  # noqa: E402


def timed(engine: HFEngine, prompts: list[list[int]], sampling: SamplingParams) -> tuple[float, list]:
    start = time.perf_counter()
    groups = engine.generate(prompts, sampling)
    return time.perf_counter() - start, [(c.token_ids, c.logprobs) for g in groups for c in g]


def compare(engines: dict[str, HFEngine], prompts: list[list[int]], n: int, max_tokens: int, rounds: int) -> dict:
    """Seconds per generate for each engine over `rounds` alternated rounds, and whether their
    outputs were identical in every round."""
    seconds: dict[str, list[float]] = {name: [] for name in engines}
    identical, tokens = True, 0
    per_round = len(prompts) // rounds
    for k in range(rounds):
        rows = [p for p in prompts[k * per_round : (k + 1) * per_round] for _ in range(n)]
        sampling = SamplingParams(n=1, temperature=1.0, max_tokens=max_tokens, seed=k)
        order = list(engines) if k % 2 == 0 else list(engines)[::-1]
        outputs = {}
        for name in order:
            elapsed, outputs[name] = timed(engines[name], rows, sampling)
            seconds[name].append(elapsed)
        identical &= outputs["shared"] == outputs["unshared"]
        tokens += sum(len(ids) for ids, _ in outputs["shared"])
    return {"seconds": seconds, "identical": identical, "tokens_per_row": tokens / (rounds * per_round * n)}


def report(label: str, result: dict) -> None:
    shared, unshared = (statistics.median(result["seconds"][name]) for name in ("shared", "unshared"))
    print(
        f"{label:<28}{unshared * 1e3:>12.1f}{shared * 1e3:>10.1f}{shared / unshared:>8.2f}"
        f"{result['tokens_per_row']:>9.1f}  {'yes' if result['identical'] else 'NO'}"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=20, help="alternated rounds per batch size")
    parser.add_argument("--large-prompts", type=int, default=32, help="prompts in the larger batch")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (a rollout worker's CPU share)")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    cfg = load_config(REPO / "configs/default.yaml", [])
    path = resolve_model_path(cfg.model, cfg.task, cfg.tools, cfg.critic, cfg.reward_model)
    shared = make_engine(EngineSettings.of(cfg), path)
    engines = {"shared": shared, "unshared": HFEngine.sharing(shared.model, shared.tokenizer, share_prefill=False)}
    fmt = ChatFormat(shared.tokenizer, prompt_format=cfg.task.prompt_format)
    rows, _ = task_rows(cfg.task, cfg.tools, cfg.run.seed)
    r, per_step = cfg.rollout, cfg.training.prompts_per_step
    need = max(per_step, args.large_prompts) * args.rounds
    prompts = [fmt.prompt_ids(row_messages(row, cfg.task.system_prompt)) for row in (rows * need)[:need]]
    compare(engines, prompts[: 2 * per_step], r.n, r.max_new_tokens, rounds=2)  # warm-up
    print(f"HF engine, {args.threads} thread(s), {args.rounds} alternated rounds; medians of one generate call:")
    print(f"{'batch':<28}{'unshared ms':>12}{'shared ms':>10}{'ratio':>8}{'tok/row':>9}  identical")
    for prompts_per_call in (per_step, args.large_prompts):
        result = compare(engines, prompts[: prompts_per_call * args.rounds], r.n, r.max_new_tokens, args.rounds)
        label = f"{prompts_per_call} x {r.n} rows, {r.max_new_tokens} tokens"
        report(label, result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
