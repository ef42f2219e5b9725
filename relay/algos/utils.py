"""Masked reductions shared by advantages, losses and KL.

Masks are float tensors of 0/1 (1 on model tokens). Positions under mask 0 (padding,
observation tokens of multi-turn episodes) may hold any value, inf and NaN included: every
helper *selects* with `torch.where` instead of multiplying by the mask, because 0 * inf and
0 * NaN are NaN and would leak into the result and into gradients.
"""

from __future__ import annotations

import torch


def masked_sum(x: torch.Tensor, mask: torch.Tensor, dim: int | None = None) -> torch.Tensor:
    """Sum of x over mask==1 (weighted by mask). dim=None: a scalar."""
    picked = torch.where(mask > 0, x, torch.zeros_like(x)) * mask
    return picked.sum() if dim is None else picked.sum(dim)


def masked_mean(x: torch.Tensor, mask: torch.Tensor, dim: int | None = None) -> torch.Tensor:
    """Mean of x over mask==1. dim=None: a scalar. An all-zero mask gives 0, not NaN.

    The denominator is clamped, not guarded with torch.where: where() would still
    backpropagate 0 * inf through its unselected branch and return a NaN gradient.
    """
    denom = mask.sum() if dim is None else mask.sum(dim)
    return masked_sum(x, mask, dim) / denom.clamp(min=1e-8)


def masked_var(x: torch.Tensor, mask: torch.Tensor, unbiased: bool = True) -> torch.Tensor:
    """Variance of x over mask==1 (a scalar). Fewer than two elements: 0."""
    mean = masked_mean(x, mask)
    sq = masked_sum((x - mean) ** 2, mask)
    n = mask.sum()
    denom = (n - 1) if unbiased else n
    return sq / denom.clamp(min=1.0)


def masked_whiten(x: torch.Tensor, mask: torch.Tensor, eps: float = 1e-8) -> torch.Tensor:
    """(x - mean) / sqrt(var + eps) over mask==1 of the whole tensor; 0 where mask==0.

    Unbiased variance (divided by n - 1). One element (or none) whitens to 0.
    """
    mean = masked_mean(x, mask)
    var = masked_var(x, mask, unbiased=True)
    out = (x - mean) * torch.rsqrt(var + eps)
    return torch.where(mask > 0, out, torch.zeros_like(out))
