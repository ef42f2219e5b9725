import pickle

import pytest
import torch

from relay.types import Batch, FinishReason, Sample


def test_batch_layout_left_pads_prompts_and_right_pads_responses():
    a = Sample(
        prompt_ids=[5, 6, 7],
        response_ids=[8, 9],
        rollout_logprobs=[-0.5, -0.25],
        loss_mask=[1, 1],
        reward=1.0,
        group_id=0,
        token_rewards={1: 0.5},
    )
    b = Sample(
        prompt_ids=[5],
        response_ids=[8, 9, 10],
        rollout_logprobs=[-1.0, 0.0, -2.0],
        loss_mask=[1, 0, 1],
        reward=0.0,
        group_id=1,
    )
    batch = Batch.from_samples([a, b], pad_id=0)
    assert batch.prompts.tolist() == [[5, 6, 7], [0, 0, 5]]
    assert batch.responses.tolist() == [[8, 9, 0], [8, 9, 10]]
    assert batch.attention_mask.tolist() == [[1, 1, 1, 1, 1, 0], [0, 0, 1, 1, 1, 1]]
    assert batch.position_ids.tolist() == [[0, 1, 2, 3, 4, 4], [0, 0, 0, 1, 2, 3]]
    assert batch.loss_mask.tolist() == [[1, 1, 0], [1, 0, 1]]
    assert batch.token_rewards.tolist() == [[0, 0.5, 0], [0, 0, 0]]
    assert batch.rewards.tolist() == [1.0, 0.0] and batch.group_ids.tolist() == [0, 1]
    batch.advantages = torch.tensor([[1.0, 1, 1], [2, 2, 2]])
    picked = batch.select([1])
    assert picked.responses.tolist() == [[8, 9, 10]] and picked.advantages.tolist() == [[2, 2, 2]]
    assert picked.old_logprobs is None and batch.to("cpu").advantages.tolist() == batch.advantages.tolist()


def test_a_sample_with_no_response_is_a_row_of_padding_after_its_prompt():
    empty = Sample(prompt_ids=[5, 6], reward=0.5)
    batch = Batch.from_samples(
        [empty, Sample(prompt_ids=[7], response_ids=[8], rollout_logprobs=[-1.0], loss_mask=[1])], 0
    )
    assert batch.responses.tolist() == [[0], [8]] and batch.loss_mask.tolist() == [[0], [1]]
    assert batch.attention_mask.tolist() == [[1, 1, 0], [0, 1, 1]]
    assert batch.rollout_logprobs.tolist() == [[0.0], [-1.0]]


def test_step_tensors_are_fields_carried_by_select_and_to():
    a = Sample(prompt_ids=[1, 2], response_ids=[3, 4], rollout_logprobs=[-1.0, -2.0], loss_mask=[1, 1])
    batch = Batch.from_samples([a, a, a], pad_id=0)
    step = ("old_logprobs", "ref_logprobs", "values", "advantages", "returns")
    assert all(getattr(batch, name) is None for name in step)
    for k, name in enumerate(step):
        setattr(batch, name, torch.arange(6, dtype=torch.float).view(3, 2) + 10 * k)
    for moved in (batch.select([2, 0]), batch.to("cpu"), pickle.loads(pickle.dumps(batch))):
        rows = [2, 0] if len(moved) == 2 else [0, 1, 2]
        for name in step:
            assert torch.equal(getattr(moved, name), getattr(batch, name)[rows]), name


def test_finish_reason_is_an_enum_that_reads_as_its_value():
    s = Sample(prompt_ids=[1], finish_reason="budget")
    assert s.finish_reason is FinishReason.BUDGET and s.finish_reason == "budget" and f"{s.finish_reason}" == "budget"
    assert pickle.loads(pickle.dumps(s)).finish_reason is FinishReason.BUDGET  # Samples cross actors pickled
    assert Sample(prompt_ids=[1]).finish_reason is None
    with pytest.raises(ValueError):
        Sample(prompt_ids=[1], finish_reason="timeout")
