"""Chapter 07, exercise: the pre-norm residual connection."""

from collections.abc import Callable

import torch


def pre_norm_residual(x: torch.Tensor, sublayer: Callable, norm: Callable) -> torch.Tensor:
    """x (B, n, d_model) -> x + sublayer(norm(x)): the residual path itself is not normalised."""
    return x + sublayer(norm(x))
