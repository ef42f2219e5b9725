"""RolloutWorker: one Engine and the agent loop; returns Samples with exact token ids."""
from __future__ import annotations

import time
from typing import Any

import torch

from relay.config import Config
from relay.data import row_messages
from relay.engines import make_engine
from relay.engines.base import SamplingParams
from relay.types import Sample


class RolloutWorker:
    def __init__(self, cfg: Config, model_path: str, worker_index: int, num_threads: int):
        torch.set_num_threads(num_threads)
        self.cfg, self.index = cfg, worker_index
        self.engine = make_engine(cfg, model_path)
        self.tokenizer = self.engine.tokenizer

    def encode_prompt(self, row: dict[str, Any]) -> list[int]:
        text = self.tokenizer.apply_chat_template(row_messages(row, self.cfg.task.system_prompt), add_generation_prompt=True, tokenize=False)
        return self.tokenizer(text, add_special_tokens=False).input_ids

    def sampling(self, step: int, greedy: bool = False) -> SamplingParams:
        r = self.cfg.rollout
        return SamplingParams(
            n=1 if greedy else r.n, temperature=0.0 if greedy else r.temperature, top_p=r.top_p, top_k=r.top_k,
            max_tokens=r.max_new_tokens, stop=r.stop,
            # A seed per (run, step, worker) makes rollouts reproducible, so a resumed run
            # samples exactly what the uninterrupted run sampled.
            seed=(self.cfg.run.seed * 1_000_003 + step * 1_009 + self.index) % 2**31,
        )

    def rollout(self, rows: list[dict[str, Any]], step: int, first_group_id: int, greedy: bool = False) -> tuple[list[Sample], dict[str, float]]:
        start = time.perf_counter()
        prompts = [self.encode_prompt(row) for row in rows]
        groups = self.engine.generate(prompts, self.sampling(step, greedy))
        samples = []
        for i, (row, prompt_ids, completions) in enumerate(zip(rows, prompts, groups)):
            for c in completions:
                samples.append(Sample(
                    prompt_ids=prompt_ids, response_ids=c.token_ids, rollout_logprobs=c.logprobs,
                    loss_mask=[1] * len(c.token_ids), group_id=first_group_id + i,
                    weight_version=self.engine.weight_version, finish_reason=c.finish_reason,
                    turn_spans=[(0, len(c.token_ids))],
                    meta={"ground_truth": row.get("ground_truth"), "response_text": self.tokenizer.decode(c.token_ids, skip_special_tokens=True)},
                ))
        seconds = time.perf_counter() - start
        tokens = sum(len(s.response_ids) for s in samples)
        return samples, {"rollout/tokens": tokens, "rollout/seconds": seconds, "rollout/tokens_per_s": tokens / max(seconds, 1e-9)}

    def update_weights(self, named_tensors: dict, version: int) -> float:
        start = time.perf_counter()
        self.engine.update_weights(named_tensors, version)
        return time.perf_counter() - start

    def weight_version(self) -> int:
        return self.engine.weight_version

    def peak_memory_mb(self) -> float:
        return peak_rss_mb()


def peak_rss_mb() -> float:
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
