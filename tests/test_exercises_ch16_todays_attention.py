"""Chapter 16's checkers: its solutions, right answers written in other styles, and typical
wrong answers, each refused with the message that names its mistake."""

import inspect
import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from helpers import todays_attention
from helpers.attention import masked_softmax
from helpers.exercises.ch16_todays_attention import (
    _absorbed,
    _absorbed_mistakes,
    _made_keys,
    _sink_mistakes,
    _windowed,
    absorbed_cases,
    check_absorbed_scores,
    check_ring_attention,
    check_softmax_with_sink,
    ring_cases,
    sink_cases,
)
from helpers.exercises.framework import TORCH_GLOBAL_SETTINGS_NAMED
from solutions.ch16_todays_attention import absorbed_scores, ring_attention, softmax_with_sink

CHECKERS = {
    "softmax with a sink": (check_softmax_with_sink, softmax_with_sink),
    "absorbed scores": (check_absorbed_scores, absorbed_scores),
    "ring attention": (check_ring_attention, ring_attention),
}
# No exercise of this chapter answers with a scalar: tensor(0.5) is a wrong shape to each
SCALAR_ANSWERS: set[str] = set()


@pytest.fixture(autouse=True, scope="module")
def one_thread():
    """The cases are tiny: on one thread each checker runs in a fraction of a second, where
    torch's thread pool, competing with other work on the cores, takes several times longer."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


# 1. Softmax with a sink: typical wrong answers


def _sink_column(scores, sink_logits):
    """sink_logits (heads,) as a column (B, heads, q, 1), to join to the scores."""
    return sink_logits[:, None, None].expand(*scores.shape[:-1], 1)


def sink_ignored(scores, sink_logits):
    return scores.softmax(-1)  # BUG: no sink in the denominator


def sink_along_the_queries(scores, sink_logits):
    exps = scores.exp()
    return exps / (exps.sum(-1) + sink_logits.exp())[..., None]  # BUG: (B, h, q) + (heads,)


def sink_along_the_keys(scores, sink_logits):
    largest = scores.amax(-1, keepdim=True)
    exps = (scores - largest).exp()
    return exps / (exps.sum(-1, keepdim=True) + (sink_logits - largest).exp())  # BUG: on keys


def sink_column_kept(scores, sink_logits):
    return torch.cat([scores, _sink_column(scores, sink_logits)], -1).softmax(-1)  # BUG: k + 1


def sink_without_the_largest_subtracted(scores, sink_logits):
    exps = scores.exp()  # BUG: inf for scores about 1,000
    return exps / (exps.sum(-1, keepdim=True) + sink_logits[:, None, None].exp())


def sink_unshifted(scores, sink_logits):
    exps = (scores - scores.amax(-1, keepdim=True)).exp()
    return exps / (exps.sum(-1, keepdim=True) + sink_logits[:, None, None].exp())  # BUG: no shift


def sink_detached(scores, sink_logits):
    column = _sink_column(scores, sink_logits.detach())  # BUG: no gradient to the sink
    return torch.cat([scores, column], -1).softmax(-1)[..., :-1]


def sink_put_first(scores, sink_logits):
    joined = torch.cat([_sink_column(scores, sink_logits), scores], -1)
    return joined.softmax(-1)[..., :-1]  # BUG: drops the last key, keeps the sink


def sink_not_exponentiated(scores, sink_logits):
    exps = (scores - scores.amax(-1, keepdim=True)).exp()
    return exps / (exps.sum(-1, keepdim=True) + sink_logits[:, None, None])  # BUG: no exp


def sink_added_to_the_scores(scores, sink_logits):
    return (scores + sink_logits[:, None, None]).softmax(-1)  # BUG: a shift changes nothing


def sink_with_the_nans_zeroed(scores, sink_logits):
    return sink_without_the_largest_subtracted(scores, sink_logits).nan_to_num(0.0)


def sink_with_the_helper(scores, sink_logits):
    return todays_attention.softmax_with_sink(scores, sink_logits)


def sink_in_float32(scores, sink_logits):
    return softmax_with_sink(scores.float(), sink_logits.float()).double()


def sink_shifting_the_scores_in_place(scores, sink_logits):
    scores -= scores.amax(-1, keepdim=True)  # BUG: the caller's scores change
    return softmax_with_sink(scores, sink_logits)


# 2. Absorbed scores: typical wrong answers


def _up_key(q_content, W_up_key):
    return W_up_key.view(q_content.shape[1], q_content.shape[-1], -1)  # (heads, d_head, d_latent)


def scores_by_making_the_keys(q_content, latents, W_up_key):
    batch, heads, _, d_head = q_content.shape
    keys = (latents @ W_up_key.T).view(batch, -1, heads, d_head).transpose(1, 2)  # BUG: keys
    return q_content @ keys.mT


def scores_by_a_key_per_head(q_content, latents, W_up_key):
    heads, d_head = q_content.shape[1], q_content.shape[-1]
    rows = []
    for h in range(heads):
        keys = latents @ W_up_key[h * d_head : (h + 1) * d_head].T  # BUG: (B, N, d_head)
        rows.append(q_content[:, h] @ keys.mT)
    return torch.stack(rows, 1)


def scores_by_an_einsum_of_the_latents_first(q_content, latents, W_up_key):
    up_key = _up_key(q_content, W_up_key)  # BUG: left to right, the keys come first
    return torch.einsum("bNl,hdl,bhnd->bhnN", latents, up_key, q_content)


def scores_by_a_key_per_cached_position(q_content, latents, W_up_key):
    batch, heads, _, d_head = q_content.shape
    columns = []
    for j in range(latents.shape[1]):
        keys = (latents[:, j] @ W_up_key.T).view(batch, heads, 1, d_head)  # BUG: position j's
        columns.append((q_content * keys).sum(-1))  # (B, heads, n)
    return torch.stack(columns, -1)


def scores_with_the_heads_split_the_wrong_way(q_content, latents, W_up_key):
    heads, d_head = q_content.shape[1], q_content.shape[-1]
    up_key = W_up_key.view(d_head, heads, -1).transpose(0, 1)  # BUG: rows interleaved
    return (q_content @ up_key) @ latents[:, None].mT


def scores_with_the_weight_read_in_by_out(q_content, latents, W_up_key):
    heads, d_head = q_content.shape[1], q_content.shape[-1]
    up_key = W_up_key.reshape(-1, heads, d_head).permute(1, 2, 0)  # BUG: read as (l, h * d)
    return (q_content @ up_key) @ latents[:, None].mT


def scores_with_the_weight_read_latent_first(q_content, latents, W_up_key):
    heads, d_head = q_content.shape[1], q_content.shape[-1]
    up_key = W_up_key.reshape(heads, -1, d_head).mT  # BUG: read as (heads, l, d_head)
    return (q_content @ up_key) @ latents[:, None].mT


def scores_scaled(q_content, latents, W_up_key):
    return absorbed_scores(q_content, latents, W_up_key) / math.sqrt(q_content.shape[-1])


def scores_summed_over_the_heads(q_content, latents, W_up_key):
    return absorbed_scores(q_content, latents, W_up_key).sum(1)  # BUG: (B, n, N)


def scores_without_a_heads_axis_on_the_latents(q_content, latents, W_up_key):
    return (q_content @ _up_key(q_content, W_up_key)) @ latents.mT  # BUG: batch meets heads


def scores_from_the_transposed_weight(q_content, latents, W_up_key):
    up_key = W_up_key.T.view(q_content.shape[1], q_content.shape[-1], -1)  # BUG: a view of .T
    return (q_content @ up_key) @ latents[:, None].mT


def scores_with_the_weight_detached(q_content, latents, W_up_key):
    return absorbed_scores(q_content, latents, W_up_key.detach())  # BUG: no gradient to W


def scores_with_the_layer(q_content, latents, W_up_key):
    layer = todays_attention.MultiHeadLatentAttention.__new__(
        todays_attention.MultiHeadLatentAttention
    )
    todays_attention.MultiHeadLatentAttention.forward(layer, q_content)  # refused by name
    return absorbed_scores(q_content, latents, W_up_key)


# 3. Ring attention: typical wrong answers


def _attend(query, keys, values):
    return (query @ keys.mT / math.sqrt(query.shape[-1])).softmax(-1) @ values


def _write(ring_keys, ring_values, key, value, slot):
    ring_keys[:, :, slot] = key[:, :, 0]
    ring_values[:, :, slot] = value[:, :, 0]


def ring_without_the_modulo(query, key, value, ring_keys, ring_values, position):
    _write(ring_keys, ring_values, key, value, position)  # BUG: past the end at position window
    filled = min(position + 1, ring_keys.shape[2])
    return _attend(query, ring_keys[:, :, :filled], ring_values[:, :, :filled])


def ring_reading_every_slot(query, key, value, ring_keys, ring_values, position):
    _write(ring_keys, ring_values, key, value, position % ring_keys.shape[2])
    return _attend(query, ring_keys, ring_values)  # BUG: the unwritten slots too


def ring_masking_the_unwritten_slots(query, key, value, ring_keys, ring_values, position):
    window = ring_keys.shape[2]
    _write(ring_keys, ring_values, key, value, position % window)
    scores = query @ ring_keys.mT / math.sqrt(query.shape[-1])
    weights = masked_softmax(scores, mask=torch.arange(window) <= position)
    return weights @ ring_values  # BUG: 0 * NaN where a slot holds NaN


def ring_written_into_a_copy(query, key, value, ring_keys, ring_values, position):
    ring_keys, ring_values = ring_keys.clone(), ring_values.clone()  # BUG: the caller's unchanged
    return ring_attention(query, key, value, ring_keys, ring_values, position)


def ring_returned_with_the_output(query, key, value, ring_keys, ring_values, position):
    output = ring_attention(query, key, value, ring_keys, ring_values, position)
    return output, ring_keys, ring_values  # BUG: a tuple


def ring_without_the_scale(query, key, value, ring_keys, ring_values, position):
    window = ring_keys.shape[2]
    _write(ring_keys, ring_values, key, value, position % window)
    filled = min(position + 1, window)
    return (query @ ring_keys[:, :, :filled].mT).softmax(-1) @ ring_values[:, :, :filled]


def ring_of_window_plus_one(query, key, value, ring_keys, ring_values, position):
    window = ring_keys.shape[2]
    held = min(position, window)
    keys = torch.cat([ring_keys[:, :, :held], key], 2)  # BUG: the oldest is still there
    values = torch.cat([ring_values[:, :, :held], value], 2)
    output = _attend(query, keys, values)
    _write(ring_keys, ring_values, key, value, position % window)
    return output


def ring_of_keys_only(query, key, value, ring_keys, ring_values, position):
    window = ring_keys.shape[2]
    ring_keys[:, :, position % window] = key[:, :, 0]  # BUG: the value is never written
    filled = min(position + 1, window)
    return _attend(query, ring_keys[:, :, :filled], ring_values[:, :, :filled])


def ring_written_detached(query, key, value, ring_keys, ring_values, position):
    return ring_attention(query, key.detach(), value.detach(), ring_keys, ring_values, position)


def ring_written_one_slot_on(query, key, value, ring_keys, ring_values, position):
    window = ring_keys.shape[2]
    _write(ring_keys, ring_values, key, value, (position + 1) % window)  # BUG: the wrong slot
    filled = min(position + 1, window)
    return _attend(query, ring_keys[:, :, :filled], ring_values[:, :, :filled])


def ring_read_before_writing(query, key, value, ring_keys, ring_values, position):
    window = ring_keys.shape[2]
    held = min(position, window)
    output = _attend(query, ring_keys[:, :, :held], ring_values[:, :, :held])  # BUG: no self
    _write(ring_keys, ring_values, key, value, position % window)
    return output


def ring_written_with_the_query_axis(query, key, value, ring_keys, ring_values, position):
    slot = position % ring_keys.shape[2]
    ring_keys[:, :, slot] = key  # BUG: (B, heads, 1, d) into (B, heads, d)
    ring_values[:, :, slot] = value
    return _attend(query, ring_keys[:, :, : slot + 1], ring_values[:, :, : slot + 1])


def ring_recording_gradients(query, key, value, ring_keys, ring_values, position):
    ring_keys.requires_grad_(True)  # BUG: the caller's ring becomes a leaf that records them
    return ring_attention(query, key, value, ring_keys, ring_values, position)


def ring_scaling_the_query_in_place(query, key, value, ring_keys, ring_values, position):
    query /= math.sqrt(query.shape[-1])  # BUG: the caller's query changes
    return ring_attention(
        query * math.sqrt(query.shape[-1]), key, value, ring_keys, ring_values, position
    )


WRONG = [
    ("softmax with a sink", sink_ignored, "the plain softmax: the sink is left out"),
    ("softmax with a sink", sink_along_the_queries, "lined up with the queries (axis 2)"),
    ("softmax with a sink", sink_along_the_queries, "sink_logits is (heads,) = (3,), one logit"),
    ("softmax with a sink", sink_along_the_keys, "lined up with the keys (axis 3)"),
    ("softmax with a sink", sink_column_kept, "the sink's column is kept"),
    ("softmax with a sink", sink_without_the_largest_subtracted, "exp overflows"),
    ("softmax with a sink", sink_without_the_largest_subtracted, "gradient with respect to"),
    ("softmax with a sink", sink_unshifted, "without the shift the scores had"),
    ("softmax with a sink", sink_detached, "no gradient reaches `sink_logits`"),
    ("softmax with a sink", sink_put_first, "the sink's column was put first"),
    ("softmax with a sink", sink_not_exponentiated, "the sink logit itself is added"),
    ("softmax with a sink", sink_added_to_the_scores, "a sink of -inf then makes every score"),
    ("softmax with a sink", sink_with_the_nans_zeroed, "the NaN then replaced by 0"),
    ("softmax with a sink", sink_with_the_helper, "calls helpers.todays_attention.softmax_with"),
    ("softmax with a sink", sink_in_float32, "within float32's rounding"),
    ("softmax with a sink", sink_shifting_the_scores_in_place, "changes its input `scores`"),
    ("absorbed scores", scores_by_making_the_keys, "makes the keys: inside your function"),
    ("absorbed scores", scores_by_a_key_per_head, "makes the keys: inside your function"),
    ("absorbed scores", scores_by_a_key_per_cached_position, "made, from the latents, a tensor"),
    ("absorbed scores", scores_by_an_einsum_of_the_latents_first, "put q_content and W_up_key"),
    ("absorbed scores", scores_with_the_heads_split_the_wrong_way, "split the wrong way"),
    ("absorbed scores", scores_with_the_weight_read_in_by_out, "read as (d_latent, heads"),
    ("absorbed scores", scores_with_the_weight_read_latent_first, "read as (heads, d_latent"),
    ("absorbed scores", scores_scaled, "the scores are divided by sqrt(d_head)"),
    ("absorbed scores", scores_summed_over_the_heads, "the heads are summed"),
    ("absorbed scores", scores_without_a_heads_axis_on_the_latents, "given no heads axis"),
    ("absorbed scores", scores_without_a_heads_axis_on_the_latents, "latents[:, None].mT"),
    ("absorbed scores", scores_from_the_transposed_weight, "not transposed (W_up_key.T is a"),
    ("absorbed scores", scores_with_the_weight_detached, "no gradient reaches `W_up_key`"),
    ("absorbed scores", scores_with_the_layer, "calls helpers.todays_attention.MultiHeadLatent"),
    ("ring attention", ring_without_the_modulo, "is the first past the ring's 3 slots"),
    ("ring attention", ring_without_the_modulo, "your function raised IndexError"),
    ("ring attention", ring_reading_every_slot, "reads slots not written yet"),
    ("ring attention", ring_masking_the_unwritten_slots, "NaN at index (0, 0, 0, 0) (reads slots"),
    ("ring attention", ring_written_into_a_copy, "holds after the call what it held before"),
    ("ring attention", ring_returned_with_the_output, "return the step's output alone"),
    ("ring attention", ring_without_the_scale, "the scores are not divided by sqrt(d)"),
    ("ring attention", ring_of_window_plus_one, "attends to window + 1 positions"),
    ("ring attention", ring_of_keys_only, "`ring_values` holds after the call what it held"),
    ("ring attention", ring_written_detached, "autograd follows key -> ring -> output"),
    ("ring attention", ring_written_one_slot_on, "went into slot 1 of `ring_keys`"),
    ("ring attention", ring_read_before_writing, "the new position is not read"),
    ("ring attention", ring_written_with_the_query_axis, "write key[:, :, 0] into it"),
    ("ring attention", ring_recording_gradients, "switches requires_grad on for its input `ring"),
    ("ring attention", ring_scaling_the_query_in_place, "changes its input `query` in place"),
]


@pytest.mark.parametrize(
    ("exercise", "answer", "words"), WRONG, ids=[f"{e}: {a.__name__}" for e, a, _ in WRONG]
)
def test_a_typical_wrong_answer_is_named(exercise, answer, words, run_checker):
    verdict, out = run_checker(CHECKERS[exercise][0], answer)
    assert verdict is False and out.startswith("Not yet") and words in out, out


# Right answers written in other styles: each must be accepted.


def sink_by_a_joined_column(scores, sink_logits):
    joined = torch.cat([scores, _sink_column(scores, sink_logits)], dim=-1)
    return joined.softmax(dim=-1)[..., :-1]


def sink_by_logsumexp(scores, sink_logits):
    joined = torch.cat([scores, _sink_column(scores, sink_logits)], dim=-1)
    return (scores - joined.logsumexp(-1, keepdim=True)).exp()


def sink_by_logaddexp(scores, sink_logits):
    total = torch.logaddexp(scores.logsumexp(-1, keepdim=True), sink_logits[:, None, None])
    return (scores - total).exp()


def sink_as_the_softmax_times_what_the_sink_leaves(scores, sink_logits):
    kept = torch.sigmoid(scores.logsumexp(-1, keepdim=True) - sink_logits[:, None, None])
    return scores.softmax(-1) * kept


def sink_head_by_head(scores, sink_logits):
    heads = []
    for h in range(scores.shape[1]):
        row = scores[:, h]  # (B, q, k)
        largest = torch.maximum(row.amax(-1, keepdim=True), sink_logits[h])
        exps = (row - largest).exp()
        heads.append(exps / (exps.sum(-1, keepdim=True) + (sink_logits[h] - largest).exp()))
    return torch.stack(heads, 1)


def sink_by_log_softmax_with_the_sink_first(scores, sink_logits):
    joined = torch.cat([_sink_column(scores, sink_logits), scores], dim=-1)
    return F.log_softmax(joined, dim=-1)[..., 1:].exp()


def scores_by_two_einsums(q_content, latents, W_up_key):
    q_latent = torch.einsum("bhnd,hdl->bhnl", q_content, _up_key(q_content, W_up_key))
    return torch.einsum("bhnl,bNl->bhnN", q_latent, latents)


def scores_by_one_einsum_query_first(q_content, latents, W_up_key):
    return torch.einsum("bhnd,hdl,bNl->bhnN", q_content, _up_key(q_content, W_up_key), latents)


def scores_head_by_head(q_content, latents, W_up_key):
    d_head = q_content.shape[-1]
    rows = []
    for h, up_key in enumerate(W_up_key.split(d_head)):  # (d_head, d_latent) each
        rows.append((q_content[:, h] @ up_key) @ latents.mT)  # (B, n, N)
    return torch.stack(rows, 1)


def scores_by_broadcast_sums(q_content, latents, W_up_key):
    up_key = _up_key(q_content, W_up_key)
    q_latent = (q_content[..., None] * up_key[None, :, None]).sum(-2)  # (B, heads, n, d_latent)
    return (q_latent[:, :, :, None] * latents[:, None, None]).sum(-1)


def ring_by_sdpa(query, key, value, ring_keys, ring_values, position):
    slot = position % ring_keys.shape[2]
    ring_keys[:, :, slot : slot + 1] = key
    ring_values[:, :, slot : slot + 1] = value
    filled = min(position + 1, ring_keys.shape[2])
    return F.scaled_dot_product_attention(
        query, ring_keys[:, :, :filled], ring_values[:, :, :filled]
    )


def ring_by_index_copy_(query, key, value, ring_keys, ring_values, position):
    slot = torch.tensor([position % ring_keys.shape[2]])
    ring_keys.index_copy_(2, slot, key)
    ring_values.index_copy_(2, slot, value)
    filled = torch.arange(min(position + 1, ring_keys.shape[2]))
    return _attend(query, ring_keys.index_select(2, filled), ring_values.index_select(2, filled))


def ring_read_oldest_first(query, key, value, ring_keys, ring_values, position):
    window = ring_keys.shape[2]
    _write(ring_keys, ring_values, key, value, position % window)
    if position < window:
        keys, values = ring_keys[:, :, : position + 1], ring_values[:, :, : position + 1]
    else:  # the order of the slots changes no softmax: rolled to read them oldest first
        shift = -((position + 1) % window)
        keys, values = ring_keys.roll(shift, 2), ring_values.roll(shift, 2)
    return masked_softmax(query @ keys.mT / math.sqrt(keys.shape[-1])) @ values


def ring_by_selecting_the_filled_slots(query, key, value, ring_keys, ring_values, position):
    window = ring_keys.shape[2]
    _write(ring_keys, ring_values, key, value, position % window)
    filled = torch.arange(window) <= position  # (window,)
    keys = torch.where(filled[:, None], ring_keys, 0.0)  # a NaN slot never meets a weight
    values = torch.where(filled[:, None], ring_values, 0.0)
    scores = (query @ keys.mT / math.sqrt(query.shape[-1])).masked_fill(~filled, -math.inf)
    return scores.softmax(-1) @ values


def ring_cleared_first_then_masked(query, key, value, ring_keys, ring_values, position):
    window = ring_keys.shape[2]
    if position == 0:  # whatever the buffer held, NaN included, is never read after this
        ring_keys.zero_()
        ring_values.zero_()
    _write(ring_keys, ring_values, key, value, position % window)
    allowed = torch.arange(window) <= position
    return masked_softmax(query @ ring_keys.mT / math.sqrt(query.shape[-1]), mask=allowed) @ (
        ring_values
    )


RIGHT = [
    ("softmax with a sink", sink_by_a_joined_column),
    ("softmax with a sink", sink_by_logsumexp),
    ("softmax with a sink", sink_by_logaddexp),
    ("softmax with a sink", sink_as_the_softmax_times_what_the_sink_leaves),
    ("softmax with a sink", sink_head_by_head),
    ("softmax with a sink", sink_by_log_softmax_with_the_sink_first),
    ("absorbed scores", scores_by_two_einsums),
    ("absorbed scores", scores_by_one_einsum_query_first),
    ("absorbed scores", scores_head_by_head),
    ("absorbed scores", scores_by_broadcast_sums),
    ("ring attention", ring_by_sdpa),
    ("ring attention", ring_by_index_copy_),
    ("ring attention", ring_read_oldest_first),
    ("ring attention", ring_by_selecting_the_filled_slots),
    ("ring attention", ring_cleared_first_then_masked),
]


@pytest.mark.parametrize("exercise", CHECKERS)
def test_the_worked_solution_passes(exercise, run_checker):
    checker, solution = CHECKERS[exercise]
    verdict, out = run_checker(checker, solution)
    assert verdict is True and out.startswith("Correct"), out


@pytest.mark.parametrize(("exercise", "answer"), RIGHT, ids=[a.__name__ for _, a in RIGHT])
def test_a_right_answer_written_another_way_is_accepted(exercise, answer, run_checker):
    verdict, out = run_checker(CHECKERS[exercise][0], answer)
    assert verdict is True and out.startswith("Correct"), out


def test_every_exercise_has_three_right_styles_and_several_wrong_answers():
    for exercise in CHECKERS:
        assert sum(name == exercise for name, _ in RIGHT) >= 3, exercise
        assert sum(name == exercise for name, _, _ in WRONG) >= 8, exercise


# The cases themselves


def test_the_checkers_own_copies_agree_with_helpers_todays_attention():
    """The mistakes and references are built from the checker's own copies: they must be
    what helpers.todays_attention computes."""
    for _, scores, sink_logits in sink_cases():
        joined = torch.cat([scores, _sink_column(scores, sink_logits)], -1).softmax(-1)[..., :-1]
        expected = todays_attention.softmax_with_sink(scores, sink_logits)
        torch.testing.assert_close(joined, expected, rtol=0, atol=1e-12)
    for _, q_content, latents, W_up_key in absorbed_cases():
        torch.testing.assert_close(
            _absorbed(q_content, latents, W_up_key), _made_keys(q_content, latents, W_up_key)
        )


def test_the_absorbed_scores_are_those_of_the_latent_attention_layer():
    """The layer's content scores, read off its weights with the rotated part switched off."""
    torch.manual_seed(16)
    layer = todays_attention.MultiHeadLatentAttention(12, 3, 5, 2, d_head=4).double()
    with torch.no_grad():
        layer.W_rope_key.weight.zero_()  # the rotated part scores 0: the content scores remain
    x = torch.randn(2, 6, 12, dtype=torch.float64)
    layer(x)
    q_content = layer.W_q(x).view(2, 6, 3, 6).transpose(1, 2)[..., :4]
    scores = _absorbed(q_content, layer.W_down(x), layer.W_up_key.weight) / math.sqrt(4 + 2)
    causal = torch.ones(6, 6, dtype=torch.bool).tril()
    torch.testing.assert_close(masked_softmax(scores, mask=causal), layer.attention_weights)


