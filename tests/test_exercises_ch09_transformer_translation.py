"""Chapter 09's checkers: its solutions and typical wrong answers (run by test_exercises.py,
with every other chapter's)."""

import itertools

import pytest
import torch
import torch.nn.functional as F

from helpers.exercises import (
    check_beam_step,
    check_gnmt_length_penalty,
    check_smoothing_over_writable_tokens,
)
from helpers.exercises.ch09_transformer_translation import _beam_inputs, _beam_mistakes
from helpers.training import sequence_cross_entropy
from solutions.ch09_transformer_translation import (
    beam_step,
    gnmt_length_penalty,
    smoothing_over_writable_tokens,
)

CHECKERS = {
    "smoothing over writable tokens": (
        check_smoothing_over_writable_tokens,
        smoothing_over_writable_tokens,
    ),
    "beam step": (check_beam_step, beam_step),
    "GNMT length penalty": (check_gnmt_length_penalty, gnmt_length_penalty),
}
# The exercises whose right answer is a scalar: to them tensor(0.5) is a wrong value, not a
# wrong shape, and their report says "got 0.5, expected ..." instead of "shape ()".
SCALAR_ANSWERS = {"smoothing over writable tokens"}


# 1. Label smoothing over the writable tokens


def _smoothed_loss(logits, targets, pad_id, q):
    per_position = -(q * logits.log_softmax(-1)).sum(-1)  # (B, T)
    return per_position[targets != pad_id].mean()


def smoothing_over_all_tokens(logits, targets, pad_id, epsilon, never_written):
    vocab = logits.shape[-1]
    q = (1 - epsilon) * F.one_hot(targets, vocab) + epsilon / vocab
    return _smoothed_loss(logits, targets, pad_id, q)


def smoothing_left_out(logits, targets, pad_id, epsilon, never_written):
    return _smoothed_loss(logits, targets, pad_id, F.one_hot(targets, logits.shape[-1]))


def smoothing_over_the_other_tokens(logits, targets, pad_id, epsilon, never_written):
    vocab = logits.shape[-1]
    one_hot = F.one_hot(targets, vocab)
    q = (1 - epsilon) * one_hot + epsilon / (vocab - 1) * (1 - one_hot)
    return _smoothed_loss(logits, targets, pad_id, q)


def smoothing_over_the_other_writable_tokens(logits, targets, pad_id, epsilon, never_written):
    vocab = logits.shape[-1]
    one_hot = F.one_hot(targets, vocab)
    others = torch.ones(vocab)
    others[never_written] = 0.0
    others = others * (1 - one_hot)  # (B, T, V)
    q = (1 - epsilon) * one_hot + epsilon * others / others.sum(-1, keepdim=True)
    return _smoothed_loss(logits, targets, pad_id, q)


def smoothing_with_the_pads_in_the_mean(logits, targets, pad_id, epsilon, never_written):
    real = targets != pad_id
    loss = smoothing_over_writable_tokens(logits, targets, pad_id, epsilon, never_written)
    return loss * real.sum() / real.numel()


def smoothing_summed(logits, targets, pad_id, epsilon, never_written):
    loss = smoothing_over_writable_tokens(logits, targets, pad_id, epsilon, never_written)
    return loss * (targets != pad_id).sum()


def smoothing_with_sequence_cross_entropy(logits, targets, pad_id, epsilon, never_written):
    return sequence_cross_entropy(logits, targets, pad_id, epsilon)


def smoothing_with_cross_entropy(logits, targets, pad_id, epsilon, never_written):
    per_position = F.cross_entropy(logits.transpose(1, 2), targets, reduction="none")
    return per_position[targets != pad_id].mean()  # no smoothing at all, and forbidden


def smoothing_that_adds_the_pad(logits, targets, pad_id, epsilon, never_written):
    if pad_id not in never_written:
        never_written.append(pad_id)
    return smoothing_over_writable_tokens(logits, targets, pad_id, epsilon, never_written)


