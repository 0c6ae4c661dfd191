"""Chapter 12's checkers: its solutions and typical wrong answers (run by test_exercises.py,
with every other chapter's)."""

import contextlib
import io
from pathlib import Path

import nbformat
import numpy as np
import pytest
import torch
import torch.nn.functional as F

from helpers.decoder_only import loss_targets
from helpers.decoder_only import prefix_lm_mask as helpers_prefix_lm_mask
from helpers.exercises import check_answer_loss, check_prefix_lm_mask, check_top_p_filter
from helpers.exercises.ch12_decoder_only import (
    EXACT,
    FLOAT64_NEAR_EDGE,
    NEAR_EDGE,
    SENTENCE_SIZE,
    answer_loss_cases,
    prefix_mask_cases,
    top_p_cases,
)
from helpers.exercises.framework import TORCH_GLOBAL_SETTINGS_NAMED
from helpers.gpt import next_token_probabilities
from helpers.masks import causal_mask
from solutions.ch12_decoder_only import answer_loss, prefix_lm_mask, top_p_filter

CHECKERS = {
    "top-p filter": (check_top_p_filter, top_p_filter),
    "prefix-LM mask": (check_prefix_lm_mask, prefix_lm_mask),
    "answer loss": (check_answer_loss, answer_loss),
}
# The exercises whose right answer is a scalar: to them tensor(0.5) is a wrong value, not a
# wrong shape, and their report says "got 0.5, expected ..." instead of "shape ()".
SCALAR_ANSWERS = {"answer loss"}

NEG_INF = float("-inf")


# 1. Top-p filtering: typical wrong answers


def _sorted_keep(scores, top_p, descending=True, including_itself=False):
    """A learner's keep mask (B, V) from sorting `scores` and summing them in order."""
    ordered, order = scores.sort(dim=-1, descending=descending)
    total = ordered.cumsum(-1)
    keep = (total if including_itself else total - ordered) < top_p
    return torch.zeros_like(keep).scatter(-1, order, keep)


def top_p_one_token_short(logits, top_p):
    if top_p >= 1:
        return logits.clone()
    return logits.masked_fill(~_sorted_keep(logits.softmax(-1), top_p, True, True), NEG_INF)


def top_p_dropping_a_dominant_top_token(logits, top_p):
    probabilities, order = logits.softmax(-1).sort(dim=-1, descending=True)
    keep = probabilities.cumsum(-1) <= top_p  # BUG: nothing when the top token alone > top_p
    return logits.masked_fill(~torch.zeros_like(keep).scatter(-1, order, keep), NEG_INF)


def top_p_sorted_ascending(logits, top_p):
    if top_p >= 1:
        return logits.clone()
    return logits.masked_fill(~_sorted_keep(logits.softmax(-1), top_p, False), NEG_INF)


def top_p_on_the_logits(logits, top_p):
    if top_p >= 1:
        return logits.clone()
    return logits.masked_fill(~_sorted_keep(logits, top_p), NEG_INF)


def top_p_returning_renormalised_probabilities(logits, top_p):
    kept = top_p_filter(logits, top_p)
    return kept.softmax(-1)


def top_p_returning_probabilities_with_zeros(logits, top_p):
    kept = top_p_filter(logits, top_p)
    return logits.softmax(-1).masked_fill(kept == NEG_INF, 0.0)


def top_p_dropping_to_zero(logits, top_p):
    kept = top_p_filter(logits, top_p)
    return logits.masked_fill(kept == NEG_INF, 0.0)


def top_p_renormalising_the_kept_logits(logits, top_p):
    return top_p_filter(logits, top_p).log_softmax(-1)


def top_p_masking_in_place(logits, top_p):
    dropped = top_p_filter(logits, top_p) == NEG_INF
    return logits.masked_fill_(dropped, NEG_INF)


def top_p_keeping_every_tie_at_the_boundary(logits, top_p):
    """The threshold form: every token at least as likely as the nucleus's least likely one."""
    probabilities = logits.softmax(-1)
    smallest = probabilities.masked_fill(top_p_filter(logits, top_p) == NEG_INF, 2.0)
    return logits.masked_fill(probabilities < smallest.amin(-1, keepdim=True), NEG_INF)


def top_p_with_the_helper(logits, top_p):
    return logits.masked_fill(next_token_probabilities(logits, top_p=top_p) == 0, NEG_INF)


def top_p_with_a_larger_top_p(logits, top_p):
    return top_p_filter(logits, min(1.0, top_p + 0.15))


def top_p_unsorting_with_gather(logits, top_p):
    probabilities, order = logits.softmax(-1).sort(dim=-1, descending=True)
    keep_sorted = probabilities.cumsum(-1) - probabilities < top_p
    keep = keep_sorted.gather(-1, order)  # BUG: the inverse of the sort is a scatter
    return logits.masked_fill(~keep, NEG_INF)


def top_p_keeping_a_less_likely_token(logits, top_p):
    """The nucleus's size, but its least likely token swapped for the most likely one dropped."""
    output = top_p_filter(logits, top_p)
    for row in range(len(logits)):
        kept, dropped = output[row] > NEG_INF, output[row] == NEG_INF
        if dropped.any():
            last = logits[row].masked_fill(~kept, float("inf")).argmin()
            best_dropped = logits[row].masked_fill(~dropped, NEG_INF).argmax()
            output[row, last], output[row, best_dropped] = NEG_INF, logits[row, best_dropped]
    return output


def top_p_returning_the_keep_mask(logits, top_p):
    return top_p_filter(logits, top_p) > NEG_INF


def top_p_in_float64(logits, top_p):
    return top_p_filter(logits.double(), top_p)


def top_p_squeezing_one_row(logits, top_p):
    return top_p_filter(logits, top_p).squeeze(0)


def top_p_keeping_while_the_mass_before_is_at_most_top_p(logits, top_p):
    """<= instead of <: one token too many where the tokens before reach top_p exactly."""
    probabilities, order = logits.softmax(-1).sort(dim=-1, descending=True)
    keep_sorted = probabilities.cumsum(-1) - probabilities <= top_p
    return logits.masked_fill(
        ~torch.zeros_like(keep_sorted).scatter(-1, order, keep_sorted), NEG_INF
    )


def top_p_filling_with_minus_1e9(logits, top_p):
    return logits.masked_fill(top_p_filter(logits, top_p) == NEG_INF, -1e9)


def top_p_filling_with_the_lowest_float(logits, top_p):
    lowest = torch.finfo(logits.dtype).min
    return logits.masked_fill(top_p_filter(logits, top_p) == NEG_INF, lowest)


def top_p_cutting_nothing(logits, top_p):
    return logits.clone()


# 2. The prefix-LM mask: typical wrong answers


def _in_prompt(prompt_lengths, size):
    return torch.arange(size)[None, :] < prompt_lengths[:, None]  # (B, size)


def prefix_blocked_convention(prompt_lengths, size):
    return ~prefix_lm_mask(prompt_lengths, size)


def prefix_plain_causal(prompt_lengths, size):
    return causal_mask(size).expand(len(prompt_lengths), size, size).clone()


def prefix_prompt_reads_the_whole_row(prompt_lengths, size):
    in_prompt = _in_prompt(prompt_lengths, size)
    return causal_mask(size)[None] | in_prompt[:, :, None]


def prefix_one_position_too_many(prompt_lengths, size):
    return prefix_lm_mask(prompt_lengths + 1, size)


def prefix_one_position_too_few(prompt_lengths, size):
    return prefix_lm_mask((prompt_lengths - 1).clamp(min=0), size)


def prefix_answer_cannot_read_the_prompt(prompt_lengths, size):
    in_prompt = _in_prompt(prompt_lengths, size)
    both = in_prompt[:, :, None] & in_prompt[:, None, :]
    return both | (causal_mask(size)[None] & ~in_prompt[:, None, :])


def prefix_first_length_for_every_row(prompt_lengths, size):
    return prefix_lm_mask(prompt_lengths[:1].expand(len(prompt_lengths)), size)


def prefix_float_mask(prompt_lengths, size):
    return prefix_lm_mask(prompt_lengths, size).float()


def prefix_without_the_batch_dimension(prompt_lengths, size):
    return prefix_lm_mask(prompt_lengths.max()[None], size)[0]


def prefix_one_mask_for_the_batch(prompt_lengths, size):
    return prefix_lm_mask(prompt_lengths.max()[None], size)


def prefix_clamping_the_lengths_in_place(prompt_lengths, size):
    return prefix_lm_mask(prompt_lengths.clamp_(max=size - 1), size)


def prefix_with_the_helper(prompt_lengths, size):
    return helpers_prefix_lm_mask(prompt_lengths, size)


def prefix_two_positions_too_many(prompt_lengths, size):
    """A leak no named mistake describes: the generic diagnosis must still call it a leak."""
    return prefix_lm_mask(prompt_lengths + 2, size)


def prefix_answer_reads_the_whole_answer(prompt_lengths, size):
    """Bidirectional inside the answer as well: not causal after the prompt."""
    in_prompt = _in_prompt(prompt_lengths, size)
    answer = ~in_prompt
    return prefix_lm_mask(prompt_lengths, size) | (answer[:, :, None] & answer[:, None, :])


# 3. The loss over the answer: typical wrong answers


def _targets_after(sequences, separator_id, including_separator=False):
    """(B, T - 1): sequences[:, 1:] with <pad> (0) before the answer."""
    targets = sequences[:, 1:]
    seen = (sequences == separator_id).cumsum(1)
    before = (seen[:, 1:] if including_separator else seen[:, :-1]) == 0
    return targets.masked_fill(before, 0)


def answer_loss_scoring_the_separator(logits, sequences, separator_id):
    targets = _targets_after(sequences, separator_id, including_separator=True)
    return F.cross_entropy(logits.flatten(0, 1), targets.flatten(), ignore_index=0)


def answer_loss_over_the_whole_sequence(logits, sequences, separator_id):
    return F.cross_entropy(logits.flatten(0, 1), sequences[:, 1:].flatten(), ignore_index=0)


def answer_loss_scoring_the_pads(logits, sequences, separator_id):
    after = (sequences == separator_id).cumsum(1)[:, :-1] > 0  # pads after <eos> included
    return F.cross_entropy(logits[after], sequences[:, 1:][after])


def answer_loss_without_ignore_index(logits, sequences, separator_id):
    targets = _targets_after(sequences, separator_id)
    return F.cross_entropy(logits.flatten(0, 1), targets.flatten())


def answer_loss_not_shifted(logits, sequences, separator_id):
    after = (sequences == separator_id).cumsum(1)[:, :-1] > 0
    targets = sequences[:, :-1].masked_fill(~after, 0)
    return F.cross_entropy(logits.flatten(0, 1), targets.flatten(), ignore_index=0)


def answer_loss_mean_per_sentence(logits, sequences, separator_id):
    targets = _targets_after(sequences, separator_id)
    losses = F.cross_entropy(logits.mT, targets, ignore_index=0, reduction="none")  # (B, T - 1)
    return (losses.sum(1) / (targets != 0).sum(1)).mean()


def answer_loss_summed(logits, sequences, separator_id):
    targets = _targets_after(sequences, separator_id)
    return F.cross_entropy(logits.flatten(0, 1), targets.flatten(), ignore_index=0, reduction="sum")


def answer_loss_with_label_smoothing(logits, sequences, separator_id):
    targets = _targets_after(sequences, separator_id)
    return F.cross_entropy(
        logits.flatten(0, 1), targets.flatten(), ignore_index=0, label_smoothing=0.1
    )


