"""Chapter 11's checkers: its solutions and typical wrong answers (run by test_exercises.py,
with every other chapter's)."""

import math

import pytest
import torch
import torch.nn.functional as F

from helpers.exercises import (
    check_alibi_attention,
    check_chunked_linear_attention,
    check_linformer_attention,
    check_lsh_attention_round,
    check_rope_half_split,
)
from helpers.long_context import linear_attention
from helpers.long_context import linformer_attention as helpers_linformer_attention
from helpers.long_context import lsh_attention as helpers_lsh_attention
from helpers.positional import alibi_bias, apply_rope
from solutions.ch11_long_context import (
    alibi_attention,
    chunked_linear_attention,
    low_rank_attention,
    lsh_attention_round,
    rope_half_split,
    slopes_for,
)

CHECKERS = {
    "rope half split": (check_rope_half_split, rope_half_split),
    "alibi attention": (check_alibi_attention, alibi_attention),
    "chunked linear attention": (check_chunked_linear_attention, chunked_linear_attention),
}


def rope_interleaved(x, positions):
    d = x.shape[-1]
    rates = 10000.0 ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)
    angles = positions.double()[:, None] * rates
    cos, sin = angles.cos().to(x.dtype), angles.sin().to(x.dtype)
    even, odd = x[..., 0::2], x[..., 1::2]
    return torch.stack([even * cos - odd * sin, even * sin + odd * cos], -1).flatten(-2)


def rope_turns_backwards(x, positions):
    return rope_half_split(x, -positions)


