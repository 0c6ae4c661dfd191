"""Chapter 13's checkers: its solutions, right answers written in other styles, and typical
wrong answers (run by test_exercises.py, with every other chapter's)."""

import contextlib
import copy
import io
from pathlib import Path

import nbformat
import pytest
import torch

from helpers.attention import merge_heads, split_heads
from helpers.exercises import (
    check_induction_score,
    check_logits_with_head_zeroed,
    check_previous_token_score,
)
from helpers.exercises.ch13_induction_heads import (
    _head_zeroed_mistakes,
    _induction_mistakes,
    _previous_mistakes,
    _watched,
    failing_forward_case,
    head_zeroed_cases,
    induction_cases,
    previous_token_cases,
)
from helpers.exercises.framework import ANSWER_TIME_LIMIT_SECONDS, Refused
from helpers.induction import induction_score as helpers_induction_score
from helpers.induction import logits_with_heads_zeroed, zeroed_heads
from helpers.induction import previous_token_score as helpers_previous_token_score
from helpers.masks import causal_mask
from helpers.positional import apply_rope
from solutions.ch13_induction_heads import (
    induction_score,
    logits_with_head_zeroed,
    previous_token_score,
)

NOTEBOOK = Path(__file__).resolve().parents[1] / "notebooks" / "13_induction_heads.ipynb"
CHECKERS = {
    "previous-token score": (check_previous_token_score, previous_token_score),
    "induction score": (check_induction_score, induction_score),
    "logits with a head zeroed": (check_logits_with_head_zeroed, logits_with_head_zeroed),
}
VALUE_CASES = {  # the cases whose values are compared
    "previous-token score": len(previous_token_cases()),
    "induction score": len(induction_cases()),
    "logits with a head zeroed": len(head_zeroed_cases()),
}
ALL_CHECKS = {**VALUE_CASES, "logits with a head zeroed": len(head_zeroed_cases()) + 1}
# (13.3 also runs the answer on ids on which model(ids) raises)


# 1. The previous-token score: typical wrong answers


def previous_over_every_query(weights):
    n = weights.shape[-1]
    queries = torch.arange(n)  # BUG: query 0's key -1 wraps around to the last key
    return weights[..., queries, queries - 1].mean(-1)


def previous_reading_the_next_key(weights):
    queries = torch.arange(weights.shape[-1] - 1)
    return weights[..., queries, queries + 1].mean(-1)


def previous_reading_the_diagonal(weights):
    return torch.diagonal(weights, dim1=-2, dim2=-1).mean(-1)


def previous_summed(weights):
    return torch.diagonal(weights, offset=-1, dim1=-2, dim2=-1).sum(-1)


def previous_averaged_over_everything(weights):
    return torch.diagonal(weights, offset=-1, dim1=-2, dim2=-1).mean()


def previous_with_default_dims(weights):
    return torch.diagonal(weights, -1).mean(-1)


def previous_zeroing_the_rest_in_place(weights):
    n = weights.shape[-1]
    weights.mul_(torch.ones(n, n).tril(-1).triu(-1))  # BUG: the caller's weights change
    return weights.sum((-2, -1)) / (n - 1)


def previous_with_the_helper(weights):
    return helpers_previous_token_score(weights)


def previous_detached(weights):
    return previous_token_score(weights.detach())


def previous_in_float64(weights):
    return previous_token_score(weights.double())


# 2. The induction score: typical wrong answers


def induction_on_the_duplicate_token(weights, length):
    queries = torch.arange(length, 2 * length)
    return weights[..., queries, queries - length].mean(-1)


def induction_over_the_whole_sequence(weights, length):
    total = torch.zeros(weights.shape[:-2], dtype=weights.dtype)
    for t in range(2 * length):
        if t - length + 1 >= 0:
            total = total + weights[..., t, t - length + 1]
    return total / (2 * length)


def induction_from_the_last_token_of_the_first_copy(weights, length):
    queries = torch.arange(length - 1, 2 * length)
    return weights[..., queries, queries - length + 1].mean(-1)


def induction_stopping_one_short(weights, length):
    queries = torch.arange(length, 2 * length - 1)
    return weights[..., queries, queries - length + 1].mean(-1)


def induction_starting_one_late(weights, length):
    queries = torch.arange(length + 1, 2 * length)
    return weights[..., queries, queries - length + 1].mean(-1)


def induction_divided_by_every_position(weights, length):
    queries = torch.arange(length, 2 * length)
    return weights[..., queries, queries - length + 1].sum(-1) / (2 * length)


def induction_summed(weights, length):
    queries = torch.arange(length, 2 * length)
    return weights[..., queries, queries - length + 1].sum(-1)


def induction_averaged_over_everything(weights, length):
    queries = torch.arange(length, 2 * length)
    return weights[..., queries, queries - length + 1].mean()


def induction_with_default_dims(weights, length):
    return torch.diagonal(weights, 1 - length)[..., 1:].mean(-1)


def induction_above_the_diagonal(weights, length):
    queries = torch.arange(length)
    return weights[..., queries, queries + length].mean(-1)


def induction_one_key_too_far(weights, length):
    queries = torch.arange(length, 2 * length)
    return weights[..., queries, (queries - length + 2).clamp(max=2 * length - 1)].mean(-1)


def induction_with_the_helper(weights, length):
    return helpers_induction_score(weights, length)


def induction_masking_in_place(weights, length):
    n = 2 * length
    stripe = torch.ones(n, n).tril(1 - length).triu(1 - length)
    stripe[length - 1, 0] = 0.0
    weights.mul_(stripe)
    return weights.sum((-2, -1)) / length


# 3. The logits with one head zeroed: typical wrong answers


def _d_head(model):
    return model.config.d_model // model.config.num_heads


def _with_pre_hook(model, ids, layer, zero):
    """model(ids) with zero(merged) applied to W_o's input in `layer`, the hook removed."""

    def hook(module, inputs):
        return (zero(inputs[0].clone()),)

    handle = model.blocks[layer].attention.W_o.register_forward_pre_hook(hook)
    try:
        return model(ids)
    finally:
        handle.remove()


def zeroing_the_output_of_W_o(model, ids, layer, head):
    columns = slice(head * _d_head(model), (head + 1) * _d_head(model))

    def hook(module, inputs, output):
        output = output.clone()
        output[..., columns] = 0.0
        return output

    handle = model.blocks[layer].attention.W_o.register_forward_hook(hook)
    try:
        return model(ids)
    finally:
        handle.remove()


def zeroing_the_next_head(model, ids, layer, head):
    d_head = _d_head(model)

    def zero(merged):
        merged[..., (head + 1) * d_head : (head + 2) * d_head] = 0.0
        return merged

    return _with_pre_hook(model, ids, layer, zero)


def zeroing_in_the_last_layer(model, ids, layer, head):
    return logits_with_head_zeroed(model, ids, len(model.blocks) - 1, head)


def zeroing_the_whole_layer(model, ids, layer, head):
    return _with_pre_hook(model, ids, layer, torch.zeros_like)


def zeroing_W_v_but_not_its_bias(model, ids, layer, head):
    ablated = copy.deepcopy(model)
    rows = slice(head * _d_head(model), (head + 1) * _d_head(model))
    with torch.no_grad():
        ablated.blocks[layer].attention.W_v.weight[rows] = 0.0
    return ablated(ids)


def zeroing_the_queries(model, ids, layer, head):
    ablated = copy.deepcopy(model)
    rows = slice(head * _d_head(model), (head + 1) * _d_head(model))
    with torch.no_grad():
        ablated.blocks[layer].attention.W_q.weight[rows] = 0.0
        ablated.blocks[layer].attention.W_q.bias[rows] = 0.0
    return ablated(ids)


def zeroing_W_o_in_place(model, ids, layer, head):
    columns = slice(head * _d_head(model), (head + 1) * _d_head(model))
    with torch.no_grad():
        model.blocks[layer].attention.W_o.weight[:, columns] = 0.0  # BUG: never put back
        return model(ids)


def putting_W_o_back_from_a_float32_copy(model, ids, layer, head):
    columns = slice(head * _d_head(model), (head + 1) * _d_head(model))
    weight = model.blocks[layer].attention.W_o.weight
    saved = weight.detach().float().clone()  # BUG: rounds the float64 model's weights
    try:
        with torch.no_grad():
            weight[:, columns] = 0.0
            return model(ids)
    finally:
        with torch.no_grad():
            weight.copy_(saved)


def leaving_the_hook_registered(model, ids, layer, head):
    columns = slice(head * _d_head(model), (head + 1) * _d_head(model))

    def hook(module, inputs):
        merged = inputs[0].clone()
        merged[..., columns] = 0.0
        return (merged,)

    model.blocks[layer].attention.W_o.register_forward_pre_hook(hook)  # BUG: never removed
    return model(ids)


def a_hook_that_returns_nothing(model, ids, layer, head):
    columns = slice(head * _d_head(model), (head + 1) * _d_head(model))

    def hook(module, inputs):
        merged = inputs[0].clone()
        merged[..., columns] = 0.0  # BUG: the copy is never returned

    handle = model.blocks[layer].attention.W_o.register_forward_pre_hook(hook)
    try:
        return model(ids)
    finally:
        handle.remove()


def returning_probabilities(model, ids, layer, head):
    return logits_with_head_zeroed(model, ids, layer, head).softmax(-1)


def returning_log_probabilities(model, ids, layer, head):
    return logits_with_head_zeroed(model, ids, layer, head).log_softmax(-1)


def leaving_the_model_in_training_mode(model, ids, layer, head):
    model.train()
    return logits_with_head_zeroed(model, ids, layer, head)


def with_the_helper(model, ids, layer, head):
    return logits_with_heads_zeroed(model, ids, [(layer, head)])


def with_the_helpers_context_manager(model, ids, layer, head):
    with zeroed_heads(model, [(layer, head)]):
        return model(ids)


def changing_the_ids_in_place(model, ids, layer, head):
    return logits_with_head_zeroed(model, ids.clamp_(max=14), layer, head)


# Regressions from a learner's and a hostile pass: torch's global settings, a module's own
# attributes, and head-zeroing mistakes that were answered by the general hint only


def previous_with_gradients_switched_off(weights):
    torch.set_grad_enabled(False)  # BUG: for all of torch, and never switched back on
    return previous_token_score(weights)


def induction_with_float64_made_the_default(weights, length):
    torch.set_default_dtype(torch.float64)  # BUG: every later tensor changes
    return induction_score(weights, length)


def with_a_global_module_hook_left_behind(model, ids, layer, head):
    torch.nn.modules.module.register_module_forward_pre_hook(lambda module, inputs: None)
    return logits_with_head_zeroed(model, ids, layer, head)


