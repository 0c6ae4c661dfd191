"""Chapter 05's checkers: its solutions and typical wrong answers (run by test_exercises.py,
with every other chapter's)."""

import math

import torch

from helpers.exercises import (
    check_add_positions_skipping_pads,
    check_distance_penalty,
    check_shift_positions,
)
from helpers.positional import offset_rotations
from solutions.ch05_positional_encoding import (
    add_positions_skipping_pads,
    distance_penalty,
    shift_positions,
)

CHECKERS = {
    "positions skipping pads": (check_add_positions_skipping_pads, add_positions_skipping_pads),
    "distance penalty": (check_distance_penalty, distance_penalty),
    "shift positions": (check_shift_positions, shift_positions),
}


def sequence_first_indexing(x, table, tokens, pad_id):
    return x + table[: x.size(0)]  # the classic bug: x.size(0) is the batch size


def counts_from_the_row_start(x, table, tokens, pad_id):
    return x + table[: x.shape[1]] * (tokens != pad_id)[..., None]


def adds_in_place(x, table, tokens, pad_id):
    x += add_positions_skipping_pads(torch.zeros_like(x), table, tokens, pad_id)
    return x


def detached_table(x, table, tokens, pad_id):
    return add_positions_skipping_pads(x, table.detach(), tokens, pad_id)


def unscaled(x, slope):
    n = x.shape[1]
    distance = (torch.arange(n)[:, None] - torch.arange(n)).abs()
    return torch.softmax(x @ x.mT - slope * distance, -1) @ x


def signed_distance(x, slope):
    n = x.shape[1]
    signed = torch.arange(n)[:, None] - torch.arange(n)
    return torch.softmax(x @ x.mT / math.sqrt(x.shape[-1]) - slope * signed, -1) @ x


def with_sdpa(x, slope):
    n = x.shape[1]
    bias = -slope * (torch.arange(n)[:, None] - torch.arange(n)).abs().float()
    return torch.nn.functional.scaled_dot_product_attention(x, x, x, attn_mask=bias)


def turned_the_wrong_way(rows, delta):
    return shift_positions(rows, -delta)


def same_speed_for_every_pair(rows, delta):
    s, c = rows[..., 0::2], rows[..., 1::2]
    cos, sin = math.cos(delta), math.sin(delta)
    return torch.stack([cos * s + sin * c, -sin * s + cos * c], -1).flatten(-2)


def calls_offset_rotations(rows, delta):
    pairs = rows.unflatten(-1, (rows.shape[-1] // 2, 2))
    return torch.einsum("jab,...jb->...ja", offset_rotations(delta, rows.shape[-1]), pairs).flatten(
        -2
    )


WRONG = [
    ("positions skipping pads", sequence_first_indexing, "the classic pe[:x.size(0)] bug"),
    ("positions skipping pads", counts_from_the_row_start, "counted from the start of the row"),
    ("positions skipping pads", adds_in_place, "changes its input `x` in place"),
    ("positions skipping pads", detached_table, "no gradient reaches `table`"),
    ("distance penalty", unscaled, "not divided by sqrt(d)"),
    ("distance penalty", signed_distance, "must be the distance |i - j|"),
    ("distance penalty", with_sdpa, "calls torch's scaled_dot_product_attention"),
    ("shift positions", turned_the_wrong_way, "turned the wrong way"),
    ("shift positions", same_speed_for_every_pair, "every pair turns at the same speed"),
    ("shift positions", calls_offset_rotations, "calls offset_rotations"),
]


def test_the_solutions_shift_really_moves_the_encoding():
    from helpers.positional import sinusoidal_encoding

    P = sinusoidal_encoding(30, 16)
    torch.testing.assert_close(shift_positions(P[:20], 10), P[10:30], atol=1e-5, rtol=0)
