"""Chapter 05's exercises: self-attention and positional encoding."""

import math
from collections.abc import Callable

import torch
import torch.nn.functional as F

from helpers.attention import DotProductAttention
from helpers.exercises.framework import exercise_checker, report, run_case
from helpers.positional import PositionalEncoding, offset_rotations, sinusoidal_encoding

__all__ = ["check_add_positions_skipping_pads", "check_distance_penalty", "check_shift_positions"]


def _positions_skipping_pads(tokens: torch.Tensor, pad_id: int) -> torch.Tensor:
    """(B, n): the position of each real token counted over the real tokens only; -1 at pads."""
    real = tokens != pad_id
    return torch.where(real, real.long().cumsum(1) - 1, -1)


def _add_skipping_pads(x, table, tokens, pad_id):
    positions = _positions_skipping_pads(tokens, pad_id)  # (B, n)
    real = (positions >= 0)[..., None]  # (B, n, 1)
    return x + table[positions.clamp(min=0)] * real  # (B, n, d)


@exercise_checker
def check_add_positions_skipping_pads(learner_add: Callable) -> bool:
    """learner_add(x, table, tokens, pad_id) -> (B, n, d): x (B, n, d) batch-first embeddings
    plus a row of the position table (max_len, d), where the first real token of every sequence
    is position 0 (however many pads come before it) and the pads are left as they were.

    The table may be learned, so gradients must reach it as well as x."""
    pad = 0
    generator = torch.Generator().manual_seed(5)
    d = 8
    sinusoidal = sinusoidal_encoding(12, d)
    learned = torch.randn(12, d, generator=generator)
    cases = [
        ("one sequence, no pads (B = 1)", torch.tensor([[3, 4, 5, 6, 7, 8]]), sinusoidal),
        (
            "left padding, a learned table",
            torch.tensor([[3, 4, 5, 6, 7], [0, 0, 5, 6, 7], [0, 0, 0, 0, 7]]),
            learned,
        ),
        (
            "right padding and a pad in the middle",
            torch.tensor([[3, 4, 0, 0], [3, 0, 4, 5]]),
            learned,
        ),
    ]
    failures, passed = [], 0
    for name, tokens, table in cases:
        batch, n = tokens.shape
        x = torch.randn(batch, n, d, generator=generator)
        real = (tokens != pad)[..., None]
        mistakes = {
            "positions counted from the start of the row: the first real token is position 0, "
            "however many pads come before it": x + table[:n] * real,
            "the pads got a position too: leave a pad's embedding as it is": x + table[:n],
            "off by one: the first real token is position 0, not 1": x
            + table[_positions_skipping_pads(tokens, pad) + 1] * real,
        }
        if batch == 1:
            mistakes[
                "positions taken from the batch axis: for batch-first x (B, n, d), x.size(0) is "
                "the batch size, the length is x.size(1) (the classic pe[:x.size(0)] bug)"
            ] = x + table[:batch]
        passed += run_case(
            name,
            lambda x, table, tokens: learner_add(x, table, tokens, pad),
            (x, table, tokens),
            lambda x, table, tokens: _add_skipping_pads(x, table, tokens, pad),
            failures,
            atol=1e-5,
            hint=(
                "real token number p of its sequence (p = 0, 1, ...) gets table[p]; pads get "
                "nothing"
            ),
            mistakes=mistakes,
            forbidden={"PositionalEncoding": PositionalEncoding.forward},
            names=("x", "table", "tokens"),
        )
    return report(failures, passed)


def _penalised_self_attention(x: torch.Tensor, slope: float) -> torch.Tensor:
    n = x.shape[1]
    positions = torch.arange(n)
    distance = (positions[:, None] - positions[None, :]).abs()  # (n, n)
    scores = x @ x.transpose(-2, -1) / math.sqrt(x.shape[-1]) - slope * distance  # (B, n, n)
    return torch.softmax(scores, dim=-1) @ x