@pytest.mark.parametrize("case", ring_cases(), ids=lambda case: case[0][:40])
def test_each_steps_reference_is_a_row_of_windowed_attention_over_the_sequence(case):
    _, queries, keys, values, window, *_ = case
    n, d = queries.shape[2], queries.shape[3]
    positions = torch.arange(n)
    allowed = todays_attention.window_mask(positions, positions, window)  # (n, n)
    full = masked_softmax(queries @ keys.mT / math.sqrt(d), mask=allowed) @ values
    for t in range(n):
        step = _windowed(
            queries[:, :, t : t + 1], keys[:, :, : t + 1], values[:, :, : t + 1], t, window
        )
        torch.testing.assert_close(step, full[:, :, t : t + 1])


def test_the_solution_leaves_the_last_window_keys_in_their_slots():
    _, queries, keys, values, window, start, _ = ring_cases()[0]
    batch, heads, n, d = queries.shape
    ring_keys = torch.full((batch, heads, window, d), start, dtype=torch.float64)
    ring_values = torch.full_like(ring_keys, start)
    for t in range(n):
        ring_attention(
            *(x[:, :, t : t + 1] for x in (queries, keys, values)), ring_keys, ring_values, t
        )
    for slot in range(window):
        newest = max(p for p in range(n) if p % window == slot)
        assert torch.equal(ring_keys[:, :, slot], keys[:, :, newest])
        assert torch.equal(ring_values[:, :, slot], values[:, :, newest])