def answer_loss_with_separator_8000(logits, sequences, separator_id):
    return answer_loss(logits, sequences, 8000)


def answer_loss_per_sentence(logits, sequences, separator_id):
    targets = _targets_after(sequences, separator_id)
    losses = F.cross_entropy(logits.mT, targets, ignore_index=0, reduction="none")
    return losses.sum(1) / (targets != 0).sum(1)  # (B,): never averaged over the batch


def answer_loss_masking_sequences_in_place(logits, sequences, separator_id):
    before = (sequences == separator_id).cumsum(1) == 0
    sequences.masked_fill_(before, 0)
    return F.cross_entropy(logits.flatten(0, 1), sequences[:, 1:].flatten(), ignore_index=0)


def answer_loss_as_a_python_number(logits, sequences, separator_id):
    return torch.tensor(answer_loss(logits, sequences, separator_id).item(), dtype=logits.dtype)


def answer_loss_with_the_helper(logits, sequences, separator_id):
    targets = loss_targets(sequences, separator_id, "answer")
    return F.cross_entropy(logits.flatten(0, 1), targets.flatten(), ignore_index=0)


def answer_loss_in_float32(logits, sequences, separator_id):
    return answer_loss(logits.float(), sequences, separator_id)


def answer_loss_scoring_only_the_first_french_token(logits, sequences, separator_id):
    after_separator = torch.zeros_like(sequences, dtype=torch.bool)
    after_separator[:, 1:] = sequences[:, :-1] == separator_id
    scored = after_separator[:, 1:]
    return F.cross_entropy(logits[scored], sequences[:, 1:][scored])


def answer_loss_leaving_out_the_first_french_token(logits, sequences, separator_id):
    """Scores from the position after <sep>: the first French token is never predicted."""
    after = (sequences == separator_id).cumsum(1)[:, :-1] > 0
    after[:, 1:] = after[:, :-1].clone()
    after[:, 0] = False
    targets = sequences[:, 1:].masked_fill(~after, 0)
    return F.cross_entropy(logits.flatten(0, 1), targets.flatten(), ignore_index=0)


def answer_loss_leaving_out_eos(logits, sequences, separator_id):
    targets = _targets_after(sequences, separator_id)
    targets = targets.masked_fill(targets == 2, 0)  # <eos> dropped with the pads
    return F.cross_entropy(logits.flatten(0, 1), targets.flatten(), ignore_index=0)


def answer_loss_on_probabilities(logits, sequences, separator_id):
    targets = _targets_after(sequences, separator_id)
    probabilities = logits.softmax(-1).flatten(0, 1)
    return F.nll_loss(probabilities, targets.flatten(), ignore_index=0)


def answer_loss_scoring_the_english_instead(logits, sequences, separator_id):
    before = (sequences == separator_id).cumsum(1)[:, :-1] == 0  # the mask the wrong way round
    targets = sequences[:, 1:].masked_fill(~before, 0)
    return F.cross_entropy(logits.flatten(0, 1), targets.flatten(), ignore_index=0)


def answer_loss_scoring_the_english_words_only(logits, sequences, separator_id):
    english = (sequences == separator_id).cumsum(1)[:, 1:] == 0  # targets before <sep>
    targets = sequences[:, 1:].masked_fill(~english, 0)
    return F.cross_entropy(logits.flatten(0, 1), targets.flatten(), ignore_index=0)


def answer_loss_log_softmax_over_time(logits, sequences, separator_id):
    targets = _targets_after(sequences, separator_id)
    log_probs = logits.log_softmax(1)  # BUG: over the positions
    return F.nll_loss(log_probs.flatten(0, 1), targets.flatten(), ignore_index=0)


def answer_loss_with_a_gradient_everywhere(logits, sequences, separator_id):
    """The right value, but every logit, the English's and the pads' too, gets a gradient."""
    zero_that_is_not = (logits - logits.detach()).sum()
    return answer_loss(logits, sequences, separator_id) + zero_that_is_not


WRONG = [
    ("top-p filter", top_p_one_token_short, "one token short: the nucleus must reach top_p"),
    ("top-p filter", top_p_one_token_short, "the most likely token is dropped"),
    ("top-p filter", top_p_dropping_a_dominant_top_token, "the most likely token is dropped"),
    ("top-p filter", top_p_sorted_ascending, "sorted in ascending order"),
    ("top-p filter", top_p_on_the_logits, "the cumulative sum is over the sorted logits"),
    (
        "top-p filter",
        top_p_returning_renormalised_probabilities,
        "returns the nucleus's probabilities, renormalised",
    ),
    (
        "top-p filter",
        top_p_returning_probabilities_with_zeros,
        "returns probabilities (softmax) with 0 at the dropped tokens",
    ),
    ("top-p filter", top_p_dropping_to_zero, "the dropped tokens are 0, not -inf"),
    (
        "top-p filter",
        top_p_renormalising_the_kept_logits,
        "the kept logits are changed into log-probabilities renormalised over the nucleus",
    ),
    ("top-p filter", top_p_masking_in_place, "changes its input `logits` in place"),
    (
        "top-p filter",
        top_p_keeping_every_tie_at_the_boundary,
        "row 0 keeps every token tied with the least likely one of the nucleus, 4 tokens "
        "where 3 already reach top_p",
    ),
    ("top-p filter", top_p_with_a_larger_top_p, "row 0 keeps 3 of its tokens, the nucleus holds 2"),
    ("top-p filter", top_p_unsorting_with_gather, "the way back is scatter(-1, order, keep)"),
    (
        "top-p filter",
        top_p_keeping_a_less_likely_token,
        "row 1 keeps token 3 instead of the more likely token 0",
    ),
    ("top-p filter", top_p_with_the_helper, "calls helpers.gpt.next_token_probabilities"),
    ("top-p filter", top_p_returning_the_keep_mask, "returns which tokens stay, a boolean mask"),
    ("top-p filter", top_p_in_float64, "dtype torch.float64, expected torch.float32"),
    ("top-p filter", top_p_squeezing_one_row, "shape (5,), expected (1, 5)"),
    (
        "top-p filter",
        top_p_keeping_while_the_mass_before_is_at_most_top_p,
        "row 0 keeps 3 tokens, one too many: the tokens before its least likely one already "
        "reach top_p = 0.5 exactly. Keep a token while the probability of the tokens before it "
        "is < top_p, not <= top_p",
    ),
    (
        "top-p filter",
        top_p_filling_with_minus_1e9,
        "the dropped tokens hold -1e+09, a large negative number, not -inf",
    ),
    (
        "top-p filter",
        top_p_filling_with_the_lowest_float,
        "the dropped tokens hold -3.4e+38, a large negative number, not -inf",
    ),
    ("top-p filter", top_p_cutting_nothing, "nothing is cut: every token outside the nucleus"),
    ("prefix-LM mask", prefix_blocked_convention, "True where attending is NOT allowed"),
    ("prefix-LM mask", prefix_plain_causal, "this is the plain causal mask"),
    ("prefix-LM mask", prefix_prompt_reads_the_whole_row, "LEAK: a prompt position reads"),
    ("prefix-LM mask", prefix_one_position_too_many, "off by one, and a LEAK"),
    ("prefix-LM mask", prefix_one_position_too_few, "its last position L-1 is left out"),
    ("prefix-LM mask", prefix_answer_cannot_read_the_prompt, "the answer cannot read the prompt"),
    ("prefix-LM mask", prefix_first_length_for_every_row, "every row uses the first row's"),
    ("prefix-LM mask", prefix_float_mask, "dtype torch.float32, expected torch.bool"),
    ("prefix-LM mask", prefix_without_the_batch_dimension, "(no batch dimension"),
    ("prefix-LM mask", prefix_one_mask_for_the_batch, "(one mask for the whole batch"),
    (
        "prefix-LM mask",
        prefix_clamping_the_lengths_in_place,
        "changes its input `prompt_lengths` in place",
    ),
    ("prefix-LM mask", prefix_with_the_helper, "calls helpers.decoder_only.prefix_lm_mask"),
    (
        "prefix-LM mask",
        prefix_two_positions_too_many,
        "the answer leaks into the prompt: prompt position 0 of row 0 reads position 3",
    ),
    (
        "prefix-LM mask",
        prefix_answer_reads_the_whole_answer,
        "reads the later position 4: after the prompt the mask is causal",
    ),
    (
        "prefix-LM mask",
        prefix_answer_reads_the_whole_answer,
        "prompt lengths 0: no prompt, the plain causal mask: at index (0, 0, 1) got 1, expected 0 "
        "(row 0 has no prompt, prompt_lengths[0] = 0, so it is the plain causal mask, position i "
        "reading positions 0..i only; yet its position 0 reads the later position 1)",
    ),
    (
        "answer loss",
        answer_loss_scoring_only_the_first_french_token,
        "only the token right after <sep> is scored, the first French token: score every target "
        "after <sep>",
    ),
    ("answer loss", answer_loss_scoring_the_separator, "the prediction of <sep> is scored too"),
    ("answer loss", answer_loss_over_the_whole_sequence, "the English is scored too"),
    ("answer loss", answer_loss_scoring_the_pads, "the pads after <eos> are scored"),
    ("answer loss", answer_loss_without_ignore_index, "are scored as predicting <pad>"),
    ("answer loss", answer_loss_not_shifted, "the targets are not shifted"),
    ("answer loss", answer_loss_mean_per_sentence, "a mean per sentence, then over the"),
    ("answer loss", answer_loss_summed, "the sum over the scored positions"),
    ("answer loss", answer_loss_with_label_smoothing, "label smoothing"),
    ("answer loss", answer_loss_per_sentence, "shape (3,), expected () (one number"),
    ("answer loss", answer_loss_masking_sequences_in_place, "changes its input `sequences`"),
    ("answer loss", answer_loss_as_a_python_number, "no gradient flows back to the inputs"),
    ("answer loss", answer_loss_with_the_helper, "calls helpers.decoder_only.loss_targets"),
    ("answer loss", answer_loss_in_float32, "dtype torch.float32, expected torch.float64"),
    ("answer loss", answer_loss_leaving_out_the_first_french_token, "the first French token"),
    ("answer loss", answer_loss_leaving_out_eos, "<eos> is left out"),
    ("answer loss", answer_loss_on_probabilities, "probabilities are used where the loss takes"),
    (
        "answer loss",
        answer_loss_scoring_the_english_instead,
        "the English is scored instead of the answer: the mask is the wrong way round",
    ),
    (
        "answer loss",
        answer_loss_scoring_the_english_words_only,
        "the English is scored instead of the answer: score the targets after <sep>",
    ),
    ("answer loss", answer_loss_log_softmax_over_time, "log_softmax is taken over the positions"),
    (
        "answer loss",
        answer_loss_with_a_gradient_everywhere,
        "the values are right but the gradient with respect to `logits` differs",
    ),
]


# Right answers written in other styles: each must be accepted.


def top_p_row_by_row_in_float64(logits, top_p):
    """How many tokens reach top_p, found per row; the first that many of the sorted tokens."""
    if top_p >= 1:
        return logits.clone()  # every token, whatever rounding does to the probabilities
    output = torch.full_like(logits, NEG_INF)
    for row in range(logits.shape[0]):
        probabilities, order = logits[row].double().softmax(-1).sort(descending=True)
        needed = int((probabilities.cumsum(0) < top_p).sum()) + 1  # the token that reaches it
        kept = order[: min(needed, len(order))]
        output[row, kept] = logits[row, kept]
    return output


