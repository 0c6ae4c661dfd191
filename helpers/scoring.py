"""Measuring what scaling does to dot-product scores (chapter 03)."""

import math

import torch

from helpers import validation


def random_queries_keys(
    d: int, num_queries: int, num_keys: int, seed: int = 0
) -> tuple[torch.Tensor, torch.Tensor]:
    """Queries (num_queries, d) and keys (num_keys, d) with independent N(0, 1) entries."""
    d = validation.whole_number(d, "d")
    num_queries = validation.whole_number(num_queries, "num_queries")
    num_keys = validation.whole_number(num_keys, "num_keys")
    generator = torch.Generator().manual_seed(validation.whole_number(seed, "seed", minimum=0))
    queries = torch.randn(num_queries, d, generator=generator)
    keys = torch.randn(num_keys, d, generator=generator)
    return queries, keys


def dot_scores(
    queries: torch.Tensor, keys: torch.Tensor, scaled: bool = True, temperature: float = 1.0
) -> torch.Tensor:
    """q . k, divided by sqrt(d) when scaled, and by the temperature: (num_queries, num_keys)."""
    validation.positive_number(temperature, "temperature")
    for name, value in (("queries", queries), ("keys", keys)):
        validation.tensor(value, name, "(n, d)")
    validation.same_float_dtype({"queries": queries, "keys": keys})
    if queries.dim() < 2 or keys.dim() < 2 or queries.shape[-1] != keys.shape[-1]:
        raise ValueError(
            f"queries {tuple(queries.shape)} and keys {tuple(keys.shape)} must be (..., n, d) "
            f"with one size d"
        )
    if queries.shape[-1] == 0:
        raise ValueError("queries and keys need a size d of at least 1")
    scale = math.sqrt(queries.shape[-1]) if scaled else 1.0
    return queries @ keys.transpose(-2, -1) / (scale * temperature)


def saturation_statistics(scores: torch.Tensor) -> dict:
    """How peaked the softmax of each row is, averaged over rows.

    max_weight: the largest weight (1/n for uniform rows, 1 for one-hot rows).
    entropy: in nats (log n for uniform rows, 0 for one-hot rows).
    score_gradient: the norm of d(loss)/d(scores) for a fixed random upstream gradient
    of unit norm per row; it vanishes as the rows become one-hot.
    """
    validation.tensor(scores, "scores", "(rows, keys)")
    if not scores.is_floating_point() or scores.dim() < 2 or 0 in scores.shape:
        raise ValueError(
            f"scores must be floating point (rows, keys), not empty; got {tuple(scores.shape)}"
        )
    scores = scores.detach().clone().requires_grad_()
    weights = torch.softmax(scores, dim=-1)
    generator = torch.Generator().manual_seed(0)
    upstream = torch.randn(weights.shape, generator=generator)
    upstream = upstream / upstream.norm(dim=-1, keepdim=True)
    (weights * upstream).sum().backward()
    entropy = -(weights * torch.log(weights.clamp_min(1e-30))).sum(-1)
    return {
        "max_weight": weights.max(-1).values.mean().item(),
        "entropy": entropy.mean().item(),
        "score_gradient": scores.grad.norm(dim=-1).mean().item(),
    }
