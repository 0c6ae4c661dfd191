"""Chapter 01, exercise 1: Epanechnikov pooling, written without kernel_pooling."""

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
