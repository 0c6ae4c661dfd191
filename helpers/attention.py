"""Attention weights and the modules that compute them.

Mask convention, everywhere in this project: a boolean mask is True where a
query may attend to a key (as the boolean ``attn_mask`` of
``torch.nn.functional.scaled_dot_product_attention``).
"""

import torch


def _mask_from_valid_lens(valid_lens: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
    """Boolean mask, broadcastable to ``scores``, that keeps the first valid_len keys.

    ``valid_lens`` is ``(batch,)`` (one length per example) or ``(batch, queries)``
    (one length per query); ``scores`` is ``(batch, ..., queries, keys)``.
    """
    if not isinstance(valid_lens, torch.Tensor):
        valid_lens = torch.as_tensor(valid_lens)
    if valid_lens.is_floating_point():
        if not torch.equal(valid_lens, valid_lens.round()):
            raise ValueError(f"valid_lens must hold whole numbers, got {valid_lens.tolist()}")
        valid_lens = valid_lens.long()
    elif valid_lens.dtype == torch.bool or valid_lens.is_complex():
        raise ValueError(f"valid_lens must be integers, got dtype {valid_lens.dtype}")
    if (valid_lens < 0).any():
        raise ValueError(f"valid_lens must be >= 0, got {valid_lens.tolist()}")

    batch, num_queries = scores.shape[0], scores.shape[-2] if scores.dim() >= 2 else None
    per_example = valid_lens.dim() == 1 and valid_lens.shape[0] == batch and scores.dim() >= 2
    per_query = (
        valid_lens.dim() == 2
        and scores.dim() >= 3
        and tuple(valid_lens.shape) == (batch, num_queries)
    )
    if not (per_example or per_query):
        raise ValueError(
            f"valid_lens of shape {tuple(valid_lens.shape)} does not fit scores of shape "
            f"{tuple(scores.shape)}: expected (batch,) = ({batch},) or "
            f"(batch, queries) = ({batch}, {num_queries})"
        )
    middle = (1,) * (scores.dim() - 1 - valid_lens.dim())
    if per_example:
        lens = valid_lens.reshape(batch, *middle, 1)  # (batch, 1, ..., 1)
    else:
        lens = valid_lens.reshape(batch, *middle, num_queries, 1)  # (batch, 1.., queries, 1)
    key_positions = torch.arange(scores.shape[-1], device=scores.device)  # (keys,)
    return key_positions < lens.to(scores.device)


def _check_mask(mask: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
    if not isinstance(mask, torch.Tensor) or mask.dtype != torch.bool:
        got = mask.dtype if isinstance(mask, torch.Tensor) else type(mask).__name__
        raise ValueError(
            f"mask must be a boolean tensor (True where a query may attend to a key), got {got}"
        )
    try:
        broadcast = torch.broadcast_shapes(mask.shape, scores.shape)
    except RuntimeError:
        broadcast = None
    if broadcast != scores.shape:
        raise ValueError(
            f"mask of shape {tuple(mask.shape)} cannot broadcast to scores of shape "
            f"{tuple(scores.shape)}"
        )
    return mask.to(scores.device)


def allowed_keys(
    scores: torch.Tensor, valid_lens: torch.Tensor | None = None, mask: torch.Tensor | None = None
) -> torch.Tensor:
    """The boolean mask (True = may attend) that valid_lens and mask leave, broadcast to scores."""
    allowed = torch.ones_like(scores, dtype=torch.bool)
    if valid_lens is not None:
        allowed = allowed & _mask_from_valid_lens(valid_lens, scores)
    if mask is not None:
        allowed = allowed & _check_mask(mask, scores)
    return allowed


def masked_softmax(
    scores: torch.Tensor, valid_lens: torch.Tensor | None = None, mask: torch.Tensor | None = None
) -> torch.Tensor:
    """Softmax over the last axis, giving exactly zero weight to the keys not allowed.

    scores: ``(batch, ..., queries, keys)``, floating point.
    valid_lens: ``(batch,)`` or ``(batch, queries)``; key j is allowed when j < valid_len.
    mask: boolean, broadcastable to ``scores``, True where a query may attend to a key.

    A row with no allowed key returns all zeros (not NaN, not a uniform row), and its
    gradient is zero. The input is not modified; the result has the input's dtype.
    """
    if not isinstance(scores, torch.Tensor) or not scores.is_floating_point():
        got = scores.dtype if isinstance(scores, torch.Tensor) else type(scores).__name__
        raise ValueError(f"scores must be a floating-point tensor, got {got}")
    if scores.dim() < 1:
        raise ValueError("scores must have at least one axis (the keys)")
    if valid_lens is None and mask is None:
        return torch.softmax(scores, dim=-1)

    allowed = allowed_keys(scores, valid_lens, mask)
    row_has_key = allowed.any(dim=-1, keepdim=True)
    # -inf is exact in every dtype (a fill of -1e9 overflows float16); rows with no
    # allowed key get a finite dummy row so that softmax gives no NaN, then zeros.
    filled = scores.masked_fill(~allowed, float("-inf")).masked_fill(~row_has_key, 0.0)
    return torch.softmax(filled, dim=-1).masked_fill(~row_has_key, 0.0)
