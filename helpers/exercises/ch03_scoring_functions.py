"""Chapter 03's exercises: scoring functions.

1. check_attention_with_temperature: scaled dot-product attention with a boolean mask and a
   temperature, returning its output and its weights.
2. check_general_attention: Luong's "general" (bilinear) score q W k^T, for queries and keys of
   different sizes.
3. check_additive_step: additive attention for one decoder state per example, from weight
   tensors, with the keys projected once in advance (Bahdanau's decoder step).
"""

import math
from collections.abc import Callable

import torch
import torch.nn.functional as F

from helpers import attention
from helpers.attention import (
    AdditiveAttention,
    DotProductAttention,
    masked_softmax,
    scaled_dot_scores,
)
from helpers.exercises.framework import Refused, exercise_checker, report, run_case

__all__ = ["check_additive_step", "check_attention_with_temperature", "check_general_attention"]

FORBIDDEN = {
    "DotProductAttention": DotProductAttention.forward,
    "DotProductAttention.attend": DotProductAttention.attend,
    "AdditiveAttention": AdditiveAttention.forward,
    "helpers.attention.scaled_dot_scores": scaled_dot_scores,
    "helpers.attention._scaled_dot_scores (scaled_dot_scores' computation)": (
        attention._scaled_dot_scores
    ),
    "torch's scaled_dot_product_attention": F.scaled_dot_product_attention,
}


EMPTY_ROW = {
    "nan": "a query with no allowed key comes out NaN: a softmax over nothing but -inf is 0/0; "
    "give it all-zero weights (masked_softmax does this)",
    "uniform": "a query with no allowed key gets all-zero weights, not uniform ones (a fill "
    "of -1e9 leaves every key equal); masked_softmax does this",
}


def _softmax(scores: torch.Tensor, allowed: torch.Tensor | None, empty: str) -> torch.Tensor:
    """The masked softmax, or what a learner's own masking gives a row with no allowed key:
    empty="nan" (fill -inf, then softmax) or "uniform" (fill -1e9, then softmax)."""
    if empty == "zeros" or allowed is None:
        return masked_softmax(scores, mask=allowed)
    fill = float("-inf") if empty == "nan" else -1e9
    return torch.softmax(scores.masked_fill(~allowed, fill), dim=-1)


def _empty_row_mistakes(reference: Callable, args: tuple, allowed: torch.Tensor | None) -> dict:
    """{diagnosis: reference(*args, empty=...)} for the two ways a row with no allowed key goes
    wrong, where the case has such a row."""
    if allowed is None or allowed.any(dim=-1).all():
        return {}
    return {EMPTY_ROW[empty]: reference(*args, empty=empty) for empty in ("nan", "uniform")}


def _part(learner: Callable, index: int) -> Callable:
    """The learner's function reduced to one element of the pair (output, weights) it returns;
    any other return value goes on unchanged, for the framework to name."""
    what = ("output", "weights")[index]

    def call(*args):
        got = learner(*args)
        ordinary = isinstance(got, torch.Tensor) and not (got.is_meta or got.is_complex())
        if ordinary and got.layout == torch.strided:
            raise Refused(
                f"returned one tensor of shape {tuple(got.shape)}, expected the pair "
                f"(output, weights): `return output, weights`"
            )
        if isinstance(got, tuple | list):
            if len(got) != 2:
                raise Refused(f"returned {len(got)} items, expected two: (output, weights)")
            return got[index]
        return got

    call.__name__ = f"{what} of {getattr(learner, '__name__', 'your function')}"
    return call


def _temperature_attention(
    q, k, v, mask, temperature, scale=True, invert=False, empty="zeros", swap=False
):
    d = q.shape[-1]
    scores = q @ k.transpose(-2, -1) / ((math.sqrt(d) if scale else 1.0) * temperature)
    weights = _softmax(scores, ~mask if invert else mask, empty)  # (B, q, k)
    return (weights, weights @ v) if swap else (weights @ v, weights)  # (B, q, d_v), (B, q, k)


