"""Chapter 01's exercises, solved as a learner would, without kernel_pooling.

1. epanechnikov_pooling: a kernel that can be zero, and the query it leaves with no key.
2. leave_one_out_pooling: every training point predicted from the others, any kernel.
3. vector_gaussian_pooling: Gaussian pooling of vector queries and keys.
"""

from collections.abc import Callable

import torch


def epanechnikov_pooling(
    queries: torch.Tensor, keys: torch.Tensor, values: torch.Tensor, width: float
) -> torch.Tensor:
    """queries (n_q,), keys and values (n_k,) -> predictions (n_q,)."""
    distances = queries[:, None] - keys[None, :]  # (n_q, n_k)
    similarity = torch.clamp(1 - (distances / width) ** 2, min=0)  # (n_q, n_k)
    totals = similarity.sum(dim=1, keepdim=True)  # (n_q, 1)
    if (totals == 0).any():  # every weight 0: the average would be 0 / 0
        lonely = queries[totals[:, 0] == 0].tolist()
        raise ValueError(f"no key lies within width {width} of the queries {lonely}")
    return (similarity / totals) @ values  # (n_q,)


def leave_one_out_pooling(
    keys: torch.Tensor, values: torch.Tensor, kernel: Callable, width: float
) -> torch.Tensor:
    """keys and values (n,) -> (n,): value i predicted from the n - 1 other points."""
    distances = keys[:, None] - keys[None, :]  # (n, n): query i, key j
    similarity = kernel(distances, width)  # (n, n), one call for every pair
    itself = torch.eye(len(keys), dtype=torch.bool)  # (n, n), True on the diagonal
    similarity = similarity.masked_fill(itself, 0.0)  # a point may not see its own value
    weights = similarity / similarity.sum(dim=1, keepdim=True)  # (n, n), rows sum to one
    return weights @ values  # (n,)


def vector_gaussian_pooling(
    queries: torch.Tensor, keys: torch.Tensor, values: torch.Tensor, width: float
) -> torch.Tensor:
    """queries (n_q, d), keys (n_k, d), values (n_k, d_v) -> (n_q, d_v)."""
    differences = queries[:, None, :] - keys[None, :, :]  # (n_q, n_k, d)
    squared = (differences**2).sum(dim=-1)  # (n_q, n_k): no square root, so no NaN slope at 0
    scores = -squared / (2 * width**2)  # (n_q, n_k)
    weights = torch.softmax(scores, dim=1)  # stable even when every e^score underflows
    return weights @ values  # (n_q, d_v)