def top_p_as_hugging_face_does(logits, top_p):
    """transformers' TopPLogitsWarper: sorted ascending, remove while the cumulative
    probability of the least likely tokens is <= 1 - top_p, always keep the last (the top).
    Like transformers, it is not applied at top_p = 1."""
    if top_p >= 1:
        return logits.clone()
    ordered, order = logits.sort(descending=False)
    cumulative = ordered.softmax(-1).cumsum(-1)
    remove = cumulative <= (1 - top_p)
    remove[..., -1:] = False
    return logits.masked_fill(remove.scatter(-1, order, remove), NEG_INF)


def top_p_with_an_additive_mask(logits, top_p):
    """Adds 0 or -inf (its gradient at the dropped tokens differs: that is not judged)."""
    if top_p >= 1:
        return logits + 0.0
    probabilities, order = logits.softmax(-1).sort(dim=-1, descending=True)
    keep_sorted = probabilities.cumsum(-1) - probabilities < top_p
    keep = torch.empty_like(keep_sorted).scatter(-1, order, keep_sorted)
    return logits + torch.zeros_like(logits).masked_fill(~keep, NEG_INF)


def top_p_breaking_ties_the_other_way(logits, top_p):
    """The worked solution on the tokens in reverse order: of equal tokens, another one stays."""
    return top_p_filter(logits.flip(-1), top_p).flip(-1)


def top_p_by_counting_the_tokens_needed(logits, top_p):
    """How many tokens each row needs (those whose cumulative probability is below top_p, and
    one more), then the first that many in descending order."""
    if top_p >= 1:
        return logits.clone()
    probabilities, order = logits.double().softmax(-1).sort(dim=-1, descending=True)
    needed = (probabilities.cumsum(-1) < top_p).sum(-1, keepdim=True) + 1  # (B, 1)
    keep_sorted = torch.arange(logits.shape[-1])[None, :] < needed
    keep = torch.zeros_like(keep_sorted).scatter(-1, order, keep_sorted)
    return torch.where(keep, logits, torch.full_like(logits, NEG_INF))


def prefix_cell_by_cell(prompt_lengths, size):
    rows = []
    for length in prompt_lengths.tolist():
        rows.append(
            [[j <= i or (i < length and j < length) for j in range(size)] for i in range(size)]
        )
    return torch.tensor(rows, dtype=torch.bool).reshape(len(rows), size, size)


def prefix_by_filling_the_prompt_block(prompt_lengths, size):
    mask = torch.ones(len(prompt_lengths), size, size).tril().bool()  # a new tensor: mine
    for row, length in enumerate(prompt_lengths.tolist()):
        mask[row, :length, :length] = True
    return mask


def prefix_by_the_later_of_the_two_positions(prompt_lengths, size):
    query, key = torch.arange(size)[:, None], torch.arange(size)[None, :]
    both_in_prompt = torch.maximum(query, key)[None] < prompt_lengths[:, None, None]
    return causal_mask(size)[None] | both_in_prompt


def answer_loss_by_gathering_log_probabilities(logits, sequences, separator_id):
    targets = sequences[:, 1:]
    after = (sequences == separator_id).long().cumsum(1)[:, :-1].bool() & (targets != 0)
    log_probs = logits.log_softmax(-1).gather(-1, targets[..., None])[..., 0]  # (B, T - 1)
    return -(log_probs * after).sum() / after.sum()


def answer_loss_row_by_row(logits, sequences, separator_id):
    predictions, targets = [], []
    for row, ids in enumerate(sequences.tolist()):
        start = ids.index(separator_id)  # the position whose target is the first French token
        end = ids.index(2)  # <eos>
        predictions.append(logits[row, start:end])
        targets.append(sequences[row, start + 1 : end + 1])
    return F.cross_entropy(torch.cat(predictions), torch.cat(targets))


def answer_loss_summed_then_divided(logits, sequences, separator_id):
    targets = _targets_after(sequences, separator_id)
    losses = F.cross_entropy(logits.transpose(1, 2), targets, reduction="none")  # (B, T - 1)
    scored = targets != 0
    return (losses * scored).sum() / scored.sum()


def answer_loss_with_the_module(logits, sequences, separator_id):
    criterion = torch.nn.CrossEntropyLoss(ignore_index=0)
    separator_at = (sequences == separator_id).int().argmax(1)  # (B,)
    after = torch.arange(sequences.shape[1] - 1)[None, :] >= separator_at[:, None]
    targets = torch.where(after, sequences[:, 1:], 0)
    return criterion(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))


RIGHT = [
    ("top-p filter", top_p_row_by_row_in_float64),
    ("top-p filter", top_p_as_hugging_face_does),
    ("top-p filter", top_p_with_an_additive_mask),
    ("top-p filter", top_p_breaking_ties_the_other_way),
    ("top-p filter", top_p_by_counting_the_tokens_needed),
    ("prefix-LM mask", prefix_cell_by_cell),
    ("prefix-LM mask", prefix_by_filling_the_prompt_block),
    ("prefix-LM mask", prefix_by_the_later_of_the_two_positions),
    ("answer loss", answer_loss_by_gathering_log_probabilities),
    ("answer loss", answer_loss_row_by_row),
    ("answer loss", answer_loss_with_the_module),
    ("answer loss", answer_loss_summed_then_divided),
]


@pytest.mark.parametrize(("exercise", "answer"), RIGHT, ids=[a.__name__ for _, a in RIGHT])
def test_a_right_answer_written_another_way_is_accepted(exercise, answer, run_checker):
    verdict, out = run_checker(CHECKERS[exercise][0], answer)
    assert verdict is True and out.startswith("Correct"), out


@pytest.mark.parametrize(
    ("name", "logits", "top_p"),
    top_p_cases(),
    ids=lambda case: case[0] if isinstance(case, str) else "",
)
def test_no_top_p_case_lies_within_rounding_of_a_cumulative_probability(name, logits, top_p):
    """An answer in the logits' dtype (or in float64) and the reference then keep the same
    tokens: a cumulative probability either lies far from top_p (NEAR_EDGE / 2 in a float32
    case, where float32 rounds a sum of 1000 probabilities to about 1e-6 at most;
    FLOAT64_NEAR_EDGE / 2 in a float64 case, where float64 rounds to about 1e-15) or, in the
    exact-boundary cases, equals it in float32 and float64 alike."""
    margin = NEAR_EDGE if logits.dtype == torch.float32 else FLOAT64_NEAR_EDGE
    for dtype in (logits.dtype, torch.float64):
        ordered = logits.to(dtype).softmax(-1).sort(dim=-1, descending=True).values
        total = ordered.cumsum(-1)
        if name.startswith(EXACT):
            assert (total - ordered == top_p).any(-1).all(), name  # some token's mass before
        elif top_p < 1:
            assert ((total - top_p).abs() > margin / 2).all() and (
                (total - ordered - top_p).abs() > margin / 2
            ).all()


def test_every_exact_boundary_case_has_a_row_that_one_token_more_would_pass_wrongly():
    """At an exact boundary the <= answer keeps one token more than the nucleus: the cases
    that test it really separate < from <=."""
    for name, logits, top_p in top_p_cases():
        if name.startswith(EXACT):
            right = top_p_filter(logits, top_p) > NEG_INF
            loose = top_p_keeping_while_the_mass_before_is_at_most_top_p(logits, top_p) > NEG_INF
            assert (loose.sum(-1) == right.sum(-1) + 1).all(), name


@pytest.mark.parametrize(
    ("answer", "not_said"),
    [
        (top_p_cutting_nothing, "sorted in ascending order"),
        (top_p_filling_with_minus_1e9, "of its tokens, the nucleus holds"),
        (top_p_keeping_while_the_mass_before_is_at_most_top_p, "keeps every token tied"),
    ],
)
def test_a_top_p_mistake_is_not_named_as_another(answer, not_said, run_checker):
    verdict, out = run_checker(check_top_p_filter, answer)
    assert verdict is False and not_said not in out, out


def test_tokens_tied_at_the_boundary_may_stay_either_way():
    """The ties case really offers a choice: the solution and its mirror keep different
    tokens, and the checker accepts both (test_a_right_answer_written_another_way...)."""
    (logits, top_p) = next((lg, p) for name, lg, p in top_p_cases() if name.startswith("ties"))
    mine = top_p_filter(logits, top_p) > NEG_INF
    mirrored = top_p_breaking_ties_the_other_way(logits, top_p) > NEG_INF
    assert not torch.equal(mine, mirrored)
    assert torch.equal(mine.sum(-1), mirrored.sum(-1))


# Regressions from a third learner's pass: top_p = 1 decided by a running sum, exp written out
# without the maximum, the softmax over the batch, answers that leave torch, a row without a
# prompt, misaligned targets and a loss computed in float16


def _cumulative_keep(logits, top_p, dtype=None):
    """The hint's test, (cumsum - p) < top_p, on the sorted probabilities, with no case apart
    for top_p = 1; the first sorted token always kept."""
    probabilities = logits.softmax(-1) if dtype is None else logits.to(dtype).softmax(-1)
    ordered, order = probabilities.sort(-1, descending=True)
    keep_sorted = (ordered.cumsum(-1) - ordered) < top_p
    keep_sorted[..., 0] = True
    return torch.zeros_like(keep_sorted).scatter(-1, order, keep_sorted)


def top_p_deciding_top_p_1_by_a_float32_running_sum(logits, top_p):
    return logits.masked_fill(~_cumulative_keep(logits, top_p), NEG_INF)


def top_p_deciding_top_p_1_by_a_float64_running_sum(logits, top_p):
    return logits.masked_fill(~_cumulative_keep(logits, top_p, torch.float64), NEG_INF)


def top_p_as_hugging_face_does_at_top_p_1_too(logits, top_p):
    """Applied at top_p = 1 as well: cumsum <= 1 - top_p = 0 removes every token whose
    probability underflows to 0."""
    ordered, order = logits.sort(descending=False)
    remove = ordered.softmax(-1).cumsum(-1) <= (1 - top_p)
    remove[..., -1:] = False
    return logits.masked_fill(remove.scatter(-1, order, remove), NEG_INF)


def _written_out_softmax(logits):
    exps = logits.exp()  # BUG: no maximum subtracted, e^100 overflows float32
    return exps / exps.sum(-1, keepdim=True)


def top_p_with_exp_written_out(logits, top_p):
    probabilities, order = _written_out_softmax(logits).sort(-1, descending=True)
    keep_sorted = (probabilities.cumsum(-1) - probabilities) < top_p
    return logits.masked_fill(
        ~torch.zeros_like(keep_sorted).scatter(-1, order, keep_sorted), NEG_INF
    )


def top_p_with_exp_written_out_keeping_the_first(logits, top_p):
    probabilities, order = _written_out_softmax(logits).sort(-1, descending=True)
    keep_sorted = (probabilities.cumsum(-1) - probabilities) < top_p
    keep_sorted[..., 0] = True
    return logits.masked_fill(
        ~torch.zeros_like(keep_sorted).scatter(-1, order, keep_sorted), NEG_INF
    )


def top_p_with_the_softmax_over_the_batch(logits, top_p):
    probabilities, order = logits.softmax(0).sort(-1, descending=True)  # BUG: dim 0
    keep_sorted = (probabilities.cumsum(-1) - probabilities) < top_p
    return logits.masked_fill(
        ~torch.zeros_like(keep_sorted).scatter(-1, order, keep_sorted), NEG_INF
    )


def top_p_in_float32(logits, top_p):
    return top_p_filter(logits.float(), top_p)


def prefix_as_a_list(prompt_lengths, size):
    return prefix_lm_mask(prompt_lengths, size).tolist()


