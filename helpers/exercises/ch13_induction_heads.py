"""Chapter 13's exercises: measuring what a head does, and silencing one.

1. check_previous_token_score: the mean weight each query puts on the token just before it.
2. check_induction_score: on a block and its copy, the mean weight each query of the copy puts
   on the token after the earlier occurrence of its own token.
3. check_logits_with_head_zeroed: a GPT's logits with one head's output set to zero, the model
   left exactly as it came, also when model(ids) raises.

What every answer must do besides its values (the framework checks it, each docstring below
states it): each call returns within ANSWER_TIME_LIMIT_SECONDS, leaves torch's global settings
(grad mode, default dtype, random generator, anomaly detection, deterministic-algorithms
setting, thread count and module hooks) as they were, leaves its inputs' requires_grad as it
came, and does not call the copy of the exercise's function in helpers.induction.
"""

import copy
import hashlib
import math
import traceback
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import torch
from torch import nn

import helpers
from helpers import induction
from helpers.exercises.framework import (
    LOWER_PRECISIONS,
    Refused,
    TimedAnswers,
    exercise_checker,
    lower_precision_mistakes,
    named_together,
    recording_calls,
    register_checker_hook,
    report,
    run_case,
    tensor_hooks,
    wrong_only,
)
from helpers.gpt import GPT, GPTConfig
from helpers.induction import (
    induction_score,
    logits_with_heads_zeroed,
    previous_token_score,
    repeated_sequences,
    zeroed_heads,
)
from helpers.validation import shown

__all__ = ["check_induction_score", "check_logits_with_head_zeroed", "check_previous_token_score"]


def _causal_weights(generator, *leading: int, n: int, dtype=torch.float32, stripe=None):
    """Attention weights (*leading, n, n): each row a softmax over keys 0..t of random scores,
    raised by 2 on the keys t - stripe (the stripe of a head that looks back), if given."""
    scores = torch.randn(*leading, n, n, generator=generator, dtype=torch.float64)
    if stripe is not None:
        queries = torch.arange(stripe, n)
        scores[..., queries, queries - stripe] += 2.0
    future = torch.ones(n, n, dtype=torch.bool).triu(1)
    return scores.masked_fill(future, float("-inf")).softmax(-1).to(dtype)


def _stripe(weights: torch.Tensor, offset: int) -> torch.Tensor:
    """(..., entries): weights[..., t, t + offset] for every t where that key exists."""
    return torch.diagonal(weights, offset=offset, dim1=-2, dim2=-1)


DEFAULT_DIMS = (
    "torch.diagonal's default dims are 0 and 1, here the leading dims: pass dim1=-2, dim2=-1 "
    "for the diagonal of each (n, n) matrix; an index such as weights[{key}] reads the first "
    "two axes too: write weights[..., {key}] to read the last two"
)
FIRST_AXES_INDEXED = (
    "the weights have leading dims here, {leading}: an index such as weights[{key}] reads "
    "the first two axes, the leading ones; index the last two, weights[..., {key}], so that "
    "any leading dims work"
)
NOTHING_BEFORE_THE_QUERY = (
    "every score is 0, as if the weights read lay above the diagonal, on keys after the query, "
    "which the causal mask leaves at 0: a key before the query is below the diagonal (a "
    "negative offset in torch.diagonal, key index t - length + 1); or as if integer division "
    "(//) rounded the mean, a number below 1, down to 0 (divide with /)"
)
LEADING_DIMS = (
    "the mean runs over the leading (batch, head) dims too: keep one score per (n, n) matrix, "
    "shape weights.shape[:-2], by averaging over the queries only (dim=-1)"
)
FIRST_MATRIX_ONLY = "every matrix gets the first matrix's score: one score per (n, n) matrix"
KEY_AFTER = (
    "the induction head's key is t - length + 1, the token that followed the earlier occurrence"
)


def _coefficients(value: torch.Tensor, weights: torch.Tensor, index: tuple) -> dict | None:
    """{(query, key): factor} for a score value computed from weights: the entries of the
    (n, n) matrix weights[index] its gradient reaches; None where the value is not that
    weighted sum of them (or no gradient reaches them)."""
    try:
        (gradient,) = torch.autograd.grad(value, weights, allow_unused=True)
    except RuntimeError:
        return None
    if gradient is None:
        return None
    factors, matrix = gradient[index].double(), weights.detach()[index].double()
    if abs((factors * matrix).sum().item() - value.double().item()) > 1e-6:
        return None
    return {(t, k): factors[t, k].item() for t, k in factors.nonzero().tolist()}


def _listed(entries: dict) -> str:
    """(4, 5), (5, 6), each times 0.25: the entries and what each is multiplied by; past 8 of
    them, the first three and the last."""
    shown = sorted(entries)
    if len(shown) > 8:
        shown = [*shown[:3], ..., shown[-1]]
    if len({round(factor, 12) for factor in entries.values()}) == 1:
        pairs = ", ".join("…" if pair is ... else f"({pair[0]}, {pair[1]})" for pair in shown)
        return f"{pairs}, each times {next(iter(entries.values())):.4g}"
    return ", ".join(
        "…" if pair is ... else f"({pair[0]}, {pair[1]}) times {entries[pair]:.4g}"
        for pair in shown
    )


def _seen(learner: Callable) -> tuple[Callable, dict]:
    """learner, and a dict that holds the weights it was given, what it returned, and the
    gradient that reached the weights when the checker compared gradients (a second backward
    pass through the learner's graph could fail: its saved tensors are freed)."""
    seen = {}

    def call(weights, *rest):
        seen.update(weights=weights, got=None, gradient=None)
        if weights.requires_grad:
            register_checker_hook(weights, lambda gradient: seen.update(gradient=gradient))
        seen["got"] = learner(weights, *rest)
        return seen["got"]

    return call, seen


def _what_it_reads(seen: dict, reference: Callable, weights: torch.Tensor, rule: str):
    """Where the learner's score reads the weights, beside where the score does, in the first
    (n, n) matrix it gets wrong: the entries its gradient reaches and by what factor. None where
    its answer is no weighted sum of the weights, or one of more than 20 of them."""
    given, got = seen.get("weights"), seen.get("got")
    expected = reference(weights)
    if not (isinstance(got, torch.Tensor) and got.requires_grad and got.shape == expected.shape):
        return None
    if torch.isnan(got.detach()).any():
        return _where_the_nan_comes_from(got, given, rule)
    error = (got.detach().double() - expected.double()).abs()
    if not error.numel() or error.max() <= 1e-6:
        return None
    index = tuple(torch.nonzero(error == error.max())[0].tolist())  # where the report points
    mine = _coefficients(got[index], given, index)
    if not mine or len(mine) > 20:
        return None
    leaf = weights.detach().clone().requires_grad_()
    theirs = _coefficients(reference(leaf)[index], leaf, index)
    keys = {query: key for query, key in theirs}
    shifts = Counter(key - keys[query] for query, key in mine if query in keys)
    step, count = shifts.most_common(1)[0] if shifts else (0, 0)
    shifted = ""
    if step and 2 * count >= len(keys):
        most = "its keys lie" if count == len(mine) == len(keys) else "most of its keys lie"
        side = "after" if step > 0 else "before"
        shifted = f"; {most} {abs(step)} {side} those, an offset off by {abs(step)}"
    where = f"the matrix weights[{', '.join(map(str, index))}]" if index else "the weights"
    return (
        f"it reads {where} at (query, key) = {_listed(mine)}, where the score reads "
        f"{_listed(theirs)}: {rule}{shifted}"
    )


def _where_the_nan_comes_from(got: torch.Tensor, given: torch.Tensor, rule: str) -> str:
    """Why the learner's score is NaN at its first NaN: the weights are numbers, so either it
    averages nothing (its gradient reaches no weight) or its computation makes the NaN."""
    index = tuple(torch.nonzero(torch.isnan(got.detach()))[0].tolist())
    try:
        (gradient,) = torch.autograd.grad(got[index], given, allow_unused=True)
    except RuntimeError:  # a graph autograd cannot run back through
        return f"the score is NaN; {rule}"
    reached = [] if gradient is None else gradient[index].nonzero().tolist()
    n = given.shape[-1]
    if not reached:
        return (
            f"the score is NaN and its gradient reaches no weight: a mean over an empty "
            f"selection is NaN (0 / 0), as when a diagonal or a slice of it holds no entry for "
            f"n = {n}; {rule}"
        )
    entries = ", ".join(f"({t}, {k})" for t, k in reached[:4])
    return (
        f"the score is NaN although the weights it reads, (query, key) = {entries}, are numbers: "
        f"the NaN comes from the computation (a nan constant, 0 / 0, inf - inf); {rule}"
    )