@pytest.mark.parametrize("case", sink_cases(), ids=lambda case: case[0][:40])
def test_every_sink_mistake_is_far_from_the_right_answer(case):
    _, scores, sink_logits = case
    right = todays_attention.softmax_with_sink(scores, sink_logits)
    for diagnosis, answer in _sink_mistakes(scores, sink_logits).items():
        if answer.shape != right.shape:
            continue
        error = (answer - right).abs().nan_to_num(math.inf).max()
        assert error < 1e-7 or error > 1e-6, (diagnosis, error)


@pytest.mark.parametrize("case", absorbed_cases(), ids=lambda case: case[0][:30])
def test_every_absorbed_mistake_is_far_from_the_right_answer(case):
    _, q_content, latents, W_up_key = case
    right = _absorbed(q_content, latents, W_up_key)
    for diagnosis, answer in _absorbed_mistakes(q_content, latents, W_up_key).items():
        if answer.shape == right.shape:
            assert (answer - right).abs().max() > 1e-3, diagnosis


def test_the_cases_are_what_the_docstrings_say():
    sinks = sink_cases()
    assert all(s.dtype == torch.float64 and k.dtype == torch.float64 for _, s, k in sinks)
    shapes = [tuple(s.shape) for _, s, _ in sinks]
    assert any(h == q for _, h, q, _ in shapes) and any(h == k for _, h, _, k in shapes)
    assert any(len({h, q, k}) == 3 and q > 1 for _, h, q, k in shapes)  # no broadcast fits
    assert any(s.min() > 980 for _, s, _ in sinks)  # exp overflows float64
    assert any((k > 709).any() and s.abs().max() < 20 for _, s, k in sinks)  # a large sink
    assert any((k == -math.inf).any() for _, _, k in sinks)

    absorbed = absorbed_cases()
    for _, q_content, latents, W_up_key in absorbed:
        batch, heads, n, d_head = q_content.shape
        cached, d_latent = latents.shape[1:]
        assert W_up_key.shape == (heads * d_head, d_latent) and latents.shape[0] == batch
        assert len({heads, n, cached, d_head, d_latent}) == 5  # a key is told by its shape
        assert q_content.dtype == latents.dtype == W_up_key.dtype == torch.float64
    assert any(q.shape[0] == q.shape[1] for _, q, _, _ in absorbed)  # B = heads
    assert any(q.shape[2] == 1 for _, q, _, _ in absorbed)  # one new position
    assert any(c.shape[-1] > q.shape[-1] for _, q, c, _ in absorbed)  # d_latent > d_head

    rings = ring_cases()
    windows = [(queries.shape[2], window) for _, queries, _, _, window, *_ in rings]
    assert any(window == 1 for _, window in windows)
    assert any(window > n for n, window in windows)  # never full
    assert any(n >= 2 * window + 1 for n, window in windows)  # wraps around twice
    assert any(math.isnan(start) for *_, start, _ in rings)
    assert any(start == 0 for *_, start, _ in rings)
    assert any(first > window for *_, window, _, first in rings)  # rings filled beforehand