def rope_slow_frequencies(x, positions):
    d = x.shape[-1]
    angles = positions.double()[:, None] * 10000.0 ** (-torch.arange(d // 2).double() / d)
    cos, sin = angles.cos().to(x.dtype), angles.sin().to(x.dtype)
    first, second = x[..., : d // 2], x[..., d // 2 :]
    return torch.cat([first * cos - second * sin, first * sin + second * cos], dim=-1)


def rope_ignores_positions(x, positions):
    return rope_half_split(x, torch.arange(x.shape[-2]))


def rope_with_the_helper(x, positions):
    half = torch.arange(x.shape[-1] // 2)
    order = torch.stack([half, half + x.shape[-1] // 2], -1).flatten()
    return apply_rope(x[..., order], positions)[..., order.argsort()]


def rope_angles_in_float32(x, positions):
    d = x.shape[-1]
    frequencies = 1.0 / (10000 ** (torch.arange(0, d, 2).float() / d))
    angles = torch.cat([positions[:, None] * frequencies] * 2, dim=-1)  # float32
    rotated_half = torch.cat([-x[..., d // 2 :], x[..., : d // 2]], dim=-1)
    return x * angles.cos().to(x.dtype) + rotated_half * angles.sin().to(x.dtype)


def rope_in_place(x, positions):
    x[...] = rope_half_split(x.clone(), positions)
    return x


def alibi_plus_sign(queries, keys, values):
    heads, q, k = queries.shape[1], queries.shape[2], keys.shape[2]
    distance = torch.arange(k - q, k)[:, None] - torch.arange(k)[None, :]
    scores = queries @ keys.mT / math.sqrt(queries.shape[-1])
    scores = scores + slopes_for(heads)[:, None, None] * distance
    return torch.softmax(scores.masked_fill(distance < 0, float("-inf")), -1) @ values


def alibi_naive_slopes(queries, keys, values):
    heads, q, k = queries.shape[1], queries.shape[2], keys.shape[2]
    slopes = torch.tensor([2.0 ** (-8.0 * h / heads) for h in range(1, heads + 1)])
    distance = torch.arange(k - q, k)[:, None] - torch.arange(k)[None, :]
    scores = queries @ keys.mT / math.sqrt(queries.shape[-1]) - slopes[:, None, None] * distance
    return torch.softmax(scores.masked_fill(distance < 0, float("-inf")), -1) @ values


def alibi_slopes_reversed(queries, keys, values):
    heads, q, k = queries.shape[1], queries.shape[2], keys.shape[2]
    distance = torch.arange(k - q, k)[:, None] - torch.arange(k)[None, :]
    scores = queries @ keys.mT / math.sqrt(queries.shape[-1])
    scores = scores - slopes_for(heads).flip(0)[:, None, None] * distance
    return torch.softmax(scores.masked_fill(distance < 0, float("-inf")), -1) @ values


def alibi_queries_from_zero(queries, keys, values):
    heads, q, k = queries.shape[1], queries.shape[2], keys.shape[2]
    distance = torch.arange(q)[:, None] - torch.arange(k)[None, :]
    scores = queries @ keys.mT / math.sqrt(queries.shape[-1])
    scores = scores - slopes_for(heads)[:, None, None] * distance.abs()
    return torch.softmax(scores.masked_fill(distance < 0, float("-inf")), -1) @ values


def alibi_not_causal(queries, keys, values):
    heads, q, k = queries.shape[1], queries.shape[2], keys.shape[2]
    distance = (torch.arange(k - q, k)[:, None] - torch.arange(k)[None, :]).abs()
    scores = queries @ keys.mT / math.sqrt(queries.shape[-1])
    return torch.softmax(scores - slopes_for(heads)[:, None, None] * distance, -1) @ values


def alibi_with_the_helper(queries, keys, values):
    heads, q, k = queries.shape[1], queries.shape[2], keys.shape[2]
    causal = torch.arange(k)[None, :] <= torch.arange(k - q, k)[:, None]
    bias = alibi_bias(heads, q, k).masked_fill(~causal, float("-inf"))
    return F.scaled_dot_product_attention(queries, keys, values, attn_mask=bias)


def chunks_without_state(queries, keys, values, chunk_size):
    return torch.cat(
        [
            linear_attention_by_hand(
                queries[..., s : s + chunk_size, :],
                keys[..., s : s + chunk_size, :],
                values[..., s : s + chunk_size, :],
            )
            for s in range(0, queries.shape[-2], chunk_size)
        ],
        dim=-2,
    )


def linear_attention_by_hand(queries, keys, values):
    similarity = ((F.elu(queries) + 1) @ (F.elu(keys) + 1).mT).tril()
    return similarity @ values / similarity.sum(-1, keepdim=True)


def chunks_without_inside_mask(queries, keys, values, chunk_size):
    phi_q, phi_k = F.elu(queries) + 1, F.elu(keys) + 1
    state = phi_k.new_zeros(*phi_k.shape[:-2], phi_k.shape[-1], values.shape[-1])
    normaliser = phi_k.new_zeros(*phi_k.shape[:-2], phi_k.shape[-1])
    outputs = []
    for s in range(0, queries.shape[-2], chunk_size):
        q, k, v = (
            phi_q[..., s : s + chunk_size, :],
            phi_k[..., s : s + chunk_size, :],
            values[..., s : s + chunk_size, :],
        )
        inside = q @ k.mT  # BUG: no tril
        outputs.append(
            (inside @ v + q @ state) / (inside.sum(-1, keepdim=True) + q @ normaliser[..., None])
        )
        state = state + k.mT @ v
        normaliser = normaliser + k.sum(-2)
    return torch.cat(outputs, dim=-2)


def chunks_adding_before_reading(queries, keys, values, chunk_size):
    phi_q, phi_k = F.elu(queries) + 1, F.elu(keys) + 1
    state = phi_k.new_zeros(*phi_k.shape[:-2], phi_k.shape[-1], values.shape[-1])
    normaliser = phi_k.new_zeros(*phi_k.shape[:-2], phi_k.shape[-1])
    outputs = []
    for s in range(0, queries.shape[-2], chunk_size):
        q, k, v = (t[..., s : s + chunk_size, :] for t in (phi_q, phi_k, values))
        state = state + k.mT @ v  # BUG: this chunk added before its queries read the state
        normaliser = normaliser + k.sum(-2)
        inside = (q @ k.mT).tril()
        outputs.append(
            (inside @ v + q @ state) / (inside.sum(-1, keepdim=True) + q @ normaliser[..., None])
        )
    return torch.cat(outputs, dim=-2)


def chunks_with_exp_features(queries, keys, values, chunk_size):
    similarity = (queries.exp() @ keys.exp().mT).tril()
    return similarity @ values / similarity.sum(-1, keepdim=True)


def chunks_unnormalised(queries, keys, values, chunk_size):
    similarity = ((F.elu(queries) + 1) @ (F.elu(keys) + 1).mT).tril()
    return similarity @ values


def chunks_with_softmax(queries, keys, values, chunk_size):
    n = queries.shape[-2]
    scores = queries @ keys.mT / math.sqrt(queries.shape[-1])
    future = ~torch.ones(n, n, dtype=torch.bool).tril()
    return torch.softmax(scores.masked_fill(future, float("-inf")), -1) @ values


def chunks_with_the_helper(queries, keys, values, chunk_size):
    return linear_attention(queries, keys, values, causal=True)


WRONG = [
    ("rope half split", rope_interleaved, "pairs neighbouring dimensions (2j, 2j + 1)"),
    ("rope half split", rope_turns_backwards, "turns the wrong way"),
    ("rope half split", rope_slow_frequencies, "not 10000^(-j/d)"),
    ("rope half split", rope_ignores_positions, "instead of the `positions` given"),
    ("rope half split", rope_with_the_helper, "calls helpers.positional.apply_rope"),
    ("rope half split", rope_in_place, "changes its input `x` in place"),
    ("rope half split", rope_angles_in_float32, "lose precision in float32"),
    ("alibi attention", alibi_plus_sign, "the bias has the wrong sign"),
    ("alibi attention", alibi_naive_slopes, "every other slope of the next one"),
    ("alibi attention", alibi_slopes_reversed, "the slopes are in reverse order"),
    ("alibi attention", alibi_queries_from_zero, "the queries are the last q positions"),
    ("alibi attention", alibi_not_causal, "no causal mask"),
    ("alibi attention", alibi_with_the_helper, "calls helpers.positional.alibi_bias"),
    ("chunked linear attention", chunks_without_state, "the state is not carried"),
    ("chunked linear attention", chunks_without_inside_mask, "no causal mask inside a chunk"),
    ("chunked linear attention", chunks_unnormalised, "not normalised"),
    ("chunked linear attention", chunks_with_softmax, "softmax weights"),
    ("chunked linear attention", chunks_with_exp_features, "not exp(x)"),
    ("chunked linear attention", chunks_adding_before_reading, "before the chunk reads it"),
    (
        "chunked linear attention",
        chunks_with_the_helper,
        "calls helpers.long_context.linear_attention",
    ),
]


def chunks_carrying_the_state_but_not_the_normaliser(queries, keys, values, chunk_size):
    phi_q, phi_k = F.elu(queries) + 1, F.elu(keys) + 1
    state = phi_k.new_zeros(*phi_k.shape[:-2], phi_k.shape[-1], values.shape[-1])
    outputs = []
    for s in range(0, queries.shape[-2], chunk_size):
        q, k, v = (t[..., s : s + chunk_size, :] for t in (phi_q, phi_k, values))
        inside = (q @ k.mT).tril()
        # BUG: the denominator sums this chunk's weights only: no z carried from earlier chunks
        outputs.append((inside @ v + q @ state) / inside.sum(-1, keepdim=True))
        state = state + k.mT @ v
    return torch.cat(outputs, dim=-2)


def chunks_replaced_by_one_cumulative_sum(queries, keys, values, chunk_size):
    """Right values with no chunks: every position's state S_i, (..., n, d, d_v), at once."""
    phi_q, phi_k = F.elu(queries) + 1, F.elu(keys) + 1
    states = (phi_k[..., :, None] * values[..., None, :]).cumsum(-3)  # (..., n, d, d_v)
    normalisers = phi_k.cumsum(-2)  # (..., n, d)
    numerator = (phi_q[..., None, :] @ states)[..., 0, :]
    return numerator / (phi_q * normalisers).sum(-1, keepdim=True)


def chunks_replaced_by_the_quadratic_form(queries, keys, values, chunk_size):
    return linear_attention_by_hand(queries, keys, values)


WRONG += [
    (
        "chunked linear attention",
        chunks_carrying_the_state_but_not_the_normaliser,
        "carried from chunk to chunk, but not the normaliser z",
    ),
    (
        "chunked linear attention",
        chunks_replaced_by_one_cumulative_sum,
        "keeps a state for every position",
    ),
    (
        "chunked linear attention",
        chunks_replaced_by_the_quadratic_form,
        "builds a matrix over the whole sequence",
    ),
]


# Right answers written in other styles: each must be accepted.


def rope_by_rotate_half_in_float64(x, positions):
    """Hugging Face's layout: x * cos + rotate_half(x) * sin, the angles in float64."""
    d = x.shape[-1]
    frequencies = 1.0 / 10000 ** (torch.arange(0, d, 2, dtype=torch.float64) / d)
    angles = torch.cat([positions.double()[:, None] * frequencies] * 2, dim=-1)  # (seq, d)
    rotated_half = torch.cat([-x[..., d // 2 :], x[..., : d // 2]], dim=-1)
    return x * angles.cos().to(x.dtype) + rotated_half * angles.sin().to(x.dtype)


def rope_by_complex_numbers(x, positions):
    d = x.shape[-1]
    pairs = torch.complex(x[..., : d // 2].double(), x[..., d // 2 :].double())
    frequencies = 10000.0 ** (-torch.arange(d // 2, dtype=torch.float64) * 2 / d)
    turned = pairs * torch.polar(
        torch.ones(1, dtype=torch.float64), positions[:, None] * frequencies
    )
    return torch.cat([turned.real, turned.imag], dim=-1).to(x.dtype)


def rope_one_pair_at_a_time(x, positions):
    d = x.shape[-1]
    first, second = [], []
    for j in range(d // 2):
        angle = positions.double() * 10000.0 ** (-2 * j / d)  # (seq,)
        cos, sin = angle.cos().to(x.dtype)[:, None], angle.sin().to(x.dtype)[:, None]
        a, b = x[..., j : j + 1], x[..., j + d // 2 : j + d // 2 + 1]
        first.append(a * cos - b * sin)
        second.append(a * sin + b * cos)
    return torch.cat(first + second, dim=-1)


def _paper_slopes(heads):
    def powers(n):
        start = 2 ** (-(2 ** -(math.log2(n) - 3)))
        return [start * start**i for i in range(n)]

    if math.log2(heads).is_integer():
        return powers(heads)
    below = 2 ** math.floor(math.log2(heads))
    return powers(below) + _paper_slopes(2 * below)[0::2][: heads - below]


def alibi_with_the_papers_slopes_and_minus_1e9(queries, keys, values):
    """Press et al.'s own get_slopes; -1e9 for the keys after the query (no row is empty)."""
    heads, q, k = queries.shape[1], queries.shape[2], keys.shape[2]
    slopes = torch.tensor(_paper_slopes(heads))[:, None, None]
    distance = torch.arange(k - q, k)[:, None] - torch.arange(k)[None, :]
    scores = queries @ keys.mT / math.sqrt(queries.shape[-1]) - slopes * distance
    return torch.softmax(torch.where(distance >= 0, scores, -1e9), dim=-1) @ values


def alibi_one_head_at_a_time_in_float64(queries, keys, values):
    heads, q, k = queries.shape[1], queries.shape[2], keys.shape[2]
    slopes = slopes_for(heads).double()
    positions_q, positions_k = torch.arange(k - q, k), torch.arange(k)
    outputs = []
    for h in range(heads):
        distance = (positions_q[:, None] - positions_k[None, :]).double()
        scores = queries[:, h].double() @ keys[:, h].double().mT / math.sqrt(queries.shape[-1])
        scores = (scores - slopes[h] * distance).masked_fill(distance < 0, float("-inf"))
        outputs.append(torch.softmax(scores, dim=-1) @ values[:, h].double())
    return torch.stack(outputs, dim=1).to(queries.dtype)


def alibi_by_einsum_and_masked_softmax(queries, keys, values):
    from helpers.attention import masked_softmax

    heads, q, k = queries.shape[1], queries.shape[2], keys.shape[2]
    distance = torch.arange(k - q, k)[:, None] - torch.arange(k)[None, :]
    scores = torch.einsum("bhqd,bhkd->bhqk", queries, keys) / math.sqrt(queries.shape[-1])
    scores = scores - slopes_for(heads)[:, None, None] * distance
    weights = masked_softmax(scores, mask=distance >= 0)
    return torch.einsum("bhqk,bhkd->bhqd", weights, values)


def chunks_in_parallel(queries, keys, values, chunk_size):
    """The form real kernels use: every chunk's sums at once, a cumulative sum over the
    chunks (one state per chunk, not per position), then the causal form inside each."""
    n = queries.shape[-2]
    pad = -n % chunk_size
    phi_q = F.pad(F.elu(queries) + 1, (0, 0, 0, pad), value=1.0)  # padded queries: no 0 / 0
    phi_k = F.pad(F.elu(keys) + 1, (0, 0, 0, pad))  # padded keys weigh 0
    v = F.pad(values, (0, 0, 0, pad))
    lead, chunks = phi_q.shape[:-2], (n + pad) // chunk_size
    phi_q, phi_k = (t.reshape(*lead, chunks, chunk_size, -1) for t in (phi_q, phi_k))
    v = v.reshape(*lead, chunks, chunk_size, -1)
    sums = phi_k.mT @ v  # (..., chunks, d, d_v)
    before = sums.cumsum(-3) - sums  # the chunks before each one
    z_before = phi_k.sum(-2).cumsum(-2) - phi_k.sum(-2)  # (..., chunks, d)
    inside = (phi_q @ phi_k.mT).tril()
    numerator = inside @ v + phi_q @ before
    denominator = inside.sum(-1, keepdim=True) + phi_q @ z_before[..., None]
    out = (numerator / denominator).reshape(*lead, chunks * chunk_size, -1)
    return out[..., :n, :]


def chunks_by_einsum_in_float64(queries, keys, values, chunk_size):
    phi_q, phi_k = (F.elu(t.double()) + 1 for t in (queries, keys))
    v = values.double()
    state = torch.zeros(*phi_k.shape[:-2], phi_k.shape[-1], v.shape[-1], dtype=torch.float64)
    z = torch.zeros(*phi_k.shape[:-2], phi_k.shape[-1], dtype=torch.float64)
    outputs = []
    for s in range(0, queries.shape[-2], chunk_size):
        q, k, vc = (
            phi_q[..., s : s + chunk_size, :],
            phi_k[..., s : s + chunk_size, :],
            v[..., s : s + chunk_size, :],
        )
        size = q.shape[-2]
        causal = torch.ones(size, size, dtype=torch.bool).tril()
        inside = torch.where(causal, torch.einsum("...id,...jd->...ij", q, k), 0.0)
        numerator = torch.einsum("...ij,...jv->...iv", inside, vc) + q @ state
        denominator = inside.sum(-1) + torch.einsum("...id,...d->...i", q, z) + 1e-6
        outputs.append(numerator / denominator[..., None])
        state = state + torch.einsum("...jd,...jv->...dv", k, vc)
        z = z + k.sum(-2)
    return torch.cat(outputs, dim=-2).to(queries.dtype)


def chunks_one_query_at_a_time_inside(queries, keys, values, chunk_size):
    phi_q, phi_k = F.elu(queries) + 1, F.elu(keys) + 1
    state = phi_k.new_zeros(*phi_k.shape[:-2], phi_k.shape[-1], values.shape[-1])
    z = phi_k.new_zeros(*phi_k.shape[:-2], phi_k.shape[-1])
    outputs = []
    for s in range(0, queries.shape[-2], chunk_size):
        end = min(s + chunk_size, queries.shape[-2])
        for i in range(s, end):  # query i reads the keys s..i of its chunk, then the state
            weights = phi_k[..., s : i + 1, :] @ phi_q[..., i, :, None]  # (..., i - s + 1, 1)
            numerator = (weights * values[..., s : i + 1, :]).sum(-2) + (
                phi_q[..., i, None, :] @ state
            )[..., 0, :]
            denominator = weights.sum((-2, -1)) + (phi_q[..., i, :] * z).sum(-1)
            outputs.append(numerator / denominator[..., None])
        state = state + phi_k[..., s:end, :].mT @ values[..., s:end, :]
        z = z + phi_k[..., s:end, :].sum(-2)
    return torch.stack(outputs, dim=-2)


RIGHT = [
    ("rope half split", rope_by_rotate_half_in_float64),
    ("rope half split", rope_by_complex_numbers),
    ("rope half split", rope_one_pair_at_a_time),
    ("alibi attention", alibi_with_the_papers_slopes_and_minus_1e9),
    ("alibi attention", alibi_one_head_at_a_time_in_float64),
    ("alibi attention", alibi_by_einsum_and_masked_softmax),
    ("chunked linear attention", chunks_in_parallel),
    ("chunked linear attention", chunks_by_einsum_in_float64),
    ("chunked linear attention", chunks_one_query_at_a_time_inside),
]


@pytest.mark.parametrize(("exercise", "answer"), RIGHT, ids=[a.__name__ for _, a in RIGHT])
def test_a_right_answer_written_another_way_is_accepted(exercise, answer, run_checker):
    verdict, out = run_checker(CHECKERS[exercise][0], answer)
    assert verdict is True and out.startswith("Correct"), out


def test_the_whole_sequence_is_judged_only_where_chunks_differ_from_it(run_checker):
    """Chunks of 1 and one chunk of 8 over 5 positions: there the cumulative sum and the
    quadratic form are what chunks compute, so only the other two cases refuse them."""
    for answer in (chunks_replaced_by_one_cumulative_sum, chunks_replaced_by_the_quadratic_form):
        verdict, out = run_checker(check_chunked_linear_attention, answer)
        assert out.startswith("Not yet: 2 of 4"), out


# The mistakes a learner's pass found named only by the general hint, each now diagnosed.


def rope_halves_swapped(x, positions):
    half = x.shape[-1] // 2
    turned = rope_half_split(x, positions)
    return torch.cat([turned[..., half:], turned[..., :half]], dim=-1)


def rope_positions_from_one(x, positions):
    return rope_half_split(x, positions + 1)


def alibi_scaled_by_the_value_width(queries, keys, values):
    widened = queries * math.sqrt(queries.shape[-1] / values.shape[-1])
    return alibi_attention(widened, keys, values)


def _chunks(queries, keys, values, chunk_size, carried=("S", "z")):
    """A learner's chunk loop that may leave S or z out of what it carries."""
    phi_q, phi_k = F.elu(queries) + 1, F.elu(keys) + 1
    state = phi_k.new_zeros(*phi_k.shape[:-2], phi_k.shape[-1], values.shape[-1])
    z = phi_k.new_zeros(*phi_k.shape[:-2], phi_k.shape[-1])
    outputs = []
    for s in range(0, queries.shape[-2], chunk_size):
        q, k, v = (t[..., s : s + chunk_size, :] for t in (phi_q, phi_k, values))
        inside = (q @ k.mT).tril()
        outputs.append((inside @ v + q @ state) / (inside.sum(-1, keepdim=True) + q @ z[..., None]))
        if "S" in carried:
            state = state + k.mT @ v
        if "z" in carried:
            z = z + k.sum(-2)
    return torch.cat(outputs, dim=-2)


def chunks_carrying_the_normaliser_but_not_the_state(queries, keys, values, chunk_size):
    return _chunks(queries, keys, values, chunk_size, carried=("z",))


def chunks_over_whole_chunks_only(queries, keys, values, chunk_size):
    """Assumes n is a multiple of chunk_size: the leftover positions stay zeros, and with
    fewer positions than one chunk, torch.cat gets nothing and raises."""
    whole = queries.shape[-2] - queries.shape[-2] % chunk_size
    output = torch.zeros(*queries.shape[:-1], values.shape[-1])
    output[..., :whole, :] = _chunks(
        queries[..., :whole, :], keys[..., :whole, :], values[..., :whole, :], chunk_size
    )
    return output


WRONG += [
    ("rope half split", rope_halves_swapped, "the two halves of the output are swapped"),
    ("rope half split", rope_positions_from_one, "turns by (position + 1) * w_j"),
    ("alibi attention", alibi_scaled_by_the_value_width, "divided by sqrt(d_v)"),
    (
        "chunked linear attention",
        chunks_carrying_the_normaliser_but_not_the_state,
        "carried from chunk to chunk, but not the state S",
    ),
    ("chunked linear attention", chunks_over_whole_chunks_only, "the last 2 positions are zeros"),
]


def test_an_answer_that_raises_where_n_is_shorter_than_a_chunk_is_told_why(run_checker):
    verdict, out = run_checker(check_chunked_linear_attention, chunks_over_whole_chunks_only)
    assert verdict is False and "n = 5, one chunk of 8: your function raised" in out, out
    assert "n = 5 is not a multiple of the chunk size 8 in this case" in out, out


def chunks_of_one_position_at_a_time(queries, keys, values, chunk_size):
    """No chunks: S and z carried from each position to the next (accepted, as the prompt
    says: it builds neither an (n, n) matrix nor a state per position)."""
    phi_q, phi_k = F.elu(queries) + 1, F.elu(keys) + 1
    state = phi_k.new_zeros(*phi_k.shape[:-2], phi_k.shape[-1], values.shape[-1])
    z = phi_k.new_zeros(*phi_k.shape[:-2], phi_k.shape[-1])
    outputs = []
    for i in range(queries.shape[-2]):
        state = state + phi_k[..., i, :, None] * values[..., i, None, :]
        z = z + phi_k[..., i, :]
        numerator = (phi_q[..., i, None, :] @ state)[..., 0, :]
        outputs.append(numerator / (phi_q[..., i, :] * z).sum(-1, keepdim=True))
    return torch.stack(outputs, dim=-2)


def test_a_loop_over_single_positions_is_accepted(run_checker):
    verdict, out = run_checker(check_chunked_linear_attention, chunks_of_one_position_at_a_time)
    assert verdict is True and out.startswith("Correct"), out


# Linformer's attention and one round of LSH attention


def linformer_swapping_the_projections(queries, keys, values, key_projection, value_projection):
    return low_rank_attention(queries, keys, values, value_projection, key_projection)


def linformer_unscaled(queries, keys, values, key_projection, value_projection):
    scores = queries @ (key_projection @ keys).mT  # BUG: no / sqrt(d)
    return torch.softmax(scores, -1) @ (value_projection @ values)


def linformer_scaled_by_k(queries, keys, values, key_projection, value_projection):
    scores = queries @ (key_projection @ keys).mT / math.sqrt(key_projection.shape[0])
    return torch.softmax(scores, -1) @ (value_projection @ values)


def linformer_softmax_over_queries(queries, keys, values, key_projection, value_projection):
    scores = queries @ (key_projection @ keys).mT / math.sqrt(queries.shape[-1])
    return torch.softmax(scores, -2) @ (value_projection @ values)


def linformer_with_the_helper(queries, keys, values, key_projection, value_projection):
    return helpers_linformer_attention(queries, keys, values, key_projection, value_projection)


def linformer_by_einsum(queries, keys, values, key_projection, value_projection):
    projected_keys = torch.einsum("kn,...nd->...kd", key_projection, keys)
    projected_values = torch.einsum("kn,...nd->...kd", value_projection, values)
    scores = torch.einsum("...qd,...kd->...qk", queries, projected_keys) / queries.shape[-1] ** 0.5
    return torch.einsum("...qk,...kd->...qd", scores.softmax(-1), projected_values)


def linformer_in_float64_by_hand(queries, keys, values, key_projection, value_projection):
    """The projections, then a softmax written out, in float64."""
    projected_keys = (key_projection.double() @ keys.double()).mT
    scores = queries.double() @ projected_keys / math.sqrt(queries.shape[-1])
    weights = (scores - scores.amax(-1, keepdim=True)).exp()
    weights = weights / weights.sum(-1, keepdim=True)
    return (weights @ (value_projection.double() @ values.double())).to(values.dtype)


def _lsh_chunks(queries, values, buckets, chunk_size, look=1, unit=True, unsort=True, ties=1):
    """A learner's sorted-chunk round that may look at another chunk, skip the unit keys,
    forget to put the outputs back or sort ties backwards."""
    n, d = queries.shape[-2:]
    chunks = n // chunk_size
    keys = queries / queries.norm(dim=-1, keepdim=True) if unit else queries
    tie = torch.arange(n) if ties == 1 else n - 1 - torch.arange(n)
    order = (buckets * n + tie).argsort(dim=-1)

    def in_chunks(x):
        x = x.gather(-2, order[..., None].expand(*order.shape, x.shape[-1]))
        return x.unflatten(-2, (chunks, chunk_size))

    def near(x):
        if chunks == 1 or look == 0:
            return x
        return torch.cat([x, x.roll(look, dims=-3)], dim=-2)

    q, k, v = in_chunks(queries), near(in_chunks(keys)), near(in_chunks(values))
    qb = in_chunks(buckets[..., None])
    kb = near(qb).mT
    qp = in_chunks(torch.arange(n).expand_as(buckets)[..., None])
    kp = near(qp).mT
    others = (qb == kb) & (qp != kp)
    allowed = torch.where(others.any(-1, keepdim=True), others, qp == kp)
    scores = (q @ k.mT / math.sqrt(d)).masked_fill(~allowed, float("-inf"))
    out = (scores.softmax(-1) @ v).flatten(-3, -2)
    if not unsort:
        return out
    return out.gather(-2, order.argsort(-1)[..., None].expand_as(out))


def lsh_own_chunk_only(queries, values, buckets, chunk_size):
    return _lsh_chunks(queries, values, buckets, chunk_size, look=0)


def lsh_looking_ahead(queries, values, buckets, chunk_size):
    return _lsh_chunks(queries, values, buckets, chunk_size, look=-1)


def lsh_keys_not_unit(queries, values, buckets, chunk_size):
    return _lsh_chunks(queries, values, buckets, chunk_size, unit=False)


def lsh_left_sorted(queries, values, buckets, chunk_size):
    return _lsh_chunks(queries, values, buckets, chunk_size, unsort=False)


def lsh_ties_backwards(queries, values, buckets, chunk_size):
    return _lsh_chunks(queries, values, buckets, chunk_size, ties=-1)


def lsh_through_the_square_mask(queries, values, buckets, chunk_size):
    """Right values, through the chapter's n x n mask: not in chunks."""
    n = queries.shape[-2]
    keys = queries / queries.norm(dim=-1, keepdim=True)
    chunk = (buckets * n + torch.arange(n)).argsort(-1).argsort(-1) // chunk_size
    chunks = n // chunk_size
    near = (chunk[..., :, None] == chunk[..., None, :]) | (
        chunk[..., :, None] == (chunk[..., None, :] + 1) % chunks
    )
    allowed = near & (buckets[..., :, None] == buckets[..., None, :])
    others = allowed & ~torch.eye(n, dtype=torch.bool)
    allowed = torch.where(others.any(-1, keepdim=True), others, torch.eye(n, dtype=torch.bool))
    scores = queries @ keys.mT / math.sqrt(queries.shape[-1])
    return scores.masked_fill(~allowed, float("-inf")).softmax(-1) @ values


def lsh_with_the_helper(queries, values, buckets, chunk_size):
    return helpers_lsh_attention(queries, values, buckets, chunk_size)


def lsh_one_chunk_at_a_time(queries, values, buckets, chunk_size):
    """A loop over the chunks of the sorted order, each against its own and the one before."""
    n, d = queries.shape[-2:]
    flat_q = queries.reshape(-1, n, d)
    flat_v = values.reshape(-1, n, values.shape[-1])
    flat_b = buckets.reshape(-1, n)
    out = torch.zeros_like(flat_v)
    for row in range(len(flat_q)):
        keys = flat_q[row] / flat_q[row].norm(dim=-1, keepdim=True)
        order = sorted(range(n), key=lambda p: (int(flat_b[row, p]), p))
        cut = [order[s : s + chunk_size] for s in range(0, n, chunk_size)]
        for c, members in enumerate(cut):
            reach = members + (cut[c - 1] if len(cut) > 1 else [])
            for i in members:
                found = [j for j in reach if j != i and flat_b[row, j] == flat_b[row, i]] or [i]
                scores = keys[found] @ flat_q[row, i] / math.sqrt(d)
                out[row, i] = scores.softmax(0) @ flat_v[row, found]
    return out.reshape(values.shape)


CHECKERS.update(
    {
        "linformer attention": (check_linformer_attention, low_rank_attention),
        "lsh attention round": (check_lsh_attention_round, lsh_attention_round),
    }
)
WRONG += [
    ("linformer attention", linformer_swapping_the_projections, "E and F are swapped"),
    ("linformer attention", linformer_unscaled, "not divided by sqrt(d)"),
    ("linformer attention", linformer_scaled_by_k, "divided by sqrt(k)"),
    ("linformer attention", linformer_softmax_over_queries, "the softmax runs over the queries"),
    (
        "linformer attention",
        linformer_with_the_helper,
        "calls helpers.long_context.linformer_attention",
    ),
    ("lsh attention round", lsh_own_chunk_only, "each chunk reads only itself"),
    ("lsh attention round", lsh_looking_ahead, "reads the chunk AFTER it"),
    ("lsh attention round", lsh_keys_not_unit, "the keys are the queries themselves"),
    ("lsh attention round", lsh_left_sorted, "left in sorted order"),
    ("lsh attention round", lsh_ties_backwards, "sorted backwards"),
    ("lsh attention round", lsh_through_the_square_mask, "builds a matrix of every query and key"),
    ("lsh attention round", lsh_with_the_helper, "calls helpers.long_context.lsh_attention"),
]
RIGHT_LOW_RANK_AND_HASHED = [
    ("linformer attention", linformer_by_einsum),
    ("linformer attention", linformer_in_float64_by_hand),
    ("lsh attention round", lsh_one_chunk_at_a_time),
]


@pytest.mark.parametrize(
    ("exercise", "answer"),
    RIGHT_LOW_RANK_AND_HASHED,
    ids=[a.__name__ for _, a in RIGHT_LOW_RANK_AND_HASHED],
)
def test_a_linformer_or_lsh_answer_written_another_way_is_accepted(exercise, answer, run_checker):
    verdict, out = run_checker(CHECKERS[exercise][0], answer)
    assert verdict is True and out.startswith("Correct"), out


def test_the_square_mask_is_refused_only_where_there_is_more_than_one_chunk(run_checker):
    verdict, out = run_checker(check_lsh_attention_round, lsh_through_the_square_mask)
    assert out.startswith("Not yet: 4 of 5"), out


def linformer_leaving_gradients_off(queries, keys, values, key_projection, value_projection):
    torch.set_grad_enabled(False)  # BUG: for the whole session
    return low_rank_attention(queries, keys, values, key_projection, value_projection)


def linformer_through_dot_product_attention(
    queries, keys, values, key_projection, value_projection
):
    from helpers.attention import DotProductAttention

    return DotProductAttention()(queries, key_projection @ keys, value_projection @ values)


def lsh_with_unit_queries(queries, values, buckets, chunk_size):
    unit = queries / queries.norm(dim=-1, keepdim=True)
    return (
        lsh_attention_round(unit, values, buckets, chunk_size)
        if False
        else _lsh_chunks(unit, values, buckets, chunk_size)
    )


@pytest.mark.parametrize(
    ("exercise", "answer", "words"),
    [
        ("linformer attention", linformer_leaving_gradients_off, "leaves gradients switched off"),
        (
            "linformer attention",
            linformer_through_dot_product_attention,
            "calls helpers' DotProductAttention",
        ),
        ("lsh attention round", lsh_looking_ahead, "reads the chunk AFTER it"),
        ("lsh attention round", lsh_with_unit_queries, "the queries are made unit length too"),
    ],
    ids=lambda value: getattr(value, "__name__", ""),
)
def test_a_linformer_or_lsh_mistake_of_a_hostile_pass_is_named_in_every_case(
    exercise, answer, words, run_checker
):
    verdict, out = run_checker(CHECKERS[exercise][0], answer)
    failures = out.splitlines()[1:]
    assert verdict is False and failures and all(words in line for line in failures), out
    assert torch.is_grad_enabled()
