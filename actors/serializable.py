"""What a rollout worker checks before it returns its samples: that each one pickles.

A sample holds data the run does not control (tool-call arguments the model wrote, environment
infos, ground truth). One that cannot be pickled (nested past the recursion limit, or an object no
pickler takes) would make Ray fail the whole rollout's return (RayTaskError(PicklingError)), which
supervision does not retry. Found before the return, it is replaced by a failed-sample record instead
and counted (faults/unserializable_samples). Cost: benchmarks/serialize_check.py.
"""

from __future__ import annotations

import pickle

import ray

from relay.types import Sample

# Ray pickles a rollout's return value some frames deeper than the rollout method runs, and inside
# a tuple and a list; pickle counts each level of nesting against the same recursion limit as a
# frame. Samples are checked wrapped in this many extra levels, so what passes pickles there too
# (measured in an actor: without the headroom a sample at the check's edge failed Ray's pickling).
PICKLE_HEADROOM = 64


def unpicklable(samples: list[Sample]) -> list[tuple[int, str]]:
    """(index, why) of each sample that would not pickle as Ray pickles it. The whole list is pickled
    once (about 10 us per sample with the C pickler); only when that fails, each sample on its own."""
    if pickle_failure(samples) is None:
        return []
    return [(i, why) for i, s in enumerate(samples) if (why := pickle_failure(s)) is not None]


def pickle_failure(obj: object) -> str | None:
    """None when `obj` pickles with PICKLE_HEADROOM levels to spare, else why not."""
    for _ in range(PICKLE_HEADROOM):
        obj = (obj,)
    try:
        pickle.dumps(obj, protocol=5)
        return None
    except Exception:
        pass
    try:  # what only cloudpickle takes (a lambda, a class made at run time), Ray takes too
        ray.cloudpickle.dumps(obj, protocol=5)
        return None
    except Exception as e:  # RecursionError, PicklingError, TypeError, ...: the return would fail
        return f"{type(e).__name__}: {str(e)[:200]}"


def unserializable_record(s: Sample, why: str) -> Sample:
    """What stands in for a sample that would not pickle: its exact tokens and turns (the episode
    happened), its tool calls without their arguments, no environment record or ground truth, and
    meta["unserializable"] = why; _report gives it a reward error, so it is counted and not trained on."""
    calls = [
        {
            "name": None if c.get("name") is None else str(c["name"]),
            "arguments": None,
            "ok": bool(c.get("ok")),
            "error": None if c.get("error") is None else str(c["error"]),
            "seconds": float(c.get("seconds", 0.0)),
            "turn": int(c.get("turn", 0)),
        }
        for c in s.tool_calls
    ]
    agent = {k: float(v) for k, v in s.meta.get("agent", {}).items()}
    return Sample(
        prompt_ids=list(s.prompt_ids),
        response_ids=list(s.response_ids),
        rollout_logprobs=list(s.rollout_logprobs),
        loss_mask=list(s.loss_mask),
        group_id=s.group_id,
        weight_version=s.weight_version,
        token_versions=list(s.token_versions),
        finish_reason=s.finish_reason,
        turn_spans=list(s.turn_spans),
        tool_calls=calls,
        response_text=str(s.response_text),
        final_text=str(s.final_text),
        turn_texts=[str(t) for t in s.turn_texts],
        meta={"episode_id": str(s.meta.get("episode_id", "")), "agent": agent, "unserializable": why},
    )