def changing_num_heads_and_leaving_it(model, ids, layer, head):
    logits = logits_with_head_zeroed(model, ids, layer, head)
    model.blocks[layer].attention.num_heads = 1  # BUG: the next forward pass breaks
    return logits


def zeroing_W_o_bias_too(model, ids, layer, head):
    ablated = copy.deepcopy(model)
    columns = slice(head * _d_head(model), (head + 1) * _d_head(model))
    with torch.no_grad():
        ablated.blocks[layer].attention.W_o.weight[:, columns] = 0.0
        ablated.blocks[layer].attention.W_o.bias.zero_()  # BUG: the bias is no head's
        return ablated(ids)


def zeroing_interleaved_columns(model, ids, layer, head):
    def zero(merged):
        merged[..., head :: model.config.num_heads] = 0.0  # BUG: the heads are side by side
        return merged

    return _with_pre_hook(model, ids, layer, zero)


def zeroing_the_head_in_every_layer(model, ids, layer, head):
    columns = slice(head * _d_head(model), (head + 1) * _d_head(model))

    def hook(module, inputs):
        merged = inputs[0].clone()
        merged[..., columns] = 0.0
        return (merged,)

    handles = [block.attention.W_o.register_forward_pre_hook(hook) for block in model.blocks]
    try:  # BUG: every layer's W_o is hooked, not model.blocks[layer]'s alone
        return model(ids)
    finally:
        for handle in handles:
            handle.remove()


WRONG = [
    ("previous-token score", previous_over_every_query, "the mean runs over all n queries"),
    ("previous-token score", previous_reading_the_next_key, "reads the weight on the NEXT key"),
    ("previous-token score", previous_reading_the_diagonal, "reads the diagonal, each query's"),
    ("previous-token score", previous_summed, "the sum over the queries: the score is their mean"),
    ("previous-token score", previous_averaged_over_everything, "shape (), expected (2, 3) (the"),
    (
        "previous-token score",
        previous_averaged_over_everything,
        "the mean runs over the leading (batch, head) dims too",
    ),
    ("previous-token score", previous_with_default_dims, "torch.diagonal's default dims are 0"),
    (
        "previous-token score",
        previous_zeroing_the_rest_in_place,
        "changes its input `weights` in place",
    ),
    (
        "previous-token score",
        previous_with_the_helper,
        "calls helpers.induction.previous_token_score",
    ),
    ("previous-token score", previous_detached, "no gradient flows back to the inputs"),
    ("previous-token score", previous_in_float64, "dtype torch.float64, expected torch.float32"),
    ("induction score", induction_on_the_duplicate_token, "(a duplicate-token score)"),
    ("induction score", induction_over_the_whole_sequence, "averages over every query of the"),
    (
        "induction score",
        induction_from_the_last_token_of_the_first_copy,
        "the queries start at t = length - 1, the last token of the first copy",
    ),
    ("induction score", induction_stopping_one_short, "the last query, t = 2*length - 1, is left"),
    ("induction score", induction_starting_one_late, "the queries start at t = length + 1"),
    ("induction score", induction_divided_by_every_position, "divides by 2*length, the number"),
    ("induction score", induction_summed, "the sum over the queries: the score is their mean"),
    ("induction score", induction_averaged_over_everything, "the mean runs over the leading"),
    ("induction score", induction_with_default_dims, "torch.diagonal's default dims are 0 and 1"),
    ("induction score", induction_above_the_diagonal, "every score is 0, as if the weights read"),
    ("induction score", induction_one_key_too_far, "reads key t - length + 2, one after the"),
    ("induction score", induction_with_the_helper, "calls helpers.induction.induction_score"),
    ("induction score", induction_masking_in_place, "changes its input `weights` in place"),
    (
        "logits with a head zeroed",
        zeroing_the_output_of_W_o,
        "zeroes W_o's OUTPUT columns 4:8 (the output after W_o, or the rows of W_o.weight",
    ),
    (
        "logits with a head zeroed",
        zeroing_the_next_head,
        "zeroes head 2's columns 8:12, not head 1's: head h is the columns",
    ),
    (
        "logits with a head zeroed",
        zeroing_the_next_head,
        "the logits are the model's own: nothing was zeroed",
    ),
    (
        "logits with a head zeroed",
        zeroing_in_the_last_layer,
        "zeroes head 1 of layer 1, not head 1 of layer 0: the layer is model.blocks[layer]",
    ),
    ("logits with a head zeroed", zeroing_the_whole_layer, "zeroes every head of layer 0: only"),
    (
        "logits with a head zeroed",
        zeroing_W_v_but_not_its_bias,
        "zeroes rows 4:8 of W_v.weight but not of W_v.bias",
    ),
    ("logits with a head zeroed", zeroing_the_queries, "zeroes the head's queries (or keys)"),
    (
        "logits with a head zeroed",
        zeroing_W_o_in_place,
        "leaves the model's weights changed (blocks.0.attention.W_o.weight)",
    ),
    (
        "logits with a head zeroed",
        putting_W_o_back_from_a_float32_copy,
        "puts the model's weights back from a torch.float32 copy (blocks.0.attention.W_o.weight)"
        ": they came in torch.float64",
    ),
    (
        "logits with a head zeroed",
        leaving_the_hook_registered,
        "leaves a forward pre-hook registered on blocks.0.attention.W_o",
    ),
    ("logits with a head zeroed", a_hook_that_returns_nothing, "nothing was zeroed"),
    ("logits with a head zeroed", returning_probabilities, "returns probabilities (softmax)"),
    ("logits with a head zeroed", returning_log_probabilities, "returns log-probabilities"),
    (
        "logits with a head zeroed",
        leaving_the_model_in_training_mode,
        "leaves the model in training mode (it came in eval mode)",
    ),
    (
        "logits with a head zeroed",
        with_the_helper,
        "calls helpers.induction.logits_with_heads_zeroed",
    ),
    (
        "logits with a head zeroed",
        with_the_helpers_context_manager,
        "calls helpers.induction.zeroed_heads",
    ),
    ("logits with a head zeroed", changing_the_ids_in_place, "changes its input `ids` in place"),
    (
        "previous-token score",
        previous_with_gradients_switched_off,
        "leaves gradients switched off for all of torch",
    ),
    (
        "induction score",
        induction_with_float64_made_the_default,
        "leaves torch's default dtype torch.float64",
    ),
    (
        "logits with a head zeroed",
        with_a_global_module_hook_left_behind,
        "leaves a global module hook registered",
    ),
    (
        "logits with a head zeroed",
        changing_num_heads_and_leaving_it,
        "changes model.blocks.0.attention.num_heads (3 before, 1 after)",
    ),
    ("logits with a head zeroed", zeroing_W_o_bias_too, "zeroes W_o's bias too"),
    ("logits with a head zeroed", zeroing_interleaved_columns, "zeroes the columns 1::3"),
    ("logits with a head zeroed", zeroing_the_head_in_every_layer, "zeroes head 1 in every layer"),
]


# Right answers written in other styles: each must be accepted.


def previous_by_a_loop(weights):
    n = weights.shape[-1]
    total = 0
    for t in range(1, n):
        total = total + weights[..., t, t - 1]
    return total / (n - 1)


def previous_by_torch_diagonal(weights):
    return torch.diagonal(weights, offset=-1, dim1=-2, dim2=-1).mean(dim=-1)


def previous_by_a_mask(weights):
    n = weights.shape[-1]
    just_below = torch.eye(n, dtype=weights.dtype).roll(-1, dims=1).tril()  # (t, t - 1)
    return (weights * just_below).sum((-2, -1)) / (n - 1)


def induction_by_a_loop(weights, length):
    total = 0
    for t in range(length, 2 * length):
        total = total + weights[..., t, t - length + 1]
    return total / length


def induction_by_torch_diagonal(weights, length):
    stripe = torch.diagonal(weights, offset=1 - length, dim1=-2, dim2=-1)
    return stripe[..., 1:].mean(dim=-1)


def induction_from_the_bottom_half(weights, length):
    copy_rows = weights[..., length:, 1 : length + 1]  # queries of the copy, keys 1..length
    return torch.diagonal(copy_rows, dim1=-2, dim2=-1).mean(-1)


def on_a_copy_with_W_o_columns_zeroed(model, ids, layer, head):
    ablated = copy.deepcopy(model)
    columns = slice(head * _d_head(model), (head + 1) * _d_head(model))
    with torch.no_grad():
        ablated.blocks[layer].attention.W_o.weight[:, columns] = 0.0
        return ablated(ids)


def on_a_copy_with_W_v_rows_and_bias_zeroed(model, ids, layer, head):
    ablated = copy.deepcopy(model)
    rows = slice(head * _d_head(model), (head + 1) * _d_head(model))
    with torch.no_grad():
        ablated.blocks[layer].attention.W_v.weight[rows] = 0.0
        ablated.blocks[layer].attention.W_v.bias[rows] = 0.0
    return ablated(ids)


def zeroing_in_place_and_putting_back(model, ids, layer, head):
    W_o = model.blocks[layer].attention.W_o
    columns = slice(head * _d_head(model), (head + 1) * _d_head(model))
    kept = W_o.weight[:, columns].clone()
    with torch.no_grad():
        W_o.weight[:, columns] = 0.0
        try:
            return model(ids)
        finally:
            W_o.weight[:, columns] = kept


def by_hooking_the_heads_before_they_merge(model, ids, layer, head):
    def hook(module, inputs, heads):  # heads (B, heads, T, d_head)
        heads = heads.clone()
        heads[:, head] = 0.0
        return heads

    handle = model.blocks[layer].attention.attention.register_forward_hook(hook)
    try:
        return model(ids)
    finally:
        handle.remove()


def _forward_by_hand(model, ids, layer, head, rope=True, check_context=True):
    """The attention-only GPT's pass written out, head `head` of block `layer` zeroed; rope and
    check_context False leave out the turn of queries and keys, or the context check."""
    if check_context:
        model.check_ids(ids)  # ids longer than the context raise, as model(ids) does
    steps = ids.shape[1]
    x = model.tokens(ids)
    if model.positions is not None:
        x = x + model.positions(torch.arange(steps))
    for index, block in enumerate(model.blocks):
        attention = block.attention
        h = block.attention_residual.norm(x)
        heads = [split_heads(W(h), model.config.num_heads) for W in (attention.W_q, attention.W_k)]
        if rope and attention.rope:
            heads = [apply_rope(part) for part in heads]
        values = split_heads(attention.W_v(h), model.config.num_heads)
        written = attention.attention(*heads, values, mask=causal_mask(steps))
        if index == layer:
            keep = torch.ones(model.config.num_heads, 1, 1, dtype=x.dtype)
            keep[head] = 0.0
            written = written * keep
        x = x + attention.W_o(merge_heads(written))
    return model.output(model.norm(x))