def prefix_as_a_numpy_array(prompt_lengths, size):
    return prefix_lm_mask(prompt_lengths, size).numpy()


def prefix_as_int64(prompt_lengths, size):
    return prefix_lm_mask(prompt_lengths, size).long()


def prefix_through_the_last_prompt_index(prompt_lengths, size):
    """The prompt's last index L - 1 as a slice end: -1 when L = 0, all but the last."""
    mask = causal_mask(size).repeat(len(prompt_lengths), 1, 1)
    for row, length in enumerate(prompt_lengths.tolist()):
        last = length - 1
        mask[row, : last + 1 if last >= 0 else size, : last + 1 if last >= 0 else size] = True
    return mask


def prefix_strictly_causal(prompt_lengths, size):
    in_prompt = _in_prompt(prompt_lengths, size)
    before = torch.ones(size, size, dtype=torch.bool).tril(-1)  # BUG: not the diagonal
    return before[None] | (in_prompt[:, :, None] & in_prompt[:, None, :])


def answer_loss_on_the_tokens_read(logits, sequences, separator_id):
    """Position t scored against the token it reads, not the next one."""
    read = sequences[:, :-1]
    after = (sequences == separator_id).cumsum(1)[:, :-1] > 0
    scored = after & (read != separator_id) & (read != 0)
    return F.cross_entropy(logits[scored], read[scored])


def answer_loss_through_float16(logits, sequences, separator_id):
    return answer_loss(logits.half().to(logits.dtype), sequences, separator_id)


TOP_P_1 = "at top_p = 1, where every token stays"
REFUSED_AFTER_A_THIRD_PASS = [
    (
        "top-p filter",
        top_p_deciding_top_p_1_by_a_float32_running_sum,
        f"row 0 keeps 1 of its 1000 tokens {TOP_P_1}",
    ),
    (
        "top-p filter",
        top_p_deciding_top_p_1_by_a_float32_running_sum,
        "Return the logits as they came when top_p >= 1",
    ),
    (
        "top-p filter",
        top_p_deciding_top_p_1_by_a_float64_running_sum,
        f"row 1 keeps 3 of its 4 tokens {TOP_P_1}",
    ),
    (
        "top-p filter",
        top_p_as_hugging_face_does_at_top_p_1_too,
        f"row 0 keeps 2 of its 4 tokens {TOP_P_1}, token 1 of probability 9.1e-54 dropped: a "
        f"probability below about 1e-45 is 0 in float32",
    ),
    (
        "top-p filter",
        top_p_with_exp_written_out,
        "no token kept: exp overflows: e^100 is inf in torch.float32",
    ),
    (
        "top-p filter",
        top_p_with_exp_written_out_keeping_the_first,
        "(exp overflows: e^100 is inf in torch.float32 (past about e^88.7), and inf / inf is NaN",
    ),
    (
        "top-p filter",
        top_p_with_the_softmax_over_the_batch,
        "the softmax runs over the batch axis (dim 0), mixing the rows",
    ),
    ("top-p filter", top_p_in_float32, "dtype torch.float32, expected torch.float64"),
    ("prefix-LM mask", prefix_as_a_list, "returned a list (.tolist() leaves torch)"),
    ("prefix-LM mask", prefix_as_a_numpy_array, "returned a numpy value (.numpy() leaves torch)"),
    ("prefix-LM mask", prefix_as_int64, "dtype torch.int64, expected torch.bool"),
    (
        "prefix-LM mask",
        prefix_through_the_last_prompt_index,
        "row 1 has no prompt, prompt_lengths[1] = 0, so it is the plain causal mask, position i "
        "reading positions 0..i only; yet its position 0 reads the later position 1. A prompt "
        "of length L is positions 0..L-1, none when L = 0: beware of L - 1 = -1 as a slice end",
    ),
    (
        "prefix-LM mask",
        prefix_strictly_causal,
        "position 0 cannot read position 0: the mask is causal, every position reads itself",
    ),
    (
        "answer loss",
        answer_loss_on_the_tokens_read,
        "the targets are the tokens the positions read, sequences[:, :-1]",
    ),
    (
        "answer loss",
        answer_loss_through_float16,
        "the logits are rounded to torch.float16 on the way, which keeps about 3 significant",
    ),
]

WRONG += REFUSED_AFTER_A_THIRD_PASS  # tests/test_exercises.py names each


@pytest.mark.parametrize(
    ("exercise", "answer", "not_said"),
    [
        ("top-p filter", top_p_deciding_top_p_1_by_a_float32_running_sum, "underflows"),
        ("prefix-LM mask", prefix_strictly_causal, "positions 0..-1"),
        ("prefix-LM mask", prefix_through_the_last_prompt_index, "after the prompt the mask"),
        ("prefix-LM mask", prefix_answer_reads_the_whole_answer, "beware of L - 1 = -1"),
    ],
    ids=lambda value: getattr(value, "__name__", value),
)
def test_a_third_pass_mistake_is_not_named_as_another(exercise, answer, not_said, run_checker):
    verdict, out = run_checker(CHECKERS[exercise][0], answer)
    assert verdict is False and not_said not in out, out


def test_the_softmax_over_the_batch_is_named_in_every_case_of_several_rows_it_fails():
    """It was named "the cumulative sum is over the sorted logits" where the two coincide: now
    both are named there, and the batch axis in every case of more than one row. In a batch of
    one every probability over the batch axis is 1, and the tokens kept are those the sort puts
    first: nothing tells the mistake there, so it is not named."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        check_top_p_filter(top_p_with_the_softmax_over_the_batch)
    failures = out.getvalue().splitlines()[1:]
    rows = {name: logits.shape[0] for name, logits, _ in top_p_cases()}
    several = [line for line in failures if rows[_case_of(line)] > 1]
    assert several and all("over the batch axis (dim 0)" in line for line in several), failures
    assert not any("batch axis" in line for line in failures if rows[_case_of(line)] == 1)


def _case_of(failure: str) -> str:
    """The name of the top-p case a failure line of the report is about."""
    return next(name for name, _, _ in top_p_cases() if failure.startswith(f"  - {name}: "))


def test_the_hint_toward_the_running_sum_says_what_holds_at_top_p_1(run_checker):
    verdict, out = run_checker(check_top_p_filter, top_p_one_token_short)
    hint = "at top_p = 1 keep every token outright: a float32 running sum reaches 1.0"
    assert out.count(hint) == 1, out  # said once, not in every failing case
    assert out.count("one token short: the nucleus must reach top_p") > 1, out


def top_p_through_numpy(logits, top_p):
    """The logits come without requires_grad, as a sampler's do: numpy reads them."""
    if top_p >= 1:
        return logits.clone()
    values = logits.numpy()
    exps = np.exp(values - values.max(-1, keepdims=True))
    probabilities = exps / exps.sum(-1, keepdims=True)
    order = np.argsort(-probabilities, -1, kind="stable")
    ordered = np.take_along_axis(probabilities, order, -1)
    keep_sorted = (np.cumsum(ordered, -1) - ordered) < top_p
    keep = np.zeros_like(keep_sorted)
    np.put_along_axis(keep, order, keep_sorted, -1)
    return torch.from_numpy(np.where(keep, values, -np.inf))


def top_p_deciding_top_p_1_apart(logits, top_p):
    """The hint's running sum, and top_p = 1 apart as the prompt says."""
    if top_p >= 1:
        return logits.clone()
    return top_p_deciding_top_p_1_by_a_float32_running_sum(logits, top_p)


@pytest.mark.parametrize("answer", [top_p_through_numpy, top_p_deciding_top_p_1_apart])
def test_a_right_answer_found_by_a_third_learners_pass_is_accepted(answer, run_checker):
    verdict, out = run_checker(check_top_p_filter, answer)
    assert verdict is True and out.startswith("Correct"), out


def test_the_top_p_cases_hold_what_the_docstring_says():
    """V up to 1000, logits up to 100 where exp overflows float32, and at top_p = 1 a row whose
    float32 running sum reaches 1.0 before its end, a token of probability 0 in float32 and an
    -inf already in the logits; below top_p = 1, nuclei of hundreds of tokens, and a nucleus
    whose edge lies NEAR_EDGE (1e-4) from top_p, where float16 keeps other tokens."""
    cases = top_p_cases()
    assert max(logits.shape[-1] for _, logits, _ in cases) == 1000
    assert any(logits.float().exp().isposinf().any() for _, logits, _ in cases)
    at_one = [logits for _, logits, top_p in cases if top_p == 1]
    assert any((logits.softmax(-1) == 0).any() for logits in at_one)
    assert any(not _cumulative_keep(logits, 1.0).all() for logits in at_one)
    assert any((logits == NEG_INF).any() for logits in at_one)
    below_one = [(name, logits, top_p) for name, logits, top_p in cases if top_p < 1]
    sizes = [(top_p_filter(lg, p) > NEG_INF).sum(-1).min() for _, lg, p in below_one]
    assert max(sizes) >= 100
    near = [
        (logits, top_p)
        for name, logits, top_p in below_one
        if not name.startswith(EXACT)
        and (_distances_to_top_p(logits, top_p) < 1.01 * NEAR_EDGE).any()
    ]
    assert near and all(
        not torch.equal(top_p_with_probabilities_in_float16(lg, p), top_p_filter(lg, p))
        for lg, p in near
    )


def _distances_to_top_p(logits, top_p):
    """How far each cumulative probability of the sorted tokens lies from top_p, in float64."""
    ordered = logits.double().softmax(-1).sort(dim=-1, descending=True).values
    return (ordered.cumsum(-1) - top_p).abs()


NOTEBOOK = Path(__file__).resolve().parents[1] / "notebooks" / "12_decoder_only.ipynb"


@pytest.mark.parametrize("exercise", CHECKERS)
def test_the_your_turn_docstrings_state_that_an_input_is_not_written_to(exercise):
    """The framework refuses an in-place operation on an input even where it changes no value."""
    checker, solution = CHECKERS[exercise]
    cells = {cell.get("id"): cell.source for cell in nbformat.read(NOTEBOOK, as_version=4).cells}
    for text in (cells[f"your-turn-{solution.__name__}"], checker.__doc__):
        assert "no in-place operation on" in " ".join(text.split()), text


def test_the_top_p_prompt_and_docstrings_state_what_the_cases_hold():
    cells = {cell.get("id"): cell.source for cell in nbformat.read(NOTEBOOK, as_version=4).cells}
    prompt, your_turn, checker = (
        " ".join(text.split())
        for text in (
            cells["exercises"],
            cells["your-turn-top_p_filter"],
            check_top_p_filter.__doc__,
        )
    )
    for text in (prompt, your_turn, checker):
        assert "1000" in text and "100" in text and "underflows to 0" in text
        assert "dtype" in text and "top_p = 1" in text
        assert "hundreds of tokens" in text and "1e-4" in text and "float16" in text
        assert "float64" in text and "1e-9" in text and "closer than float32" in text
        assert "stays -inf" in text.replace("`", "")
    assert "without gradients" in your_turn and "without requires_grad" in checker


# Regressions from a fourth learner's pass: hints that do not apply to the answer's output
# ("or nothing is cut" for an answer that keeps every tie, the softmax over the batch axis in a
# batch of one), and three mistakes of the loss that got the general hint