def smoothing_in_place(logits, targets, pad_id, epsilon, never_written):
    logits.sub_(logits.logsumexp(-1, keepdim=True))  # the caller's logits become log-probs
    return smoothing_over_writable_tokens(logits, targets, pad_id, epsilon, never_written)


# 2. One step of beam search


def beam_best_of_each_hypothesis(scores, log_probs, ended, pad_id):
    after_end = torch.full_like(log_probs[0, 0], float("-inf"))
    after_end[pad_id] = 0.0
    log_probs = torch.where(ended[..., None], after_end, log_probs)
    best, tokens = (scores[..., None] + log_probs).max(-1)
    order = best.argsort(-1, descending=True)
    return best.gather(1, order), order, tokens.gather(1, order)


def beam_without_the_scores(scores, log_probs, ended, pad_id):
    return beam_step(torch.zeros_like(scores), log_probs, ended, pad_id)


def beam_extending_ended_hypotheses(scores, log_probs, ended, pad_id):
    return beam_step(scores, log_probs, torch.zeros_like(ended), pad_id)


def beam_with_flat_tokens(scores, log_probs, ended, pad_id):
    new_scores, beams, tokens = beam_step(scores, log_probs, ended, pad_id)
    return new_scores, beams, beams * log_probs.shape[-1] + tokens


def beam_with_flat_beams(scores, log_probs, ended, pad_id):
    new_scores, beams, tokens = beam_step(scores, log_probs, ended, pad_id)
    return new_scores, beams * log_probs.shape[-1] + tokens, tokens


def beam_in_index_order(scores, log_probs, ended, pad_id):
    new_scores, beams, tokens = beam_step(scores, log_probs, ended, pad_id)
    order = (beams * log_probs.shape[-1] + tokens).argsort(-1)
    return new_scores.gather(1, order), beams.gather(1, order), tokens.gather(1, order)


def beam_with_true_division(scores, log_probs, ended, pad_id):
    new_scores, beams, tokens = beam_step(scores, log_probs, ended, pad_id)
    chosen = beams * log_probs.shape[-1] + tokens
    return new_scores, chosen / log_probs.shape[-1], tokens  # float, not the hypothesis


def beam_without_tokens(scores, log_probs, ended, pad_id):
    new_scores, beams, _ = beam_step(scores, log_probs, ended, pad_id)
    return new_scores, beams


def beam_detached(scores, log_probs, ended, pad_id):
    new_scores, beams, tokens = beam_step(scores, log_probs, ended, pad_id)
    return new_scores.detach(), beams, tokens


def beam_in_place(scores, log_probs, ended, pad_id):
    after_end = torch.full_like(log_probs[0, 0], float("-inf"))
    after_end[pad_id] = 0.0
    log_probs[ended] = after_end  # overwrites the caller's log-probabilities
    candidates = (scores[..., None] + log_probs).flatten(1)
    new_scores, chosen = candidates.topk(scores.shape[-1], dim=-1)
    return new_scores, chosen // log_probs.shape[-1], chosen % log_probs.shape[-1]


# 3. GNMT's length penalty


def _lengths(tokens, pad_id, dtype):
    return (tokens != pad_id).sum(-1).to(dtype)


def penalty_of_the_chapter(scores, tokens, pad_id, alpha):
    return scores / _lengths(tokens, pad_id, scores.dtype) ** alpha


def penalty_of_the_padded_length(scores, tokens, pad_id, alpha):
    return scores / ((5 + tokens.shape[-1]) / 6) ** alpha


def penalty_with_the_parentheses_misplaced(scores, tokens, pad_id, alpha):
    return scores / ((5 + _lengths(tokens, pad_id, scores.dtype)) ** alpha / 6)


def penalty_without_alpha(scores, tokens, pad_id, alpha):
    return scores / ((5 + _lengths(tokens, pad_id, scores.dtype)) / 6)


def penalty_multiplied(scores, tokens, pad_id, alpha):
    return scores * ((5 + _lengths(tokens, pad_id, scores.dtype)) / 6) ** alpha


