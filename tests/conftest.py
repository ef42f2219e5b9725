"""Shared fixtures. Plain `pytest` needs no GPU and no network; GPU tests carry the `gpu` marker."""

import os

import pytest

# Tests never reach a hub; the tiny models are shipped in the repository.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
# torch's OpenMP threads spin at the end of every parallel region (libgomp's default). Where two
# actors compute at once on 2 cores (learner and critic, async rollout and update, two Tune trials)
# or other jobs share the machine, the spinning threads hold the cores the working ones need: the
# tiny model's update ran 8x slower with 2 threads than with 1. Passive threads sleep instead.
# Set before torch loads here, it reaches every Ray worker and driver process the tests start.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")


def pytest_collection_modifyitems(config, items):
    try:
        import torch

        has_gpu = torch.cuda.is_available()
    except ImportError:
        has_gpu = False
    if has_gpu:
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(scope="session")
def tiny_model_path():
    """The tiny model shipped in the repository (never one built on this machine)."""
    from relay.models.shipped import shipped_model

    return str(shipped_model("tiny"))