def top_p_keeping_every_token_at_least_as_likely_as_the_last(logits, top_p):
    if top_p >= 1:
        return logits.clone()
    probs = logits.softmax(-1)
    sorted_p, _ = probs.sort(-1, descending=True)
    k = ((sorted_p.cumsum(-1) - sorted_p) < top_p).sum(-1, keepdim=True)
    threshold = sorted_p.gather(-1, k - 1)
    return logits.masked_fill(probs < threshold, NEG_INF)  # BUG: every tie of the last stays


def top_p_applying_the_sorted_mask_unsorted(logits, top_p):
    if top_p >= 1:
        return logits.clone()
    probs, order = logits.softmax(-1).sort(-1, descending=True)
    keep_sorted = probs.cumsum(-1) - probs < top_p
    return logits.masked_fill(~keep_sorted, NEG_INF)  # BUG: never scattered back by order


def top_p_one_short_as_the_notebook_writes_it(logits, top_p):
    probabilities, order = logits.softmax(-1).sort(-1, descending=True)
    keep_sorted = probabilities.cumsum(-1) < top_p  # stops before reaching top_p
    keep = torch.zeros_like(keep_sorted).scatter(-1, order, keep_sorted)
    return logits.masked_fill(~keep, float("-inf"))


OTHER_TOP_P_HINTS = {  # words of each hint that names another mistake
    "nothing is cut",
    "the dropped tokens are 0",
    "the cumulative sum is over the sorted logits",
    "batch axis",
    "one too many",
}


@pytest.mark.parametrize(
    ("answer", "its_own"),
    [
        (top_p_keeping_every_token_at_least_as_likely_as_the_last, {"keeps every token tied"}),
        (
            top_p_keeping_while_the_mass_before_is_at_most_top_p,
            {"one too many", "at top_p = 1, where every token stays"},
        ),
        (top_p_applying_the_sorted_mask_unsorted, {"scatter it back to token order first"}),
        (
            top_p_one_short_as_the_notebook_writes_it,
            {"one token short", "the most likely token is dropped", "keeps no token"},
        ),
    ],
    ids=lambda value: getattr(value, "__name__", ""),
)
def test_a_top_p_answer_is_told_its_own_mistake_in_every_case_and_no_other(
    answer, its_own, run_checker
):
    """An answer that keeps every tie (or one more token at an exact boundary) was told "or the
    dropped tokens are 0; or nothing is cut" on rows of tied zeros, where those coincide with it;
    the notebook's one-short answer and one that forgets to unsort were told of the softmax over
    the batch axis on rows where every probability ties."""
    verdict, out = run_checker(check_top_p_filter, answer)
    failures = out.splitlines()[1:]
    assert verdict is False and failures, out
    for line in failures:
        assert any(words in line for words in its_own), line
        assert not any(words in line for words in OTHER_TOP_P_HINTS - its_own), line


def test_the_exact_boundary_cases_tell_every_tie_kept_from_nothing_cut():
    """In each, an answer that keeps every tied token still cuts a token far below them."""
    for name, logits, top_p in top_p_cases():
        if name.startswith(EXACT):
            ties = top_p_keeping_every_token_at_least_as_likely_as_the_last(logits, top_p)
            assert (ties == NEG_INF).any(-1).all(), name
            assert (
                (ties > NEG_INF).sum(-1) > (top_p_filter(logits, top_p) > NEG_INF).sum(-1)
            ).all()


def answer_loss_with_nll_on_the_logits(logits, sequences, separator_id):
    targets = _targets_after(sequences, separator_id)
    scored = targets != 0
    return F.nll_loss(logits[scored], targets[scored])  # BUG: nll_loss wants log-probabilities


def answer_loss_from_the_first_rows_separator(logits, sequences, separator_id):
    sep = int((sequences[0] == separator_id).nonzero()[0])  # BUG: row 0's, for every row
    return F.cross_entropy(
        logits[:, sep:].flatten(0, 1), sequences[:, sep + 1 :].flatten(), ignore_index=0
    )


def answer_loss_with_a_small_gradient_everywhere(logits, sequences, separator_id):
    leak = logits.sum() * 1e-3  # BUG: adds 0 to the value, 1e-3 to every logit's gradient
    return answer_loss(logits, sequences, separator_id) + leak - leak.detach()


def answer_loss_with_a_gradient_on_the_unscored_positions(logits, sequences, separator_id):
    scored = _targets_after(sequences, separator_id) != 0
    other = logits[~scored]  # BUG: the English's and the pads' logits get a gradient of 1
    return answer_loss(logits, sequences, separator_id) + (other - other.detach()).sum()


UNSCORED = "position 0 of row 0, whose target is a token of the English and is not scored, receives"
REFUSED_AFTER_A_FOURTH_PASS = [
    (
        "answer loss",
        answer_loss_with_nll_on_the_logits,
        "F.nll_loss is given the raw logits: it takes log-probabilities",
    ),
    (
        "answer loss",
        answer_loss_from_the_first_rows_separator,
        "every row uses the first row's <sep> position",
    ),
    ("answer loss", answer_loss_with_a_small_gradient_everywhere, UNSCORED),
    ("answer loss", answer_loss_with_a_gradient_on_the_unscored_positions, UNSCORED),
    ("answer loss", answer_loss_with_a_gradient_everywhere, UNSCORED),
]

WRONG += REFUSED_AFTER_A_FOURTH_PASS  # tests/test_exercises.py names each


@pytest.mark.parametrize(
    ("answer", "words"),
    [(answer, words) for _, answer, words in REFUSED_AFTER_A_FOURTH_PASS],
    ids=lambda value: getattr(value, "__name__", ""),
)
def test_a_loss_mistake_of_a_fourth_pass_is_named_in_every_case(answer, words, run_checker):
    verdict, out = run_checker(check_answer_loss, answer)
    failures = out.splitlines()[1:]
    assert verdict is False and len(failures) == len(answer_loss_cases()), out
    assert all(words in line for line in failures), out


# torch's global settings: an answer that changes them is refused, and they are put back


def top_p_with_gradients_switched_off(logits, top_p):
    torch.set_grad_enabled(False)  # BUG: for all of torch, and never switched back on
    return top_p_filter(logits, top_p)


def prefix_with_float64_made_the_default(prompt_lengths, size):
    torch.set_default_dtype(torch.float64)  # BUG: every later tensor changes
    return prefix_lm_mask(prompt_lengths, size)


def answer_loss_with_a_global_module_hook_left_behind(logits, sequences, separator_id):
    torch.nn.modules.module.register_module_forward_hook(lambda module, inputs, output: None)
    return answer_loss(logits, sequences, separator_id)


def prefix_reseeding_the_global_generator(prompt_lengths, size):
    torch.manual_seed(12345)  # BUG: every later random number of the caller changes
    return prefix_lm_mask(prompt_lengths, size)


def answer_loss_drawing_from_the_global_generator(logits, sequences, separator_id):
    torch.rand(1)  # BUG: moves the caller's random numbers on
    return answer_loss(logits, sequences, separator_id)


RESEEDS = "reseeds or draws from torch's global random generator"
GLOBAL_SETTINGS_CHANGED = [
    ("prefix-LM mask", prefix_reseeding_the_global_generator, RESEEDS, prefix_mask_cases),
    ("answer loss", answer_loss_drawing_from_the_global_generator, RESEEDS, answer_loss_cases),
    (
        "top-p filter",
        top_p_with_gradients_switched_off,
        "leaves gradients switched off",
        top_p_cases,
    ),
    (
        "prefix-LM mask",
        prefix_with_float64_made_the_default,
        "leaves torch's default dtype torch.float64",
        prefix_mask_cases,
    ),
    (
        "answer loss",
        answer_loss_with_a_global_module_hook_left_behind,
        "leaves a global module hook registered",
        answer_loss_cases,
    ),
]
WRONG += [(exercise, answer, words) for exercise, answer, words, _ in GLOBAL_SETTINGS_CHANGED]


@pytest.mark.parametrize(
    ("exercise", "answer", "words", "cases"),
    GLOBAL_SETTINGS_CHANGED,
    ids=lambda value: getattr(value, "__name__", value),
)
def test_torchs_global_settings_are_put_back_after_an_answer_changes_them(
    exercise, answer, words, cases, run_checker
):
    hooks = dict(torch.nn.modules.module._global_forward_hooks)
    random_state = torch.random.get_rng_state()
    verdict, out = run_checker(CHECKERS[exercise][0], answer)
    failures = out.splitlines()[1:]
    assert verdict is False and len(failures) == len(cases()), out
    assert all(words in line for line in failures), out
    assert torch.is_grad_enabled() and torch.get_default_dtype() == torch.float32
    assert dict(torch.nn.modules.module._global_forward_hooks) == hooks
    assert torch.equal(torch.random.get_rng_state(), random_state)


# Regressions from a fifth learner's pass: the checker raised where the right tokens were kept
# with other logits at top_p = 1; a nucleus capped at 10 tokens, probabilities in float16 and an
# input -inf replaced at top_p = 1 were judged Correct; a sorted keep mask never scattered back,
# rows given other rows' prompt lengths and three loss mistakes got the general hint


def top_p_doubling_every_logit(logits, top_p):
    return logits * 2


def top_p_adding_one_to_the_kept_logits(logits, top_p):
    return top_p_filter(logits, top_p) + 1


def top_p_after_a_temperature(logits, top_p):
    return top_p_filter(logits / 0.8, top_p)


def top_p_on_the_logits_minus_their_maximum(logits, top_p):
    return top_p_filter(logits - logits.amax(-1, keepdim=True), top_p)


def top_p_through_float16_logits(logits, top_p):
    return top_p_filter(logits.half().to(logits.dtype), top_p)


def top_p_capped_at_ten_tokens(logits, top_p):
    if top_p >= 1:
        return logits.clone()
    probabilities, order = logits.softmax(-1).sort(-1, descending=True)
    keep_sorted = probabilities.cumsum(-1) - probabilities < top_p
    keep_sorted[:, 10:] = False  # BUG: a nucleus has no such limit
    return logits.masked_fill(~keep_sorted.scatter(-1, order, keep_sorted), NEG_INF)


def top_p_with_probabilities_in_float16(logits, top_p):
    if top_p >= 1:
        return logits.clone()
    probabilities, order = logits.half().softmax(-1).sort(-1, descending=True)  # BUG: float16
    keep_sorted = probabilities.cumsum(-1) - probabilities < top_p
    return logits.masked_fill(~keep_sorted.scatter(-1, order, keep_sorted), NEG_INF)


def top_p_with_softmax_rounded_to_float16(logits, top_p):
    if top_p >= 1:
        return logits.clone()
    probabilities, order = logits.softmax(-1).half().sort(-1, descending=True)  # BUG: float16
    needed = (probabilities.cumsum(-1) < top_p).sum(-1, keepdim=True) + 1
    keep_sorted = torch.arange(logits.shape[-1]) < needed
    return logits.masked_fill(~keep_sorted.scatter(-1, order, keep_sorted), NEG_INF)


def top_p_as_hugging_face_does_in_bfloat16(logits, top_p):
    if top_p >= 1:
        return logits.clone()
    ordered, order = logits.bfloat16().sort(descending=False)  # BUG: bfloat16
    remove = ordered.softmax(-1).cumsum(-1) <= (1 - top_p)
    remove[..., -1:] = False
    return logits.masked_fill(remove.scatter(-1, order, remove), NEG_INF)


def top_p_replacing_an_input_inf(logits, top_p):
    finite = logits.nan_to_num(neginf=-1e4)  # BUG: an -inf of the input comes back as -1e4
    return finite if top_p >= 1 else top_p_filter(finite, top_p)


def prefix_with_the_lengths_sorted(prompt_lengths, size):
    return prefix_lm_mask(prompt_lengths.sort().values, size)  # BUG: rows get others' lengths