def _name_what_it_reads(failures: list, hint: str, seen: dict, reference: Callable, weights, rule):
    """Replace the general hint of a value failure that no mistake named by where the answer
    reads the weights, where that can be told."""
    if failures[-1].endswith(f" ({hint})"):
        reading = _what_it_reads(seen, reference, weights, rule)
        if reading is not None:
            failures[-1] = f"{failures[-1][: -len(hint) - 3]} ({reading})"


def _name_a_key_after_the_query(failures: list, seen: dict, key: Callable, text: str):
    """Name, after a gradient failure, a weight read above the diagonal (a key after its query,
    0 under the causal mask, so the values agree): a negative key index wraps around to the
    last keys. key(t): the key query t should read; text: that key, in words."""
    gradient = seen.get("gradient")
    if "the values are right but the gradient" not in failures[-1] or gradient is None:
        return
    if not gradient.triu(1).any():
        return
    *_, t, k = torch.nonzero(gradient.triu(1))[0].tolist()
    n, wrapped = gradient.shape[-1], key(t)
    if wrapped < 0 and wrapped % n == k:
        which = "the last key" if wrapped == -1 else f"key {k}, counted from the end"
        why = f"{text} = {wrapped} for t = {t} is {which}, 0 under the causal mask"
    else:
        why = "a key after the query, 0 under the causal mask"
    failures[-1] += (
        f" (it reads weights[..., {t}, {k}], above the diagonal: {why}, so the values agree "
        f"while the gradient reaches it)"
    )


def _name_the_leading_dims_used_as_the_matrix(failures: list, seen: dict, weights, key: str):
    """Name DEFAULT_DIMS after a shape failure no mistake named, where the answer's shape is
    what a diagonal over the leading dims gives: as many axes as the leading dims, the last
    one the n keys; name FIRST_AXES_INDEXED after an IndexError where there are leading dims.
    key: the query's and key's index in the exercise, "t, t - 1" say."""
    got, leading, n = seen.get("got"), weights.shape[:-2], weights.shape[-1]
    if leading and ": your function raised IndexError: " in failures[-1]:
        failures[-1] += f" ({FIRST_AXES_INDEXED.format(leading=tuple(leading), key=key)})"
        return
    if (
        failures[-1].endswith(f", expected {tuple(leading)}")
        and isinstance(got, torch.Tensor)
        and got.dim() == len(leading) >= 1
        and got.shape[-1] == n
    ):
        failures[-1] += (
            f" (its last axis has the n = {n} keys of each matrix, not the leading dims: "
            f"{DEFAULT_DIMS.format(key=key)})"
        )


def _name_a_mean_not_taken(failures: list, seen: dict, weights, queries: int) -> None:
    """Name, after a shape failure no mistake named, an answer that returns the scores with
    one axis more than one per matrix: the weights of the `queries` queries not averaged, or
    the mean taken with keepdim=True."""
    got, leading = seen.get("got"), tuple(weights.shape[:-2])
    flattened = (math.prod(leading),)
    if (
        len(leading) != 1
        and failures[-1].endswith(f"shape {flattened}, expected {leading}")
        and isinstance(got, torch.Tensor)
    ):
        also = " (or the mean taken with keepdim=True)" if not leading else ""
        failures[-1] += (
            f" (the leading axes are flattened into one, a reshape(-1, n, n) of the weights"
            f"{also}: one score per (n, n) matrix has the shape of the leading dims, "
            f"weights.shape[:-2]; reshape the scores back, or take the diagonal of the weights "
            f"as they come)"
        )
        return
    if not (
        failures[-1].endswith(f", expected {leading}")
        and isinstance(got, torch.Tensor)
        and got.dim() == len(leading) + 1
        and tuple(got.shape[:-1]) == leading
        and got.shape[-1] in (1, queries)
    ):
        return
    one_per_matrix = "one score per (n, n) matrix has the shape of the leading dims"
    if got.shape[-1] == queries:
        which = (
            "the weight of its one query on an axis of its own (or the mean taken with "
            "keepdim=True)"
            if queries == 1
            else f"the weight of each of the {queries} queries, not their mean"
        )
        failures[-1] += (
            f" (returns {which}: {one_per_matrix}, so average over the queries, .mean(-1))"
        )
    else:
        failures[-1] += (
            f" (the mean is taken with keepdim=True: {one_per_matrix}, weights.shape[:-2], "
            f"so leave keepdim out)"
        )


def _first_matrix_only(scores: torch.Tensor) -> torch.Tensor:
    """The first (n, n) matrix's score, given to every matrix: scores (..., queries)."""
    return scores.reshape(-1, scores.shape[-1])[0].mean().expand(scores.shape[:-1])


PREVIOUS_HINT = "the mean over the queries t = 1..n-1 of weights[..., t, t - 1]"
INDUCTION_HINT = (
    "the mean over the queries t = length..2*length-1 of weights[..., t, t - length + 1]"
)

# 1. The previous-token score


def _column_major(weights: torch.Tensor) -> torch.Tensor:
    """The same weights, stored with each (n, n) matrix's columns contiguous: an answer that
    reads the storage as if it were laid out row by row (as_strided, view on a transpose)
    reads other numbers."""
    return weights.transpose(-2, -1).contiguous().transpose(-2, -1)


def previous_token_cases() -> list[tuple[str, torch.Tensor]]:
    """(name, weights (..., n, n)) for every case the checker runs."""
    generator = torch.Generator().manual_seed(130)
    return [
        ("one (n, n) matrix, n = 6", _causal_weights(generator, n=6, stripe=1)),
        ("(B=2, heads=3, n=8, n=8)", _causal_weights(generator, 2, 3, n=8, stripe=1)),
        (
            "n = 2, a batch of 4: only query 1 has a previous token",
            _causal_weights(generator, 4, n=2),
        ),
        ("float64, (heads=2, n=7, n=7)", _causal_weights(generator, 2, n=7, dtype=torch.float64)),
        ("(B=3, heads=1, n=5, n=5), no stripe", _causal_weights(generator, 3, 1, n=5)),
        (
            "(B=2, n=16, n=16): a longer sequence, stored column by column (not contiguous)",
            _column_major(_causal_weights(generator, 2, n=16, stripe=1)),
        ),
    ]


def _previous_mistakes(weights: torch.Tensor) -> dict:
    n = weights.shape[-1]
    below = _stripe(weights, -1)  # (..., n - 1)
    diagonal = _stripe(weights, 0)  # (..., n)
    mistakes = {
        "the mean runs over all n queries, t = 0 included (a sum divided by n, or key t - 1 = "
        "-1 for t = 0, the last key, 0 under the causal mask): the first query has no previous "
        "token, so average over the n - 1 queries t = 1..n-1": below.sum(-1) / n,
        "every score is 0, as if it reads the weight on the NEXT key, weights[..., t, t + 1], "
        "above the diagonal, which the causal mask leaves at 0 (the previous token is key "
        "t - 1, just below the diagonal, offset=-1), or as if integer division (//) rounded "
        "the mean, a number below 1, down to 0 (divide with /)": _stripe(weights, 1).mean(-1),
        "reads the diagonal, each query's weight on its own token, over every query: the "
        "previous token is key t - 1, just below it (offset=-1)": diagonal.mean(-1),
        "reads the diagonal, each query's weight on its own token (t, t), over the queries "
        "t = 1..n-1: the previous token is key t - 1, just below it (offset=-1)": diagonal[
            ..., 1:
        ].mean(-1),
        "the sum over the queries: the score is their mean": below.sum(-1),
        "the mean of whole rows, every key's weight: each query's score is its weight on the "
        "one key just before it, weights[..., t, t - 1], the stripe below the diagonal "
        "(torch.diagonal(weights, offset=-1, dim1=-2, dim2=-1))": weights[..., 1:, :].mean(
            (-2, -1)
        ),
        "every weight below the diagonal (tril(-1)) is summed, all the earlier keys: the score "
        "reads only the key just before each query, weights[..., t, t - 1], the stripe "
        "torch.diagonal(weights, offset=-1, dim1=-2, dim2=-1)": weights.tril(-1).sum((-2, -1))
        / (n - 1),
        LEADING_DIMS: below.mean(),
        FIRST_MATRIX_ONLY: _first_matrix_only(below),
        **lower_precision_mistakes(lambda w: _stripe(w, -1).mean(-1), weights, "weights"),
    }
    mistakes[
        "counts query 0 as if its previous token were key 0 (weights[..., 0, 0], or key t - 1 "
        "clamped at 0) and divides by n: query 0 has no previous token, so average over the "
        "n - 1 queries t = 1..n-1 alone"
    ] = (diagonal[..., 0] + below.sum(-1)) / n
    if n > 2:
        mistakes[
            "divides by n - 2: the queries t = 1..n-1 are n - 1 of them, so the mean divides "
            "by n - 1 (or take .mean(-1) of the n - 1 weights below the diagonal)"
        ] = below.sum(-1) / (n - 2)
    return mistakes