@pytest.mark.parametrize("exercise", CHECKERS)
def test_the_checker_docstrings_state_the_time_limit_and_the_rules(exercise):
    doc = " ".join(CHECKERS[exercise][0].__doc__.split())
    assert "within ANSWER_TIME_LIMIT_SECONDS (5 s)" in doc
    assert "no in-place operation on them, even one that changes no value" in doc
    assert TORCH_GLOBAL_SETTINGS_NAMED in doc
    if exercise != "ring attention":  # it has no copy in the helpers to refuse
        assert "refused by name" in doc
    else:
        assert "Write key and value IN PLACE" in doc


# Answers that are not answers


def _none(*args):
    return None


def _raises(*args):
    raise KeyError("oops")


def _scalar(*args):
    return torch.tensor(0.5)


def _text(*args):
    return "weights"


def _exits(*args):
    raise SystemExit(1)


def _meta(*args):
    return torch.empty(2, 3, device="meta")


def _complex(*args):
    return torch.zeros(2, 3, dtype=torch.complex64)


def _list(*args):
    return [[0.5, 0.5], [1.0, 0.0]]


def _numpy(*args):
    return np.zeros((2, 3))


NOT_ANSWERS = {
    _none: "returned None: did the function forget to `return`",
    _raises: "your function raised KeyError: 'oops'",
    _scalar: "shape ()",
    _text: "returned a str, expected a tensor",
    _exits: "raised SystemExit",
    _meta: "meta tensor",
    _complex: "complex tensor",
    _list: "returned a list (.tolist() leaves torch), expected a tensor",
    _numpy: "returned a numpy value (.numpy() leaves torch), expected a tensor",
}


