"""Training samples from an agent program's episode: one per chain of calls (relay/endpoint/episodes.py).

A chain's sample has the exact ids the engine read and wrote: the prompt of its first call, then
each call's sampled tokens (loss mask 1, with their logprobs and weight version) and the tokens
fed between two calls (tool results, user turns: loss mask 0). Every sample of an episode gets
the episode's reward (what the agent program returned), so any estimator trains on them; an
episode whose program raised keeps its samples as records with a reward error (counted, never
trained on), and one that made no call has no sample (`agent/episodes_without_calls`).
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from typing import Any

from relay.endpoint.episodes import EpisodeRecord, tool_call_records
from relay.types import FinishReason, Sample


@dataclass
class AgentOutcome:
    """What one run of the agent program gave: its reward and info, or why it has none."""

    reward: float | None = None
    info: dict[str, Any] = field(default_factory=dict)
    error: str | None = None


class AgentFailed(RuntimeError):
    """The agent program raised or returned no reward: the reward function reports it as a reward error."""


def agent_reward(sample: Sample) -> float:
    """task.agent's reward function: the reward the agent program returned for the episode."""
    result = sample.meta["agent_result"]
    if result["error"] is not None:
        raise AgentFailed(result["error"])
    return result["reward"]


def episode_samples(record: EpisodeRecord, outcome: AgentOutcome, row: dict, group_id: int, tokenizer) -> list[Sample]:
    leaves = record.leaves()
    samples = []
    for index, leaf in enumerate(leaves):
        chain = record.chain(leaf)
        prompt = chain[0][0].prompt_ids
        response, logprobs, mask, versions, spans, texts = [], [], [], [], [], []
        for i, (call, choice) in enumerate(chain):
            if i:  # what was fed between the previous call's tokens and this call's: loss mask 0
                fed = call.prompt_ids[len(prompt) + len(response) :]
                response += fed
                logprobs += [0.0] * len(fed)
                mask += [0] * len(fed)
                versions += [versions[-1] if versions else choice.version] * len(fed)
            spans.append((len(response), len(response) + len(choice.token_ids)))
            response += choice.token_ids
            logprobs += choice.logprobs
            mask += [1] * len(choice.token_ids)
            versions += [choice.version] * len(choice.token_ids)
            texts.append(choice.text)
        last = chain[-1][1]
        tool_calls = tool_call_records(chain)
        samples.append(
            Sample(
                prompt_ids=list(prompt),
                response_ids=response,
                rollout_logprobs=logprobs,
                loss_mask=mask,
                group_id=group_id,
                weight_version=min(versions),
                token_versions=versions,
                finish_reason=FinishReason.LENGTH if last.finish == "length" else FinishReason.STOP,
                turn_spans=spans,
                tool_calls=tool_calls,
                ground_truth=row.get("ground_truth"),
                response_text=tokenizer.decode(response, skip_special_tokens=True),
                final_text=texts[-1],
                turn_texts=texts,
                meta={
                    "episode_id": record.id,
                    "agent": {
                        "turns": len(chain),
                        "tool_calls": len(tool_calls),
                        "tool_errors": 0,
                        "tool_seconds": 0.0,
                        "env_steps": 0,
                        "calls": len(record.calls),
                        "splits": record.splits,
                        "sample_index": index,
                    },
                    "agent_result": {"reward": outcome.reward, "info": outcome.info, "error": outcome.error},
                },
            )
        )
    return samples


def agent_metrics(
    records: list[EpisodeRecord], outcomes: list[AgentOutcome], samples: list[Sample]
) -> dict[str, float]:
    """Per rollout call: calls and splits per episode, samples per episode, failures (the driver sums
    the counts over workers and keeps the last worker's means)."""
    if not records:
        return {}
    return {
        "agent/calls_mean": statistics.fmean(len(r.calls) for r in records),
        "agent/history_splits": float(sum(r.splits for r in records)),
        # continued chat calls whose history, rendered and re-tokenized, would not be the tokens served
        "agent/retokenize_drift_calls": float(sum(c.drift is True for r in records for c in r.calls)),
        "agent/samples_per_episode": len(samples) / len(records),
        "agent/episodes_without_calls": float(sum(not r.calls for r in records)),
        "agent/program_errors": float(sum(o.error is not None for o in outcomes)),
    }