@exercise_checker
def check_attention_with_temperature(learner_attend: Callable) -> bool:
    """learner_attend(queries, keys, values, mask, temperature) -> (output, weights):
    weights = masked softmax of q k^T / (sqrt(d) * temperature), mask boolean (True = may
    attend), broadcastable to (B, q, k); output = weights @ values. Without DotProductAttention,
    scaled_dot_scores or torch's scaled_dot_product_attention (masked_softmax is fine)."""
    generator = torch.Generator().manual_seed(30)
    queries = torch.randn(2, 3, 16, generator=generator)
    keys = torch.randn(2, 5, 16, generator=generator)
    values = torch.randn(2, 5, 4, generator=generator)
    random_mask = torch.rand(2, 3, 5, generator=generator) < 0.6
    random_mask[..., 0] = True
    empty_row = random_mask.clone()
    empty_row[1, 2] = False
    cases = [
        ("temperature 1, no key masked", torch.ones(2, 3, 5, dtype=torch.bool), 1.0),
        ("temperature 0.5, a random mask (B, q, k)", random_mask, 0.5),
        (
            "temperature 3, a key-padding mask (B, 1, k)",
            torch.tensor([[[True, True, False, False, False]], [[True] * 5]]),
            3.0,
        ),
        ("a query with no allowed key", empty_row, 1.5),
    ]
    failures, passed = [], 0
    for name, mask, temperature in cases:
        right = True
        for index, part in enumerate(("output", "weights")):
            with torch.no_grad():
                variants = {
                    "divides by the temperature only: divide by sqrt(d) * temperature": (
                        _temperature_attention(queries, keys, values, mask, temperature, False)
                    ),
                    "multiplies by the temperature: a high temperature must flatten, so divide": (
                        _temperature_attention(queries, keys, values, mask, 1 / temperature)
                    ),
                    "the mask is inverted: True means the query MAY attend to that key": (
                        _temperature_attention(queries, keys, values, mask, temperature, True, True)
                    ),
                    "returned (weights, output): return the pair in the order (output, "
                    "weights)": _temperature_attention(
                        queries, keys, values, mask, temperature, swap=True
                    ),
                    **_empty_row_mistakes(
                        _temperature_attention, (queries, keys, values, mask, temperature), mask
                    ),
                }
            mistakes = {why: both[index] for why, both in variants.items()}
            if index == 1 and not right:
                break  # the weights are checked once the output is right: one message a case
            right = run_case(
                f"{name}, {part}",
                _part(learner_attend, index),
                (queries, keys, values, mask, temperature),
                lambda q, k, v, m, t, i=index: _temperature_attention(q, k, v, m, t)[i],
                failures,
                atol=1e-5,
                hint="",
                mistakes=mistakes,
                forbidden=FORBIDDEN,
                names=("queries", "keys", "values", "mask", "temperature"),
            )
            passed += right
    return report(failures, passed)


def _allowed(lens: torch.Tensor | None, k: int) -> torch.Tensor | None:
    """Valid lengths (B,) as a mask (B, 1, k), True where key j < the length."""
    return None if lens is None else torch.arange(k) < lens[:, None, None]


def _general(q, k, v, W, lens, transposed=False, scale=1.0, empty="zeros"):
    scores = q @ (W.T if transposed else W) @ k.transpose(1, 2) / scale  # (B, q, k)
    return _softmax(scores, _allowed(lens, k.shape[1]), empty) @ v  # (B, q, d_v)