def answer_loss_with_the_sign_flipped(logits, sequences, separator_id):
    targets = _targets_after(sequences, separator_id)
    scored = targets != 0
    log_probabilities = logits.log_softmax(-1).gather(-1, targets[..., None])[..., 0]
    return log_probabilities[scored].mean()  # BUG: the mean log-probability, not minus it


def answer_loss_over_every_position(logits, sequences, separator_id):
    targets = _targets_after(sequences, separator_id)
    losses = F.cross_entropy(logits.mT, targets, reduction="none")  # (B, T - 1)
    return (losses * (targets != 0)).mean()  # BUG: the unscored positions count in the mean


def answer_loss_divided_by_the_batch_size(logits, sequences, separator_id):
    targets = _targets_after(sequences, separator_id)
    losses = F.cross_entropy(logits.mT, targets, reduction="none")
    return (losses * (targets != 0)).sum() / len(sequences)  # BUG: by B


KEPT_BUT_CHANGED = "the right tokens are kept but their logits changed"
ROUNDED_TO_FLOAT16 = "the logits are rounded to torch.float16 on the way"
IN_FLOAT16 = "computed in float16/lower precision"
SIGN_FLIPPED = "the sign is flipped (returns -loss)"
OVER_EVERY_POSITION = "divided by ALL positions, B * (T - 1), the unscored ones counted"
BY_THE_BATCH_SIZE = "divided by the batch size B"
REFUSED_AFTER_A_FIFTH_PASS = [
    ("top-p filter", top_p_doubling_every_logit, KEPT_BUT_CHANGED),
    ("top-p filter", top_p_adding_one_to_the_kept_logits, KEPT_BUT_CHANGED),
    ("top-p filter", top_p_after_a_temperature, KEPT_BUT_CHANGED),
    ("top-p filter", top_p_on_the_logits_minus_their_maximum, KEPT_BUT_CHANGED),
    ("top-p filter", top_p_through_float16_logits, ROUNDED_TO_FLOAT16),
    ("top-p filter", top_p_capped_at_ten_tokens, "keeps 10 of its tokens, the nucleus holds"),
    ("top-p filter", top_p_with_probabilities_in_float16, IN_FLOAT16),
    ("top-p filter", top_p_with_softmax_rounded_to_float16, IN_FLOAT16),
    ("top-p filter", top_p_as_hugging_face_does_in_bfloat16, "a running sum in lower precision"),
    (
        "top-p filter",
        top_p_replacing_an_input_inf,
        "is -inf in the input, a token already ruled out (cut by top-k, say), and comes back as "
        "-1e+04: it must stay -inf, also at top_p = 1",
    ),
    ("top-p filter", top_p_applying_the_sorted_mask_unsorted, "scatter it back to token order"),
    (
        "prefix-LM mask",
        prefix_with_the_lengths_sorted,
        "rows have other rows' prompt lengths: row 0 holds the mask of a prompt of length 0",
    ),
    ("answer loss", answer_loss_with_the_sign_flipped, SIGN_FLIPPED),
    ("answer loss", answer_loss_over_every_position, OVER_EVERY_POSITION),
    ("answer loss", answer_loss_divided_by_the_batch_size, BY_THE_BATCH_SIZE),
]

WRONG += REFUSED_AFTER_A_FIFTH_PASS  # tests/test_exercises.py names each

TOP_P_OF_CASE = {name: top_p for name, _, top_p in top_p_cases()}


@pytest.mark.parametrize(
    ("answer", "words"),
    [
        (top_p_doubling_every_logit, KEPT_BUT_CHANGED),
        (top_p_adding_one_to_the_kept_logits, KEPT_BUT_CHANGED),
        (top_p_after_a_temperature, KEPT_BUT_CHANGED),
        (top_p_on_the_logits_minus_their_maximum, KEPT_BUT_CHANGED),
        (top_p_through_float16_logits, ROUNDED_TO_FLOAT16),
    ],
    ids=lambda value: getattr(value, "__name__", ""),
)
def test_kept_tokens_with_changed_logits_are_named_at_top_p_1(answer, words, run_checker):
    """The checker raised IndexError there: it looked for a token dropped at top_p = 1 where
    every token was kept, with other logits."""
    verdict, out = run_checker(check_top_p_filter, answer)
    at_one = [line for line in out.splitlines()[1:] if TOP_P_OF_CASE[_case_of(line)] == 1]
    assert verdict is False and at_one, out
    assert all(words in line for line in at_one), at_one


@pytest.mark.parametrize(
    "answer",
    [
        top_p_with_probabilities_in_float16,
        top_p_with_softmax_rounded_to_float16,
        top_p_as_hugging_face_does_in_bfloat16,
    ],
)
def test_probabilities_in_lower_precision_are_named_where_an_edge_lies_near_top_p(
    answer, run_checker
):
    """Judged Correct while no cumulative probability came within 1e-3 of top_p."""
    verdict, out = run_checker(check_top_p_filter, answer)
    near = [
        line
        for line in out.splitlines()[1:]
        if f"nucleus edges {NEAR_EDGE:g} from top_p" in _case_of(line)
    ]
    assert verdict is False and len(near) == 1, out
    assert "lower precision" in near[0], near


def test_a_row_given_another_rows_prompt_length_is_the_row_reported(run_checker):
    """The report pointed at row 0 and explained a leak in row 3."""
    verdict, out = run_checker(check_prefix_lm_mask, prefix_with_the_lengths_sorted)
    failures = out.splitlines()[1:]
    assert verdict is False and failures, out
    for line in failures:
        reported = line.split("at index (")[1].split(",")[0]
        assert f"other rows' prompt lengths: row {reported} holds" in line, line


@pytest.mark.parametrize(
    ("answer", "words"),
    [
        (answer_loss_with_the_sign_flipped, SIGN_FLIPPED),
        (answer_loss_over_every_position, OVER_EVERY_POSITION),
        (answer_loss_divided_by_the_batch_size, BY_THE_BATCH_SIZE),
    ],
    ids=lambda value: getattr(value, "__name__", ""),
)
def test_a_loss_mistake_of_a_fifth_pass_is_named_in_every_case(answer, words, run_checker):
    verdict, out = run_checker(check_answer_loss, answer)
    failures = out.splitlines()[1:]
    assert verdict is False and len(failures) == len(answer_loss_cases()), out
    assert all(words in line for line in failures), out


# Regressions from a sixth learner's pass: probabilities in float32 for float64 logits were
# judged Correct (no edge lay closer to top_p than float32 tells apart); a threshold on each
# probability was told "the cumulative sum is over the sorted logits" where the two coincided in
# one case; one softmax over the flattened batch, row 0's nucleus for every row, NaN from -inf
# times 0, and four loss mistakes and one mask mistake got the general hint


def top_p_with_probabilities_in_float32(logits, top_p):
    if top_p >= 1:
        return logits.clone()
    probabilities, order = logits.float().softmax(-1).sort(-1, descending=True)  # BUG: float32
    keep_sorted = probabilities.cumsum(-1) - probabilities < top_p
    return logits.masked_fill(~keep_sorted.scatter(-1, order, keep_sorted), NEG_INF)


def top_p_keeping_each_token_of_probability_at_least_1_minus_top_p(logits, top_p):
    probabilities = logits.softmax(-1)
    keep = probabilities >= 1 - top_p  # BUG: a threshold on each token, not a running sum
    keep |= probabilities == probabilities.amax(-1, keepdim=True)
    return logits.masked_fill(~keep, NEG_INF)


def top_p_over_the_flattened_batch(logits, top_p):
    if top_p >= 1:
        return logits.clone()
    probabilities, order = logits.flatten().softmax(-1).sort(descending=True)  # BUG: one row
    keep_sorted = probabilities.cumsum(-1) - probabilities < top_p
    keep = torch.zeros_like(keep_sorted).scatter(-1, order, keep_sorted)
    return logits.masked_fill(~keep.view_as(logits), NEG_INF)


def top_p_with_row_0s_nucleus_for_every_row(logits, top_p):
    if top_p >= 1:
        return logits.clone()
    probabilities, order = logits[0].softmax(-1).sort(descending=True)  # BUG: row 0 only
    keep_sorted = probabilities.cumsum(-1) - probabilities < top_p
    keep = torch.zeros_like(keep_sorted).scatter(-1, order, keep_sorted)
    return logits.masked_fill(~keep[None], NEG_INF)


def top_p_multiplying_by_the_keep_mask(logits, top_p):
    keep = top_p_filter(logits, top_p) > NEG_INF
    return logits * keep + torch.where(keep, 0.0, NEG_INF)  # BUG: -inf * 0 is NaN


def top_p_adding_logits_minus_logits(logits, top_p):
    return top_p_filter(logits, top_p) + (logits - logits)  # BUG: -inf - -inf is NaN


def prefix_with_the_longest_prompt_for_every_row(prompt_lengths, size):
    longest = prompt_lengths.max().expand(len(prompt_lengths))  # BUG: one length for all
    return prefix_lm_mask(longest, size)


def _answer_mask(sequences, separator_id):
    """(B, T - 1): the positions whose target comes after <sep>, pads left out."""
    return _targets_after(sequences, separator_id) != 0


def answer_loss_on_unshifted_targets(logits, sequences, separator_id):
    scored = _answer_mask(sequences, separator_id)
    return F.cross_entropy(logits[scored], sequences[:, :-1][scored])  # BUG: not shifted


def answer_loss_with_row_0s_mask(logits, sequences, separator_id):
    scored = _answer_mask(sequences, separator_id)[:1].expand(len(sequences), -1)  # BUG: row 0
    return F.cross_entropy(logits[scored], sequences[:, 1:][scored])


def answer_loss_divided_by_every_non_pad_target(logits, sequences, separator_id):
    scored = _answer_mask(sequences, separator_id)
    losses = F.cross_entropy(logits.mT, sequences[:, 1:], reduction="none")
    return (losses * scored).sum() / (sequences[:, 1:] != 0).sum()  # BUG: the English counted


def answer_loss_slicing_the_logits_again(logits, sequences, separator_id):
    scored = _answer_mask(sequences, separator_id)[:, :-1]
    sliced = logits[:, :-1]  # BUG: the logits are (B, T - 1, V) already
    return F.cross_entropy(sliced[scored], sequences[:, 1:-1][scored])


IN_FLOAT32 = "computed in float32: float64 logits need float64 probabilities"
NAN_FROM_INF = "-inf x 0 is NaN: use masked_fill or where"
FLATTENED = "one softmax over the whole batch, flattened"
ROW_0 = "row 0's nucleus is used for every row"
SORTED_LOGITS = "the cumulative sum is over the sorted logits"
REFUSED_AFTER_A_SIXTH_PASS = [
    ("top-p filter", top_p_with_probabilities_in_float32, IN_FLOAT32),
    (
        "top-p filter",
        top_p_keeping_each_token_of_probability_at_least_1_minus_top_p,
        "-inf already in the logits (after top-k = 5), top_p = 0.65: at index (0, 5) got -inf, "
        "expected 1.88 (row 0 keeps 1 of its tokens, the nucleus holds 3",
    ),
    ("top-p filter", top_p_over_the_flattened_batch, FLATTENED),
    ("top-p filter", top_p_with_row_0s_nucleus_for_every_row, ROW_0),
    ("top-p filter", top_p_multiplying_by_the_keep_mask, NAN_FROM_INF),
    ("top-p filter", top_p_adding_logits_minus_logits, NAN_FROM_INF),
    (
        "prefix-LM mask",
        prefix_with_the_longest_prompt_for_every_row,
        "every row uses the batch's longest prompt",
    ),
    (
        "answer loss",
        answer_loss_on_unshifted_targets,
        "position t predicts token t + 1: targets are sequences[:, 1:]",
    ),
    ("answer loss", answer_loss_with_row_0s_mask, "row 0's mask is used for every row"),
    (
        "answer loss",
        answer_loss_divided_by_every_non_pad_target,
        "divided by every target that is not <pad>, the English's included",
    ),
    ("answer loss", answer_loss_slicing_the_logits_again, "the logits are sliced again"),
]

