"""model.attn_implementation's null on a CPU in bf16 (relay/config/model.py with_cpu_attention):
eager_grouped, which the learner and the engine then load; anything set, float32 or a GPU keeps its choice."""

import pytest

from relay.config import load_config


@pytest.mark.parametrize(
    ("overrides", "kernel"),
    [
        (["training.mixed_precision=bf16"], "eager_grouped"),
        (["model.dtype=bfloat16"], "eager_grouped"),
        ([], None),  # float32: the library's sdpa
        (["training.mixed_precision=bf16", "model.attn_implementation=sdpa"], "sdpa"),
        (["training.mixed_precision=bf16", "resources.learner.gpus=1"], None),
    ],
)
def test_bf16_on_a_cpu_resolves_to_eager_grouped_attention(overrides, kernel):
    assert load_config(None, overrides).model.attn_implementation == kernel