@pytest.mark.parametrize("exercise", CHECKERS)
@pytest.mark.parametrize("answer", NOT_ANSWERS, ids=lambda f: f.__name__)
def test_every_checker_answers_anything_without_raising(exercise, answer, run_checker):
    verdict, out = run_checker(CHECKERS[exercise][0], answer)
    assert verdict is False and out.startswith("Not yet") and NOT_ANSWERS[answer] in out, out


def not_written_yet(*args):
    raise NotImplementedError  # your code here


@pytest.mark.parametrize("exercise", CHECKERS)
def test_a_function_not_written_yet_gets_one_friendly_line(exercise, run_checker):
    verdict, out = run_checker(CHECKERS[exercise][0], not_written_yet)
    assert verdict is False
    assert out == "Not yet: `not_written_yet` is not written yet (it raised NotImplementedError).\n"


def never_returns(*args):
    while True:
        pass


@pytest.mark.parametrize("exercise", CHECKERS)
def test_an_answer_that_never_returns_gets_a_verdict(exercise, run_checker, monkeypatch):
    monkeypatch.setattr("helpers.exercises.framework.ANSWER_TIME_LIMIT_SECONDS", 0.05)
    verdict, out = run_checker(CHECKERS[exercise][0], never_returns)
    assert verdict is False
    assert out.startswith("Not yet: `never_returns` did not return within 0.05 s"), out