WRONG += REFUSED_AFTER_A_SIXTH_PASS  # tests/test_exercises.py names each


def test_probabilities_in_float32_fail_only_where_an_edge_lies_1e_9_from_top_p(run_checker):
    """Judged Correct while every float64 case kept its edges further from top_p than float32
    rounds: now one lies FLOAT64_NEAR_EDGE (1e-9) from it."""
    verdict, out = run_checker(check_top_p_filter, top_p_with_probabilities_in_float32)
    failures = out.splitlines()[1:]
    assert verdict is False and len(failures) == 1, out
    assert f"nucleus edges {FLOAT64_NEAR_EDGE:g} from top_p" in _case_of(failures[0])
    assert IN_FLOAT32 in failures[0], failures


def test_a_float64_case_has_an_edge_closer_to_top_p_than_float32_tells_apart():
    near = [
        (logits, top_p)
        for _, logits, top_p in top_p_cases()
        if logits.dtype == torch.float64
        and top_p < 1
        and (_distances_to_top_p(logits, top_p) < 1.01 * FLOAT64_NEAR_EDGE).any()
    ]
    assert near and all(
        not torch.equal(top_p_with_probabilities_in_float32(lg, p), top_p_filter(lg, p))
        for lg, p in near
    )


@pytest.mark.parametrize(
    ("answer", "its_own"),
    [
        (top_p_on_the_logits, SORTED_LOGITS),
        (top_p_over_the_flattened_batch, FLATTENED),
        (top_p_with_row_0s_nucleus_for_every_row, ROW_0),
    ],
    ids=lambda value: getattr(value, "__name__", ""),
)
def test_a_way_of_computing_the_nucleus_is_named_in_every_case_and_no_other_way(
    answer, its_own, run_checker
):
    """Each of these names how the answer computes every nucleus: it is named wherever the
    answer fails, and the other ways, which coincide with it in some cases, are not."""
    verdict, out = run_checker(check_top_p_filter, answer)
    failures = out.splitlines()[1:]
    assert verdict is False and failures, out
    for line in failures:
        assert its_own in line, line
        assert not any(way in line for way in {SORTED_LOGITS, FLATTENED, ROW_0} - {its_own})


def test_a_way_of_computing_that_fits_one_case_only_is_not_named(run_checker):
    """A threshold on each probability keeps the same tokens as the sum of the sorted logits
    where -inf is in the logits, and was told so there; the answer that does sum the sorted
    logits fits that diagnosis in every case."""
    verdict, out = run_checker(
        check_top_p_filter, top_p_keeping_each_token_of_probability_at_least_1_minus_top_p
    )
    assert verdict is False, out
    for way in (SORTED_LOGITS, FLATTENED, ROW_0):
        assert way not in out, out


@pytest.mark.parametrize(
    ("answer", "words"),
    [
        (answer, words)
        for exercise, answer, words in REFUSED_AFTER_A_SIXTH_PASS
        if exercise == "answer loss"
    ],
    ids=lambda value: getattr(value, "__name__", ""),
)
def test_a_loss_mistake_of_a_sixth_pass_is_named_in_every_case(answer, words, run_checker):
    verdict, out = run_checker(check_answer_loss, answer)
    failures = out.splitlines()[1:]
    assert verdict is False and len(failures) == len(answer_loss_cases()), out
    assert all(words in line for line in failures), out


# Regressions from a seventh learner's pass: a prefix mask built for 6 positions, logits given
# requires_grad by the answer, the first 4 rows of a larger batch and a result kept by shape,
# dtype and top_p were judged Correct; a denominator with the pads after <eos>, pads scored as
# <eos>, a second shift and a squared error got the general hint; the most likely token dropped
# in a nucleus of several tokens was told only a count, and float32 probabilities of float64
# logits were also told "or float16"; the prompts did not list every global setting watched


def prefix_built_for_6_positions(prompt_lengths, size):
    causal = causal_mask(6)[:size, :size]  # BUG: a size typed in
    in_prompt = torch.arange(size)[None, :] < prompt_lengths[:, None]
    return causal[None] | (in_prompt[:, :, None] & in_prompt[:, None, :])


def top_p_switching_requires_grad_on(logits, top_p):
    logits.requires_grad_(True)  # BUG: the caller's tensor now records gradients
    return top_p_filter(logits.detach(), top_p)


def top_p_of_the_first_4_rows(logits, top_p):
    return top_p_filter(logits[:4], top_p)  # BUG: a batch of at most 4 rows


_KEPT_BY_SHAPE = {}


def top_p_kept_by_shape_dtype_and_top_p(logits, top_p):
    key = (logits.shape, logits.dtype, top_p)  # BUG: the values left out of the key
    if key not in _KEPT_BY_SHAPE:
        _KEPT_BY_SHAPE[key] = top_p_filter(logits, top_p)
    return _KEPT_BY_SHAPE[key].clone()


def top_p_shifting_the_keep_mask_without_its_first_entry(logits, top_p):
    if top_p >= 1:
        return logits.clone()
    probabilities, order = logits.softmax(-1).sort(-1, descending=True)
    keep_sorted = torch.zeros_like(probabilities, dtype=torch.bool)
    keep_sorted[..., 1:] = probabilities.cumsum(-1)[..., :-1] < top_p  # BUG: [..., 0] stays False
    keep = torch.zeros_like(keep_sorted).scatter(-1, order, keep_sorted)
    return logits.masked_fill(~keep, NEG_INF)


def answer_loss_divided_by_every_position_after_the_separator(logits, sequences, separator_id):
    after = _targets_after(sequences, separator_id) != 0
    after_separator = (sequences == separator_id).cumsum(1)[:, :-1] > 0  # pads included
    losses = F.cross_entropy(logits.mT, sequences[:, 1:], reduction="none")
    return (losses * after).sum() / after_separator.sum()  # BUG: the pads counted


def answer_loss_scoring_the_pads_as_eos(logits, sequences, separator_id):
    after_separator = (sequences == separator_id).cumsum(1)[:, :-1] > 0
    targets = sequences[:, 1:].masked_fill(sequences[:, 1:] == 0, 2)  # BUG: <pad> as <eos>
    return F.cross_entropy(logits[after_separator], targets[after_separator])


def answer_loss_shifting_twice(logits, sequences, separator_id):
    scored = (_targets_after(sequences, separator_id) != 0)[:, 1:]
    targets = sequences[:, 1:][:, 1:]  # BUG: shifted again
    return F.cross_entropy(logits[:, :-1][scored], targets[scored])


def answer_loss_as_a_squared_error(logits, sequences, separator_id):
    scored = _targets_after(sequences, separator_id) != 0
    one_hot = F.one_hot(sequences[:, 1:][scored], logits.shape[-1]).to(logits.dtype)
    return ((logits[scored].softmax(-1) - one_hot) ** 2).sum(-1).mean()  # BUG: not the CE


REFUSED_AFTER_A_SEVENTH_PASS = [
    (
        "prefix-LM mask",
        prefix_built_for_6_positions,
        "of size 6 at most, passed: is a size typed in (causal_mask(6), range(6))",
    ),
    (
        "top-p filter",
        top_p_switching_requires_grad_on,
        "switches requires_grad on for its input `logits`",
    ),
    ("top-p filter", top_p_of_the_first_4_rows, "shape (4, 10), expected (6, 10)"),
    (
        "top-p filter",
        top_p_kept_by_shape_dtype_and_top_p,
        "returns its result of an earlier case of this shape, dtype and top_p",
    ),
    (
        "top-p filter",
        top_p_shifting_the_keep_mask_without_its_first_entry,
        "drops its most likely token",
    ),
    (
        "answer loss",
        answer_loss_divided_by_every_position_after_the_separator,
        "divided by every position after <sep>, the pads after <eos> included",
    ),
    (
        "answer loss",
        answer_loss_scoring_the_pads_as_eos,
        "the pads after <eos> are scored as predictions of <eos>",
    ),
    ("answer loss", answer_loss_shifting_twice, "scored against token t + 2"),
    (
        "answer loss",
        answer_loss_as_a_squared_error,
        "the squared error between the softmax and a one-hot target",
    ),
]

WRONG += REFUSED_AFTER_A_SEVENTH_PASS  # tests/test_exercises.py names each


@pytest.mark.parametrize(
    ("answer", "words"),
    [
        (answer, words)
        for exercise, answer, words in REFUSED_AFTER_A_SEVENTH_PASS
        if exercise == "answer loss"
    ],
    ids=lambda value: getattr(value, "__name__", ""),
)
def test_a_loss_mistake_of_a_seventh_pass_is_named_in_every_case(answer, words, run_checker):
    verdict, out = run_checker(check_answer_loss, answer)
    failures = out.splitlines()[1:]
    assert verdict is False and len(failures) == len(answer_loss_cases()), out
    assert all(words in line for line in failures), out


def test_a_prefix_case_is_as_long_as_a_sentence():
    assert max(size for _, _, size in prefix_mask_cases()) == SENTENCE_SIZE >= 12


def test_a_top_p_case_has_more_than_4_rows_and_one_repeats_an_earlier_shape_dtype_and_top_p():
    cases = top_p_cases()
    assert max(len(logits) for _, logits, _ in cases) > 4
    assert any(
        earlier.shape == logits.shape
        and earlier.dtype == logits.dtype
        and p == top_p
        and not torch.equal(earlier, logits)
        for index, (_, logits, top_p) in enumerate(cases)
        for _, earlier, p in cases[:index]
    )


def test_the_caller_keeps_its_logits_requires_grad(run_checker):
    """The checker hands the answer logits without gradients, as a sampler's come."""
    verdict, out = run_checker(check_top_p_filter, top_p_switching_requires_grad_on)
    failures = out.splitlines()[1:]
    assert verdict is False and len(failures) == len(top_p_cases()), out


def test_the_top_token_dropped_is_named_in_every_case_a_nucleus_has_several_tokens(run_checker):
    verdict, out = run_checker(
        check_top_p_filter, top_p_shifting_the_keep_mask_without_its_first_entry
    )
    failures = out.splitlines()[1:]
    assert verdict is False and failures, out
    for line in failures:
        assert "most likely token" in line, line


def test_float32_probabilities_of_float64_logits_are_not_told_float16(run_checker):
    _, out = run_checker(check_top_p_filter, top_p_with_probabilities_in_float32)
    (failure,) = out.splitlines()[1:]
    assert IN_FLOAT32 in failure and "float16" not in failure[failure.index(IN_FLOAT32) :]


@pytest.mark.parametrize("exercise", CHECKERS)
def test_the_prompts_state_every_global_setting_the_checkers_put_back(exercise):
    checker, solution = CHECKERS[exercise]
    cells = {cell.get("id"): cell.source for cell in nbformat.read(NOTEBOOK, as_version=4).cells}
    for text in (cells["exercises"], cells[f"your-turn-{solution.__name__}"], checker.__doc__):
        text = " ".join(text.split())
        assert TORCH_GLOBAL_SETTINGS_NAMED in text, text
        if exercise != "prefix-LM mask":  # (its one tensor is of ints: it has no gradients)
            assert "requires_grad as it came, no hook left on" in text, text


