"""Chapter 04's exercises: multi-head attention.

1. check_fold_heads: fold the heads into the batch axis, (B, n, d_model) -> (B * heads, n,
   d_head), in torch's order (example b's head j at row b * heads + j), and back.
2. check_packed_attention: a multi-head attention forward pass from torch's packed weights
   (in_proj_weight, out_proj_weight and their biases) with its key_padding_mask (True = ignore).
3. check_multi_query_attention: multi-query attention, where every query head shares one key
   head and one value head, with a boolean mask broadcastable to (B, heads, q, k).
"""

import math
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn

from helpers import attention
from helpers.attention import MultiHeadAttention, masked_softmax, merge_heads, split_heads
from helpers.exercises.framework import Refused, exercise_checker, report, run_case

__all__ = ["check_fold_heads", "check_multi_query_attention", "check_packed_attention"]

FORBIDDEN_LAYERS = {
    "MultiHeadAttention": MultiHeadAttention.forward,
    "torch.nn.MultiheadAttention": nn.MultiheadAttention.forward,
    "torch's multi_head_attention_forward": F.multi_head_attention_forward,
    "torch's scaled_dot_product_attention": F.scaled_dot_product_attention,
}


def _fold(x, heads, order="torch"):
    batch, n, d = x.shape
    if order == "no transpose":
        return x.reshape(batch * heads, n, d // heads)
    split = x.reshape(batch, n, heads, d // heads).transpose(1, 2)  # (B, heads, n, d_head)
    if order == "heads first":
        split = split.transpose(0, 1)  # (heads, B, n, d_head)
    return split.reshape(batch * heads, n, d // heads)


def _unfold(x, heads, order="torch"):
    rows, n, d_head = x.shape
    batch = rows // heads
    if order == "no transpose":
        return x.reshape(batch, n, heads * d_head)
    if order == "heads first":
        x = x.reshape(heads, batch, n, d_head).transpose(0, 1)
    return x.reshape(batch, heads, n, d_head).transpose(1, 2).reshape(batch, n, heads * d_head)


@exercise_checker
def check_fold_heads(learner_fold: Callable, learner_unfold: Callable) -> bool:
    """learner_fold(x, num_heads): (B, n, d_model) -> (B * heads, n, d_head), example b's
    head j at row b * num_heads + j (torch.nn.MultiheadAttention's layout); learner_unfold(x,
    num_heads) undoes it. Without helpers.attention's split_heads and merge_heads.

    The inputs count 0, 1, 2, ... so a wrong answer shows which feature landed where; unfold is
    fed a fresh (contiguous) tensor, as attention's output is."""
    forbidden = {
        "helpers.attention.split_heads": split_heads,
        "helpers.attention.merge_heads": merge_heads,
        "helpers.attention._split_heads (split_heads' computation)": attention._split_heads,
        "helpers.attention._merge_heads (merge_heads' computation)": attention._merge_heads,
    }
    failures, passed = [], 0
    for batch, n, d, heads in ((2, 3, 8, 4), (3, 5, 6, 2), (2, 4, 6, 1)):
        x = torch.arange(batch * n * d, dtype=torch.float32).reshape(batch, n, d)
        folded = _fold(x, heads).contiguous()
        name = f"{batch} examples, {n} positions, d_model {d}, {heads} heads"
        for what, learner, data, reference in (
            ("fold", learner_fold, x, _fold),
            ("unfold", learner_unfold, folded, _unfold),
        ):
            mistakes = {
                "heads first: row b * num_heads + j must hold example b's head j, so the batch "
                "axis stays outside the heads": reference(data, heads, "heads first"),
                "no transpose: the heads must come before the positions; a reshape alone "
                "cuts each position's features across rows": reference(data, heads, "no transpose"),
            }
            passed += run_case(
                f"{what}, {name}",
                learner,
                (data, heads),
                reference,
                failures,
                atol=0,
                hint=(
                    "row b * num_heads + j holds features j * d_head to (j + 1) * d_head - 1 of "
                    "example b, at every position"
                ),
                mistakes=mistakes,
                forbidden=forbidden,
                names=("x", "num_heads"),
            )
    return report(failures, passed)


def _packed(
    queries,
    keys,
    values,
    in_proj_weight,
    in_proj_bias,
    out_proj_weight,
    out_proj_bias,
    num_heads,
    key_padding_mask,
    invert=True,
    scale_by="d_head",
    transpose=True,
    order=(0, 1, 2),
    across_heads=False,
    head_axis=True,
):
    weights = in_proj_weight.chunk(3)  # W_q, W_k, W_v: each (d_model, d_model)
    biases = in_proj_bias.chunk(3)
    weights = [weights[i] for i in order]
    biases = [biases[i] for i in order]
    q, k, v = (
        F.linear(x, W, b) if transpose else x @ W + b
        for x, W, b in zip((queries, keys, values), weights, biases, strict=True)
    )
    if across_heads:  # bug 5: (B, n, heads, d_head), attention over the heads axis
        q, k, v = (t.unflatten(-1, (num_heads, -1)) for t in (q, k, v))
        heads = masked_softmax(q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])) @ v
        return F.linear(heads.flatten(-2), out_proj_weight, out_proj_bias)
    q, k, v = (split_heads(t, num_heads) for t in (q, k, v))  # (B, heads, n, d_head)
    d = q.shape[-1] if scale_by == "d_head" else queries.shape[-1]
    scores = q @ k.transpose(-2, -1) / math.sqrt(d)  # (B, heads, q, k)
    mask = None
    if key_padding_mask is not None:
        mask = (~key_padding_mask if invert else key_padding_mask)[:, None, None, :]
        if not head_axis:  # (B, 1, k): its batch axis lines up with the heads
            mask = mask[:, 0]
    heads = masked_softmax(scores, mask=mask) @ v  # (B, heads, q, d_head)
    merged = merge_heads(heads)  # (B, q, d_model)
    if not transpose:
        return merged @ out_proj_weight + out_proj_bias
    return F.linear(merged, out_proj_weight, out_proj_bias)  # (B, q, d_model)


HEAD_AXIS = (
    "the key-padding mask needs a head axis as well as a query axis: (B, k) becomes (B, 1, 1, k); "
    "a (B, 1, k) mask lines its batch axis up with the heads"
)


def _naming_the_head_axis(learner: Callable, mistaken: Callable) -> Callable:
    """The learner's function, with a raise about shapes that do not broadcast named as the
    missing head axis when the mask without it cannot broadcast either (where B differs from
    the number of heads)."""

    def call(*args):
        try:
            return learner(*args)
        except Exception as error:  # the learner's code may fail in any way
            about_shapes = any(
                words in str(error) for words in ("broadcast", "must match the size of tensor")
            )
            if about_shapes:
                try:
                    mistaken(*args)
                except Exception:  # the mistaken mask fails here too
                    raise Refused(
                        f"your function raised {type(error).__name__}: {error} ({HEAD_AXIS})"
                    ) from error
            raise

    call.__name__ = getattr(learner, "__name__", "your function")
    return call


@exercise_checker
def check_packed_attention(learner_attention: Callable) -> bool:
    """learner_attention(queries, keys, values, in_proj_weight, in_proj_bias, out_proj_weight,
    out_proj_bias, num_heads, key_padding_mask) -> (B, q, d_model), as
    torch.nn.MultiheadAttention(batch_first=True) computes it with those weights:
    in_proj_weight (3 d_model, d_model) stacks W_q, W_k, W_v in nn.Linear's (out, in) layout;
    key_padding_mask (B, k) is True where a key is to be IGNORED, or None. Without
    MultiHeadAttention, torch.nn.MultiheadAttention or torch's attention functions
    (split_heads, merge_heads, DotProductAttention and masked_softmax are fine)."""
    generator = torch.Generator().manual_seed(40)
    d_model = 8
    cases = [
        ("self-attention, 2 heads, no padding", 2, 4, 4, False, None),
        ("cross-attention, 4 heads, no padding", 4, 3, 5, True, None),
        (
            "cross-attention, 4 heads, padding on the right and on the left",
            4,
            3,
            5,
            True,
            torch.tensor([[False, False, False, True, True], [True, True, False, False, False]]),
        ),
        (
            "self-attention, 2 heads, padding",
            2,
            4,
            4,
            False,
            torch.tensor([[False, False, True, True], [False, False, False, False]]),
        ),
        (
            "self-attention, 3 examples, 2 heads, padding",
            2,
            4,
            4,
            False,
            torch.tensor([[False, False, True, True], [False] * 4, [False, True, True, True]]),
        ),
    ]
    failures, passed = [], 0
    for name, heads, n_q, n_k, cross, padding in cases:
        batch = 2 if padding is None else len(padding)
        queries = torch.randn(batch, n_q, d_model, generator=generator)
        keys = torch.randn(batch, n_k, d_model, generator=generator) if cross else queries
        values = torch.randn(batch, n_k, d_model, generator=generator) if cross else queries
        in_proj_weight = torch.randn(3 * d_model, d_model, generator=generator) / 2
        in_proj_bias = torch.randn(3 * d_model, generator=generator) / 4
        out_proj_weight = torch.randn(d_model, d_model, generator=generator) / 2
        out_proj_bias = torch.randn(d_model, generator=generator) / 4
        args = (
            queries,
            keys,
            values,
            in_proj_weight,
            in_proj_bias,
            out_proj_weight,
            out_proj_bias,
            heads,
            padding,
        )
        with torch.no_grad():
            mistakes = {
                f"scaled by sqrt(d_model): each head scores with sqrt(d_head) = "
                f"sqrt({d_model // heads})": _packed(*args, scale_by="d_model"),
                "nn.Linear's weight is (out, in): project with x @ W.T or F.linear(x, W, b)": (
                    _packed(*args, transpose=False)
                ),
                "in_proj_weight stacks W_q, then W_k, then W_v, in that order": _packed(
                    *args, order=(1, 0, 2)
                ),
            }
            if padding is None and not cross:
                mistakes[
                    "attention ran across heads, not positions: after the reshape to (B, n, "
                    "heads, d_head), transpose to (B, heads, n, d_head) (bug 5)"
                ] = _packed(*args, across_heads=True)
            if padding is not None:
                mistakes[
                    "key_padding_mask is True where a key is IGNORED: attend where it is False"
                ] = _packed(*args, invert=False)
                if batch == heads:  # otherwise the mistaken mask cannot broadcast: it raises
                    mistakes[HEAD_AXIS] = _packed(*args, head_axis=False)
        passed += run_case(
            name,
            _naming_the_head_axis(learner_attention, lambda *args: _packed(*args, head_axis=False)),
            args,
            _packed,
            failures,
            atol=1e-5,
            hint="project, split into heads, attend with scores / sqrt(d_head), merge, project",
            mistakes=mistakes,
            forbidden=FORBIDDEN_LAYERS,
            names=(
                "queries",
                "keys",
                "values",
                "in_proj_weight",
                "in_proj_bias",
                "out_proj_weight",
                "out_proj_bias",
                "num_heads",
                "key_padding_mask",
            ),
        )
    return report(failures, passed)


def _multi_query(
    queries,
    keys,
    values,
    W_q,
    W_k,
    W_v,
    W_o,
    num_heads,
    mask,
    scale_by="d_head",
    use_mask=True,
    transpose=True,
):
    q = split_heads(queries @ W_q.T, num_heads)  # (B, heads, q, d_head)
    if not transpose:
        q = (queries @ W_q.T).reshape(q.shape)
    k = (keys @ W_k.T)[:, None]  # (B, 1, k, d_head): one key head for all
    v = (values @ W_v.T)[:, None]  # (B, 1, k, d_head)
    d = q.shape[-1] if scale_by == "d_head" else queries.shape[-1]
    scores = q @ k.transpose(-2, -1) / math.sqrt(d)  # (B, heads, q, k)
    weights = masked_softmax(scores, mask=mask if use_mask else None)  # (B, heads, q, k)
    return merge_heads(weights @ v) @ W_o.T  # (B, q, d_model)


@exercise_checker
def check_multi_query_attention(learner_attention: Callable) -> bool:
    """learner_attention(queries, keys, values, W_q, W_k, W_v, W_o, num_heads, mask) ->
    (B, q, d_model): multi-query attention. W_q (d_model, d_model) and W_o (d_model, d_model)
    as in multi-head attention; W_k and W_v (d_head, d_model) make ONE key head and ONE value
    head that every query head reads. Weights in nn.Linear's (out, in) layout, no biases.
    mask: boolean, True = may attend, broadcastable to (B, heads, q, k), or None. Without
    MultiHeadAttention, torch.nn.MultiheadAttention or torch's attention functions."""
    generator = torch.Generator().manual_seed(41)
    d_model = 8
    causal = torch.ones(4, 4, dtype=torch.bool).tril()
    per_head = torch.rand(2, 4, 3, 5, generator=generator) < 0.6
    per_head[..., 0] = True
    cases = [
        ("self-attention, 4 heads, no mask", 4, 4, 4, False, None),
        ("self-attention, 2 heads, a causal mask (q, k)", 2, 4, 4, False, causal),
        (
            "cross-attention, 4 heads, a padding mask (B, 1, 1, k)",
            4,
            3,
            5,
            True,
            torch.tensor([[True, True, True, False, False], [True] * 5])[:, None, None],
        ),
        ("cross-attention, 4 heads, one mask per head (B, heads, q, k)", 4, 3, 5, True, per_head),
    ]
    failures, passed = [], 0
    for name, heads, n_q, n_k, cross, mask in cases:
        d_head = d_model // heads
        queries = torch.randn(2, n_q, d_model, generator=generator)
        keys = torch.randn(2, n_k, d_model, generator=generator) if cross else queries
        values = torch.randn(2, n_k, d_model, generator=generator) if cross else queries
        W_q = torch.randn(d_model, d_model, generator=generator) / 2
        W_k = torch.randn(d_head, d_model, generator=generator) / 2
        W_v = torch.randn(d_head, d_model, generator=generator) / 2
        W_o = torch.randn(d_model, d_model, generator=generator) / 2
        args = (queries, keys, values, W_q, W_k, W_v, W_o, heads, mask)
        with torch.no_grad():
            mistakes = {
                f"scaled by sqrt(d_model): scores use sqrt(d_head) = sqrt({d_head})": (
                    _multi_query(*args, scale_by="d_model")
                ),
                "the queries were reshaped to (B, heads, q, d_head) without the transpose: "
                "reshape to (B, q, heads, d_head), then transpose": _multi_query(
                    *args, transpose=False
                ),
            }
            if mask is not None:
                mistakes["the mask is not applied"] = _multi_query(*args, use_mask=False)
        passed += run_case(
            name,
            learner_attention,
            args,
            _multi_query,
            failures,
            atol=1e-5,
            hint=(
                "split the queries into heads; the one key head and value head, "
                "(B, 1, k, d_head), broadcast over them"
            ),
            mistakes=mistakes,
            forbidden=FORBIDDEN_LAYERS,
            names=("queries", "keys", "values", "W_q", "W_k", "W_v", "W_o", "num_heads", "mask"),
        )
    return report(failures, passed)