def by_writing_the_forward_pass_out(model, ids, layer, head):
    return _forward_by_hand(model, ids, layer, head)


RIGHT = [
    ("previous-token score", previous_by_a_loop),
    ("previous-token score", previous_by_torch_diagonal),
    ("previous-token score", previous_by_a_mask),
    ("induction score", induction_by_a_loop),
    ("induction score", induction_by_torch_diagonal),
    ("induction score", induction_from_the_bottom_half),
    ("logits with a head zeroed", on_a_copy_with_W_o_columns_zeroed),
    ("logits with a head zeroed", on_a_copy_with_W_v_rows_and_bias_zeroed),
    ("logits with a head zeroed", zeroing_in_place_and_putting_back),
    ("logits with a head zeroed", by_hooking_the_heads_before_they_merge),
    ("logits with a head zeroed", by_writing_the_forward_pass_out),
]


@pytest.mark.parametrize(("exercise", "answer"), RIGHT, ids=[a.__name__ for _, a in RIGHT])
def test_a_right_answer_written_another_way_is_accepted(exercise, answer, run_checker):
    verdict, out = run_checker(CHECKERS[exercise][0], answer)
    assert verdict is True and out.startswith("Correct"), out


# The cases themselves: every named mistake is either the right answer in that case (then the
# checker leaves it out, see wrong_only) or far from it, so no wrong answer passes by rounding.


def far_or_equal(mistakes: dict, right: torch.Tensor) -> None:
    """A mistake that loses precision on the way is close by design: it need only lie outside
    the checkers' tolerance, 1e-6, by a factor of ten."""
    for diagnosis, answer in mistakes.items():
        if answer.shape == right.shape:
            error = (answer.double() - right.double()).abs().max()
            far = 1e-5 if "significant digits" in diagnosis else 1e-3
            assert error < 1e-7 or error > far, (diagnosis, error)


@pytest.mark.parametrize("case", previous_token_cases(), ids=lambda case: case[0])
def test_every_previous_token_mistake_is_far_from_the_right_answer(case):
    _, weights = case
    far_or_equal(_previous_mistakes(weights), helpers_previous_token_score(weights))


@pytest.mark.parametrize("case", induction_cases(), ids=lambda case: case[0])
def test_every_induction_mistake_is_far_from_the_right_answer(case):
    _, weights, length = case
    far_or_equal(_induction_mistakes(weights, length), helpers_induction_score(weights, length))


@pytest.mark.parametrize("case", head_zeroed_cases(), ids=lambda case: case[0])
def test_every_head_zeroed_mistake_is_far_from_the_right_answer(case):
    _, model, ids, layer, head = case
    right = logits_with_heads_zeroed(model, ids, [(layer, head)])
    for diagnosis, answer in _head_zeroed_mistakes(model, ids, layer, head).items():
        far = 1e-3 if "significant digits" in diagnosis else 1e-2  # (the tolerance is 1e-4)
        assert (answer.double() - right.double()).abs().max() > far, diagnosis


def test_the_checker_leaves_the_learners_random_numbers_alone(run_checker):
    torch.manual_seed(4)
    expected = torch.rand(3)
    torch.manual_seed(4)
    run_checker(check_logits_with_head_zeroed, logits_with_head_zeroed)
    assert torch.equal(torch.rand(3), expected)


@pytest.mark.parametrize(
    ("answer", "words"),
    [
        (zeroing_W_o_in_place, "leaves the model's weights changed"),
        (leaving_the_hook_registered, "leaves a forward pre-hook registered"),
        (leaving_the_model_in_training_mode, "leaves the model in training mode"),
    ],
    ids=lambda value: getattr(value, "__name__", ""),
)
def test_a_model_left_changed_is_refused_and_put_back_as_it_came(answer, words):
    _, model, ids, layer, head = head_zeroed_cases()[0]
    weights = copy.deepcopy(model.state_dict())
    with pytest.raises(Refused, match=words):
        _watched(answer, model, layer, head)(ids)
    assert not model.training
    assert all(not module._forward_pre_hooks for module in model.modules())
    for name, tensor in model.state_dict().items():
        assert torch.equal(tensor, weights[name]), name


# Regressions from a hostile pass


def previous_by_gather(weights):
    n = weights.shape[-1]
    keys = torch.arange(n - 1).expand(*weights.shape[:-2], n - 1).unsqueeze(-1)  # key t - 1
    return weights[..., 1:, :].gather(-1, keys).squeeze(-1).mean(-1)


def induction_by_einsum(weights, length):
    n = 2 * length
    stripe = torch.zeros(n, n, dtype=weights.dtype)
    queries = torch.arange(length, n)
    stripe[queries, queries - length + 1] = 1.0
    return torch.einsum("...ij,ij->...", weights, stripe) / length


def by_a_functional_call_with_an_edited_weight(model, ids, layer, head):
    weights = {**dict(model.named_parameters()), **dict(model.named_buffers())}
    name = f"blocks.{layer}.attention.W_o.weight"
    edited = weights[name].detach().clone()
    edited[:, head * _d_head(model) : (head + 1) * _d_head(model)] = 0.0
    with torch.no_grad():
        return torch.func.functional_call(model, {**weights, name: edited}, (ids,))


@pytest.mark.parametrize(
    ("exercise", "answer"),
    [
        ("previous-token score", previous_by_gather),
        ("induction score", induction_by_einsum),
        ("logits with a head zeroed", by_a_functional_call_with_an_edited_weight),
    ],
    ids=lambda value: getattr(value, "__name__", value),
)
def test_a_right_answer_in_yet_another_style_is_accepted(exercise, answer, run_checker):
    verdict, out = run_checker(CHECKERS[exercise][0], answer)
    assert verdict is True and out.startswith("Correct"), out


def _not_a_tensor(convert):
    """Each exercise's solution, its result passed through convert."""
    return {
        "previous-token score": lambda w: convert(previous_token_score(w)),
        "induction score": lambda w, length: convert(induction_score(w, length)),
        "logits with a head zeroed": lambda *inputs: convert(logits_with_head_zeroed(*inputs)),
    }


@pytest.mark.parametrize("exercise", list(CHECKERS))
@pytest.mark.parametrize(
    ("convert", "words"),
    [
        (lambda x: x.detach().numpy(), "returned a numpy value (.numpy() leaves torch)"),
        (lambda x: x.sum().item(), "returned a Python float"),
        (lambda x: x.detach().reshape(-1).tolist(), "returned a list (.tolist() leaves torch)"),
        (lambda x: str(x), "returned a str, expected a tensor"),
    ],
)
def test_an_answer_that_is_not_a_tensor_is_refused_by_what_it_is(
    exercise, convert, words, run_checker
):
    verdict, out = run_checker(CHECKERS[exercise][0], _not_a_tensor(convert)[exercise])
    failed = f"Not yet: {VALUE_CASES[exercise]} of {ALL_CHECKS[exercise]} checks failed"
    assert verdict is False and out.startswith(failed), out
    assert words in out, out


def replacing_W_o_forward(model, ids, layer, head):
    W_o, original = model.blocks[layer].attention.W_o, model.blocks[layer].attention.W_o.forward
    columns = slice(head * _d_head(model), (head + 1) * _d_head(model))
    W_o.forward = lambda merged: original(merged.index_fill(-1, torch.arange(64)[columns], 0.0))
    return model(ids)  # BUG: W_o.forward never put back


def replacing_W_o_with_a_zeroed_copy(model, ids, layer, head):
    attention = model.blocks[layer].attention
    zeroed = copy.deepcopy(attention.W_o)
    with torch.no_grad():
        zeroed.weight[:, head * _d_head(model) : (head + 1) * _d_head(model)] = 0.0
    attention.W_o = zeroed  # BUG: the model keeps the new module
    return model(ids)


class ZeroingWrapper(torch.nn.Module):
    def __init__(self, inner, columns):
        super().__init__()
        self.inner, self.columns = inner, columns

    def forward(self, merged):
        merged = merged.clone()
        merged[..., self.columns] = 0.0
        return self.inner(merged)


def wrapping_W_o(model, ids, layer, head):
    attention = model.blocks[layer].attention
    columns = slice(head * _d_head(model), (head + 1) * _d_head(model))
    attention.W_o = ZeroingWrapper(attention.W_o, columns)  # BUG: new weight names, left there
    return model(ids)


def converting_the_model_to_float64(model, ids, layer, head):
    model.double()  # BUG: the model itself is converted
    return logits_with_head_zeroed(model, ids, layer, head).float()


def freezing_the_weights(model, ids, layer, head):
    model.requires_grad_(False)  # BUG: never switched back on
    return logits_with_head_zeroed(model, ids, layer, head)


def leaving_gradients_behind(model, ids, layer, head):
    model(ids).sum().backward()  # BUG: every weight's .grad is left filled
    return logits_with_head_zeroed(model, ids, layer, head)


@pytest.mark.parametrize(
    ("answer", "words"),
    [
        (
            replacing_W_o_forward,
            "leaves model.blocks.0.attention.W_o.forward replaced (a function where the module's "
            "own forward was)",
        ),
        (replacing_W_o_with_a_zeroed_copy, "replaces or adds a module, model.blocks.0.attention"),
        (wrapping_W_o, "replaces or adds a module, model.blocks.0.attention.W_o"),
        (converting_the_model_to_float64, "leaves the model's weights in torch.float64 on cpu"),
        (freezing_the_weights, "leaves requires_grad off for the model's weight"),
        (leaving_gradients_behind, "leaves gradients in the model's weights (.grad of"),
        (changing_num_heads_and_leaving_it, "changes model.blocks.0.attention.num_heads"),
    ],
    ids=lambda value: getattr(value, "__name__", ""),
)
def test_a_model_changed_beyond_its_weights_is_refused_and_put_back(answer, words, run_checker):
    _, model, ids, layer, head = head_zeroed_cases()[0]
    modules = dict(model.named_modules())
    weights = {name: tensor.clone() for name, tensor in model.state_dict().items()}
    with pytest.raises(Refused) as refused:
        _watched(answer, model, layer, head)(ids)
    assert words in str(refused.value)
    assert dict(model.named_modules()) == modules
    assert not any("forward" in vars(module) for module in model.modules())
    for name, parameter in model.named_parameters():
        assert parameter.requires_grad and parameter.grad is None, name
    for name, tensor in model.state_dict().items():
        assert tensor.dtype == weights[name].dtype and torch.equal(tensor, weights[name]), name
    verdict, out = run_checker(check_logits_with_head_zeroed, answer)
    assert verdict is False and words in out, out