def penalty_through_python_numbers(scores, tokens, pad_id, alpha):
    return torch.tensor(gnmt_length_penalty(scores, tokens, pad_id, alpha).tolist())


def penalty_in_place(scores, tokens, pad_id, alpha):
    return scores.div_(((5 + _lengths(tokens, pad_id, scores.dtype)) / 6) ** alpha)


WRONG = [
    ("smoothing over writable tokens", smoothing_over_all_tokens, "spread over all V tokens"),
    ("smoothing over writable tokens", smoothing_left_out, "no smoothing"),
    (
        "smoothing over writable tokens",
        smoothing_over_the_other_tokens,
        "fairseq's label_smoothed_nll_loss",
    ),
    (
        "smoothing over writable tokens",
        smoothing_over_the_other_writable_tokens,
        "Annotated Transformer's LabelSmoothing",
    ),
    (
        "smoothing over writable tokens",
        smoothing_with_the_pads_in_the_mean,
        "the pads were counted in the mean",
    ),
    ("smoothing over writable tokens", smoothing_summed, "the sum over the positions"),
    (
        "smoothing over writable tokens",
        smoothing_with_sequence_cross_entropy,
        "calls helpers.training.sequence_cross_entropy",
    ),
    (
        "smoothing over writable tokens",
        smoothing_with_cross_entropy,
        "calls torch.nn.functional.cross_entropy",
    ),
    (
        "smoothing over writable tokens",
        smoothing_that_adds_the_pad,
        "changes its input `never_written` in place",
    ),
    (
        "smoothing over writable tokens",
        smoothing_in_place,
        "changes its input `logits` in place",
    ),
    ("beam step", beam_best_of_each_hypothesis, "the best extension of each hypothesis"),
    ("beam step", beam_without_the_scores, "the previous scores were not added"),
    ("beam step", beam_extending_ended_hypotheses, "extended like a live one"),
    ("beam step", beam_with_flat_tokens, "tokens are flat indices"),
    ("beam step", beam_with_flat_beams, "beams are flat indices"),
    ("beam step", beam_in_index_order, "not sorted best first"),
    ("beam step", beam_with_true_division, "beams has dtype torch.float32"),
    ("beam step", beam_without_tokens, "returned 2 items, expected three"),
    ("beam step", beam_detached, "no gradient flows back"),
    ("beam step", beam_in_place, "changes its input `log_probs` in place"),
    ("GNMT length penalty", penalty_of_the_chapter, "the chapter's penalty L ** alpha"),
    ("GNMT length penalty", penalty_of_the_padded_length, "the pads were counted"),
    ("GNMT length penalty", penalty_with_the_parentheses_misplaced, "(5 + L) ** alpha / 6"),
    ("GNMT length penalty", penalty_without_alpha, "alpha is ignored"),
    ("GNMT length penalty", penalty_multiplied, "multiplied by the penalty"),
    ("GNMT length penalty", penalty_through_python_numbers, "no gradient flows back"),
    ("GNMT length penalty", penalty_in_place, "changes its input `scores` in place"),
]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_smoothing_with_nothing_left_out_is_torchs_label_smoothing(dtype):
    logits = torch.randn(3, 5, 11, dtype=dtype) * 3
    targets = torch.randint(1, 11, (3, 5))
    targets[0, 3:] = 0
    torch.testing.assert_close(
        smoothing_over_writable_tokens(logits, targets, 0, 0.15, []),
        sequence_cross_entropy(logits, targets, 0, label_smoothing=0.15),
    )


def test_smoothing_puts_no_probability_on_tokens_never_written():
    """The best logits for the smoothed target are log q: a model that learns them gives <pad>
    and <bos> probability (almost) zero, and the loss is q's entropy."""
    vocab, epsilon, never = 6, 0.3, [0, 1]
    targets = torch.tensor([[2, 5, 0]])
    q = torch.full((1, 3, vocab), epsilon / (vocab - len(never)))
    q[..., never] = 0.0
    q += (1 - epsilon) * F.one_hot(targets, vocab)
    loss = smoothing_over_writable_tokens(q.log().clamp(min=-50), targets, 0, epsilon, never)
    entropy = -(q * q.log().nan_to_num(neginf=0.0)).sum(-1)[0, :2].mean()
    torch.testing.assert_close(loss, entropy)