@pytest.mark.parametrize("exercise", CHECKERS)
@pytest.mark.parametrize("given", [None, torch.zeros(3), "ring_attention"], ids=repr)
def test_a_checker_given_something_else_than_a_function_says_to_pass_the_function(
    exercise, given, run_checker
):
    verdict, out = run_checker(CHECKERS[exercise][0], given)
    assert verdict is False and out.startswith("Not yet: check_") and out.count("\n") == 1, out
    assert "takes your function itself" in out, out


ALONE = [  # mistakes that coincide in some cases: each is named on its own in another
    ("softmax with a sink", sink_unshifted, "without the shift the scores had", "exp overflows"),
    ("ring attention", ring_read_before_writing, "the new position is not read", "window + 1"),
    ("ring attention", ring_of_window_plus_one, "window + 1 positions", "the new position is"),
]


@pytest.mark.parametrize(
    ("exercise", "answer", "words", "other"), ALONE, ids=[a.__name__ for _, a, _, _ in ALONE]
)
def test_a_mistake_is_named_alone_where_it_differs_from_another(
    exercise, answer, words, other, run_checker
):
    _, out = run_checker(CHECKERS[exercise][0], answer)
    assert any(words in line and other not in line for line in out.splitlines()), out


def test_a_ring_answer_stops_at_the_first_step_it_fails_in_each_sequence(run_checker):
    _, out = run_checker(check_ring_attention, ring_without_the_modulo)
    failures = out.splitlines()[1:]
    assert len(failures) == 5, out  # of 6: the window longer than the sequence never wraps
    assert all("your function raised IndexError" in line for line in failures), out
    assert "Traceback" not in out