@exercise_checker
def check_distance_penalty(learner_attention: Callable) -> bool:
    """learner_attention(x, slope) -> (B, n, d): self-attention with no projections (queries,
    keys and values are x itself), whose scores x_i . x_j / sqrt(d) lose slope * |i - j|
    before the softmax, without torch's scaled_dot_product_attention."""
    generator = torch.Generator().manual_seed(6)
    cases = [
        ("x (1, 5, 4), slope 0.5", torch.randn(1, 5, 4, generator=generator), 0.5),
        (
            "x (2, 6, 8), slope 0: plain self-attention",
            torch.randn(2, 6, 8, generator=generator),
            0.0,
        ),
        ("x (2, 7, 8), slope 2", torch.randn(2, 7, 8, generator=generator) * 2, 2.0),
    ]
    failures, passed = [], 0
    for name, x, slope in cases:
        n = x.shape[1]
        signed = torch.arange(n)[:, None] - torch.arange(n)[None, :]  # i - j
        unscaled = x @ x.mT - slope * signed.abs()
        mistakes = {
            "the scores are not divided by sqrt(d)": torch.softmax(unscaled, -1) @ x,
            "the penalty uses i - j; it must be the distance |i - j|": torch.softmax(
                x @ x.mT / math.sqrt(x.shape[-1]) - slope * signed, -1
            )
            @ x,
            "the penalty is added: distant tokens must lose score, subtract slope * |i - j|": (
                _penalised_self_attention(x, -slope)
            ),
            "softmax over the queries axis: each query's weights over the keys (the last axis) "
            "must sum to 1": torch.softmax(
                x @ x.mT / math.sqrt(x.shape[-1]) - slope * signed.abs(), 1
            )
            @ x,
        }
        passed += run_case(
            name,
            lambda x, slope=slope: learner_attention(x, slope),
            (x,),
            lambda x, slope=slope: _penalised_self_attention(x, slope),
            failures,
            atol=1e-5,
            hint="softmax(x x^T / sqrt(d) - slope * |i - j|) x, the softmax over the keys",
            mistakes=mistakes,
            forbidden={
                "torch's scaled_dot_product_attention": F.scaled_dot_product_attention,
                "helpers' DotProductAttention": DotProductAttention.forward,
            },
            names=("x",),
        )
    return report(failures, passed)


def _shift(rows: torch.Tensor, delta: int) -> torch.Tensor:
    d = rows.shape[-1]
    pairs = rows.double().unflatten(-1, (d // 2, 2))  # (..., d/2, (sin, cos))
    rotated = torch.einsum("jab,...jb->...ja", offset_rotations(delta, d).double(), pairs)
    return rotated.flatten(-2).to(rows.dtype)


@exercise_checker
def check_shift_positions(learner_shift: Callable) -> bool:
    """learner_shift(rows, delta) -> rows of the same shape (..., d): each sin/cos pair
    (2j, 2j + 1) turned by the rotation R_j(delta), so that row i of the sinusoidal encoding
    becomes row i + delta; any vectors may be given, not only rows of P. Without
    offset_rotations or sinusoidal_encoding."""
    generator = torch.Generator().manual_seed(7)
    P = sinusoidal_encoding(40, 16)
    cases = [
        ("rows 0..9 of P (d = 16), delta = 3", P[:10], 3),
        ("rows 20..29 of P for d = 8, delta = -5", sinusoidal_encoding(40, 8)[20:30], -5),
        ("any vectors (2, 3, 12), delta = 7", torch.randn(2, 3, 12, generator=generator), 7),
    ]
    failures, passed = [], 0
    for name, rows, delta in cases:
        d = rows.shape[-1]
        s, c = rows.double()[..., 0::2], rows.double()[..., 1::2]
        cos, sin = math.cos(delta), math.sin(delta)  # every pair at omega_0 = 1
        same_speed = torch.stack([cos * s + sin * c, -sin * s + cos * c], -1).flatten(-2)
        halves = rows.double().unflatten(-1, (2, d // 2)).transpose(-1, -2)  # (j, j + d/2)
        halves_rotated = torch.einsum(
            "jab,...jb->...ja", offset_rotations(delta, d).double(), halves
        )
        mistakes = {
            "turned the wrong way: that is row i - delta": _shift(rows, -delta),
            "every pair turns at the same speed: pair j turns by omega_j * delta, "
            "omega_j = 10000^(-2j/d)": same_speed.to(rows.dtype),
            "the pairs are (2j, 2j + 1), neighbours, not (j, j + d/2)": halves_rotated.transpose(
                -1, -2
            )
            .flatten(-2)
            .to(rows.dtype),
        }
        passed += run_case(
            name,
            lambda rows, delta=delta: learner_shift(rows, delta),
            (rows,),
            lambda rows, delta=delta: _shift(rows, delta),
            failures,
            atol=1e-5,
            hint=(
                "(sin, cos) of pair j times R_j(delta) = [[cos w, sin w], [-sin w, cos w]], "
                "w = omega_j * delta"
            ),
            mistakes=mistakes,
            forbidden={
                "offset_rotations": offset_rotations,
                "sinusoidal_encoding": sinusoidal_encoding,
            },
            names=("rows",),
        )
    return report(failures, passed)
