"""training.mixed_precision=bf16 on one learner actor (relay/update/precision.py): the matmuls run
in bf16, the master weights, their gradients and AdamW's state stay float32, and the update moves
the weights about as the float32 update does."""

import pytest
import torch

from actors.learner import Learner
from relay.config import load_config
from relay.config.role_settings import PolicySettings
from relay.config.validate_pipeline import is_sharded
from relay.types import Batch, Sample
from relay.update.precision import bf16_unsupported

BF16 = ["training.mixed_precision=bf16", "training.micro_batch_size=4"]
pytestmark = pytest.mark.skipif(bf16_unsupported(torch.device("cpu")) is not None, reason="no bf16 on this CPU")


def make_batch() -> Batch:
    g = torch.Generator().manual_seed(0)
    samples = [
        Sample(
            prompt_ids=torch.randint(3, 30, (3 + i % 3,), generator=g).tolist(),
            response_ids=torch.randint(3, 30, (2 + i % 4,), generator=g).tolist(),
            loss_mask=[1] * (2 + i % 4),
            rollout_logprobs=(-torch.rand(2 + i % 4, generator=g) * 3).tolist(),
            reward=float(i % 2),
            group_id=i // 2,
        )
        for i in range(8)
    ]
    batch = Batch.from_samples(samples, pad_id=0)
    batch.advantages = (torch.randn(batch.loss_mask.shape, generator=g) * batch.loss_mask).float()
    return batch


def learner(tiny_model_path, overrides: list[str]) -> Learner:
    return Learner(PolicySettings.of(load_config(None, overrides)), tiny_model_path, num_threads=1)


def test_one_learner_runs_mixed_precision_itself():
    """bf16 alone no longer makes a rank group: FSDP2 is for several ranks (or cpu_offload)."""
    cfg = load_config(None, ["training.mixed_precision=bf16"])
    assert not is_sharded(cfg.training, 1) and is_sharded(cfg.training, 2)


def test_bf16_step_keeps_float32_masters_and_moves_the_weights(tiny_model_path):
    bf16, fp32 = learner(tiny_model_path, BF16), learner(tiny_model_path, ["training.micro_batch_size=4"])
    assert bf16.model.config._attn_implementation == "eager_grouped"  # bf16 on a CPU (relay/config/model.py)
    batch = make_batch()
    # the model's matmuls run in bf16: the linear layers' outputs and the logits come out bf16
    seen = []
    layer = next(m for m in bf16.model.modules() if isinstance(m, torch.nn.Linear))
    layer.register_forward_hook(lambda _m, _i, out: seen.append(out.dtype))
    with torch.no_grad():
        logits = bf16.model(input_ids=batch.input_ids, attention_mask=batch.attention_mask).logits
    assert seen == [torch.bfloat16] and logits.dtype == torch.bfloat16
    # ... and the logprobs the loss reads are float32, within bf16's rounding of float32's
    gap = (bf16.compute_logprobs(batch) - fp32.compute_logprobs(batch)).abs() * batch.loss_mask
    assert bf16.compute_logprobs(batch).dtype == torch.float32
    mean = float(gap.sum() / batch.loss_mask.sum())
    print(f"bf16 vs float32 logprobs: mean gap {mean:.2e}, largest {float(gap.max()):.2e}")
    assert 0 < mean < 0.05 and float(gap.max()) < 0.2  # bf16 keeps 8 bits of mantissa: ~0.4% of a logit

    before = {n: p.detach().clone() for n, p in bf16.model.named_parameters()}
    metrics = {"bf16": bf16.update(batch), "fp32": fp32.update(make_batch())}
    assert all(torch.isfinite(torch.tensor(m["actor/loss"])) for m in metrics.values())
    moved = {n: (p.detach() - before[n]).abs().max() for n, p in bf16.model.named_parameters()}
    assert all(p.dtype == torch.float32 for p in bf16.model.parameters())
    assert all(p.grad is None or p.grad.dtype == torch.float32 for p in bf16.model.parameters())
    state = [s for s in bf16.optimizer.state.values()]
    assert state and all(t.dtype == torch.float32 for s in state for k, t in s.items() if k != "step")
    assert sum(float(m > 0) for m in moved.values()) >= len(moved) * 0.9  # about every tensor trained
    # the same step from the same weights, in bf16 and float32, moves them alike. Adam's first step
    # is about lr * sign(gradient), so a gradient near 0 may flip: compare the whole step's direction
    fp32_after = dict(fp32.model.named_parameters())
    step_bf16 = torch.cat([(p.detach() - before[n]).flatten() for n, p in bf16.model.named_parameters()])
    step_fp32 = torch.cat([(fp32_after[n].detach() - before[n]).flatten() for n, _ in bf16.model.named_parameters()])
    cosine = float(torch.nn.functional.cosine_similarity(step_bf16, step_fp32, dim=0))
    print(f"bf16 vs float32 update: cosine similarity {cosine:.3f}")
    assert cosine > 0.9
    print({k: (metrics["bf16"][k], metrics["fp32"][k]) for k in ("actor/loss", "actor/grad_norm")})
    assert metrics["bf16"]["actor/grad_norm"] == pytest.approx(metrics["fp32"]["actor/grad_norm"], rel=0.1)


def test_a_device_without_bf16_is_refused_in_one_line(tiny_model_path, monkeypatch):
    import relay.update.precision as precision

    monkeypatch.setattr(precision, "bf16_unsupported", lambda device: "this CPU has no bf16 matmul support")
    with pytest.raises(RuntimeError) as refused:
        learner(tiny_model_path, BF16)
    assert "\n" not in str(refused.value) and "training.mixed_precision=none" in str(refused.value)
    learner(tiny_model_path, [])  # float32 runs anywhere