@pytest.mark.parametrize(
    ("exercise", "answer"),
    [
        ("previous-token score", previous_with_gradients_switched_off),
        ("induction score", induction_with_float64_made_the_default),
        ("logits with a head zeroed", with_a_global_module_hook_left_behind),
    ],
    ids=lambda value: getattr(value, "__name__", value),
)
def test_torchs_global_settings_are_put_back_after_an_answer_changes_them(
    exercise, answer, run_checker
):
    hooks = dict(torch.nn.modules.module._global_forward_pre_hooks)
    verdict, out = run_checker(CHECKERS[exercise][0], answer)
    failed = f"Not yet: {ALL_CHECKS[exercise]} of {ALL_CHECKS[exercise]} checks failed"
    assert verdict is False and out.startswith(failed), out
    assert torch.is_grad_enabled() and torch.get_default_dtype() == torch.float32
    assert dict(torch.nn.modules.module._global_forward_pre_hooks) == hooks


# Regressions from a second learner's pass: a model whose forward pass fails, a model in training
# mode, heads of another width, and the rules the prompts state


def _zeroing_hook(model, head, width=None):
    width = _d_head(model) if width is None else width
    columns = slice(head * width, (head + 1) * width)

    def hook(module, inputs):
        merged = inputs[0].clone()
        merged[..., columns] = 0.0
        return (merged,)

    return hook


def removing_the_hook_only_after_a_forward_pass_that_succeeds(model, ids, layer, head):
    handle = model.blocks[layer].attention.W_o.register_forward_pre_hook(_zeroing_hook(model, head))
    with torch.no_grad():
        logits = model(ids)
    handle.remove()  # BUG: never reached when model(ids) raises
    return logits


def putting_the_weights_back_only_after_a_forward_pass_that_succeeds(model, ids, layer, head):
    W_o = model.blocks[layer].attention.W_o
    columns = slice(head * _d_head(model), (head + 1) * _d_head(model))
    kept = W_o.weight[:, columns].clone()
    with torch.no_grad():
        W_o.weight[:, columns] = 0.0
        logits = model(ids)
        W_o.weight[:, columns] = kept  # BUG: never reached when model(ids) raises
    return logits


def hiding_the_error_of_the_forward_pass(model, ids, layer, head):
    try:
        return logits_with_head_zeroed(model, ids, layer, head)
    except ValueError:  # BUG: the caller never learns that the ids were refused
        return torch.zeros(*ids.shape, model.config.vocab_size)


def with_a_head_width_of_4_typed_in(model, ids, layer, head):
    handle = model.blocks[layer].attention.W_o.register_forward_pre_hook(
        _zeroing_hook(model, head, width=4)  # BUG: right for some models only
    )
    try:
        return model(ids)
    finally:
        handle.remove()


def with_a_head_width_of_d_model_over_the_layers(model, ids, layer, head):
    width = model.config.d_model // model.config.num_layers  # BUG: heads, not layers
    handle = model.blocks[layer].attention.W_o.register_forward_pre_hook(
        _zeroing_hook(model, head, width=width)
    )
    try:
        return model(ids)
    finally:
        handle.remove()


def switching_to_eval_mode_for_good(model, ids, layer, head):
    model.eval()  # BUG: a model that came in training mode leaves in eval mode
    return logits_with_head_zeroed(model, ids, layer, head)


def a_hook_that_does_nothing(model, ids, layer, head):
    handle = model.blocks[layer].attention.W_o.register_forward_pre_hook(lambda m, i: None)
    try:
        return model(ids)
    finally:
        handle.remove()


REFUSED_AFTER_A_SECOND_PASS = [
    (
        removing_the_hook_only_after_a_forward_pass_that_succeeds,
        "model(ids) raised ValueError, and your function leaves a forward pre-hook registered on "
        "blocks.1.attention.W_o",
    ),
    (
        putting_the_weights_back_only_after_a_forward_pass_that_succeeds,
        "model(ids) raised ValueError, and your function leaves the model's weights changed "
        "(blocks.1.attention.W_o.weight)",
    ),
    (hiding_the_error_of_the_forward_pass, "your function returned instead of raising"),
    (with_a_head_width_of_4_typed_in, "zeroes the columns 4:8, as if each head were 4 wide"),
    (with_a_head_width_of_d_model_over_the_layers, "as if each head were 6 wide: d_head ="),
    (switching_to_eval_mode_for_good, "leaves the model in eval mode (it came in training mode)"),
    (a_hook_that_does_nothing, "(one that returns None leaves it as it was)"),
    (with_the_helper, "calls helpers.induction.logits_with_heads_zeroed, which this exercise"),
]


@pytest.mark.parametrize(
    ("answer", "words"),
    REFUSED_AFTER_A_SECOND_PASS,
    ids=lambda value: getattr(value, "__name__", ""),
)
def test_a_wrong_answer_found_by_a_second_learners_pass_is_refused_by_name(
    answer, words, run_checker
):
    verdict, out = run_checker(check_logits_with_head_zeroed, answer)
    assert verdict is False and words in out, out


def test_the_failing_case_names_try_finally_and_leaves_the_model_as_it_came(monkeypatch):
    case = failing_forward_case()
    model = case[1]
    monkeypatch.setattr("helpers.exercises.ch13_induction_heads.failing_forward_case", lambda: case)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        verdict = check_logits_with_head_zeroed(
            removing_the_hook_only_after_a_forward_pass_that_succeeds
        )
    assert not verdict and "undo in try/finally, or a `with` block" in out.getvalue()
    assert not any(module._forward_pre_hooks for module in model.modules())
    with pytest.raises(ValueError, match="do not fit in the context"):
        model(case[2])  # the case's ids are ones on which model(ids) raises


def test_a_hook_that_returns_nothing_is_not_blamed_on_the_head_width(run_checker):
    for answer in (a_hook_that_returns_nothing, a_hook_that_does_nothing):
        verdict, out = run_checker(check_logits_with_head_zeroed, answer)
        assert verdict is False and "as if each head were" not in out, out
        assert out.count("nothing was zeroed") == len(head_zeroed_cases()), out


def checking_the_ids_before_anything(model, ids, layer, head):
    if ids.shape[1] > model.config.context_length:
        raise ValueError("too many tokens for the model's context")
    return logits_with_head_zeroed(model, ids, layer, head)


def with_a_context_manager_of_its_own(model, ids, layer, head):
    @contextlib.contextmanager
    def head_silenced():
        handle = model.blocks[layer].attention.W_o.register_forward_pre_hook(
            _zeroing_hook(model, head)
        )
        try:
            yield
        finally:
            handle.remove()

    with head_silenced(), torch.no_grad():
        return model(ids)


def in_eval_mode_and_back(model, ids, layer, head):
    was_training = model.training
    model.eval()
    try:
        return logits_with_head_zeroed(model, ids, layer, head)
    finally:
        model.train(was_training)


def previous_by_a_loop_over_the_queries_of_every_matrix(weights):
    flat = weights.reshape(-1, *weights.shape[-2:])  # (matrices, n, n)
    scores = [torch.stack([m[t, t - 1] for t in range(1, m.shape[-1])]).mean() for m in flat]
    return torch.stack(scores).reshape(weights.shape[:-2])


def induction_by_gathering_the_stripe(weights, length):
    queries = torch.arange(length, 2 * length)
    keys = (queries - length + 1).expand(*weights.shape[:-2], length).unsqueeze(-1)
    return weights[..., length:, :].gather(-1, keys).squeeze(-1).mean(-1)


ACCEPTED_AFTER_A_SECOND_PASS = [
    ("logits with a head zeroed", checking_the_ids_before_anything),
    ("logits with a head zeroed", with_a_context_manager_of_its_own),
    ("logits with a head zeroed", in_eval_mode_and_back),
    ("previous-token score", previous_by_a_loop_over_the_queries_of_every_matrix),
    ("induction score", induction_by_gathering_the_stripe),
]


@pytest.mark.parametrize(
    ("exercise", "answer"),
    ACCEPTED_AFTER_A_SECOND_PASS,
    ids=[answer.__name__ for _, answer in ACCEPTED_AFTER_A_SECOND_PASS],
)
def test_a_right_answer_found_by_a_second_learners_pass_is_accepted(exercise, answer, run_checker):
    verdict, out = run_checker(CHECKERS[exercise][0], answer)
    assert verdict is True and out.startswith("Correct"), out


