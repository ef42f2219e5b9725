"""training.mixed_precision=bf16 end to end on the default task: float32 master weights, bf16
matmuls (relay/update/precision.py). Colocated, the engine generates from the learner's module
under the same autocast; as separate actors with model.dtype=bfloat16, the HF engine holds bf16
weights and each sync converts the learner's float32 weights once. Either way the engine/learner
logprob gap is in every step's metrics."""

import json
from pathlib import Path

import pytest
import torch

from relay.config import load_config
from relay.run import metric_keys as keys
from relay.update.precision import bf16_unsupported
from relay_trainer import loop

REPO = Path(__file__).resolve().parents[2]
SMALL = [
    "training.steps=2",
    "training.prompts_per_step=4",
    "rollout.n=4",
    "task.num_eval_rows=4",
    "training.eval_before=false",
    "logging.console=false",
    "checkpoint.every=0",
    "checkpoint.save_hf_model=false",
    "training.mixed_precision=bf16",
]
LAYOUTS = {
    "colocated": ["resources.colocate=true"],
    "bf16-engine": ["resources.colocate=false", "model.dtype=bfloat16"],
}


@pytest.mark.skipif(bf16_unsupported(torch.device("cpu")) is not None, reason="no bf16 on this CPU")
@pytest.mark.parametrize("layout", LAYOUTS)
def test_bf16_run_trains_and_reports_the_logprob_gap(tmp_path, ray_session, layout):
    cfg = load_config(REPO / "configs/default.yaml", [f"run.output_dir={tmp_path}", *SMALL, *LAYOUTS[layout]])
    summary = loop.train(cfg)
    lines = (Path(summary["run_dir"]) / "metrics.jsonl").read_text().splitlines()
    steps = {m["step"]: m for m in map(json.loads, lines) if "step" in m}
    assert sorted(steps) == [1, 2]
    for step, m in steps.items():
        print(layout, step, {k: m[k] for k in (keys.LOGPROB_GAP, "rollout/logprob_diff_max", "actor/grad_norm")})
        assert m[keys.WEIGHTS_VERSION] == step
        # the same bf16 matmuls on both sides (colocated: one module, one autocast) or bf16 weights
        # against float32 masters cast to bf16 (separate): small either way
        assert 0 <= m[keys.LOGPROB_GAP] < 0.05, (step, m[keys.LOGPROB_GAP])
    assert steps[1]["actor/grad_norm"] > 0  # 4 groups of 4: a later step's may all share one reward
