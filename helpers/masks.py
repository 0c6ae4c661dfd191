"""Boolean masks in the project's one convention: True where a query may attend to a key.

Other libraries use other conventions; each conversion lives here, in one named function.
"""

import torch


def causal_mask(size: int, device=None) -> torch.Tensor:
    """(size, size): query i may attend to keys 0..i."""
    return torch.tril(torch.ones(size, size, dtype=torch.bool, device=device))


def padding_mask(tokens: torch.Tensor, pad_id: int) -> torch.Tensor:
    """(B, 1, k) from token ids (B, k): every query may attend to every non-pad key."""
    if tokens.dim() != 2:
        raise ValueError(f"tokens must be (batch, length), got {tuple(tokens.shape)}")
    return (tokens != pad_id)[:, None, :]


def from_key_padding_mask(key_padding_mask: torch.Tensor) -> torch.Tensor:
    """torch.nn.MultiheadAttention's key_padding_mask (B, k), True = ignore -> (B, 1, k)."""
    if key_padding_mask.dtype != torch.bool or key_padding_mask.dim() != 2:
        raise ValueError(
            f"key_padding_mask must be boolean (batch, keys), got {key_padding_mask.dtype} "
            f"{tuple(key_padding_mask.shape)}"
        )
    return ~key_padding_mask[:, None, :]


def from_torch_attn_mask(attn_mask: torch.Tensor) -> torch.Tensor:
    """torch.nn.MultiheadAttention's attn_mask -> ours (same shape).

    Its boolean mask is True where attending is NOT allowed (the opposite of ours and of
    scaled_dot_product_attention's); its float mask is added to the scores (-inf = not allowed).
    """
    if attn_mask.dtype == torch.bool:
        return ~attn_mask
    if attn_mask.is_floating_point():
        return attn_mask != float("-inf")
    raise ValueError(f"attn_mask must be boolean or floating point, got {attn_mask.dtype}")