def test_the_cases_have_heads_of_two_widths_and_models_in_both_modes():
    cases = head_zeroed_cases()
    widths = {model.config.d_model // model.config.num_heads for _, model, *_ in cases}
    modes = {model.training for _, model, *_ in cases}
    assert len(widths) >= 2 and modes == {True, False}


FORBIDDEN = {
    "previous-token score": ["previous_token_score"],
    "induction score": ["induction_score"],
    "logits with a head zeroed": ["logits_with_heads_zeroed", "zeroed_heads"],
}
YOUR_TURN = {
    "previous-token score": ("exercises", "your-turn-previous_token_score"),
    "induction score": ("exercise-2", "your-turn-induction_score"),
    "logits with a head zeroed": ("exercise-3", "your-turn-logits_with_head_zeroed"),
}


def _cells() -> dict:
    notebook = nbformat.read(NOTEBOOK, as_version=4)
    return {cell.get("id"): cell.source for cell in notebook.cells}


@pytest.mark.parametrize("exercise", list(CHECKERS))
def test_the_prompt_and_the_docstrings_state_every_rule_the_checker_enforces(exercise):
    prompt_id, your_turn_id = YOUR_TURN[exercise]
    cells = _cells()
    prompt, your_turn, checker_doc = (
        " ".join(text.split())  # as read, whatever the line breaks
        for text in (cells[prompt_id], cells[your_turn_id], CHECKERS[exercise][0].__doc__)
    )
    limit = f"{ANSWER_TIME_LIMIT_SECONDS:g} s"
    for text in (your_turn, checker_doc):
        assert limit in text and "grad mode, default dtype, random generator" in text
    assert f"within {limit}" in cells["exercises"]  # the exercises' introduction, for all three
    for name in FORBIDDEN[exercise]:
        for text in (prompt, your_turn, checker_doc):
            assert name in text, (name, text)
    assert "no python loop" not in prompt.lower() and "no loop over" not in prompt.lower()
    if exercise == "logits with a head zeroed":
        for text in (prompt, your_turn, checker_doc):
            assert "train" in text and "raises" in text


# Regressions from a third learner's pass: mistakes that were answered by the general hint
# only, or by a message about another one, and the rules the prompts did not state


def previous_on_the_diagonal_after_the_first_query(weights):
    return torch.diagonal(weights, dim1=-2, dim2=-1)[..., 1:].mean(-1)


def previous_divided_by_n_minus_2(weights):
    n = weights.shape[-1]
    return torch.diagonal(weights, offset=-1, dim1=-2, dim2=-1).sum(-1) / max(n - 2, 1)


def previous_in_bfloat16(weights):
    below = torch.diagonal(weights.bfloat16(), offset=-1, dim1=-2, dim2=-1)
    return below.mean(-1).to(weights.dtype)


def previous_as_the_notebook_writes_it(weights):
    """The chapter's own example of this mistake: the stripe below the diagonal over n."""
    return torch.diagonal(weights, offset=-1, dim1=-2, dim2=-1).sum(-1) / weights.shape[-1]


def induction_one_key_too_far_and_one_query_short(weights, length):
    queries = torch.arange(length, 2 * length - 1)
    return weights[..., queries, queries - length + 2].sum(-1) / length


def induction_one_query_too_early(weights, length):
    queries = torch.arange(length - 1, 2 * length - 1)
    return weights[..., queries, queries - length + 1].mean(-1)


def induction_in_float64(weights, length):
    return induction_score(weights.double(), length)


def zeroing_rows_of_W_o_and_putting_them_back(model, ids, layer, head):
    W_o = model.blocks[layer].attention.W_o
    rows = slice(head * _d_head(model), (head + 1) * _d_head(model))
    kept = W_o.weight.detach().clone()
    try:
        with torch.no_grad():
            W_o.weight[rows] = 0.0  # BUG: W_o's output columns, not its input's
            return model(ids)
    finally:
        with torch.no_grad():
            W_o.weight.copy_(kept)


def zeroing_the_heads_slice_of_the_bias_too(model, ids, layer, head):
    ablated = copy.deepcopy(model)
    columns = slice(head * _d_head(model), (head + 1) * _d_head(model))
    with torch.no_grad():
        ablated.blocks[layer].attention.W_o.weight[:, columns] = 0.0
        ablated.blocks[layer].attention.W_o.bias[columns] = 0.0  # BUG: no head's
        return ablated(ids)


def _hooking_the_attentions_input(model, ids, layer, head, inputs_zeroed):
    columns = slice(head * _d_head(model), (head + 1) * _d_head(model))

    def hook(module, inputs, named):
        zeroed = inputs[0].clone()
        zeroed[..., columns] = 0.0  # BUG: the residual stream's columns, not the head's output
        return (zeroed,) * inputs_zeroed + inputs[inputs_zeroed:], named

    handle = model.blocks[layer].attention.register_forward_pre_hook(hook, with_kwargs=True)
    try:
        return model(ids)
    finally:
        handle.remove()


def zeroing_the_queries_input(model, ids, layer, head):
    return _hooking_the_attentions_input(model, ids, layer, head, 1)


def zeroing_every_input_of_the_attention(model, ids, layer, head):
    return _hooking_the_attentions_input(model, ids, layer, head, 3)


def returning_float32_logits(model, ids, layer, head):
    return logits_with_head_zeroed(model, ids, layer, head).float()


def clamping_the_ids_in_place_to_the_vocabulary(model, ids, layer, head):
    ids.clamp_(max=model.config.vocab_size - 1)  # changes no value, still in place
    return logits_with_head_zeroed(model, ids, layer, head)


REFUSED_AFTER_A_THIRD_PASS = [
    (
        "previous-token score",
        previous_on_the_diagonal_after_the_first_query,
        "reads the diagonal, each query's weight on its own token (t, t), over the queries "
        "t = 1..n-1",
    ),
    ("previous-token score", previous_divided_by_n_minus_2, "divides by n - 2: the queries"),
    (
        "previous-token score",
        previous_in_bfloat16,
        "the computation runs in torch.bfloat16, which keeps about 2 significant digits",
    ),
    (
        "induction score",
        induction_one_key_too_far_and_one_query_short,
        "reads key t - length + 2, one after the token to copy (for the queries t = length.."
        "2*length-2, divided by length)",
    ),
    (
        "induction score",
        induction_one_query_too_early,
        "the queries run t = length-1..2*length-2, one too early",
    ),
    ("induction score", induction_in_float64, "dtype torch.float64, expected torch.float32"),
    (
        "logits with a head zeroed",
        zeroing_rows_of_W_o_and_putting_them_back,
        "zeroes W_o's OUTPUT columns 4:8 (the rows of W_o.weight, W_o.weight[4:8])",
    ),
    (
        "logits with a head zeroed",
        zeroing_the_heads_slice_of_the_bias_too,
        "zeroes W_o.bias[4:8] too: the bias belongs to no head",
    ),
    (
        "logits with a head zeroed",
        zeroing_the_queries_input,
        "zeroes columns 4:8 of the queries the layer's attention reads",
    ),
    (
        "logits with a head zeroed",
        zeroing_every_input_of_the_attention,
        "zeroes columns 4:8 of the queries, keys and values the layer's attention reads",
    ),
    (
        "logits with a head zeroed",
        returning_float32_logits,
        "dtype torch.float32, expected torch.float64",
    ),
    (
        "logits with a head zeroed",
        clamping_the_ids_in_place_to_the_vocabulary,
        "runs an in-place operation on its input `ids`, which changes no value",
    ),
]

WRONG += REFUSED_AFTER_A_THIRD_PASS  # tests/test_exercises.py names each


@pytest.mark.parametrize("answer", [previous_over_every_query, previous_as_the_notebook_writes_it])
def test_a_mean_over_every_query_is_not_said_to_wrap_around(answer, run_checker):
    """Only an index t - 1 = -1 wraps; a sum over the stripe divided by n reads no key -1."""
    verdict, out = run_checker(check_previous_token_score, answer)
    assert verdict is False and "the mean runs over all n queries" in out, out
    assert "wraps around" not in out, out


def test_the_output_columns_are_named_whether_or_not_the_bias_is_zeroed(run_checker):
    """It was named only when the bias's slice was zeroed too, as a hook on W_o's output does."""
    for answer in (zeroing_the_output_of_W_o, zeroing_rows_of_W_o_and_putting_them_back):
        verdict, out = run_checker(check_logits_with_head_zeroed, answer)
        failures = out.splitlines()[1:]
        assert len(failures) == len(head_zeroed_cases()), out
        assert all("zeroes W_o's OUTPUT columns" in line for line in failures), out


@pytest.mark.parametrize("exercise", list(CHECKERS))
def test_the_your_turn_docstrings_state_that_an_input_is_not_written_to(exercise):
    _, your_turn_id = YOUR_TURN[exercise]
    for text in (_cells()[your_turn_id], CHECKERS[exercise][0].__doc__):
        assert "no in-place operation on" in " ".join(text.split()), text


def test_the_prompt_and_the_docstrings_state_what_the_model_must_keep():
    """The checker refuses a .grad left on the weights, requires_grad switched off and a model
    converted with model.double(), besides weights, hooks and mode: all three texts say so."""
    prompt_id, your_turn_id = YOUR_TURN["logits with a head zeroed"]
    cells = _cells()
    texts = (cells[prompt_id], cells[your_turn_id], check_logits_with_head_zeroed.__doc__)
    for text in (" ".join(text.split()) for text in texts):
        for rule in ("requires_grad", ".grad", "model.double()", "hooks", "train/eval mode"):
            assert rule in text, (rule, text)
        assert "model's dtype" in text and "no in-place operation on it" in text


# Regressions from a fourth learner's pass: attributes added to the model (with or without a
# leading _), and an attribute set again to the value it had; from a later pass, a forward put
# back by assignment (an instance attribute left, though it is the module's own forward)


def _zeroing_forward(W_o, original, columns):
    def patched(merged):
        merged = merged.clone()
        merged[..., columns] = 0.0
        return original(merged)

    return patched


def putting_the_saved_forward_back_by_assignment(model, ids, layer, head):
    W_o = model.blocks[layer].attention.W_o
    original = W_o.forward
    W_o.forward = _zeroing_forward(
        W_o, original, slice(head * _d_head(model), (head + 1) * _d_head(model))
    )
    try:
        return model(ids)
    finally:
        W_o.forward = original  # BUG: W_o runs as it came, but keeps an attribute `forward`


def deleting_the_patched_forward(model, ids, layer, head):
    W_o = model.blocks[layer].attention.W_o
    W_o.forward = _zeroing_forward(
        W_o, W_o.forward, slice(head * _d_head(model), (head + 1) * _d_head(model))
    )
    try:
        return model(ids)
    finally:
        del W_o.forward  # the class's forward runs again


def setting_dropout_to_the_value_it_had(model, ids, layer, head):
    model.blocks[layer].attention.attention.dropout.p = 0.0  # it is 0.0 already
    return logits_with_head_zeroed(model, ids, layer, head)


def keeping_the_handle_on_the_model(model, ids, layer, head):
    W_o = model.blocks[layer].attention.W_o
    model._ablation_handle = W_o.register_forward_pre_hook(_zeroing_hook(model, head))
    try:
        return model(ids)
    finally:
        model._ablation_handle.remove()  # BUG: the hook goes, the attribute stays


def keeping_the_handle_on_the_attention(model, ids, layer, head):
    attention = model.blocks[layer].attention
    attention.handle = attention.W_o.register_forward_pre_hook(_zeroing_hook(model, head))
    try:
        return model(ids)
    finally:
        attention.handle.remove()  # BUG: the hook goes, the attribute stays


def marking_the_model(model, ids, layer, head):
    model.ablated = (layer, head)  # BUG: a new attribute left on the model
    return logits_with_head_zeroed(model, ids, layer, head)


def deleting_an_attribute(model, ids, layer, head):
    del model.blocks[layer].attention.W_o.in_features  # BUG: never put back
    return logits_with_head_zeroed(model, ids, layer, head)


def replacing_W_o_weight_with_a_zeroed_parameter(model, ids, layer, head):
    W_o = model.blocks[layer].attention.W_o
    zeroed = W_o.weight.detach().clone()
    zeroed[:, head * _d_head(model) : (head + 1) * _d_head(model)] = 0.0
    W_o.weight = torch.nn.Parameter(zeroed)  # BUG: the model keeps the new parameter
    with torch.no_grad():
        return model(ids)


@pytest.mark.parametrize(
    "answer",
    [deleting_the_patched_forward, setting_dropout_to_the_value_it_had],
    ids=lambda answer: answer.__name__,
)
def test_a_model_put_back_as_it_behaved_is_accepted(answer, run_checker):
    verdict, out = run_checker(check_logits_with_head_zeroed, answer)
    assert verdict is True and out.startswith("Correct"), out


def previous_counting_query_0_on_itself(weights):
    n = weights.shape[-1]  # BUG: query 0's own weight counted, and a mean over n
    return (weights[..., 0, 0] + weights.diagonal(-1, -2, -1).sum(-1)) / n


def induction_one_key_too_far_and_the_last_query_on_itself(weights, length):
    t = torch.arange(length, 2 * length - 1)  # BUG: key t - length + 2
    return torch.cat([weights[..., t, t - length + 2], weights[..., -1:, -1]], -1).mean(-1)


def zeroing_the_columns_one_to_the_right(model, ids, layer, head):
    d = _d_head(model)

    def hook(module, args):
        x = args[0].clone()
        x[..., head * d + 1 : (head + 1) * d + 1] = 0  # BUG: shifted by one
        return (x,)

    handle = model.blocks[layer].attention.W_o.register_forward_pre_hook(hook)
    try:
        return model(ids)
    finally:
        handle.remove()


ATTRIBUTES_LEFT_CHANGED = [
    (
        putting_the_saved_forward_back_by_assignment,
        "leaves an instance attribute forward on model.blocks.0.attention.W_o (the bound "
        "method you saved, assigned back",
    ),
    (
        keeping_the_handle_on_the_model,
        "adds model._ablation_handle (a RemovableHandle) and leaves it there",
    ),
    (
        keeping_the_handle_on_the_attention,
        "adds model.blocks.0.attention.handle (a RemovableHandle) and leaves it there",
    ),
    (marking_the_model, "adds model.ablated ((0, 1)) and leaves it"),
    (
        deleting_an_attribute,
        "deletes model.blocks.0.attention.W_o.in_features and leaves it deleted",
    ),
    (
        replacing_W_o_weight_with_a_zeroed_parameter,
        "replaces a parameter, model.blocks.0.attention.W_o.weight, and leaves it there",
    ),
]

REFUSED_AFTER_A_FOURTH_PASS = [
    (
        "previous-token score",
        previous_counting_query_0_on_itself,
        "counts query 0 as if its previous token were key 0 (weights[..., 0, 0], or key t - 1 "
        "clamped at 0) and divides by n",
    ),
    (
        "induction score",
        induction_one_key_too_far_and_the_last_query_on_itself,
        "(query, key) = (4, 2), (5, 3), (6, 4), (7, 7), each times 0.25, where the score reads "
        "(4, 1), (5, 2), (6, 3), (7, 4), each times 0.25",
    ),
    (
        "induction score",
        induction_one_key_too_far_and_the_last_query_on_itself,
        "most of its keys lie 1 after those, an offset off by 1",
    ),
    (
        "logits with a head zeroed",
        zeroing_the_columns_one_to_the_right,
        "zeroes the columns 5:9, head 1's shifted by +1: head h is the columns "
        "h*d_head:(h+1)*d_head of W_o's input, here 4:8",
    ),
] + [("logits with a head zeroed", answer, words) for answer, words in ATTRIBUTES_LEFT_CHANGED]

WRONG += REFUSED_AFTER_A_FOURTH_PASS  # tests/test_exercises.py names each


@pytest.mark.parametrize(
    ("exercise", "answer", "words"),
    REFUSED_AFTER_A_FOURTH_PASS,
    ids=lambda value: getattr(value, "__name__", ""),
)
def test_a_wrong_answer_found_by_a_fourth_learners_pass_is_named_in_every_case(
    exercise, answer, words, run_checker
):
    verdict, out = run_checker(CHECKERS[exercise][0], answer)
    assert verdict is False, out
    failures = out.splitlines()[1:]
    hint = {"previous-token score": "of weights[..., t, t - 1])", "induction score": "+ 1])"}
    assert not any(line.endswith(hint.get(exercise, "zeroed)")) for line in failures), out


@pytest.mark.parametrize(
    ("answer", "words"),
    ATTRIBUTES_LEFT_CHANGED,
    ids=lambda value: getattr(value, "__name__", ""),
)
def test_a_model_left_with_an_attribute_changed_is_refused_in_every_case(
    answer, words, run_checker
):
    """An added attribute was caught only where an earlier case had left it on the same
    module, and then named by its address ('<torch.utils.hooks.RemovableHandle objec')."""
    verdict, out = run_checker(check_logits_with_head_zeroed, answer)
    every = ALL_CHECKS["logits with a head zeroed"]
    assert verdict is False and out.startswith(f"Not yet: {every} of {every} checks"), out
    assert words in out and "<" not in out, out


@pytest.mark.parametrize(
    "answer",
    [keeping_the_handle_on_the_model, keeping_the_handle_on_the_attention, deleting_an_attribute,
     replacing_W_o_weight_with_a_zeroed_parameter, putting_the_saved_forward_back_by_assignment],
    ids=lambda answer: answer.__name__,
)  # fmt: skip
def test_a_model_left_with_an_attribute_changed_is_put_back_as_it_came(answer):
    _, model, ids, layer, head = head_zeroed_cases()[0]
    attributes = {name: dict(vars(module)) for name, module in model.named_modules()}
    parameters = dict(model.named_parameters())
    with pytest.raises(Refused):
        _watched(answer, model, layer, head)(ids)
    for name, module in model.named_modules():
        assert set(vars(module)) == set(attributes[name]), name
    assert all(parameter is parameters[name] for name, parameter in model.named_parameters())


def test_a_changed_attribute_is_shown_by_value_or_by_type():
    def changing_in_features(model, ids, layer, head):
        model.blocks[layer].attention.W_o.in_features = 99  # BUG: left changed
        return logits_with_head_zeroed(model, ids, layer, head)

    def changing_the_config(model, ids, layer, head):
        model.config = copy.copy(model.config)  # BUG: another object, left there
        return logits_with_head_zeroed(model, ids, layer, head)

    _, model, ids, layer, head = head_zeroed_cases()[0]
    with pytest.raises(Refused, match=r"W_o.in_features \(12 before, 99 after\)"):
        _watched(changing_in_features, model, layer, head)(ids)
    with pytest.raises(Refused, match=r"model.config \(one GPTConfig before, another after\)"):
        _watched(changing_the_config, model, layer, head)(ids)


def previous_squared(weights):
    return previous_token_score(weights) ** 2  # not a weighted sum of the weights


def test_where_a_score_reads_is_told_only_of_a_weighted_sum_of_the_weights(run_checker):
    verdict, out = run_checker(check_previous_token_score, previous_squared)
    assert verdict is False and "it reads" not in out, out
    assert out.count("(the mean over the queries t = 1..n-1 of weights[..., t, t - 1])") > 0, out


# Regressions from a fifth learner's pass: answers that return NaN made the first two checkers
# raise IndexError; answers that got the general hint, or the input's dtype for the logits'


def previous_from_query_2_on(weights):
    below = torch.diagonal(weights, offset=-1, dim1=-2, dim2=-1)
    return below[..., 1:].mean(-1)  # BUG: query 1 left out; for n = 2 an empty slice, NaN


def previous_two_keys_back(weights):
    return torch.diagonal(weights, offset=-2, dim1=-2, dim2=-1).mean(-1)  # n = 2: empty, NaN


def previous_all_nan(weights):
    return torch.full(weights.shape[:-2], float("nan"), dtype=weights.dtype) + 0 * weights.sum(
        (-2, -1)
    )


def previous_of_the_first_matrix(weights):
    n = weights.shape[-1]
    first = weights.reshape(-1, n, n)[0].diagonal(-1).mean()  # BUG: the first matrix's only
    return first.expand(weights.shape[:-2])


def previous_over_every_query_divided_by_n_minus_1(weights):
    n = weights.shape[-1]  # BUG: t = 0 reads key -1, the last key (0, so the values agree)
    return sum(weights[..., t, t - 1] for t in range(n)) / (n - 1)


def induction_from_the_third_query_of_the_copy(weights, length):
    queries = torch.arange(length, 2 * length)
    return weights[..., queries, queries - length + 1][..., 2:].mean(-1)  # length 2: NaN


def induction_times_nan(weights, length):
    return weights[..., 0, 0] * float("nan")


def induction_over_the_whole_first_block(weights, length):
    return weights[..., length:, :length].sum(-1).mean(-1) / length


def induction_with_default_dims_on_the_copy(weights, length):
    return torch.diagonal(weights[..., length:, :], offset=1)[..., :length].mean(-1)


def zeroing_in_batch_row_0_only(model, ids, layer, head):
    columns = slice(head * _d_head(model), (head + 1) * _d_head(model))

    def zero(merged):
        merged[0, :, columns] = 0.0  # BUG: the other sequences keep the head
        return merged

    return _with_pre_hook(model, ids, layer, zero)


def zeroing_at_the_last_position_only(model, ids, layer, head):
    columns = slice(head * _d_head(model), (head + 1) * _d_head(model))

    def zero(merged):
        merged[:, -1, columns] = 0.0  # BUG: every earlier position keeps the head
        return merged

    return _with_pre_hook(model, ids, layer, zero)


def zeroing_one_column_too_many(model, ids, layer, head):
    d = _d_head(model)

    def zero(merged):
        merged[..., head * d : (head + 1) * d + 1] = 0.0  # BUG: one column of the next head
        return merged

    return _with_pre_hook(model, ids, layer, zero)


def removing_W_o_bias_instead(model, ids, layer, head):
    def hook(module, inputs, output):
        return output - module.bias  # BUG: the bias goes, every head stays

    handle = model.blocks[layer].attention.W_o.register_forward_hook(hook)
    try:
        return model(ids)
    finally:
        handle.remove()


def keeping_only_the_head(model, ids, layer, head):
    columns = slice(head * _d_head(model), (head + 1) * _d_head(model))

    def zero(merged):
        kept = torch.zeros_like(merged)
        kept[..., columns] = merged[..., columns]  # BUG: the other heads zeroed instead
        return kept

    return _with_pre_hook(model, ids, layer, zero)


def returning_float64_logits(model, ids, layer, head):
    return logits_with_head_zeroed(model, ids, layer, head).double()


REFUSED_AFTER_A_FIFTH_PASS = [
    (
        "previous-token score",
        previous_from_query_2_on,
        "NaN at index (0,) (the score is NaN and its gradient reaches no weight: a mean over an "
        "empty selection is NaN (0 / 0)",
    ),
    ("previous-token score", previous_two_keys_back, "a mean over an empty selection is NaN"),
    ("previous-token score", previous_all_nan, "NaN at index () (the score is NaN"),
    (
        "previous-token score",
        previous_of_the_first_matrix,
        "every matrix gets the first matrix's score: one score per (n, n) matrix",
    ),
    (
        "previous-token score",
        previous_over_every_query_divided_by_n_minus_1,
        "(it reads weights[..., 0, 5], above the diagonal: key t - 1 = -1 for t = 0 is the last "
        "key",
    ),
    (
        "induction score",
        induction_from_the_third_query_of_the_copy,
        "a mean over an empty selection is NaN (0 / 0), as when a diagonal or a slice of it "
        "holds no entry for n = 4",
    ),
    (
        "induction score",
        induction_times_nan,
        "the score is NaN although the weights it reads, (query, key) = (0, 0), are numbers",
    ),
    (
        "induction score",
        induction_over_the_whole_first_block,
        "averages the copy's queries over the whole first block",
    ),
    (
        "induction score",
        induction_with_default_dims_on_the_copy,
        "shape (5, 10), expected (2, 3) (its last axis has the n = 10 keys of each matrix, not "
        "the leading dims: torch.diagonal's default dims are 0 and 1",
    ),
    (
        "logits with a head zeroed",
        zeroing_in_batch_row_0_only,
        "zeroes head 1 in batch row 0 only (W_o's input[0, :, 4:8])",
    ),
    (
        "logits with a head zeroed",
        zeroing_at_the_last_position_only,
        "zeroes head 1 at the last position only (W_o's input[:, -1, 4:8])",
    ),
    (
        "logits with a head zeroed",
        zeroing_one_column_too_many,
        "zeroes the columns 4:9, one column wider than head 1's 4:8",
    ),
    (
        "logits with a head zeroed",
        removing_W_o_bias_instead,
        "removes W_o's bias and zeroes no head",
    ),
    (
        "logits with a head zeroed",
        keeping_only_the_head,
        "keeps only head 1 and zeroes the other heads of layer 0",
    ),
    (
        "logits with a head zeroed",
        returning_float64_logits,
        "dtype torch.float64, expected torch.float32 (keep the model's dtype: the logits come in "
        "the dtype of its weights",
    ),
]

WRONG += REFUSED_AFTER_A_FIFTH_PASS  # tests/test_exercises.py names each


@pytest.mark.parametrize(
    ("exercise", "answer", "words"),
    REFUSED_AFTER_A_FIFTH_PASS,
    ids=lambda value: getattr(value, "__name__", ""),
)
def test_a_wrong_answer_found_by_a_fifth_learners_pass_is_named_in_every_case(
    exercise, answer, words, run_checker
):
    """No case falls back on the general hint (the whole first block was named only where it
    reads at most 12 weights), nor on the input's dtype, which for the logits are int64 ids."""
    verdict, out = run_checker(CHECKERS[exercise][0], answer)
    assert verdict is False and words in out, out
    hint = {"previous-token score": "of weights[..., t, t - 1])", "induction score": "+ 1])"}
    failures = out.splitlines()[1:]
    assert not any(line.endswith(hint.get(exercise, "zeroed)")) for line in failures), out
    assert "the input's dtype" not in out, out


def test_the_whole_first_block_and_the_default_dims_are_named_in_every_case(run_checker):
    for answer, words in (
        (induction_over_the_whole_first_block, "over the whole first block"),
        (induction_with_default_dims_on_the_copy, "torch.diagonal's default dims are 0 and 1"),
    ):
        verdict, out = run_checker(check_induction_score, answer)
        failures = out.splitlines()[1:]
        assert failures and all(words in line for line in failures), out


# Regressions from a sixth learner's pass


def previous_by_floor_division(weights):
    below = torch.diagonal(weights, -1, -2, -1)
    return below.sum(-1) // (weights.shape[-1] - 1)  # BUG: every score rounds down to 0


def induction_on_the_previous_token(weights, length):
    return torch.diagonal(weights, -1, -2, -1)[..., length - 1 :].mean(-1)  # BUG: key t - 1


def _zeroing_and_clearing(hooks_attribute):
    def answer(model, ids, layer, head):
        columns = slice(head * _d_head(model), (head + 1) * _d_head(model))
        W_o = model.blocks[layer].attention.W_o

        def zero(module, inputs):
            merged = inputs[0].clone()
            merged[..., columns] = 0.0
            return (merged,)

        W_o.register_forward_pre_hook(zero)
        try:
            return model(ids)
        finally:
            getattr(W_o, hooks_attribute).clear()  # BUG: the model's own hooks go too

    answer.__name__ = f"clearing{hooks_attribute}"
    return answer


clearing_every_pre_hook = _zeroing_and_clearing("_forward_pre_hooks")
clearing_every_forward_hook = _zeroing_and_clearing("_forward_hooks")


def raising_an_error_of_its_own(model, ids, layer, head):
    if ids.shape[1] > model.config.context_length:
        raise RuntimeError("too long")  # BUG: not the model's error
    return logits_with_head_zeroed(model, ids, layer, head)


def _with_merged_heads_edited(edit):
    def answer(model, ids, layer, head):
        return _with_pre_hook(model, ids, layer, lambda merged: edit(merged, model, head))

    answer.__name__ = f"zeroing{edit.__name__}"
    return answer


def _slice_at_the_head_index(merged, model, head):
    merged = merged.clone()
    merged[..., head : head + _d_head(model)] = 0.0
    return merged


def _slice_to_the_end(merged, model, head):
    merged = merged.clone()
    merged[..., head * _d_head(model) :] = 0.0
    return merged


def _positions_axis(merged, model, head):
    merged = merged.clone()
    merged[:, head * _d_head(model) : (head + 1) * _d_head(model)] = 0.0
    return merged


def _batch_row(merged, model, head):
    merged = merged.clone()
    merged[head] = 0.0
    return merged


def _without_the_transpose(merged, model, head):
    batch, positions, width = merged.shape
    split = merged.reshape(batch, model.config.num_heads, positions, _d_head(model)).clone()
    split[:, head] = 0.0
    return split.reshape(batch, positions, width)


def zeroing_the_whole_attention_output(model, ids, layer, head):
    handle = model.blocks[layer].attention.register_forward_hook(
        lambda module, inputs, output: torch.zeros_like(output)  # BUG: every head and the bias
    )
    try:
        return model(ids)
    finally:
        handle.remove()


REFUSED_AFTER_A_SIXTH_PASS = [
    ("previous-token score", previous_by_floor_division, "integer division (//)"),
    (
        "induction score",
        induction_on_the_previous_token,
        "reads key t - 1 (the previous token) instead of t - length + 1",
    ),
    (
        "logits with a head zeroed",
        clearing_every_pre_hook,
        "removes a forward pre-hook the model already had on blocks.0.attention.W_o",
    ),
    (
        "logits with a head zeroed",
        clearing_every_forward_hook,
        "removes a forward hook the model already had on blocks.0.attention.W_o",
    ),
    (
        "logits with a head zeroed",
        raising_an_error_of_its_own,
        "your function raised RuntimeError('too long') from its own code, where model(ids) raises "
        "ValueError",
    ),
    (
        "logits with a head zeroed",
        _with_merged_heads_edited(_slice_at_the_head_index),
        "a slice that starts at the head's index",
    ),
    (
        "logits with a head zeroed",
        _with_merged_heads_edited(_slice_to_the_end),
        "head 1 and every head after it",
    ),
    (
        "logits with a head zeroed",
        _with_merged_heads_edited(_positions_axis),
        "zeroes positions 4:8",
    ),
    ("logits with a head zeroed", _with_merged_heads_edited(_batch_row), "zeroes batch row 1"),
    (
        "logits with a head zeroed",
        _with_merged_heads_edited(_without_the_transpose),
        "without the transpose",
    ),
    (
        "logits with a head zeroed",
        zeroing_the_whole_attention_output,
        "zeroes the layer's whole attention output, every head and W_o's bias",
    ),
]

WRONG += REFUSED_AFTER_A_SIXTH_PASS  # tests/test_exercises.py names each


def forward_pass_without_rope(model, ids, layer, head):
    return _forward_by_hand(model, ids, layer, head, rope=False)


def forward_pass_without_the_context_check(model, ids, layer, head):
    return _forward_by_hand(model, ids, layer, head, check_context=False)


def through_float32_and_back(model, ids, layer, head):
    dtype = model.tokens.weight.dtype
    model.float()
    try:
        return logits_with_head_zeroed(model, ids, layer, head).to(dtype)
    finally:
        model.to(dtype)


def refusing_ids_as_long_as_the_context(model, ids, layer, head):
    if ids.shape[1] >= model.config.context_length:  # off by one: T == context fits
        raise ValueError("ids too long for the model")
    return logits_with_head_zeroed(model, ids, layer, head)


REFUSED_AFTER_A_SEVENTH_PASS = [
    (
        "logits with a head zeroed",
        refusing_ids_as_long_as_the_context,
        "ids exactly as long as the context",
    ),
    ("logits with a head zeroed", forward_pass_without_rope, "computes the attention without RoPE"),
    ("logits with a head zeroed", forward_pass_without_the_context_check, "model(ids) raises"),
    ("logits with a head zeroed", through_float32_and_back, "weight"),
]
WRONG += REFUSED_AFTER_A_SEVENTH_PASS  # tests/test_exercises.py names each


def test_the_model_comes_back_with_the_hooks_of_its_own():
    """An answer that clears W_o's hooks is refused and the model's own hooks are put back."""
    _, model, ids, layer, head = head_zeroed_cases()[3]
    W_o = model.blocks[layer].attention.W_o
    hooks = (dict(W_o._forward_pre_hooks), dict(W_o._forward_hooks))
    assert all(hooks)
    with pytest.raises(Refused, match="removes a forward pre-hook the model already had"):
        _watched(clearing_every_pre_hook, model, layer, head)(ids)
    assert (dict(W_o._forward_pre_hooks), dict(W_o._forward_hooks)) == hooks


@pytest.mark.parametrize(
    ("checker", "solution"),
    [
        (check_previous_token_score, previous_token_score),
        (check_induction_score, induction_score),
        (check_logits_with_head_zeroed, logits_with_head_zeroed),
    ],
    ids=["previous-token score", "induction score", "head zeroed"],
)
def test_the_prompts_state_every_global_setting_the_checkers_put_back(checker, solution):
    from helpers.exercises.framework import TORCH_GLOBAL_SETTINGS_NAMED

    cells = {cell.get("id"): cell.source for cell in nbformat.read(NOTEBOOK, as_version=4).cells}
    for text in (cells["exercises"], cells[f"your-turn-{solution.__name__}"], checker.__doc__):
        text = " ".join(text.split())
        assert TORCH_GLOBAL_SETTINGS_NAMED in text, text
        assert "requires_grad as it came, no hook left on" in text, text


def _pass_by_hand_leaving_out(model, ids, layer, head, left_out, norm_of=None):
    """The attention-only GPT's pass written out with its scores computed by hand, head `head`
    of block `layer` zeroed, leaving out one step: "scale", "mask", "norm" (each block's),
    "final norm" or "residual", or scaling by sqrt(d_model) ("model width"). norm_of(model,
    block): the layer norm used in place of each block's, and of the final one (block None)."""
    norm_of = norm_of or (
        lambda model, block: block.attention_residual.norm if block else model.norm
    )
    model.check_ids(ids)
    steps = ids.shape[1]
    x = model.tokens(ids)
    if model.positions is not None:
        x = x + model.positions(torch.arange(steps))
    for index, block in enumerate(model.blocks):
        attention = block.attention
        h = x if left_out == "norm" else norm_of(model, block)(x)
        q, k, v = (
            split_heads(W(h), model.config.num_heads)
            for W in (attention.W_q, attention.W_k, attention.W_v)
        )
        if attention.rope:
            q, k = apply_rope(q), apply_rope(k)
        scores = q @ k.transpose(-2, -1)  # (B, heads, T, T)
        if left_out == "model width":
            scores = scores / model.config.d_model**0.5
        elif left_out != "scale":
            scores = scores / q.shape[-1] ** 0.5
        if left_out != "mask":
            scores = scores.masked_fill(~causal_mask(steps), float("-inf"))
        written = scores.softmax(-1) @ v  # (B, heads, T, d_head)
        if index == layer:
            written = written.clone()
            written[:, head] = 0.0
        written = attention.W_o(merge_heads(written))
        x = written if left_out == "residual" else x + written
    return model.output(x if left_out == "final norm" else norm_of(model, None)(x))


@pytest.mark.parametrize(
    ("left_out", "words"),
    [
        ("scale", "does not divide the scores by sqrt(d_head)"),
        ("mask", "has no causal mask"),
        ("norm", "leaves out each block's layer norm"),
        ("final norm", "leaves out the final layer norm"),
        ("model width", "divides the scores by sqrt(d_model)"),
        ("residual", "replaces x with what the attention writes"),
    ],
)
def test_a_pass_written_by_hand_is_told_the_step_it_left_out(left_out, words, run_checker):
    """Each was answered with the general hint alone (an eighth learner's pass)."""

    def answer(model, ids, layer, head):
        return _pass_by_hand_leaving_out(model, ids, layer, head, left_out)

    verdict, out = run_checker(check_logits_with_head_zeroed, answer)
    failures = out.splitlines()[1:]
    assert verdict is False and failures and all(words in line for line in failures), out


def test_the_pass_by_hand_leaving_nothing_out_is_right(run_checker):
    def answer(model, ids, layer, head):
        return _pass_by_hand_leaving_out(model, ids, layer, head, None)

    verdict, out = run_checker(check_logits_with_head_zeroed, answer)
    assert verdict is True, out


def previous_without_the_mean(weights):
    return torch.diagonal(weights, offset=-1, dim1=-2, dim2=-1)  # BUG: one weight per query


def previous_with_keepdim(weights):
    return torch.diagonal(weights, offset=-1, dim1=-2, dim2=-1).mean(-1, keepdim=True)  # BUG


def induction_without_the_mean(weights, length):
    return torch.diagonal(weights, offset=1 - length, dim1=-2, dim2=-1)[..., 1 : length + 1]


@pytest.mark.parametrize(
    ("checker", "answer", "words"),
    [
        (check_previous_token_score, previous_without_the_mean, "not their mean"),
        (check_previous_token_score, previous_with_keepdim, "keepdim=True"),
        (check_induction_score, induction_without_the_mean, "each of the 4 queries"),
    ],
    ids=["previous, no mean", "previous, keepdim", "induction, no mean"],
)
def test_a_score_with_an_axis_too_many_is_told_why(checker, answer, words, run_checker):
    """Each got "shape (5,), expected ()" alone (a ninth learner's pass)."""
    verdict, out = run_checker(checker, answer)
    assert verdict is False and words in out, out


def _leaving(leave):
    """The worked solution, with leave(model, layer) run first and never undone."""

    def answer(model, ids, layer, head):
        leave(model, layer)
        return logits_with_head_zeroed(model, ids, layer, head)

    return answer


@pytest.mark.parametrize(
    ("leave", "words"),
    [
        (
            lambda m, layer: m.blocks[layer].attention.W_o.register_full_backward_hook(
                lambda module, grad_in, grad_out: None
            ),
            "leaves a backward hook registered on blocks.",
        ),
        (
            lambda m, layer: m.blocks[layer].attention.W_o.register_full_backward_pre_hook(
                lambda module, grad_out: None
            ),
            "leaves a backward pre-hook registered on blocks.",
        ),
        (
            lambda m, layer: m.blocks[layer].attention.W_o.weight.register_hook(lambda g: g * 0),
            "leaves a hook on the model's weight blocks.",
        ),
        (
            lambda m, layer: m.tokens.weight.register_post_accumulate_grad_hook(lambda p: None),
            "leaves a hook on the model's weight tokens.weight",
        ),
        (
            lambda m, layer: m._register_state_dict_hook(lambda *arguments: None),
            "leaves a state_dict hook registered on the model",
        ),
    ],
    ids=["backward hook", "backward pre-hook", "weight hook", "accumulate hook", "state_dict"],
)
def test_a_hook_of_any_kind_left_on_the_model_is_refused(leave, words, run_checker):
    """Only forward hooks were watched: these were judged Correct (a tenth learner's pass)."""
    verdict, out = run_checker(check_logits_with_head_zeroed, _leaving(leave))
    assert verdict is False and words in out, out


def eval_mode_not_restored_when_the_model_raises(model, ids, layer, head):
    was_training = model.training
    model.eval()
    logits = logits_with_head_zeroed(model, ids, layer, head)
    model.train(was_training)  # BUG: skipped when the line above raises
    return logits


def test_a_mode_not_put_back_when_the_forward_pass_raises_is_refused(run_checker):
    """The case that raises used a model in eval mode, where model.eval() changes nothing."""
    verdict, out = run_checker(
        check_logits_with_head_zeroed, eval_mode_not_restored_when_the_model_raises
    )
    assert verdict is False and "leaves the model in eval mode" in out, out


def _final_norm_in_every_block(model, block):
    return model.norm


def _bare(model, block):
    return lambda x: torch.nn.functional.layer_norm(x, x.shape[-1:])


@pytest.mark.parametrize("norm_of", [_final_norm_in_every_block, _bare])
def test_a_pass_by_hand_with_another_layer_norm_is_refused(norm_of, run_checker):
    """The cases' layer norms had weight 1 and bias 0, where any layer norm computes the same:
    both were judged Correct (a tenth learner's pass)."""

    def answer(model, ids, layer, head):
        return _pass_by_hand_leaving_out(model, ids, layer, head, None, norm_of)

    verdict, out = run_checker(check_logits_with_head_zeroed, answer)
    assert verdict is False, out


def previous_of_the_flattened_weights(weights):
    n = weights.shape[-1]
    return weights.reshape(-1, n, n).diagonal(-1, 1, 2).mean(-1)  # BUG: never reshaped back


def logits_rounded_to_float16(model, ids, layer, head):
    logits = logits_with_head_zeroed(model, ids, layer, head)
    return logits.half().to(logits.dtype)  # BUG: rounds every logit


@pytest.mark.parametrize(
    ("checker", "answer", "words"),
    [
        (
            check_previous_token_score,
            previous_of_the_flattened_weights,
            "the leading axes are flattened into one",
        ),
        (check_logits_with_head_zeroed, logits_rounded_to_float16, "rounded to float16"),
    ],
    ids=["flattened leading axes", "float16 logits"],
)
def test_flattened_axes_and_a_float16_round_trip_are_named(checker, answer, words, run_checker):
    """The first was told it took the mean with keepdim=True, the second got the general hint
    (a tenth learner's pass)."""
    verdict, out = run_checker(checker, answer)
    assert verdict is False and words in out, out
    assert "keepdim=True:" not in out, out


def previous_of_the_first_8_positions(weights):
    return torch.diagonal(weights[..., :8, :8], -1, -2, -1).mean(-1)  # BUG: n hard-coded


def induction_of_the_first_16_positions(weights, length):
    n = min(weights.shape[-1], 16)  # BUG: n hard-coded
    return torch.diagonal(weights[..., :n, :n], 1 - length, -2, -1)[..., 1 : n // 2 + 1].mean(-1)


@pytest.mark.parametrize(
    ("checker", "answer"),
    [
        (check_previous_token_score, previous_of_the_first_8_positions),
        (check_induction_score, induction_of_the_first_16_positions),
    ],
    ids=["previous, n <= 8", "induction, n <= 16"],
)
def test_a_score_that_reads_only_the_first_positions_is_refused(checker, answer, run_checker):
    """No case was longer than n = 8 (n = 12 for the induction score): an answer reading only
    that corner was judged Correct (an eleventh learner's pass)."""
    verdict, out = run_checker(checker, answer)
    assert verdict is False, out


# Regressions from a learner's pass: two previous-token scores that got the general hint


def previous_score_of_whole_rows(weights):
    return weights[..., 1:, :].mean((-2, -1))  # BUG: every key of each row, not key t - 1


def previous_score_of_everything_below_the_diagonal(weights):
    n = weights.shape[-1]
    return weights.tril(-1).sum((-2, -1)) / (n - 1)  # BUG: every earlier key


REFUSED_AFTER_A_LEARNERS_PASS = [
    ("previous-token score", previous_score_of_whole_rows, "the mean of whole rows"),
    (
        "previous-token score",
        previous_score_of_everything_below_the_diagonal,
        "every weight below the diagonal (tril(-1)) is summed",
    ),
]
WRONG += REFUSED_AFTER_A_LEARNERS_PASS  # tests/test_exercises.py names each


@pytest.mark.parametrize(
    ("exercise", "answer", "words"),
    REFUSED_AFTER_A_LEARNERS_PASS,
    ids=lambda value: getattr(value, "__name__", ""),
)
def test_a_previous_token_mistake_is_named_in_every_case_it_fails(
    exercise, answer, words, run_checker
):
    verdict, out = run_checker(CHECKERS[exercise][0], answer)
    failures = out.splitlines()[1:]
    assert verdict is False and failures and all(words in line for line in failures), out