@exercise_checker
def check_previous_token_score(learner_score: Callable) -> bool:
    """learner_score(weights) -> (...): weights (..., n, n) attention weights, float32 or
    float64, n >= 2, any leading dims. The mean over the queries t = 1..n-1 of weights[..., t, t
    - 1], the weight each query puts on the token just before it; one score per (n, n) matrix, a
    tensor in the weights' dtype, with gradients; the weights left as they were (no in-place
    operation on them, even one that changes no value, and their requires_grad as it came, no hook
    left on them). Without calling helpers.induction.previous_token_score (refused by name). Each
    call returns within ANSWER_TIME_LIMIT_SECONDS (5 s) and leaves torch's grad mode, default
    dtype, random generator, anomaly detection, deterministic-algorithms setting, thread count
    and module hooks as they were."""
    failures, passed = [], 0
    answers, seen = _seen(TimedAnswers(learner_score))
    for name, weights in previous_token_cases():
        case_passed = run_case(
            name,
            answers,
            (weights,),
            previous_token_score,
            failures,
            atol=1e-6 if weights.dtype == torch.float32 else 1e-12,
            hint=PREVIOUS_HINT,
            mistakes=wrong_only(_previous_mistakes(weights), previous_token_score(weights)),
            forbidden={
                "helpers.induction.previous_token_score": previous_token_score,
                "helpers.induction._previous_token_score": induction._previous_token_score,
            },
            names=("weights",),
        )
        passed += case_passed
        if not case_passed:
            _name_what_it_reads(
                failures,
                PREVIOUS_HINT,
                seen,
                previous_token_score,
                weights,
                "query t reads key t - 1, for the n - 1 queries t = 1..n-1",
            )
            _name_a_key_after_the_query(failures, seen, lambda t: t - 1, "key t - 1")
            _name_the_leading_dims_used_as_the_matrix(failures, seen, weights, "t, t - 1")
            _name_a_mean_not_taken(failures, seen, weights, weights.shape[-1] - 1)
    return report(failures, passed)


# 2. The induction score


def induction_cases() -> list[tuple[str, torch.Tensor, int]]:
    """(name, weights (..., 2 * length, 2 * length), length) for every case."""
    generator = torch.Generator().manual_seed(131)

    def weights(*leading, length, dtype=torch.float32):
        return _causal_weights(generator, *leading, n=2 * length, dtype=dtype, stripe=length - 1)

    return [
        ("one (n, n) matrix, length 4 (n = 8)", weights(length=4), 4),
        ("(B=2, heads=3, n=10, n=10), length 5", weights(2, 3, length=5), 5),
        ("length 2 (n = 4): the copy's queries t = 2, 3 on keys 1, 2", weights(3, length=2), 2),
        ("float64, (heads=2, n=12, n=12), length 6", weights(2, length=6, dtype=torch.float64), 6),
        ("(B=1, heads=4, n=6, n=6), length 3", weights(1, 4, length=3), 3),
        (
            "(B=2, n=18, n=18), length 9: a longer block, stored column by column (not contiguous)",
            _column_major(weights(2, length=9)),
            9,
        ),
    ]


def _induction_mistakes(weights: torch.Tensor, length: int) -> dict:
    n = 2 * length
    stripe = _stripe(weights, 1 - length)  # queries t = length - 1..n - 1
    copy_queries = stripe[..., 1:]  # t = length..n - 1
    too_far = _stripe(weights, 2 - length)[..., 2:]  # key t - length + 2, t = length..n - 1
    mistakes = {
        "reads key t - length, the earlier occurrence of the current token itself (a "
        "duplicate-token score): an induction head attends to the token AFTER it, key "
        "t - length + 1": _stripe(weights, -length).mean(-1),
        "the queries start at t = length - 1, the last token of the first copy: its token has "
        "not occurred before; the queries are the second copy, t = length..2*length-1": (
            stripe.mean(-1)
        ),
        "averages over every query of the sequence, t = 0..2*length-1: only the queries of the "
        "second copy, t = length..2*length-1, have an earlier occurrence to look back at": (
            stripe.sum(-1) / n
        ),
        "divides by 2*length, the number of positions: the mean is over the `length` queries "
        "of the second copy": copy_queries.sum(-1) / n,
        "the sum over the queries: the score is their mean": copy_queries.sum(-1),
        LEADING_DIMS: copy_queries.mean(),
        FIRST_MATRIX_ONLY: _first_matrix_only(copy_queries),
        "averages the copy's queries over the whole first block, weights[..., length:, "
        ":length] (keys 0..length-1): each query t reads one key, t - length + 1, the token "
        "after the earlier occurrence of its own": weights[..., length:, :length].mean((-2, -1)),
        NOTHING_BEFORE_THE_QUERY: torch.zeros_like(copy_queries[..., 0]),
        f"reads key t - 1 (the previous token) instead of t - length + 1: {KEY_AFTER}": (
            _stripe(weights, -1)[..., length - 1 :].mean(-1)
        ),
        f"reads key t - length + 2, one after the token to copy: {KEY_AFTER}": too_far.mean(-1),
        f"reads key t - length + 2, one after the token to copy (for the queries t = length.."
        f"2*length-2, divided by length): {KEY_AFTER}, for every query of the copy up to t = "
        f"2*length-1": too_far[..., :-1].sum(-1) / length,
        f"reads key t - length + 2, one after the token to copy (for the queries t = length.."
        f"2*length-2): {KEY_AFTER}, for every query of the copy up to t = 2*length-1": too_far[
            ..., :-1
        ].mean(-1),
        "the queries run t = length-1..2*length-2, one too early: the copy's queries are "
        "t = length..2*length-1 (query length - 1 is the last token of the first block, "
        "whose token has not occurred before)": stripe[..., :-1].mean(-1),
        **lower_precision_mistakes(
            lambda w: _stripe(w, 1 - length)[..., 1:].mean(-1), weights, "weights"
        ),
        "the last query, t = 2*length - 1, is left out: range(length, 2*length) stops "
        "before 2*length, so the copy's queries run to 2*length - 1": (
            copy_queries[..., :-1].mean(-1)
        ),
        "the queries start at t = length + 1, one late: the copy's first query, t = length, "
        "counts too": copy_queries[..., 1:].mean(-1),
    }
    return mistakes


@exercise_checker
def check_induction_score(learner_score: Callable) -> bool:
    """learner_score(weights, length) -> (...): weights (..., n, n) attention weights on a
    block of `length` tokens followed by its copy, n = 2 * length, length >= 2, float32 or
    float64, any leading dims. The mean over the queries of the copy, t = length..2*length-1, of
    weights[..., t, t - length + 1]: the weight on the token after the earlier occurrence of the
    query's own token. One score per (n, n) matrix, a tensor in the weights' dtype, with
    gradients; the weights left as they were (no in-place operation on them, even one that
    changes no value, and their requires_grad as it came, no hook left on them). Without calling
    helpers.induction.induction_score (refused by name). Each call returns within
    ANSWER_TIME_LIMIT_SECONDS (5 s) and leaves torch's grad mode, default dtype, random
    generator, anomaly detection, deterministic-algorithms setting, thread count and module
    hooks as they were."""
    failures, passed = [], 0
    answers, seen = _seen(TimedAnswers(learner_score))
    for name, weights, length in induction_cases():

        def learner(w, length=length):
            return answers(w, length)

        def reference(w, length=length):
            return induction_score(w, length)

        case_passed = run_case(
            name,
            learner,
            (weights,),
            reference,
            failures,
            atol=1e-6 if weights.dtype == torch.float32 else 1e-12,
            hint=INDUCTION_HINT,
            mistakes=wrong_only(
                _induction_mistakes(weights, length), induction_score(weights, length)
            ),
            forbidden={
                "helpers.induction.induction_score": induction_score,
                "helpers.induction._induction_score": induction._induction_score,
            },
            names=("weights",),
        )
        passed += case_passed
        if not case_passed:
            _name_what_it_reads(
                failures,
                INDUCTION_HINT,
                seen,
                reference,
                weights,
                f"query t of the copy, t = length..2*length-1 ({length}..{2 * length - 1} here), "
                f"reads key t - length + 1, the token after the earlier occurrence of its own",
            )
            _name_a_key_after_the_query(
                failures, seen, lambda t, length=length: t - length + 1, "key t - length + 1"
            )
            _name_the_leading_dims_used_as_the_matrix(failures, seen, weights, "t, t - length + 1")
            _name_a_mean_not_taken(failures, seen, weights, length)
    return report(failures, passed)


