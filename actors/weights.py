"""Weight sync learner -> rollout workers. On CPU and across nodes: the object store."""
from __future__ import annotations

import time

import ray


def sync_weights(learner, workers: list, version: int) -> float:
    """Put once (the learner's return value stays in the object store), every worker reads it."""
    start = time.perf_counter()
    weights = learner.get_weights.remote()
    ray.get([w.update_weights.remote(weights, version) for w in workers])
    return time.perf_counter() - start
