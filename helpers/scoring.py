"""Measuring what scaling does to dot-product scores (chapter 03)."""

import math

import torch

from helpers import validation
from helpers.attention import AdditiveAttention
from helpers.contexts import keeping_random_state

SCORE_FUNCTIONS = ("dot product", "scaled dot product", "additive")
LARGEST_LAYER = 2**24  # weights in fixed_additive_attention's layer: more is a typing mistake


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
    _check_dot_inputs(queries, keys)
    return _dot_scores(queries, keys, scaled, temperature)


def _dot_scores(
    queries: torch.Tensor, keys: torch.Tensor, scaled: bool, temperature: float
) -> torch.Tensor:
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


def projection_gradients(d: int, scaled: bool, num_queries: int = 500, num_keys: int = 10) -> dict:
    """Where the gradient goes when scores come from learned projections q = x W_q, k = x W_k
    (W initialised so that q and k have unit-variance entries), in float64.

    For a fixed random upstream gradient of unit norm per row: the norms of the gradients at
    W_q and W_k, and the per-query gradient norms at q (their mean, median, and the share of
    queries passing back less than 1e-3).
    """
    d = validation.whole_number(d, "d")
    generator = torch.Generator().manual_seed(d)
    inputs_q = torch.randn(num_queries, d, generator=generator, dtype=torch.float64)
    inputs_k = torch.randn(num_keys, d, generator=generator, dtype=torch.float64)
    W_q = (
        torch.randn(d, d, generator=generator, dtype=torch.float64) / math.sqrt(d)
    ).requires_grad_()
    W_k = (
        torch.randn(d, d, generator=generator, dtype=torch.float64) / math.sqrt(d)
    ).requires_grad_()
    queries = inputs_q @ W_q  # (q, d)
    queries.retain_grad()
    scores = dot_scores(queries, inputs_k @ W_k, scaled)  # (q, k)
    weights = torch.softmax(scores, dim=-1)
    upstream = torch.randn(
        weights.shape, generator=torch.Generator().manual_seed(0), dtype=torch.float64
    )
    (weights * (upstream / upstream.norm(dim=-1, keepdim=True))).sum().backward()
    per_query = queries.grad.norm(dim=-1)  # (q,)
    return {
        "W_q": W_q.grad.norm().item(),
        "W_k": W_k.grad.norm().item(),
        "query_mean": per_query.mean().item(),
        "query_median": per_query.median().item(),
        "starved": (per_query < 1e-3).double().mean().item(),
    }


def fixed_additive_attention(
    size: int = 2, num_hiddens: int = 8, seed: int = 0
) -> AdditiveAttention:
    """An untrained AdditiveAttention for queries and keys of `size` entries, its weights drawn
    from a seeded generator (the global seed untouched), in float64 and eval mode."""
    size = validation.whole_number(size, "size")
    num_hiddens = validation.whole_number(num_hiddens, "num_hiddens")
    weights = num_hiddens * (2 * size + 1)  # W_q, W_k and w_v
    if weights > LARGEST_LAYER:
        raise ValueError(
            f"size {size} and num_hiddens {num_hiddens} would make {weights:,} weights, more "
            f"than 2^24 = {LARGEST_LAYER:,}: smaller sizes were meant"
        )
    generator = torch.Generator().manual_seed(validation.whole_number(seed, "seed", minimum=0))
    with keeping_random_state():  # nn.Linear's first weights, overwritten below
        layer = AdditiveAttention(size, size, num_hiddens)
    with torch.no_grad():
        for parameter in layer.parameters():
            parameter.copy_(torch.randn(parameter.shape, generator=generator))
    return layer.double().eval()


@torch.no_grad()
def scores_by_function(
    query: torch.Tensor, keys: torch.Tensor, additive: AdditiveAttention, temperature: float = 1.0
) -> dict:
    """One query's score for each key under each of SCORE_FUNCTIONS, divided by the temperature:
    query (d,), keys (num_keys, d) -> {name: (num_keys,)}. The dot products use dot_scores; the
    additive score is `additive`'s, for queries and keys of size d."""
    validation.tensor(query, "query", "(d,)")
    if query.dim() != 1:
        raise ValueError(f"query must be one vector (d,), got shape {tuple(query.shape)}")
    validation.positive_number(temperature, "temperature")
    if not isinstance(additive, AdditiveAttention):
        raise TypeError(
            "additive must be an AdditiveAttention (fixed_additive_attention()), got "
            f"{type(additive).__name__}"
        )
    queries = query[None]  # (1, d)
    _check_dot_inputs(queries, keys)
    scores = {
        "dot product": _dot_scores(queries, keys, False, temperature)[0],
        "scaled dot product": _dot_scores(queries, keys, True, temperature)[0],
        "additive": additive.scores(queries[None], keys[None])[0, 0] / temperature,
    }
    _check_finite_scores(scores, query, keys)
    return scores


# The checks: each public function above calls these once, at its door, and what it then
# computes trusts what passed them. Each error names what was expected and what came.


def _check_dot_inputs(queries: object, keys: object) -> None:
    """Queries and keys (..., n, d) of one floating dtype and one size d >= 1."""
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


def _check_finite_scores(scores: dict, query: torch.Tensor, keys: torch.Tensor) -> None:
    """Every score is a finite number; otherwise an error naming where NaN or inf came from."""
    broken = [name for name, values in scores.items() if not values.isfinite().all()]
    if not broken:
        return
    if not (query.isfinite().all() and keys.isfinite().all()):
        cause = "the query or the keys hold NaN or inf"
    elif "additive" in broken and len(broken) == 1:
        cause = "the additive layer's weights hold NaN or inf"
    else:
        cause = "the scores overflow: the query, keys or temperature are too extreme"
    raise ValueError(f"the {', '.join(broken)} scores are not finite: {cause}")