# 3. The logits with one head zeroed


def _model(
    seed: int, num_layers: int, num_heads: int, d_model: int, dtype, position: str = "learned"
) -> GPT:
    """A random attention-only GPT whose heads all change its logits (embeddings of std 1); in
    float64, weights float32 cannot hold (a round trip through float32 changes them)."""
    config = GPTConfig(
        vocab_size=16,
        context_length=16,
        d_model=d_model,
        num_heads=num_heads,
        num_layers=num_layers,
        d_ff=4 * d_model,
        attention_only=True,
        position=position,
    )
    torch.manual_seed(seed)
    model = GPT(config)
    with torch.no_grad():
        model.tokens.weight.normal_(std=1.0)
        if model.positions is not None:
            model.positions.weight.normal_(std=1.0)
        for norm in (m for m in model.modules() if isinstance(m, nn.LayerNorm)):
            norm.weight.normal_(1.0, 0.3)  # (not 1 and 0: a norm mixed up or left bare shows)
            norm.bias.normal_(0.0, 0.3)
    model = model.to(dtype).eval()
    if dtype == torch.float64:
        with torch.no_grad():
            for weight in model.parameters():
                weight.add_(1e-12 * torch.randn_like(weight))
    return model


def head_zeroed_cases() -> list[tuple[str, GPT, torch.Tensor, int, int]]:
    """(name, model, ids (B, T), layer, head) for every case; new models on every call."""
    with torch.random.fork_rng(devices=[]):  # the learner's random numbers stay theirs
        two_layers = _model(132, 2, 3, 12, torch.float32)
        one_layer = _with_hooks_of_its_own(_model(133, 1, 4, 16, torch.float32))
        in_float64 = _model(134, 2, 2, 8, torch.float64)
        wider_heads = _model(136, 2, 3, 18, torch.float32)
        in_training = _model(137, 2, 2, 12, torch.float32).train()
        with_rope = _model(139, 2, 2, 16, torch.float32, position="rope")
    generator = torch.Generator().manual_seed(135)
    random_ids = torch.randint(16, (2, 10), generator=generator)
    repeated = repeated_sequences(1, 6, 16, generator)
    full_context = torch.randint(16, (1, with_rope.config.context_length), generator=generator)
    return [
        ("two layers of 3 heads (d_head = 4): layer 0, head 1", two_layers, random_ids, 0, 1),
        ("the same model: layer 1, head 0 (the first columns)", two_layers, random_ids, 1, 0),
        ("the same model: layer 1, head 2 (the last columns)", two_layers, repeated, 1, 2),
        ("one layer of 4 heads: head 3, a block and its copy", one_layer, repeated, 0, 3),
        ("float64, two layers of 2 heads: layer 0, head 0", in_float64, random_ids[:1], 0, 0),
        ("two layers of 3 heads of width 6 (d_head = 6): layer 1, head 1", wider_heads, repeated,
         1, 1),
        ("a model in training mode (d_head = 6): layer 0, head 1", in_training, random_ids, 0, 1),
        ("RoPE positions, as chapter 13's models (d_head = 8): layer 1, head 1", with_rope,
         repeated, 1, 1),
        ("ids exactly as long as the context (16 tokens), which model(ids) reads: layer 0, "
         "head 1", with_rope, full_context, 0, 1),
    ]  # fmt: skip


def _looks_on(module: nn.Module, *inputs) -> None:
    """A hook of the model's own that changes nothing (a caller's probe, say)."""


def _with_hooks_of_its_own(model: GPT) -> GPT:
    """The model with a forward pre-hook and a forward hook that change nothing on every W_o:
    an answer must remove its own hooks only (the handle's remove(), not clear())."""
    for block in model.blocks:
        block.attention.W_o.register_forward_pre_hook(_looks_on)
        block.attention.W_o.register_forward_hook(_looks_on)
    return model


def failing_forward_case() -> tuple[str, GPT, torch.Tensor, int, int]:
    """(name, model, ids, layer, head) on which model(ids) raises: ids longer than the context."""
    with torch.random.fork_rng(devices=[]):  # RoPE: no position table to run out of
        model = _model(138, 2, 2, 8, torch.float32, position="rope").train()  # (dropout 0)
    ids = torch.zeros(1, model.config.context_length + 1, dtype=torch.int64)
    name = (
        f"ids of {ids.shape[1]} tokens, longer than the model's context of "
        f"{model.config.context_length}, on which model(ids) raises: layer 1, head 0"
    )
    return name, model, ids, 1, 0


def _edited_logits(model: GPT, ids: torch.Tensor, edit: Callable) -> torch.Tensor:
    """The logits of a copy of the model after edit(copy) changes its weights."""
    edited = copy.deepcopy(model)
    with torch.no_grad():
        edit(edited)
        return edited(ids)