def test_the_beam_step_keeps_the_k_best_candidates_found_one_by_one():
    scores, log_probs, ended = _beam_inputs(5, 3, 4, 6, ((1, 2),), (0,))
    new_scores, beams, tokens = beam_step(scores, log_probs, ended, 0)
    for i in range(3):
        candidates = []
        for b, v in itertools.product(range(4), range(6)):
            if ended[i, b]:
                if v == 0:
                    candidates.append((scores[i, b].item(), b, v))
            else:
                candidates.append(((scores[i, b] + log_probs[i, b, v]).item(), b, v))
        best = sorted(candidates, reverse=True)[:4]
        assert [c[0] for c in best] == new_scores[i].tolist()
        assert [c[1] for c in best] == beams[i].tolist()
        assert [c[2] for c in best] == tokens[i].tolist()


def test_every_named_beam_mistake_differs_from_the_right_answer():
    args = (*_beam_inputs(33, 3, 4, 9, ((1, 2),), (0, 2)), 0)
    right = beam_step(*args)
    for diagnosis, answer in _beam_mistakes(*args).items():
        same = all(torch.equal(a, b) for a, b in zip(answer, right, strict=True))
        assert not same, diagnosis


def test_gnmt_with_alpha_zero_gives_the_scores_back():
    scores = -torch.rand(2, 3) * 10
    tokens = torch.randint(0, 5, (2, 3, 6))
    assert torch.equal(gnmt_length_penalty(scores, tokens, 0, 0.0), scores)


def smoothing_with_epsilon_over_v_on_writable(logits, targets, pad_id, epsilon, never_written):
    vocab = logits.shape[-1]
    writable = torch.ones(vocab, dtype=logits.dtype)
    writable[list(never_written)] = 0
    target = writable * epsilon / vocab + (1 - epsilon) * F.one_hot(targets, vocab).to(logits.dtype)
    per_token = -(target * logits.log_softmax(-1)).sum(-1)
    return per_token[targets != pad_id].mean()


def beam_step_ended_take_anything(scores, log_probs, ended, pad_id):
    free = torch.where(ended[..., None], 0.0, log_probs)
    new_scores, chosen = (scores[..., None] + free).flatten(1).topk(scores.shape[1])
    return new_scores, chosen // log_probs.shape[-1], chosen % log_probs.shape[-1]


def gnmt_without_eos(scores, tokens, pad_id, alpha):
    length = (tokens != pad_id).sum(-1).to(scores.dtype) - 1
    return scores / ((5 + length) / 6) ** alpha


WRONG += [
    (
        "smoothing over writable tokens",
        smoothing_with_epsilon_over_v_on_writable,
        "epsilon / V on each writable token",
    ),
    ("beam step", beam_step_ended_take_anything, "given every token at no cost"),
    ("GNMT length penalty", gnmt_without_eos, "L leaves out the <eos>"),
]


def _flat_candidates(scores, log_probs, ended, pad_id, pad_cost=None):
    """(B, k * V): an ended hypothesis adds only pad_id, at pad_cost (None: no cost)."""
    is_pad = torch.arange(log_probs.shape[-1]) == pad_id
    after_end = torch.where(is_pad, 0.0 if pad_cost is None else pad_cost, float("-inf"))
    return (scores[..., None] + torch.where(ended[..., None], after_end, log_probs)).flatten(1)


def beam_step_with_the_pad_hard_coded(scores, log_probs, ended, pad_id):
    return beam_step(scores, log_probs, ended, 0)


def beam_step_paying_for_the_pad(scores, log_probs, ended, pad_id):
    candidates = _flat_candidates(scores, log_probs, ended, pad_id, pad_cost=log_probs)
    new_scores, chosen = candidates.topk(scores.shape[1])
    return new_scores, chosen // log_probs.shape[-1], chosen % log_probs.shape[-1]


