"""Chapter 04's exercises, worked: with chapter 02's masked softmax and the chapter's own
reshape-and-transpose, nothing else from helpers.attention."""

import math

import torch

from helpers.attention import masked_softmax


def fold(x: torch.Tensor, num_heads: int) -> torch.Tensor:
    """Exercise 1. (B, n, d_model) -> (B * heads, n, d_head), example b's head j at row
    b * num_heads + j."""
    batch, n, d_model = x.shape
    heads = x.reshape(batch, n, num_heads, d_model // num_heads).transpose(1, 2)  # (B, h, n, d_h)
    return heads.reshape(batch * num_heads, n, d_model // num_heads)  # (B * h, n, d_h)


def unfold(x: torch.Tensor, num_heads: int) -> torch.Tensor:
    """Exercise 1, back. (B * heads, n, d_head) -> (B, n, d_model)."""
    rows, n, d_head = x.shape
    heads = x.reshape(rows // num_heads, num_heads, n, d_head)  # (B, h, n, d_h)
    return heads.transpose(1, 2).reshape(rows // num_heads, n, num_heads * d_head)  # (B, n, d)


def _split(x: torch.Tensor, num_heads: int) -> torch.Tensor:
    batch, n, d_model = x.shape
    return x.reshape(batch, n, num_heads, d_model // num_heads).transpose(1, 2)  # (B, h, n, d_h)


def _merge(x: torch.Tensor) -> torch.Tensor:
    batch, num_heads, n, d_head = x.shape
    return x.transpose(1, 2).reshape(batch, n, num_heads * d_head)  # (B, n, d_model)


def packed_attention(
    queries: torch.Tensor,
    keys: torch.Tensor,
    values: torch.Tensor,
    in_proj_weight: torch.Tensor,
    in_proj_bias: torch.Tensor,
    out_proj_weight: torch.Tensor,
    out_proj_bias: torch.Tensor,
    num_heads: int,
    key_padding_mask: torch.Tensor | None,
) -> torch.Tensor:
    """Exercise 2: torch.nn.MultiheadAttention's forward pass, from its packed weights."""
    W_q, W_k, W_v = in_proj_weight.chunk(3)  # each (d_model, d_model), (out, in)
    b_q, b_k, b_v = in_proj_bias.chunk(3)  # each (d_model,)
    q = _split(queries @ W_q.T + b_q, num_heads)  # (B, h, q, d_head)
    k = _split(keys @ W_k.T + b_k, num_heads)  # (B, h, k, d_head)
    v = _split(values @ W_v.T + b_v, num_heads)  # (B, h, k, d_head)
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])  # (B, h, q, k)
    mask = None if key_padding_mask is None else ~key_padding_mask[:, None, None, :]  # (B,1,1,k)
    heads = masked_softmax(scores, mask=mask) @ v  # (B, h, q, d_head)
    return _merge(heads) @ out_proj_weight.T + out_proj_bias  # (B, q, d_model)


def multi_query_attention(
    queries: torch.Tensor,
    keys: torch.Tensor,
    values: torch.Tensor,
    W_q: torch.Tensor,
    W_k: torch.Tensor,
    W_v: torch.Tensor,
    W_o: torch.Tensor,
    num_heads: int,
    mask: torch.Tensor | None,
) -> torch.Tensor:
    """Exercise 3: every query head reads the same single key head and value head."""
    q = _split(queries @ W_q.T, num_heads)  # (B, h, q, d_head)
    k = (keys @ W_k.T).unsqueeze(1)  # (B, 1, k, d_head): broadcasts over the heads
    v = (values @ W_v.T).unsqueeze(1)  # (B, 1, k, d_head)
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])  # (B, h, q, k)
    weights = masked_softmax(scores, mask=mask)  # (B, h, q, k)
    return _merge(weights @ v) @ W_o.T  # (B, q, d_model)
