"""training.mixed_precision for a role that is one actor (not an FSDP rank group): float32 master
weights, gradients and optimizer state; the model's matmuls in bf16 under torch.autocast.

A rank group gets the same from FSDP2's MixedPrecisionPolicy (relay/update/fsdp.py). One actor
gets it from autocast around its module's forward: weights stay float32 parameters (what AdamW
steps and checkpoints hold), each forward casts them to bf16 for the linear layers and the
attention matmuls, and the backward casts their gradients back to float32. What autocast leaves
in float32 (RMSNorm upcasts itself, softmax and the losses) stays there; the logits are made
float32 (relay/update/policy.py) before the log-softmax, so logprobs, ratios and the loss are
float32 math on bf16-computed logits, as in the GPU peers (verl, OpenRLHF: bf16 autocast with
fp32 masters).
"""

from __future__ import annotations

import contextlib
import functools

import torch

from relay.config.schema import TrainingConfig
from relay.update.policy import is_fsdp_module


def bf16_unsupported(device: torch.device) -> str | None:
    """Why bf16 compute cannot run on `device`, in one line, or None where it can. On a CPU torch
    runs bf16 matmuls through oneDNN, which needs AVX-512 (BW/VL/DQ, fast with avx512_bf16 or AMX)
    or Arm's bf16 extension; elsewhere it has no bf16 GEMM worth training with."""
    if device.type == "cuda":
        return None if torch.cuda.is_bf16_supported() else f"{torch.cuda.get_device_name(device)} has no bf16 support"
    if device.type == "cpu" and not torch.ops.mkldnn._is_mkldnn_bf16_supported():
        return "this CPU has no bf16 matmul support in torch (oneDNN needs AVX-512 or Arm bf16)"
    return None


def uses_autocast(training: TrainingConfig) -> bool:
    return training.mixed_precision == "bf16"


def check_bf16(training: TrainingConfig, device: torch.device) -> None:
    """Refuse, at an actor's start, a run asking for bf16 where the device cannot compute it."""
    if uses_autocast(training) and (why := bf16_unsupported(device)):
        raise RuntimeError(f"training.mixed_precision=bf16: {why}; set training.mixed_precision=none")


def compute_precision(training: TrainingConfig, device: torch.device):
    """The context a role's forward passes run in: bf16 autocast under mixed precision, else nothing.
    Wrapped around a whole generate, it casts the weights once per call instead of once per token
    (autocast caches the casts of leaf parameters that require grad until the outermost context exits)."""
    if not uses_autocast(training):
        return contextlib.nullcontext()
    return torch.autocast(device_type=device.type, dtype=torch.bfloat16)


def autocast_forward(model: torch.nn.Module, training: TrainingConfig, device: torch.device) -> torch.nn.Module:
    """Make `model`'s forward run under compute_precision (mixed precision only; the model itself,
    changed in place). Only the forward: torch's autocast recipe runs the backward outside it,
    where each op's gradient takes the dtype its forward ran in. functools.wraps keeps the
    signature readable (relay/update/policy.py: keeps_logits asks for `logits_to_keep`)."""
    if not uses_autocast(training):
        return model
    check_bf16(training, device)
    forward = model.forward

    @functools.wraps(forward)
    def forward_in_bf16(*args, **kwargs):
        # a rank group's FSDP2 module has its own bf16 policy (MixedPrecisionPolicy) once sharded
        if is_fsdp_module(model):
            return forward(*args, **kwargs)
        with compute_precision(training, device):
            return forward(*args, **kwargs)

    model.forward = forward_in_bf16
    return model