def beam_step_with_div_and_mod_swapped(scores, log_probs, ended, pad_id):
    new_scores, chosen = _flat_candidates(scores, log_probs, ended, pad_id).topk(scores.shape[1])
    return new_scores, chosen % log_probs.shape[-1], chosen // log_probs.shape[-1]


def beam_step_over_the_whole_batch(scores, log_probs, ended, pad_id):
    batch, k = scores.shape
    candidates = _flat_candidates(scores, log_probs, ended, pad_id)
    new_scores, chosen = candidates.flatten().topk(batch * k)
    vocab = log_probs.shape[-1]
    return (
        new_scores.view(batch, k),
        (chosen // vocab).view(batch, k),
        (chosen % vocab).view(batch, k),
    )


def beam_step_over_the_whole_batch_keeping_k(scores, log_probs, ended, pad_id):
    candidates = _flat_candidates(scores, log_probs, ended, pad_id)
    new_scores, chosen = candidates.flatten().topk(scores.shape[1])  # (k,): k for the batch
    return new_scores, chosen // log_probs.shape[-1], chosen % log_probs.shape[-1]


def beam_step_dropping_ended_hypotheses(scores, log_probs, ended, pad_id):
    candidates = (scores.masked_fill(ended, float("-inf"))[..., None] + log_probs).flatten(1)
    new_scores, chosen = candidates.topk(scores.shape[1])
    return new_scores, chosen // log_probs.shape[-1], chosen % log_probs.shape[-1]


def smoothing_with_the_pad_hard_coded(logits, targets, pad_id, epsilon, never_written):
    return smoothing_over_writable_tokens(logits, targets, 0, epsilon, never_written)


WRONG += [
    ("beam step", beam_step_dropping_ended_hypotheses, "the ended hypotheses were dropped"),
    (
        "smoothing over writable tokens",
        smoothing_with_the_pad_hard_coded,
        "pad_id is 3 here: was it taken to be 0?",
    ),
    ("beam step", beam_step_with_the_pad_hard_coded, "the pad id is taken to be 0"),
    ("beam step", beam_step_paying_for_the_pad, "paid the log-probability of its pad"),
    ("beam step", beam_step_with_div_and_mod_swapped, "`//` and `%` are swapped"),
    ("beam step", beam_step_over_the_whole_batch, "one top-k over the whole batch"),
    ("beam step", beam_step_over_the_whole_batch_keeping_k, "one top-k over the whole batch?"),
]


def test_a_pad_id_other_than_zero_changes_the_right_answer():
    """The cases with pad_id 5 are the ones where a hard-coded 0 shows: an ended hypothesis
    survives, and its token must be the pad."""
    args = (*_beam_inputs(34, 2, 3, 8, ((0, 1), (1, 0))), 5)
    right, hard_coded = beam_step(*args), beam_step_with_the_pad_hard_coded(*args)
    assert (right[2] == 5).sum() == 2 and not torch.equal(right[2], hard_coded[2])


# Right answers in other styles: each must be accepted.


def beam_step_with_a_large_negative(scores, log_probs, ended, pad_id):
    is_pad = torch.arange(log_probs.shape[-1]) == pad_id
    after_end = torch.where(is_pad, 0.0, -1e9)  # (V,)
    candidates = scores[..., None] + torch.where(ended[..., None], after_end, log_probs)
    new_scores, chosen = candidates.flatten(1).topk(scores.shape[1])
    vocab = log_probs.shape[-1]
    return new_scores, torch.div(chosen, vocab, rounding_mode="floor"), chosen % vocab


def beam_step_by_a_loop_over_sentences(scores, log_probs, ended, pad_id):
    k, vocab = scores.shape[1], log_probs.shape[-1]
    results = []
    for row_scores, row_log_probs, row_ended in zip(scores, log_probs, ended, strict=True):
        extensions = []
        for b in range(k):
            if row_ended[b]:
                only_pad = torch.full((vocab,), float("-inf"), dtype=row_scores.dtype)
                only_pad[pad_id] = 0.0
                extensions.append(row_scores[b] + only_pad)
            else:
                extensions.append(row_scores[b] + row_log_probs[b])
        best, chosen = torch.cat(extensions).topk(k)
        results.append((best, chosen // vocab, chosen % vocab))
    return tuple(torch.stack(part) for part in zip(*results, strict=True))


def beam_step_by_sorting(scores, log_probs, ended, pad_id):
    candidates = _flat_candidates(scores, log_probs, ended, pad_id)
    ordered, order = candidates.sort(dim=-1, descending=True, stable=True)
    k, vocab = scores.shape[1], log_probs.shape[-1]
    chosen = order[:, :k]
    return ordered[:, :k], chosen // vocab, chosen % vocab


def beam_step_by_unravel_index(scores, log_probs, ended, pad_id):
    log_probs = log_probs.masked_fill(ended[..., None], float("-inf"))
    pad_column = torch.zeros_like(log_probs).index_fill(-1, torch.tensor([pad_id]), 1.0).bool()
    log_probs = torch.where(ended[..., None] & pad_column, 0.0, log_probs)
    candidates = (scores[..., None] + log_probs).flatten(1)
    new_scores, chosen = candidates.topk(scores.shape[1])
    beams, tokens = torch.unravel_index(chosen, log_probs.shape[1:])
    return new_scores, beams, tokens


def smoothing_by_scatter_in_float64(logits, targets, pad_id, epsilon, never_written):
    vocab = logits.shape[-1]
    log_probs = logits.double().log_softmax(-1)
    writable = torch.ones(vocab, dtype=torch.float64).index_fill(
        0, torch.tensor(never_written, dtype=torch.int64), 0.0
    )
    q = (epsilon * writable / writable.sum()).expand_as(log_probs).clone()
    q = q.scatter_add(-1, targets[..., None], torch.full_like(log_probs[..., :1], 1 - epsilon))
    per_position = -(q * log_probs).sum(-1)
    real = targets != pad_id
    return (per_position * real).sum().div(real.sum()).to(logits.dtype)


def smoothing_as_two_terms(logits, targets, pad_id, epsilon, never_written):
    log_probs = logits.log_softmax(-1)
    writable = [v for v in range(logits.shape[-1]) if v not in never_written]
    nll = -log_probs.gather(-1, targets[..., None])[..., 0]  # (B, T)
    spread = -log_probs[..., writable].mean(-1)  # (B, T)
    real = targets != pad_id
    return ((1 - epsilon) * nll + epsilon * spread)[real].mean()


def penalty_by_pow(scores, tokens, pad_id, alpha):
    lengths = torch.where(tokens == pad_id, 0, 1).sum(-1)
    return scores / torch.pow((lengths + 5) / 6, alpha).to(scores.dtype)


def penalty_in_float64(scores, tokens, pad_id, alpha):
    lengths = (tokens != pad_id).double().sum(-1)
    return (scores.double() * ((5 + lengths) / 6) ** -alpha).to(scores.dtype)


RIGHT = [
    ("smoothing over writable tokens", smoothing_by_scatter_in_float64),
    ("smoothing over writable tokens", smoothing_as_two_terms),
    ("GNMT length penalty", penalty_by_pow),
    ("GNMT length penalty", penalty_in_float64),
    ("beam step", beam_step_with_a_large_negative),
    ("beam step", beam_step_by_a_loop_over_sentences),
    ("beam step", beam_step_by_sorting),
    ("beam step", beam_step_by_unravel_index),
]


@pytest.mark.parametrize(
    ("exercise", "answer"), RIGHT, ids=[f"{e}: {a.__name__}" for e, a in RIGHT]
)
def test_a_right_answer_written_another_way_is_accepted(exercise, answer, run_checker):
    verdict, out = run_checker(CHECKERS[exercise][0], answer)
    assert verdict is True and out.startswith("Correct"), out