def _head_zeroed_mistakes(model: GPT, ids: torch.Tensor, layer: int, head: int) -> dict:
    config = model.config
    d_head = config.d_model // config.num_heads
    rows = slice(head * d_head, (head + 1) * d_head)
    columns = f"{rows.start}:{rows.stop}"

    def attention(edited: GPT) -> nn.Module:
        return edited.blocks[layer].attention

    def zero_output_columns(edited):
        attention(edited).W_o.weight[rows] = 0.0
        attention(edited).W_o.bias[rows] = 0.0

    def zero_rows_of_W_o(edited):
        attention(edited).W_o.weight[rows] = 0.0

    def zero_bias_slice_too(edited):
        attention(edited).W_o.weight[:, rows] = 0.0
        attention(edited).W_o.bias[rows] = 0.0

    def zero_attention_inputs(how_many):
        def edit(edited):
            def hook(module, inputs, named):
                zeroed = inputs[0].clone()
                zeroed[..., rows] = 0.0
                return (zeroed,) * how_many + inputs[how_many:], named

            attention(edited).register_forward_pre_hook(hook, with_kwargs=True)

        return edit

    def zero_values_but_not_bias(edited):
        attention(edited).W_v.weight[rows] = 0.0

    def zero_output_bias_too(edited):
        attention(edited).W_o.weight[:, rows] = 0.0
        attention(edited).W_o.bias.zero_()

    def zero_interleaved_columns(edited):
        attention(edited).W_o.weight[:, head :: config.num_heads] = 0.0

    def zero_queries(edited):
        attention(edited).W_q.weight[rows] = 0.0
        attention(edited).W_q.bias[rows] = 0.0

    def zero_output_bias_only(edited):
        attention(edited).W_o.bias.zero_()

    def zero_merged_heads_at(where: tuple):
        """An edit that zeroes W_o's input (B, T, d_model) at `where` only."""

        def edit(edited):
            def hook(module, inputs):
                merged = inputs[0].clone()
                merged[where] = 0.0
                return (merged,)

            attention(edited).W_o.register_forward_pre_hook(hook)

        return edit

    output_not_input = (
        f"head {head}'s output is W_o's INPUT, columns {columns} of the merged heads "
        f"(W_o.weight[:, {columns}]), which W_o mixes into every output column"
    )
    with torch.no_grad():
        logits = logits_with_heads_zeroed(model, ids, [(layer, head)])
        plain = logits_with_heads_zeroed(model, ids, [])
    mistakes = {
        f"zeroes every head of layer {layer}: only head {head}'s columns {columns} of W_o's "
        f"input": logits_with_heads_zeroed(
            model, ids, [(layer, other) for other in range(config.num_heads)]
        ),
        f"zeroes W_o's OUTPUT columns {columns} (the output after W_o, or the rows of "
        f"W_o.weight and of its bias): {output_not_input}": _edited_logits(
            model, ids, zero_output_columns
        ),
        f"zeroes W_o's OUTPUT columns {columns} (the rows of W_o.weight, W_o.weight[{columns}]): "
        f"{output_not_input}": _edited_logits(model, ids, zero_rows_of_W_o),
        f"zeroes W_o.bias[{columns}] too: the bias belongs to no head (its entries are W_o's "
        f"output columns, which every head writes to) and stays; zero only W_o's input "
        f"columns {columns}, head {head}'s output": _edited_logits(model, ids, zero_bias_slice_too),
        f"zeroes columns {columns} of the queries the layer's attention reads "
        f"(model.blocks[{layer}].attention's first input, the residual stream): those are "
        f"features of the tokens, not head {head}; its output is columns {columns} of W_o's "
        f"input, so hook model.blocks[{layer}].attention.W_o": _edited_logits(
            model, ids, zero_attention_inputs(1)
        ),
        f"zeroes columns {columns} of the queries, keys and values the layer's attention reads "
        f"(the residual stream, model.blocks[{layer}].attention's inputs): those are features "
        f"of the tokens, not head {head}; its output is columns {columns} of W_o's input, so "
        f"hook model.blocks[{layer}].attention.W_o": _edited_logits(
            model, ids, zero_attention_inputs(3)
        ),
        f"zeroes rows {columns} of W_v.weight but not of W_v.bias: each value of the head is "
        f"then the bias, and so is its output (its weights sum to 1); zero the bias's rows too, "
        f"or zero W_o's input columns {columns}": _edited_logits(
            model, ids, zero_values_but_not_bias
        ),
        "zeroes the head's queries (or keys): its scores are then all 0 and its attention "
        "uniform over the keys so far, so it still writes the average of its values; zero what "
        "it writes, W_o's input columns, instead": _edited_logits(model, ids, zero_queries),
        f"zeroes W_o's bias too: the bias belongs to no head and stays; zero only W_o's input "
        f"columns {columns}, head {head}'s output": _edited_logits(
            model, ids, zero_output_bias_too
        ),
        f"zeroes the columns {head}::{config.num_heads}, every num_heads-th one: the heads sit "
        f"side by side in W_o's input, not interleaved; head {head} is the block {columns}, "
        f"head*d_head:(head+1)*d_head": _edited_logits(model, ids, zero_interleaved_columns),
        f"removes W_o's bias and zeroes no head: the bias belongs to no head and stays; zero "
        f"head {head}'s output, columns {columns} of W_o's input": _edited_logits(
            model, ids, zero_output_bias_only
        ),
        "returns probabilities (softmax): return the logits themselves": logits.softmax(-1),
        "returns log-probabilities (log_softmax): return the logits themselves": (
            logits.log_softmax(-1)
        ),
    }
    if config.position == "rope":

        def without_rope(edited):
            for block in edited.blocks:
                block.attention.rope = False
            attention(edited).W_o.weight[:, rows] = 0.0

        mistakes[
            "computes the attention without RoPE: this model turns each head's queries and keys "
            "by their positions (helpers.positional.apply_rope on q and k, after split_heads); "
            f"{WRITTEN_OUT}"
        ] = _edited_logits(model, ids, without_rope)
    for low, digits in LOWER_PRECISIONS:
        mistakes[
            f"the logits are rounded to {str(low).removeprefix('torch.')} on the way (the "
            f"logits, or the model copied, in {str(low).removeprefix('torch.')}), which keeps "
            f"{digits} significant digits: keep the model's dtype throughout"
        ] = logits.to(low).to(logits.dtype)
    mistakes.update(_written_out_mistakes(model, ids, layer, rows))
    batch, positions = ids.shape
    if batch > 1:
        mistakes[
            f"zeroes head {head} in batch row 0 only (W_o's input[0, :, {columns}]): zero it in "
            f"every sequence of the batch, [..., {columns}]"
        ] = _edited_logits(model, ids, zero_merged_heads_at((0, slice(None), rows)))
    if positions > 1:
        mistakes[
            f"zeroes head {head} at the last position only (W_o's input[:, -1, {columns}]): zero "
            f"it at every position of every sequence, [..., {columns}]"
        ] = _edited_logits(model, ids, zero_merged_heads_at((slice(None), -1, rows)))
    if config.num_heads > 2:
        mistakes[
            f"keeps only head {head} and zeroes the other heads of layer {layer}: zero head "
            f"{head}'s columns {columns} alone, and leave the others as they are"
        ] = logits_with_heads_zeroed(
            model, ids, [(layer, other) for other in range(config.num_heads) if other != head]
        )
    if config.num_layers > 1:
        mistakes[
            f"zeroes head {head} in every layer: only in layer {layer}, model.blocks[{layer}]"
        ] = logits_with_heads_zeroed(
            model, ids, [(other, head) for other in range(config.num_layers)]
        )
    for other_layer in range(config.num_layers):
        for other in range(config.num_heads):
            if (other_layer, other) == (layer, head):
                continue
            where = slice(other * d_head, (other + 1) * d_head)
            if other_layer == layer:
                diagnosis = (
                    f"zeroes head {other}'s columns {where.start}:{where.stop}, not head "
                    f"{head}'s: head h is the columns h*d_head:(h+1)*d_head of W_o's input, "
                    f"here {columns} (d_head = {d_head})"
                )
            else:
                diagnosis = (
                    f"zeroes head {other} of layer {other_layer}, not head {head} of layer "
                    f"{layer}: the layer is model.blocks[layer]"
                )
            mistakes[diagnosis] = logits_with_heads_zeroed(model, ids, [(other_layer, other)])
    for shift in (1, -1) if head else (1,):
        shifted = slice(head * d_head + shift, (head + 1) * d_head + shift)
        mistakes[
            f"zeroes the columns {shifted.start}:{min(shifted.stop, config.d_model)}, head "
            f"{head}'s shifted by {shift:+d}: head h is the columns h*d_head:(h+1)*d_head of "
            f"W_o's input, here {columns}"
        ] = _with_columns_zeroed(model, ids, layer, shifted)
    for start, stop in ((0, 1), (-1, 0), (0, -1), (1, 0)):  # one column more or fewer
        block = slice(rows.start + start, rows.stop + stop)
        if block.start >= 0 and block.stop <= config.d_model:
            size = "wider" if block.stop - block.start > d_head else "narrower"
            mistakes[
                f"zeroes the columns {block.start}:{block.stop}, one column {size} than head "
                f"{head}'s {columns}: a slice a:b stops before b, so head h is the d_head = "
                f"{d_head} columns h*d_head:(h+1)*d_head of W_o's input"
            ] = _with_columns_zeroed(model, ids, layer, block)
    for width in range(1, config.d_model // (head + 1) + 1):  # blocks inside W_o's input
        if width != d_head and (head, width) != (0, config.d_model):  # (not the whole layer)
            block = f"{head * width}:{(head + 1) * width}"
            mistakes[
                f"zeroes the columns {block}, as if each head were {width} wide: d_head = "
                f"model.config.d_model // model.config.num_heads = {config.d_model} // "
                f"{config.num_heads} = {d_head} here, so head {head} is the columns {columns}"
            ] = _with_columns_zeroed(model, ids, layer, slice(head * width, (head + 1) * width))
    mistakes.update(_merged_heads_misread(model, ids, layer, head))
    mistakes[  # last: when nothing changed, that is the mistake, whatever else matches too
        f"the logits are the model's own: nothing was zeroed. A forward pre-hook must RETURN "
        f"the changed input (one that returns None leaves it as it was), the columns zeroed "
        f"must lie inside W_o's input (head {head} is {columns}, d_head = {d_head} here), and "
        f"an edited copy must be the model that runs"
    ] = plain
    return mistakes


WRITTEN_OUT = "check a pass written by hand against model(ids) with nothing zeroed first"


def _written_out_mistakes(model: GPT, ids: torch.Tensor, layer: int, rows: slice) -> dict:
    """What a forward pass written out by hand returns when it leaves out one step of the
    model's own, with the head (W_o's input columns `rows` of block `layer`) zeroed."""
    d_model = model.config.d_model
    d_head = d_model // model.config.num_heads

    def unscaled(edited, block):
        def hook(module, inputs):  # (queries, keys, values, valid_lens, mask)
            return (inputs[0] * math.sqrt(d_head),) + inputs[1:]

        block.attention.attention.register_forward_pre_hook(hook)

    def scaled_by_model_width(edited, block):
        def hook(module, inputs):  # scores / sqrt(d_model) in place of / sqrt(d_head)
            return (inputs[0] * math.sqrt(d_head / d_model),) + inputs[1:]

        block.attention.attention.register_forward_pre_hook(hook)

    def without_residual(edited, block):
        def hook(module, inputs, output):  # what the attention wrote, without x added
            return output - inputs[0]

        block.attention_residual.register_forward_hook(hook)

    def unmasked(edited, block):
        def hook(module, inputs):
            return inputs[:4] + (None,)

        block.attention.attention.register_forward_pre_hook(hook)

    def unnormed(edited, block):
        block.attention_residual.norm = nn.Identity()

    def without_final_norm(edited, block):
        edited.norm = nn.Identity()

    steps = {
        f"does not divide the scores by sqrt(d_head) = sqrt({d_head}): the model's attention "
        f"scales q @ k^T by 1 / sqrt(d_head) before the softmax": unscaled,
        f"divides the scores by sqrt(d_model) = sqrt({d_model}): the model's attention scales "
        f"each head's q @ k^T by 1 / sqrt(d_head), the width of one head, sqrt({d_head}) here": (
            scaled_by_model_width
        ),
        "replaces x with what the attention writes: each block adds it to the residual "
        "stream, x = x + W_o(heads)": without_residual,
        "has no causal mask, so each position reads the keys after it: the model masks them "
        "(helpers.masks.causal_mask(T), -inf before the softmax)": unmasked,
        "leaves out each block's layer norm: the attention reads "
        "block.attention_residual.norm(x), not x (the residual adds to x itself)": unnormed,
        "leaves out the final layer norm: the logits are model.output(model.norm(x))": (
            without_final_norm
        ),
    }
    mistakes = {}
    for diagnosis, step in steps.items():

        def edit(edited, step=step):
            for block in edited.blocks:
                step(edited, block)
            edited.blocks[layer].attention.W_o.weight[:, rows] = 0.0

        mistakes[f"computes a pass that {diagnosis}; {WRITTEN_OUT}"] = _edited_logits(
            model, ids, edit
        )
    return mistakes


def _merged_heads_misread(model: GPT, ids: torch.Tensor, layer: int, head: int) -> dict:
    """Mistakes in where head `head` lies in W_o's input (B, T, num_heads * d_head)."""
    config = model.config
    heads, d_head = config.num_heads, config.d_model // config.num_heads
    columns = f"{head * d_head}:{(head + 1) * d_head}"

    def zero_merged(zero: Callable):
        def edit(edited):
            def hook(module, inputs):
                return (zero(inputs[0].clone()),)

            edited.blocks[layer].attention.W_o.register_forward_pre_hook(hook)

        return edit

    def zero_without_the_transpose(merged):
        batch, positions, width = merged.shape
        split = merged.reshape(batch, heads, positions, d_head)
        split[:, head] = 0.0
        return split.reshape(batch, positions, width)

    def zero_the_whole_output(edited):
        edited.blocks[layer].attention.W_o.weight.zero_()
        edited.blocks[layer].attention.W_o.bias.zero_()

    def zero_positions(merged):
        merged[:, head * d_head : (head + 1) * d_head] = 0.0
        return merged

    mistakes = {
        f"zeroes positions {columns} (W_o's input[:, {columns}], the second axis, T) instead of "
        f"columns: W_o's input is (B, T, d_model), so index the last axis, [..., {columns}]": (
            _edited_logits(model, ids, zero_merged(zero_positions))
        ),
        "zeroes the layer's whole attention output, every head and W_o's bias: zero only head "
        f"{head}'s columns {columns} of W_o's input, and keep the bias": (
            _edited_logits(model, ids, zero_the_whole_output)
        ),
        f"reshapes W_o's input (B, T, d_model) to (B, heads, T, d_head) without the transpose: "
        f"the heads sit in the last axis, so split it, .view(B, T, heads, d_head), and zero "
        f"[:, :, {head}] (or transpose(1, 2) before indexing the heads)": (
            _edited_logits(model, ids, zero_merged(zero_without_the_transpose))
        ),
    }
    if head > 0:  # (head 0 starts at column 0 either way)
        mistakes[
            f"zeroes the columns {head}:{head + d_head}, a slice that starts at the head's "
            f"index: head h starts at column h*d_head, so head {head} is the columns {columns}"
        ] = _with_columns_zeroed(model, ids, layer, slice(head, head + d_head))
    if head < heads - 1:  # (the last head's columns run to the end)
        mistakes[
            f"zeroes the columns {head * d_head}: to the end, head {head} and every head after "
            f"it: head {head} alone is the columns {columns}, the slice stops at (head+1)*d_head"
        ] = _with_columns_zeroed(model, ids, layer, slice(head * d_head, None))
    if head < ids.shape[0] > 1:
        mistakes[
            f"zeroes batch row {head} (W_o's input[{head}]), a sequence, not head {head}: the "
            f"head is the columns {columns} of the last axis, [..., {columns}]"
        ] = _edited_logits(model, ids, zero_merged(lambda merged: _zero_row(merged, head)))
    return mistakes


def _zero_row(merged: torch.Tensor, row: int) -> torch.Tensor:
    merged[row] = 0.0
    return merged


def _with_columns_zeroed(model: GPT, ids: torch.Tensor, layer: int, columns: slice):
    """The logits with the given columns of W_o's input in `layer` set to zero (on a copy)."""

    def zero(edited: GPT) -> None:
        edited.blocks[layer].attention.W_o.weight[:, columns] = 0.0

    return _edited_logits(model, ids, zero)


_HOOK_KINDS = {  # a module's dict of hooks: (what it holds, what runs them)
    "_forward_pre_hooks": ("forward pre-hook", "forward pass"),
    "_forward_hooks": ("forward hook", "forward pass"),
    "_backward_pre_hooks": ("backward pre-hook", "backward pass"),
    "_backward_hooks": ("backward hook", "backward pass"),
    "_state_dict_pre_hooks": ("state_dict pre-hook", "state_dict()"),
    "_state_dict_hooks": ("state_dict hook", "state_dict()"),
    "_load_state_dict_pre_hooks": ("load_state_dict pre-hook", "load_state_dict()"),
    "_load_state_dict_post_hooks": ("load_state_dict post-hook", "load_state_dict()"),
}
_HOOK_FLAGS = ("_with_kwargs", "_always_called")


def _hooks(model: nn.Module) -> dict[tuple[str, str, int], tuple]:
    """{(module name, kind, key): (hook, {flag: value})} for every hook registered on the
    model's modules, of each kind in _HOOK_KINDS (the flags: with_kwargs and always_called,
    where set)."""
    return {
        (name or "the model", kind, key): (
            hook,
            {
                flag: getattr(module, f"{kind}{flag}")[key]
                for flag in _HOOK_FLAGS
                if key in getattr(module, f"{kind}{flag}", {})
            },
        )
        for name, module in model.named_modules()
        for kind in _HOOK_KINDS
        for key, hook in getattr(module, kind, {}).items()
    }


def _put_back_hooks(model: nn.Module, hooks: dict) -> None:
    """Register again, under their keys, the hooks given that are no longer registered."""
    modules = dict(model.named_modules())
    for (name, kind, key), (hook, flags) in hooks.items():
        module = modules["" if name == "the model" else name]
        getattr(module, kind)[key] = hook
        for flag, value in flags.items():
            getattr(module, f"{kind}{flag}")[key] = value


def _remove_hooks(model: nn.Module, hooks: set) -> None:
    modules = dict(model.named_modules())
    for name, kind, key in hooks:
        module = modules["" if name == "the model" else name]
        getattr(module, kind).pop(key, None)
        for flag in _HOOK_FLAGS:
            getattr(module, f"{kind}{flag}", {}).pop(key, None)


_PLAIN = (bool, int, float, complex, str, bytes, type(None))


def _plain(value: object) -> bool:
    """A number, string, bool, None, or a tuple of them: compared by value."""
    if isinstance(value, tuple | frozenset):
        return all(_plain(item) for item in value)
    return isinstance(value, _PLAIN)


def _same_attribute(before: object, now: object) -> bool:
    """The same object, or an equal plain value (dropout.p = 0.0 when it was 0.0)."""
    if now is before:
        return True
    return type(now) is type(before) and _plain(before) and now == before


def _described(value: object) -> str:
    """A plain value by its repr, any other object by its type (its repr may be an address)."""
    if _plain(value):
        return shown(value)
    kind = type(value).__name__
    return f"{'an' if kind[0].lower() in 'aeiou' else 'a'} {kind}"


def _is_the_class_forward(module: nn.Module, forward: object) -> bool:
    """forward is the module's own: its class's forward bound to it (what
    `original = module.forward` saved, assigned back by `module.forward = original`)."""
    return (
        getattr(forward, "__func__", None) is type(module).forward
        and getattr(forward, "__self__", None) is module
    )


def _model_state(model: GPT) -> dict:
    """Everything of the model a learner's call could leave changed: its modules (each one's
    children, attributes, parameters and buffers), its weights (values, dtype, requires_grad,
    grad), its hooks and its mode."""
    modules = dict(model.named_modules())
    tensors = {**dict(model.named_parameters()), **dict(model.named_buffers())}
    return {
        "modules": modules,
        "children": {name: dict(module._modules) for name, module in modules.items()},
        "attributes": {name: dict(vars(module)) for name, module in modules.items()},
        "weights": {
            name: (dict(module._parameters), dict(module._buffers))
            for name, module in modules.items()
        },
        "tensors": {
            name: (tensor, tensor.detach().clone(), tensor.requires_grad, tensor.grad)
            for name, tensor in tensors.items()
        },
        "tensor hooks": {name: tensor_hooks(tensor) for name, tensor in tensors.items()},
        "hooks": _hooks(model),
        "training": model.training,
    }


_MISSING = object()
KEEP_IT_LOCAL = (
    "the model must come back with the attributes it had, so keep what you need in a local "
    "variable (a hook's handle, say)"
)


def _put_back_modules(state: dict) -> str | None:
    """Each module's children, attributes, parameters and buffers as they were; what the
    learner changed, if anything."""
    problems = []
    for name, module in state["modules"].items():
        before, now = state["children"][name], dict(module._modules)
        if now != before:
            changed = next(key for key in {*before, *now} if before.get(key) is not now.get(key))
            problems.append(
                f"replaces or adds a module, {_where(name, changed)}, and leaves it there: every "
                f"later use of the model would run the changed one; zero a copy "
                f"(copy.deepcopy(model)) or use a forward pre-hook and remove it afterwards"
            )
        module._modules.clear()
        module._modules.update(before)
        problems += _put_back_forward(state, name, module)
        problems += _put_back_attributes(state, name, module)
        for kind, held in zip(("parameter", "buffer"), state["weights"][name], strict=True):
            now = getattr(module, f"_{kind}s")
            if set(now) != set(held) or any(now[key] is not held[key] for key in held):
                changed = next(key for key in {*held, *now} if held.get(key) is not now.get(key))
                how = "adds" if changed not in held else "replaces"
                problems.append(
                    f"{how} a {kind}, {_where(name, changed)}, and leaves it there: every later "
                    f"use of the model would read it; zero a copy (copy.deepcopy(model)), or "
                    f"put the original back in a `finally:` block"
                )
                now.clear()
                now.update(held)
    return problems[0] if problems else None


def _where(module_name: str, attribute: str) -> str:
    return f"model.{module_name}.{attribute}" if module_name else f"model.{attribute}"


def _put_back_forward(state: dict, name: str, module: nn.Module) -> list[str]:
    """A forward left on the module that is not the one it came with, the module's own among
    them (a bound method saved and assigned back: an instance attribute it came without)."""
    before = state["attributes"][name].get("forward", _MISSING)
    now = vars(module).get("forward", _MISSING)
    if now is before:
        return []
    if before is _MISSING:
        del module.forward
    else:
        module.forward = before
    if before is _MISSING and _is_the_class_forward(module, now):
        owner = f"model.{name}" if name else "model"
        return [
            f"leaves an instance attribute forward on {owner} (the bound method you saved, "
            f"assigned back: it runs the module's own forward, but the model must come back "
            f"with the attributes it had, and the module came without this one): del it in "
            f"finally (`del module.forward`), and the class's forward runs again"
        ]
    return [
        f"leaves {_where(name, 'forward')} replaced ({_described(now)} where the module's own "
        f"forward was): every later forward pass of the model would run the replacement; use a "
        f"forward pre-hook, or put the original back in a `finally:` block (`del "
        f"module.forward`, not an assignment of the bound method you saved)"
    ]


def _put_back_attributes(state: dict, name: str, module: nn.Module) -> list[str]:
    """Attributes added, deleted or changed (other than torch's own, whose names start with _,
    and the tensors a forward pass writes, such as attention_weights)."""
    problems = []
    before, now = state["attributes"][name], vars(module)
    for key in [key for key in now if key not in before and key != "forward"]:
        problems.append(
            f"adds {_where(name, key)} ({_described(now.pop(key))}) and leaves it there; "
            f"{KEEP_IT_LOCAL}, or delete it in a `finally:` block"
        )
    for key, value in before.items():
        if key.startswith("_") or key in ("training", "forward"):
            continue
        if key not in now:
            now[key] = value
            problems.append(
                f"deletes {_where(name, key)} and leaves it deleted: every later forward pass "
                f"would miss it; change a copy (copy.deepcopy(model)), or put it back in a "
                f"`finally:` block"
            )
        elif isinstance(value, torch.Tensor) or isinstance(now[key], torch.Tensor):
            continue  # a forward pass writes some (attention_weights)
        elif not _same_attribute(value, now[key]):
            if _plain(value) or _plain(now[key]) or type(value) is not type(now[key]):
                values = f"{_described(value)} before, {_described(now[key])} after"
            else:
                values = f"one {type(value).__name__} before, another after"
            now[key] = value
            problems.append(
                f"changes {_where(name, key)} ({values}) and leaves it changed: every later "
                f"forward pass would read the new value; change a copy (copy.deepcopy(model)), "
                f"or put it back in a `finally:` block"
            )
    return problems


def _rounded_copy(tensor: torch.Tensor, saved: torch.Tensor) -> torch.dtype | None:
    """The lower floating dtype whose copy of the saved weights `tensor` holds, if any."""
    if not saved.is_floating_point() or tensor.shape != saved.shape:
        return None
    lower = [torch.float32, *(low for low, _ in LOWER_PRECISIONS)]
    for low in lower:
        if low.itemsize < saved.dtype.itemsize and torch.equal(
            tensor.detach(), saved.to(low).to(saved.dtype)
        ):
            return low
    return None


def _put_back_weights(state: dict) -> str | None:
    """Each weight's values, dtype, requires_grad and grad as they were; the first change."""
    problems = []
    for name, (tensor, saved, requires_grad, grad) in state["tensors"].items():
        converted = tensor.dtype != saved.dtype or tensor.device != saved.device
        edited = not converted and (
            tensor.shape != saved.shape or not torch.equal(tensor.detach(), saved)
        )
        if converted:
            problems.append(
                f"leaves the model's weights in {tensor.dtype} on {tensor.device} (they came in "
                f"{saved.dtype} on {saved.device}, {name}): model.double() and model.to() change "
                f"the model itself; convert a copy"
            )
        elif edited and (low := _rounded_copy(tensor, saved)) is not None:
            problems.append(
                f"puts the model's weights back from a {low} copy ({name}): they came in "
                f"{saved.dtype}, and the round trip through {low} rounds them; save them in "
                f"their own dtype (W.detach().clone())"
            )
        elif edited:
            problems.append(
                f"leaves the model's weights changed ({name}): the model must come back as it "
                f"came, or every later use of it runs without the head; zero a copy "
                f"(copy.deepcopy(model)), put the weights back, or use a forward pre-hook"
            )
        if converted or edited:
            tensor.data = saved.clone()
        if tensor.requires_grad != requires_grad:
            tensor.requires_grad_(requires_grad)
            problems.append(
                f"leaves requires_grad {'off' if requires_grad else 'on'} for the model's weight "
                f"{name}: later training could not update it; run the model inside "
                f"`with torch.no_grad():` instead"
            )
        if tensor.grad is not grad:
            tensor.grad = grad
            problems.append(
                f"leaves gradients in the model's weights (.grad of {name}): a later optimizer "
                f"step would use them; compute the logits inside `with torch.no_grad():`"
            )
        if tensor_hooks(tensor) != state["tensor hooks"][name]:
            _, gradient_hooks, accumulate_hooks = state["tensor hooks"][name]
            for hooks, kept in (
                (tensor._backward_hooks, gradient_hooks),
                (getattr(tensor, "_post_accumulate_grad_hooks", None), accumulate_hooks),
            ):
                for key in [key for key in hooks or () if key not in kept]:
                    del hooks[key]
            problems.append(
                f"leaves a hook on the model's weight {name} (register_hook or "
                f"register_post_accumulate_grad_hook): every later backward pass through the "
                f"model would run it; keep its handle and call handle.remove() in a `finally:` "
                f"block"
            )
    return problems[0] if problems else None


def _left_changed(model: GPT, state: dict) -> str | None:
    """What the learner's call left changed in the model, after putting all of it back."""
    modules_problem = _put_back_modules(state)
    weights_problem = _put_back_weights(state)
    hooks = _hooks(model)
    left = sorted(set(hooks) - set(state["hooks"]))
    removed = sorted(set(state["hooks"]) - set(hooks))
    mode = model.training
    _remove_hooks(model, set(left))
    _put_back_hooks(model, {key: state["hooks"][key] for key in removed})
    model.train(state["training"])
    if modules_problem or weights_problem:
        return modules_problem or weights_problem
    if removed:
        name, hooks_attribute, _ = removed[0]
        return (
            f"removes a {_hook_kind(hooks_attribute)} the model already had on {name} (one of "
            f"its own, registered before your call): the model must come back with its hooks; "
            f"remove only your own hook, with handle.remove() on the handle that "
            f"register_..._hook returns, not {hooks_attribute}.clear()"
        )
    if left:
        name, hooks_attribute, _ = left[0]
        runs = _HOOK_KINDS[hooks_attribute][1]
        effect = "still run without the head" if runs == "forward pass" else "run it"
        return (
            f"leaves a {_hook_kind(hooks_attribute)} registered on {name}: every later {runs} "
            f"of the model would {effect}; keep the handle that register_..._hook returns and "
            f"call handle.remove() in a `finally:` block"
        )
    if mode != state["training"]:
        came, left_in = ("training", "eval") if state["training"] else ("eval", "training")
        return (
            f"leaves the model in {left_in} mode (it came in {came} mode): put the mode back "
            f"with model.train(was_training)"
        )
    return None


def _hook_kind(hooks_attribute: str) -> str:
    """What a module's hook dict holds, in words."""
    return _HOOK_KINDS[hooks_attribute][0]


def _watched(learner: Callable, model: GPT, layer: int, head: int) -> Callable:
    """learner(model, ids, layer, head), refused if it leaves the model changed (which is
    then put back, for the reference and the next cases)."""

    def call(ids):
        state = _model_state(model)
        try:
            got = learner(model, ids, layer, head)
        finally:
            problem = _left_changed(model, state)
        if problem is not None:
            raise Refused(problem)
        return got

    return call


@exercise_checker
def check_logits_with_head_zeroed(learner_logits: Callable) -> bool:
    """learner_logits(model, ids, layer, head) -> (B, T, vocab): model an attention-only
    helpers.gpt.GPT in eval or training mode (its dropout is 0), float32 or float64, ids (B, T)
    int64, layer and head ints. The logits of model(ids) with head `head` of block `layer`
    writing nothing: W_o of that layer reads zeros in the head's columns
    head*d_head:(head+1)*d_head of the merged heads, d_head = d_model // num_heads (the cases
    have heads 4 and 6 wide), its bias stays. A tensor in the model's dtype: the logits, not
    probabilities. ids is left as it was (no in-place operation on it, even one that changes no
    value, and its requires_grad as it came, no hook left on it). The model must be left as it came:
    its modules, their forward and their other attributes (num_heads, say), its weights with their
    values, their dtype (model.double() converts the model itself), their requires_grad and their
    .grad (left empty: no backward pass through the model), its hooks and its train/eval mode; also
    when model(ids) raises: one case passes ids longer than the context, on which the function
    must let model(ids)'s error through (or raise one of its type from a check of its own) and
    still leave the model as it came (try/finally, or a `with` block). The gradients are not
    checked: an ablation measures a trained model, nothing is learned through it. Without
    calling helpers.induction.logits_with_heads_zeroed or helpers.induction.zeroed_heads
    (refused by name). Each call returns within ANSWER_TIME_LIMIT_SECONDS (5 s) and leaves
    torch's grad mode, default dtype, random generator, anomaly detection,
    deterministic-algorithms setting, thread count and module hooks as they were."""
    failures, passed, answers = [], 0, TimedAnswers(learner_logits)
    forbidden = {
        "helpers.induction.logits_with_heads_zeroed": logits_with_heads_zeroed,
        "helpers.induction.zeroed_heads": zeroed_heads,
        "helpers.induction._zeroing (zeroed_heads' computation)": induction._zeroing.__wrapped__,
        "helpers.induction._zeroing_hook (zeroed_heads' hook)": induction._zeroing_hook,
    }
    for name, model, ids, layer, head in head_zeroed_cases():

        def reference(i, model=model, layer=layer, head=head):
            return logits_with_heads_zeroed(model, i, [(layer, head)])

        case_passed = run_case(
            name,
            _watched(answers, model, layer, head),
            (ids,),
            reference,
            failures,
            atol=1e-4,
            hint=f"the logits with head {head} of layer {layer} zeroed",
            mistakes=_known_mistakes(name, model, ids, layer, head),
            forbidden=forbidden,
            names=("ids",),
        )
        passed += case_passed
        if not case_passed:
            _name_the_models_dtype(failures)
    passed += _left_as_it_came_when_the_forward_pass_fails(answers, failures, forbidden)
    return report(failures, passed)


_MISTAKES_SEEN: dict[tuple, dict] = {}  # (case, its fingerprint) -> its mistakes' logits


def _known_mistakes(name: str, model: GPT, ids: torch.Tensor, layer: int, head: int) -> dict:
    """What each named mistake returns on this case, worked out once per session (a few hundred
    forward passes of edited copies) and kept: the cases are the same at every call, which the
    fingerprint of the model's weights, mode and hooks and of the ids makes sure of."""
    key = (name, _fingerprint(model, ids), layer, head)
    if key not in _MISTAKES_SEEN:
        right = logits_with_heads_zeroed(model, ids, [(layer, head)])
        mistakes = named_together(_head_zeroed_mistakes(model, ids, layer, head))
        _MISTAKES_SEEN[key] = wrong_only(mistakes, right)
    return _MISTAKES_SEEN[key]


def _fingerprint(model: GPT, ids: torch.Tensor) -> str:
    digest = hashlib.sha256(repr((model.training, model.config, ids.tolist())).encode())
    for key, tensor in model.state_dict().items():
        digest.update(key.encode() + str(tensor.dtype).encode())
        digest.update(tensor.detach().cpu().contiguous().view(torch.uint8).numpy().tobytes())
    hooks = sorted(  # by what they run: a new model registers new hooks under new keys
        (name, kind, getattr(hook, "__qualname__", type(hook).__name__))
        for (name, kind, _), (hook, _) in _hooks(model).items()
    )
    digest.update(repr(hooks).encode())
    return digest.hexdigest()


INPUTS_DTYPE = " (keep the input's dtype)"  # the framework's words: the input here is int ids


def _name_the_models_dtype(failures: list[str]) -> None:
    """The logits' dtype is the model's, not that of the input, which holds int64 ids."""
    if failures[-1].endswith(INPUTS_DTYPE):
        failures[-1] = (
            f"{failures[-1][: -len(INPUTS_DTYPE)]} (keep the model's dtype: the logits come in "
            f"the dtype of its weights, with no conversion of the model or of the logits)"
        )


def _left_as_it_came_when_the_forward_pass_fails(
    answers: Callable, failures: list[str], forbidden: dict
) -> bool:
    """The learner's function on ids the model refuses: model(ids)'s error must come through,
    and the model must come back as it came (no hook left, no weight left zeroed)."""
    name, model, ids, layer, head = failing_forward_case()
    models_error = _error_of(model, ids)
    state = _model_state(model)
    raised = None
    try:
        with recording_calls(forbidden) as called:
            answers(model, ids, layer, head)
    except Refused as refusal:  # torch's global settings left changed
        _left_changed(model, state)
        failures.append(f"{name}: {refusal}")
        return False
    except (Exception, SystemExit) as error:  # the learner's code may fail; here it should
        raised = error
    problem = _left_changed(model, state)
    if called:
        problem = f"calls {called[0]}, which this exercise asks you to write yourself"
    elif problem is not None:
        problem = (
            f"model(ids) raised {type(raised).__name__}, and your function {problem} (code "
            f"after model(ids) does not run when it raises: undo in try/finally, or a `with` "
            f"block)"
        )
    elif raised is None:
        problem = (
            "your function returned instead of raising: model(ids) raises on these ids, and the "
            "error must reach the caller (an `except` that returns something hides it; put the "
            "clean-up in a `finally:` block instead)"
        )
    elif not _raised_by_the_model(raised, models_error):
        problem = (
            f"your function raised {type(raised).__name__}({shown(str(raised))}) from its own "
            f"code, where model(ids) raises {type(models_error).__name__}"
            f"({shown(str(models_error))}): let the model's own error through (no check of your "
            f"own that raises another, no `except` that replaces it)"
        )
    if problem is None:
        return True
    failures.append(f"{name}: {problem}")
    return False


_MODEL_CODE = tuple(str(Path(module.__file__).parent) for module in (torch, helpers))


def _raised_by_the_model(raised: BaseException, models_error: Exception) -> bool:
    """raised is of the type of model(ids)'s error (a check of the ids of one's own may raise
    it first), or one torch or the helpers raise (as in a forward pass written out by hand),
    not another that the learner's code raises itself."""
    if type(raised) is type(models_error):
        return True
    frames = traceback.extract_tb(raised.__traceback__)
    return bool(frames) and frames[-1].filename.startswith(_MODEL_CODE)


def _error_of(model: GPT, ids: torch.Tensor) -> Exception:
    """The error model(ids) raises."""
    try:
        with torch.no_grad():
            model(ids)
    except Exception as error:  # the case is built so that it raises
        return error
    raise AssertionError("failing_forward_case's ids must make model(ids) raise")