@exercise_checker
def check_general_attention(learner_general: Callable) -> bool:
    """learner_general(queries, keys, values, W, valid_lens) -> output (B, q, d_v), with
    Luong's "general" score q W k^T (no scaling): queries (B, q, d_q), keys (B, k, d_k),
    W (d_q, d_k), valid_lens (B,) or None. Without DotProductAttention, AdditiveAttention or
    torch's scaled_dot_product_attention (masked_softmax is fine)."""
    generator = torch.Generator().manual_seed(31)
    cases = [
        ("queries of size 6, keys of size 4, no mask", 6, 4, None),
        ("queries of size 6, keys of size 4, valid lengths (2, 5)", 6, 4, torch.tensor([2, 5])),
        ("a square W (size 5)", 5, 5, torch.tensor([5, 3])),
        ("a query with no valid key", 5, 3, torch.tensor([0, 4])),
    ]
    failures, passed = [], 0
    for name, d_q, d_k, lens in cases:
        queries = torch.randn(2, 3, d_q, generator=generator)
        keys = torch.randn(2, 5, d_k, generator=generator)
        values = torch.randn(2, 5, 2, generator=generator)
        W = torch.randn(d_q, d_k, generator=generator) / math.sqrt(d_q)
        with torch.no_grad():
            mistakes = {
                f"divided by sqrt({d_k}): the general score is not scaled": _general(
                    queries, keys, values, W, lens, scale=math.sqrt(d_k)
                ),
                f"divided by sqrt({d_q}): the general score is not scaled": _general(
                    queries, keys, values, W, lens, scale=math.sqrt(d_q)
                ),
            }
            if d_q == d_k:
                mistakes["uses W transposed: the score is q W k^T, W of shape (d_q, d_k)"] = (
                    _general(queries, keys, values, W, lens, transposed=True)
                )
            if lens is not None:
                mistakes[
                    "the valid lengths are ignored: keys at or past the valid length get weight 0 "
                    "(pass valid_lens to masked_softmax)"
                ] = _general(queries, keys, values, W, None)
            mistakes.update(
                _empty_row_mistakes(
                    _general, (queries, keys, values, W, lens), _allowed(lens, keys.shape[1])
                )
            )
        passed += run_case(
            name,
            learner_general,
            (queries, keys, values, W, lens),
            _general,
            failures,
            atol=1e-5,
            hint="",
            mistakes=mistakes,
            forbidden=FORBIDDEN,
            names=("queries", "keys", "values", "W", "valid_lens"),
        )
    return report(failures, passed)


def _additive_step(
    state, projected_keys, values, W_q, w_v, lens, tanh=True, mask=True, empty="zeros"
):
    features = (state @ W_q.T)[:, None, :] + projected_keys  # (B, k, h)
    scores = (torch.tanh(features) if tanh else features) @ w_v  # (B, k)
    allowed = torch.arange(scores.shape[1]) < lens[:, None] if mask else None  # (B, k)
    weights = _softmax(scores, allowed, empty)  # (B, k)
    return (weights[:, :, None] * values).sum(1)  # (B, d_v)


BROADCAST = (
    "the projected state (B, h) needs a key axis to meet the projected keys (B, k, h): "
    "(B, 1, h) + (B, k, h) gives every key's features"
)


@exercise_checker
def check_additive_step(learner_step: Callable) -> bool:
    """learner_step(state, projected_keys, values, W_q, w_v, valid_lens) -> context (B, d_v):
    for one decoder state per example, state (B, d_q), keys projected in advance
    projected_keys (B, k, h) (= keys W_k^T), values (B, k, d_v), W_q (h, d_q), w_v (h,),
    valid_lens (B,). score_j = w_v . tanh(W_q state + projected_keys_j). Without
    AdditiveAttention (masked_softmax is fine)."""
    generator = torch.Generator().manual_seed(32)
    cases = [
        ("batch 2, 6 keys, h = 8, valid lengths (3, 6)", 2, 6, 8, torch.tensor([3, 6])),
        ("batch 3, 4 keys, h = 5, valid lengths (4, 1, 2)", 3, 4, 5, torch.tensor([4, 1, 2])),
        ("an example with no valid key", 2, 5, 8, torch.tensor([0, 5])),
    ]
    failures, passed = [], 0
    for name, batch, k, h, lens in cases:
        state = torch.randn(batch, 7, generator=generator)  # d_q = 7
        projected_keys = torch.randn(batch, k, h, generator=generator)
        values = torch.randn(batch, k, 3, generator=generator)
        W_q = torch.randn(h, 7, generator=generator) / math.sqrt(7)
        w_v = torch.randn(h, generator=generator)
        args = (state, projected_keys, values, W_q, w_v, lens)
        with torch.no_grad():
            mistakes = {
                "no tanh: the score is w_v . tanh(W_q state + projected key)": _additive_step(
                    *args, tanh=False
                ),
                "the keys past the valid length still get weight": _additive_step(
                    *args, mask=False
                ),
                **_empty_row_mistakes(_additive_step, args, torch.arange(k) < lens[:, None]),
            }
        before = len(failures)
        passed += run_case(
            name,
            learner_step,
            args,
            _additive_step,
            failures,
            atol=1e-5,
            hint="",
            mistakes=mistakes,
            forbidden=FORBIDDEN,
            names=("state", "projected_keys", "values", "W_q", "w_v", "valid_lens"),
        )
        if len(failures) > before and "must match the size of tensor" in failures[-1]:
            failures[-1] += f" ({BROADCAST})"  # the raise this hint is about
    return report(failures, passed)
