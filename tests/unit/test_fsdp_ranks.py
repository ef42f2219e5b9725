"""FSDP2 rank groups (relay/update/fsdp.py, actors/rank_group.py) against one process: the tiny model in
fp32 over gloo, 3 optimizer steps x 2 mini-batches with a cosine schedule, learner and critic."""

import pytest
import torch

from tests.fsdp_ranks import SAVE_AFTER, STEPS, one_process, relative_difference, run_ranks

# A key projection's bias adds q.b to every logit of a query's row, which softmax ignores: its
# gradient is 0 in exact arithmetic, so what reaches it is float noise, and Adam (which divides by
# the gradient's own scale) turns that noise into steps of about lr. Those tensors differ by lr-sized
# amounts between any two float orders (even two runs on one process with another micro-batching).
NOISE_ONLY = ".self_attn.k_proj.bias"
KEYS = {"learner": ("actor/loss", "actor/grad_norm", "actor/lr"), "critic": ("critic/vf_loss", "critic/grad_norm")}


@pytest.fixture(scope="module")
def two_ranks(tmp_path_factory, tiny_model_path):
    folder = tmp_path_factory.mktemp("fsdp")
    return folder, run_ranks(2, tiny_model_path, folder, resume=False)


def largest_difference(a: dict, b: dict, steps) -> tuple[float, str]:
    diffs = []
    for role, keys in KEYS.items():
        diffs += [
            (relative_difference(a[role]["metrics"][s][k], b[role]["metrics"][s][k]), f"{role} {k} step {s}")
            for s in steps
            for k in keys
        ]
    return max(diffs)


def test_two_ranks_train_like_one_process(two_ranks, tiny_model_path):
    _, sharded = two_ranks
    single = one_process(tiny_model_path)
    worst = largest_difference(sharded, single, range(1, STEPS + 1))
    for role in KEYS:
        assert relative_difference(sharded[role]["forward"], single[role]["forward"]) < 1e-5, role
        weights = max(
            (relative_difference(w, single[role]["weights"][k]), k)
            for k, w in sharded[role]["weights"].items()
            if not k.endswith(NOISE_ONLY)
        )
        print(
            f"{role}: largest relative difference of a weight tensor after {STEPS} steps: {weights[0]:.2e} ({weights[1]})"
        )
        noise = max(
            relative_difference(w, single[role]["weights"][k])
            for k, w in sharded[role]["weights"].items()
            if k.endswith(NOISE_ONLY)
        )
        print(f"{role}: key-projection biases (gradient 0 but float noise), largest: {noise:.2e}")
        assert weights[0] < 1e-5
        assert sharded[role]["weights"].keys() == single[role]["weights"].keys()
    print(f"largest relative difference of a metric: {worst[0]:.2e} ({worst[1]})")
    assert worst[0] < 1e-5, worst


def test_two_rank_checkpoint_resumes_on_one_process(two_ranks, tiny_model_path):
    folder, sharded = two_ranks
    resumed = one_process(tiny_model_path, checkpoint=folder / "checkpoint")
    worst = largest_difference(resumed, sharded, range(SAVE_AFTER + 1, STEPS + 1))
    print(f"2 ranks -> 1 process: largest relative difference after resume: {worst[0]:.2e} ({worst[1]})")
    assert worst[0] < 1e-5, worst


@pytest.mark.slow
@pytest.mark.parametrize("world", [2, 3])
def test_two_rank_checkpoint_resumes_on_two_and_three_ranks(two_ranks, tiny_model_path, world):
    folder, sharded = two_ranks
    resumed = run_ranks(world, tiny_model_path, folder, resume=True)
    steps = range(SAVE_AFTER + 1, STEPS + 1)
    if world == 2:  # the same world size: exactly the uninterrupted run
        for role, keys in KEYS.items():
            for s in steps:
                for k in keys:
                    assert resumed[role]["metrics"][s][k] == sharded[role]["metrics"][s][k], (role, s, k)
    worst = largest_difference(resumed, sharded, steps)
    print(f"2 ranks -> {world} ranks: largest relative difference after resume: {worst[0]:.2e} ({worst[1]})")
    assert worst[0] < 1e-5, worst


@pytest.mark.slow
def test_memory_options_on_two_ranks(two_ranks, tiny_model_path, tmp_path):
    """Activation checkpointing recomputes the same numbers; token-budget micro-batches give the
    same update from the same weights up to float error (later steps start from weights that
    differ by that error, amplified by Adam, so only step 1 is held to 1e-5); bf16 mixed
    precision trains with fp32 master weights and stays near the fp32 run."""
    _, fp32 = two_ranks
    runs = {}
    for name, option in (
        ("checkpointing", "training.activation_checkpointing=true"),
        ("budget", "training.max_tokens_per_micro_batch=12"),
        ("bf16", "training.mixed_precision=bf16"),
    ):
        (tmp_path / name).mkdir()
        runs[name] = run_ranks(2, tiny_model_path, tmp_path / name, False, [option])
    for name, steps, limit in (("checkpointing", range(1, STEPS + 1), 1e-5), ("budget", range(1, 2), 1e-5)):
        every = largest_difference(runs[name], fp32, range(1, STEPS + 1))
        worst = largest_difference(runs[name], fp32, steps)
        print(
            f"{name} vs plain: largest relative difference {worst[0]:.2e} ({worst[1]}); over all steps {every[0]:.2e}"
        )
        assert worst[0] < limit, (name, worst)
    assert all(w.dtype == torch.float32 for w in runs["bf16"]["learner"]["weights"].values())
    worst = largest_difference(runs["bf16"], fp32, range(1, 2))
    print(f"bf16 mixed precision vs fp32, step 1: largest relative difference {worst[0]:.2e} ({worst[1]})")
    assert worst[0] < 0.05, worst
