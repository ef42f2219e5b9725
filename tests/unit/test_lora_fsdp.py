"""LoRA with the FSDP2 learner: two gloo ranks reach the adapters, merged weights and final folder
of one process, and their sharded checkpoint (adapters only) resumes on one process."""

import pytest
import torch
from torch.distributed.checkpoint import FileSystemReader
from transformers import AutoModelForCausalLM

from relay.models.lora import MERGED_FOLDER
from tests.fsdp_ranks import SAVE_AFTER, STEPS, relative_difference
from tests.lora_ranks import one_process, run_lora_ranks


# Two spawned ranks plus one process: minutes on 2 loaded cores.
@pytest.mark.slow
def test_two_lora_ranks_reach_the_weights_of_one_process(tiny_model_path, tmp_path):
    sharded = run_lora_ranks(2, tiny_model_path, tmp_path / "ranks")
    single = one_process(tiny_model_path, tmp_path / "one")
    for step in range(1, STEPS + 1):
        for key in ("actor/loss", "actor/grad_norm"):
            a, b = sharded["metrics"][step][key], single["metrics"][step][key]
            assert relative_difference(a, b) < 1e-5, (step, key, a, b)
    assert sharded["adapters"].keys() == single["adapters"].keys() and sharded["adapters"]
    worst = max(relative_difference(v, single["adapters"][k]) for k, v in sharded["adapters"].items())
    print(f"2 LoRA ranks vs 1 process: largest relative difference of an adapter after {STEPS} steps: {worst:.2e}")
    assert worst < 1e-5
    assert sharded["merged"].keys() == single["merged"].keys()
    assert max(relative_difference(v, single["merged"][k]) for k, v in sharded["merged"].items()) < 1e-5
    assert torch.equal(sharded["ref"], single["ref"])  # the base model, adapters off: not trained at all

    # the sharded checkpoint holds the adapters only (and their optimizer state) and resumes on one process
    saved = FileSystemReader(str(tmp_path / "ranks" / "checkpoint")).read_metadata().state_dict_metadata
    model_keys = [k for k in saved if k.startswith("model.")]
    assert model_keys and all(".lora_" in k for k in model_keys)
    resumed = one_process(tiny_model_path, tmp_path / "resumed", checkpoint=tmp_path / "ranks" / "checkpoint")
    for step in range(SAVE_AFTER + 1, STEPS + 1):
        for key in ("actor/loss", "actor/grad_norm"):
            a, b = resumed["metrics"][step][key], sharded["metrics"][step][key]
            assert relative_difference(a, b) < 1e-5, (step, key, a, b)

    merged = AutoModelForCausalLM.from_pretrained(tmp_path / "ranks" / "final_model" / MERGED_FOLDER)
    weights = merged.state_dict()
    assert max(relative_difference(weights[k], v) for k, v in single["merged"].items()) < 1e-5
