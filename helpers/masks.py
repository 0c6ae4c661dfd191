"""Boolean masks in the project's one convention: True where a query may attend to a key.

Other libraries and tutorials use other conventions. ``convert_mask`` is the one place that
translates between them; the other converters here only reshape around it.
"""

import torch

from helpers import validation

CONVENTIONS = {
    "allowed": "boolean, True = may attend (this project; F.scaled_dot_product_attention)",
    "ignored": "boolean, True = may NOT attend (nn.MultiheadAttention, nn.Transformer)",
    "additive": "float, 0 = may attend, -inf = may not; added to the scores",
    "keep01": "numbers 0/1, 1 = may attend (many blog posts: masked_fill(mask == 0, ...))",
}


def _allowed_from(mask: torch.Tensor, convention: str) -> torch.Tensor:
    if convention in ("allowed", "ignored"):
        if mask.dtype != torch.bool:
            raise ValueError(
                f"a mask in the {convention!r} convention must be boolean, got {mask.dtype}"
            )
        return mask if convention == "allowed" else ~mask
    if mask.dtype == torch.bool:
        raise ValueError(
            f"a mask in the {convention!r} convention holds numbers, got a boolean mask: "
            f"name its convention 'allowed' or 'ignored'"
        )
    if convention == "additive":
        allowed = mask == 0
        if not (allowed | (mask == float("-inf"))).all():
            raise ValueError(
                f"an additive mask must hold only 0 (attend) and -inf (do not attend), got "
                f"values {sorted(set(mask[~allowed & (mask != float('-inf'))].tolist()))[:5]}"
            )
        return allowed
    allowed = mask == 1
    if not (allowed | (mask == 0)).all():
        raise ValueError(
            f"a 'keep01' mask must hold only 0 and 1, got {mask.unique().tolist()[:5]}"
        )
    return allowed


def convert_mask(mask: torch.Tensor, source: str, target: str = "allowed") -> torch.Tensor:
    """The same mask, same shape, in another convention (see CONVENTIONS for their names)."""
    for name in (source, target):
        if not isinstance(name, str) or name not in CONVENTIONS:
            raise ValueError(
                f"unknown mask convention {name!r}: expected one of {list(CONVENTIONS)}"
            )
    if not isinstance(mask, torch.Tensor):
        raise ValueError(f"mask must be a tensor, got {type(mask).__name__}")
    allowed = _allowed_from(mask, source)
    if target == "allowed":
        return allowed
    if target == "ignored":
        return ~allowed
    if target == "additive":
        return torch.zeros(allowed.shape, device=allowed.device).masked_fill(
            ~allowed, float("-inf")
        )
    return allowed.long()


def causal_mask(size: int, device: str | torch.device | None = None) -> torch.Tensor:
    """(size, size): query i may attend to keys 0..i."""
    return _causal_mask(validation.whole_number(size, "size", minimum=0), device)


def _causal_mask(size: int, device: str | torch.device | None) -> torch.Tensor:
    return torch.tril(torch.ones(size, size, dtype=torch.bool, device=device))


def padding_mask(tokens: torch.Tensor, pad_id: int) -> torch.Tensor:
    """(B, 1, k) from token ids (B, k): every query may attend to every non-pad key.

    Pads may sit anywhere (right, left, in the middle). As a cross-attention mask the
    tokens are the source's, and the size-1 query axis broadcasts over the target.
    """
    if not isinstance(tokens, torch.Tensor) or tokens.dim() != 2:
        got = tuple(tokens.shape) if isinstance(tokens, torch.Tensor) else type(tokens).__name__
        raise ValueError(f"tokens must be (B, n), got {got}")
    if tokens.is_floating_point() or tokens.dtype == torch.bool:
        raise ValueError(f"tokens must be integer token ids, got {tokens.dtype}")
    pad_id = validation.whole_number(pad_id, "pad_id", minimum=0)
    return _padding_mask(tokens, pad_id)


def _padding_mask(tokens: torch.Tensor, pad_id: int) -> torch.Tensor:
    return (tokens != pad_id)[:, None, :]  # (B, 1, k)


def causal_padding_mask(tokens: torch.Tensor, pad_id: int) -> torch.Tensor:
    """(B, n, n): a decoder's self-attention mask, causal and blind to pad keys."""
    return padding_mask(tokens, pad_id) & causal_mask(tokens.shape[1], tokens.device)


def _causal_padding_mask(tokens: torch.Tensor, pad_id: int) -> torch.Tensor:
    return _padding_mask(tokens, pad_id) & _causal_mask(tokens.shape[1], tokens.device)


def from_key_padding_mask(key_padding_mask: torch.Tensor) -> torch.Tensor:
    """torch.nn.MultiheadAttention's key_padding_mask (B, k), True = ignore -> (B, 1, k)."""
    if not isinstance(key_padding_mask, torch.Tensor) or key_padding_mask.dim() != 2:
        raise ValueError(f"key_padding_mask must be (B, k), got {key_padding_mask!r}")
    return _allowed_from(key_padding_mask, "ignored")[:, None, :]


def from_torch_attn_mask(attn_mask: torch.Tensor) -> torch.Tensor:
    """torch.nn.MultiheadAttention's attn_mask -> ours (same shape).

    Its boolean mask is True where attending is NOT allowed (the opposite of ours and of
    scaled_dot_product_attention's); its float mask is added to the scores.
    """
    if not isinstance(attn_mask, torch.Tensor):
        raise ValueError(f"attn_mask must be a tensor, got {type(attn_mask).__name__}")
    if not (attn_mask.dtype == torch.bool or attn_mask.is_floating_point()):
        raise ValueError(
            f"torch's attn_mask is boolean (True = ignore) or float (added), got {attn_mask.dtype}"
        )
    return _allowed_from(attn_mask, "ignored" if attn_mask.dtype == torch.bool else "additive")


PAD_MARKERS = ("<pad>", "_")
MASK_KINDS = ("padding", "causal", "padding + causal", "cross-attention")


def build_mask(target: list[str], source: list[str], kind: str) -> torch.Tensor:
    """The boolean mask (q, k), True = may attend, for a kind in MASK_KINDS.

    Queries are the target tokens; keys are the target tokens too, or the source tokens
    for cross-attention. Tokens in PAD_MARKERS are pads.
    """
    if kind not in MASK_KINDS:
        raise ValueError(f"kind must be one of {MASK_KINDS}, got {kind!r}")
    for name, tokens in (("target", target), ("source", source)):
        if isinstance(tokens, str) or not all(isinstance(t, str) for t in tokens):
            raise ValueError(f"{name} must be a list of token strings, got {tokens!r}")
    keys = source if kind == "cross-attention" else target
    key_is_real = torch.tensor([token not in PAD_MARKERS for token in keys])  # (keys,)
    if kind == "causal":
        return causal_mask(len(target))
    if kind == "padding + causal":
        return causal_mask(len(target)) & key_is_real
    return key_is_real.bool().expand(len(target), len(keys))