def test_only_a_mask_that_fails_the_sentence_case_alone_is_asked_about_a_typed_size(run_checker):
    """The question came after a leak in a case of size 6 too, where the cases before it were
    of size 5 and under."""
    _, out = run_checker(check_prefix_lm_mask, prefix_prompt_reads_the_whole_row)
    assert "is a size typed in" not in out, out


def loss_finding_sep_by_argmax(logits, sequences, separator_id):
    targets = sequences[:, 1:]
    separator_at = sequences.argmax(1)  # <sep> is the largest id only when nothing lies above it
    positions = torch.arange(targets.shape[1])[None]
    keep = (positions >= separator_at[:, None]) & (targets != 0)
    return F.cross_entropy(logits[keep], targets[keep])


def test_a_loss_that_finds_sep_by_the_largest_id_is_refused(run_checker):
    """Every case had <sep> as its largest id (an eighth learner's pass)."""
    verdict, out = run_checker(check_answer_loss, loss_finding_sep_by_argmax)
    assert verdict is False and "ids above <sep>" in out, out


def top_p_summing_float32_probabilities_in_float16(logits, top_p):
    if top_p >= 1:
        return logits.clone()
    probabilities, order = logits.softmax(-1).sort(-1, descending=True)
    total = probabilities.half().cumsum(-1).to(probabilities.dtype)  # BUG: a float16 sum
    keep_sorted = total - probabilities < top_p  # the last token's total is 1 in any precision
    keep_sorted[:, 0] = True
    return logits.masked_fill(~keep_sorted.scatter(-1, order, keep_sorted), NEG_INF)


def _top_p_from_the_mass_left_summed_in(dtype):
    def answer(logits, top_p):
        if top_p >= 1:
            return logits.clone()
        probabilities, order = logits.softmax(-1).sort(-1, descending=True)
        left = probabilities.flip(-1).to(dtype).cumsum(-1).flip(-1).to(probabilities.dtype)  # BUG
        keep_sorted = 1 - left < top_p
        keep_sorted[:, 0] = True
        return logits.masked_fill(~keep_sorted.scatter(-1, order, keep_sorted), NEG_INF)

    answer.__name__ = f"top_p_from_the_mass_left_summed_in_{str(dtype).removeprefix('torch.')}"
    return answer


top_p_from_the_mass_left_summed_in_float32 = _top_p_from_the_mass_left_summed_in(torch.float32)
top_p_from_the_mass_left_summed_in_float16 = _top_p_from_the_mass_left_summed_in(torch.float16)


@pytest.mark.parametrize(
    "answer",
    [
        top_p_summing_float32_probabilities_in_float16,
        top_p_from_the_mass_left_summed_in_float32,
        top_p_from_the_mass_left_summed_in_float16,
    ],
)
def test_a_running_sum_in_lower_precision_is_refused_where_the_edge_token_is_not_last(
    answer, run_checker
):
    """The near-edge cases had the edge token last, where the running sum is 1 in any precision
    and the mass before it comes out right (an eighth learner's pass)."""
    verdict, out = run_checker(check_top_p_filter, answer)
    assert verdict is False and "nucleus edges" in out, out


def top_p_with_a_margin_in_float64(logits, top_p):
    if top_p >= 1:
        return logits.clone()
    probabilities, order = logits.double().softmax(-1).sort(-1, descending=True)
    keep_sorted = probabilities.cumsum(-1) - probabilities < top_p - 1e-5  # BUG: a margin
    keep_sorted[:, 0] = True
    return logits.masked_fill(~keep_sorted.scatter(-1, order, keep_sorted), NEG_INF)


def test_a_margin_in_the_comparison_is_named_beside_lower_precision(run_checker):
    """A float64 answer with a margin was told only of float16 and float32 (a ninth learner's
    pass)."""
    verdict, out = run_checker(check_top_p_filter, top_p_with_a_margin_in_float64)
    assert verdict is False and "a comparison with a margin" in out, out


def answer_loss_with_a_detached_normaliser(logits, sequences, separator_id):
    targets = _targets_after(sequences, separator_id)  # (B, T - 1), 0 where unscored
    scored = targets != 0
    picked = logits[scored]  # (scored, V)
    normaliser = picked.logsumexp(-1).detach()  # BUG: no gradient through the normaliser
    return (normaliser - picked.gather(-1, targets[scored][:, None])[:, 0]).mean()


def test_a_detached_normaliser_is_named_from_the_gradient(run_checker):
    """Its gradient failure said only that the gradients differ (a ninth learner's pass)."""
    verdict, out = run_checker(check_answer_loss, answer_loss_with_a_detached_normaliser)
    assert verdict is False and "a detached log-sum-exp" in out, out


# Regressions from a learner's pass: wrong answers that got another mistake's message or the
# general hint


def top_p_sorting_ascending_as_written(logits, top_p):
    p, order = logits.softmax(-1).sort(-1)  # BUG: ascending
    keep_sorted = (p.cumsum(-1) - p) < top_p
    keep = torch.zeros_like(keep_sorted).scatter(-1, order, keep_sorted)
    return logits.masked_fill(~keep, NEG_INF)


def top_p_returning_the_sorted_logits(logits, top_p):
    ordered, _ = logits.sort(-1, descending=True)
    p = ordered.softmax(-1)
    return ordered.masked_fill(~((p.cumsum(-1) - p) < top_p), NEG_INF)  # BUG: never unsorted


def prefix_every_position_reads_every_position(prompt_lengths, size):
    return torch.ones(len(prompt_lengths), size, size, dtype=torch.bool)


def prefix_with_the_causal_mask_transposed(prompt_lengths, size):
    in_prompt = _in_prompt(prompt_lengths, size)
    return causal_mask(size).T | (in_prompt[:, :, None] & in_prompt[:, None, :])


def _answer_positions(sequences, separator_id):
    return (sequences == separator_id).cumsum(-1)[:, :-1] > 0


def answer_loss_on_probabilities(logits, sequences, separator_id):
    m = _answer_positions(sequences, separator_id) & (sequences[:, 1:] != 0)
    return F.cross_entropy(logits.softmax(-1)[m], sequences[:, 1:][m])  # BUG: probabilities


def answer_loss_averaging_one_minus_p(logits, sequences, separator_id):
    m = _answer_positions(sequences, separator_id) & (sequences[:, 1:] != 0)
    p = logits.softmax(-1).gather(-1, sequences[:, 1:, None])[..., 0]
    return (1 - p)[m].mean()  # BUG: 1 - p, not -log p


def answer_loss_against_the_argmax(logits, sequences, separator_id):
    m = _answer_positions(sequences, separator_id) & (sequences[:, 1:] != 0)
    return F.cross_entropy(logits[m], logits.argmax(-1)[m])  # BUG: the model's own guesses


def answer_loss_with_the_pads_of_the_inputs(logits, sequences, separator_id):
    m = _answer_positions(sequences, separator_id) & (sequences[:, :-1] != 0)  # BUG: inputs
    return F.cross_entropy(logits[m], sequences[:, 1:][m])


REFUSED_AFTER_AN_EIGHTH_PASS = [
    ("top-p filter", top_p_sorting_ascending_as_written, "sorted in ascending order"),
    ("top-p filter", top_p_returning_the_sorted_logits, "the result is still in sorted order"),
    ("prefix-LM mask", prefix_every_position_reads_every_position, "the mask is True everywhere"),
    ("prefix-LM mask", prefix_with_the_causal_mask_transposed, "the causal part is transposed"),
    ("answer loss", answer_loss_on_probabilities, "F.cross_entropy is given probabilities"),
    ("answer loss", answer_loss_averaging_one_minus_p, "1 - p, the probability the target"),
    ("answer loss", answer_loss_against_the_argmax, "the targets are the model's own predictions"),
    ("answer loss", answer_loss_with_the_pads_of_the_inputs, "the pads are found among the"),
]
WRONG += REFUSED_AFTER_AN_EIGHTH_PASS  # tests/test_exercises.py names each


@pytest.mark.parametrize(
    ("exercise", "answer", "words"),
    REFUSED_AFTER_AN_EIGHTH_PASS,
    ids=lambda value: getattr(value, "__name__", ""),
)
def test_a_mistake_of_an_eighth_pass_is_named_first_in_every_case(
    exercise, answer, words, run_checker
):
    verdict, out = run_checker(CHECKERS[exercise][0], answer)
    failures = out.splitlines()[1:]
    assert verdict is False and failures, out
    assert all(f"({words}" in line for line in failures), out


@pytest.mark.parametrize(
    ("answer", "not_said"),
    [
        (prefix_every_position_reads_every_position, "longest prompt"),
        (top_p_sorting_ascending_as_written, "the dropped tokens are 0"),
        (top_p_dropping_to_zero, "sorted in ascending order"),
    ],
    ids=lambda value: getattr(value, "__name__", str(value)),
)
def test_an_eighth_pass_mistake_is_not_named_as_another(answer, not_said, run_checker):
    checker = check_prefix_lm_mask if answer.__name__.startswith("prefix") else check_top_p_filter
    verdict, out = run_checker(checker, answer)
    assert verdict is False and not_said not in out, out


# Regressions from a ninth learner's pass: a top_p and a separator id typed in where the
# argument belongs (named by that, not by ties, top_p = 1 or the English), and the perplexity


def top_p_with_its_own_top_p(logits, top_p):
    return top_p_filter(logits, 0.9)  # BUG: the argument is never read


def answer_loss_finding_a_fixed_sep_by_argmax(logits, sequences, separator_id):
    start = (sequences == 8000).int().argmax(-1, keepdim=True)  # BUG: 8000, not separator_id
    m = (torch.arange(sequences.shape[1] - 1) >= start) & (sequences[:, 1:] != 0)
    return F.cross_entropy(logits[m], sequences[:, 1:][m])  # no 8000: the whole sequence


def answer_loss_as_perplexity(logits, sequences, separator_id):
    return answer_loss(logits, sequences, separator_id).exp()  # BUG: exp(loss)


REFUSED_AFTER_A_NINTH_PASS = [
    (
        "top-p filter",
        top_p_with_its_own_top_p,
        "keeps the same nucleus whatever top_p is, that of top_p = 0.9",
    ),
    ("answer loss", answer_loss_with_separator_8000, "looks for <sep> as a fixed id, 8000"),
    (
        "answer loss",
        answer_loss_finding_a_fixed_sep_by_argmax,
        "looks for <sep> as a fixed id, 8000",
    ),
    ("answer loss", answer_loss_as_perplexity, "returns exp(loss), the perplexity, not the"),
]
WRONG += REFUSED_AFTER_A_NINTH_PASS  # tests/test_exercises.py names each


@pytest.mark.parametrize(
    ("exercise", "answer", "words"),
    REFUSED_AFTER_A_NINTH_PASS,
    ids=lambda value: getattr(value, "__name__", ""),
)
def test_a_mistake_of_a_ninth_pass_is_named_alone_in_every_case_it_fails(
    exercise, answer, words, run_checker
):
    verdict, out = run_checker(CHECKERS[exercise][0], answer)
    failures = out.splitlines()[1:]
    assert verdict is False and failures, out
    assert all(line.endswith(")") and f"({words}" in line for line in failures), out
    other_diagnoses = ("as many of the tied tokens", "where every token stays", "English is")
    assert not any(said in out for said in other_diagnoses), out
