"""The learning-rate schedule (relay/update/lr_schedule.py) and token-budget micro-batches (relay/update/loop.py)."""

import pytest
import torch

from relay.config import TrainingConfig, load_config
from relay.update.loop import micro_batch_rows, rank_rows, run_update, trim_padding
from relay.update.lr_schedule import lr_factor, make_lr_scheduler
from tests.unit.test_update_loop import TokenRegressor, make_batch


def test_lr_factors_by_hand():
    # warm-up 2 of 6 steps: 1/3, 2/3, then linear 1 -> 0.1 over the remaining 3 intervals
    linear = [lr_factor(s, "linear", 2, 6, 0.1) for s in range(6)]
    assert linear == pytest.approx([1 / 3, 2 / 3, 1.0, 0.7, 0.4, 0.1])
    cosine = [lr_factor(s, "cosine", 0, 3, 0.0) for s in range(3)]
    assert cosine == pytest.approx([1.0, 0.5, 0.0], abs=1e-12)
    assert [lr_factor(s, "constant", 0, 10, 0.0) for s in range(10)] == [1.0] * 10


def test_scheduler_follows_the_factor_and_the_default_keeps_lr_exact():
    model = torch.nn.Linear(2, 1)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4)
    sched = make_lr_scheduler(opt, TrainingConfig(steps=3, mini_batches=2, lr_schedule="linear", min_lr_ratio=0.5))
    seen = []
    for _ in range(6):
        seen.append(opt.param_groups[0]["lr"])
        opt.step()
        sched.step()
    assert seen == pytest.approx([3e-4 * (1 - 0.1 * s) for s in range(6)])
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4)
    make_lr_scheduler(opt, TrainingConfig())
    assert opt.param_groups[0]["lr"] == 3e-4  # exactly: constant multiplies by 1.0


def test_config_rejects_bad_schedule_keys():
    from relay.config import ConfigError

    with pytest.raises(ConfigError) as e:
        load_config(
            None, ["training.warmup_steps=-1", "training.min_lr_ratio=2", "training.max_tokens_per_micro_batch=-5"]
        )
    text = str(e.value)
    assert "training.warmup_steps" in text and "training.min_lr_ratio" in text
    assert "training.max_tokens_per_micro_batch" in text


def test_token_budget_groups_rows_by_length_and_covers_every_row():
    lengths = torch.tensor([5, 1, 9, 2, 8, 3, 7, 4])
    micro = micro_batch_rows(lengths, micro_batch_size=64, max_tokens=10)
    assert sorted(torch.cat(micro).tolist()) == list(range(8))
    assert len(micro) == 4  # ceil(39 / 10)
    for a, b in zip(micro, micro[1:]):  # sorted by length: every row of one is no longer than the next's
        assert lengths[a].max() <= lengths[b].min()
    assert max(int(lengths[m].sum()) for m in micro) <= 2 * 10
    assert [len(m) for m in micro_batch_rows(lengths, 64, 10, count=6)].count(0) <= 6
    assert [len(m) for m in micro_batch_rows(lengths, 3, 0)] == [3, 3, 2]


def test_rank_rows_split_every_row_once():
    assert torch.cat([rank_rows(7, r, 3) for r in range(3)]).tolist() == list(range(7))


def test_trim_padding_keeps_the_logit_columns():
    batch = make_batch()
    micro = trim_padding(batch.select([0, 1]))  # responses of length 1 and 2 (of 4)
    assert micro.responses.shape[1] == 2 and micro.attention_mask.shape[1] == micro.prompt_width + 2
    assert torch.equal(micro.loss_mask, batch.loss_mask[:2, :2])


@pytest.mark.parametrize("agg_mode", ["token-mean", "seq-mean-token-mean"])
def test_token_budget_update_equals_fixed_micro_batches(agg_mode):
    results = []
    for budget in (0, 4, 7):
        model = TokenRegressor()
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        training = TrainingConfig(micro_batch_size=3, max_tokens_per_micro_batch=budget, grad_clip=1e9, mini_batches=2)
        metrics = run_update(
            model,
            optimizer,
            make_batch(),
            model.loss_fn(agg_mode),
            training,
            seed=0,
            weight_by_tokens=agg_mode == "token-mean",
        )
        results.append((metrics["grad_norm"], [p.detach().clone() for p in model.parameters()], metrics["loss"]))
    (norm, params, loss), rest = results[0], results[1:]
    for other_norm, other_params, other_loss in rest:
        assert other_norm == pytest.approx(norm, rel=1e-5)
        assert other_loss == pytest.approx(loss, rel=1e-5)  # the mini-batches' loss, however they are cut
        assert all(torch.allclose(a, b, atol=1e-6) for a, b in zip(other_params, params))