def test_the_rings_are_the_only_inputs_written(run_checker):
    def ring_writing_the_key_too(query, key, value, ring_keys, ring_values, position):
        output = ring_attention(query, key, value, ring_keys, ring_values, position)
        key.mul_(1.0)  # BUG: an in-place operation on the caller's key, changing no value
        return output

    verdict, out = run_checker(check_ring_attention, ring_writing_the_key_too)
    assert verdict is False and "runs an in-place operation on its input `key`" in out, out


def test_a_ring_with_a_hook_left_on_it_is_refused(run_checker):
    def ring_retaining_its_gradient(query, key, value, ring_keys, ring_values, position):
        output = ring_attention(query, key, value, ring_keys, ring_values, position)
        if ring_keys.requires_grad:
            ring_keys.retain_grad()  # BUG: a hook left on the caller's ring
        return output

    verdict, out = run_checker(check_ring_attention, ring_retaining_its_gradient)
    assert verdict is False and "leaves a hook on its input `ring_keys`" in out, out


def test_the_solutions_signatures_are_what_the_checkers_call():
    assert list(inspect.signature(softmax_with_sink).parameters) == ["scores", "sink_logits"]
    assert list(inspect.signature(absorbed_scores).parameters) == [
        "q_content",
        "latents",
        "W_up_key",
    ]
    assert list(inspect.signature(ring_attention).parameters) == [
        "query",
        "key",
        "value",
        "ring_keys",
        "ring_values",
        "position",
    ]
