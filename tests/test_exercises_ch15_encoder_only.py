"""Chapter 15's checkers: its solutions, right answers written in other styles, and typical
wrong answers, each refused with the message that names its mistake."""

import inspect

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

from helpers import encoder_only
from helpers.exercises import (
    check_segment_ids,
    check_token_classification_loss,
    check_whole_word_mask,
)
from helpers.exercises.ch15_encoder_only import (
    _segments,
    _token_loss,
    _token_loss_mistakes,
    _whole_word_mask,
    segment_cases,
    token_loss_cases,
    whole_word_cases,
)
from helpers.exercises.framework import TORCH_GLOBAL_SETTINGS_NAMED
from solutions.ch15_encoder_only import segment_ids, token_classification_loss, whole_word_mask

CHECKERS = {
    "token-classification loss": (check_token_classification_loss, token_classification_loss),
    "segment ids": (check_segment_ids, segment_ids),
    "whole-word masking": (check_whole_word_mask, whole_word_mask),
}
# The exercises whose right answer is a scalar: to them tensor(0.5) is a wrong value, not a
# wrong shape, and their report says "got 0.5, expected ..." instead of "shape ()".
SCALAR_ANSWERS = {"token-classification loss"}
# The exercises whose inputs are integer ids only: no requires_grad to switch, no gradient
NO_TENSOR_TO_SWITCH = {"segment ids": "integer ids", "whole-word masking": "integer ids"}

IGNORE = -100


@pytest.fixture(autouse=True, scope="module")
def one_thread():
    """The cases are tiny: on one thread each checker runs in a fraction of a second, where
    torch's thread pool, competing with other work on the cores, takes several times longer."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


# 1. The token-classification loss: typical wrong answers


def _per_position(logits, labels):
    """(B, n): the cross-entropy at every position, 0 where there is no label; and the mask."""
    labelled = labels != IGNORE
    losses = F.cross_entropy(logits.transpose(1, 2), labels.clamp(min=0), reduction="none")
    return losses * labelled, labelled


def loss_over_every_position(logits, labels):
    losses, _ = _per_position(logits, labels)
    return losses.sum() / labels.numel()  # BUG: the ignored positions counted in the mean


def loss_summed(logits, labels):
    losses, _ = _per_position(logits, labels)
    return losses.sum()  # BUG: the sum, not the mean


def loss_mean_per_row(logits, labels):
    losses, labelled = _per_position(logits, labels)
    return (losses.sum(1) / labelled.sum(1)).mean()  # BUG: each row weighs the same


def loss_divided_by_the_batch_size(logits, labels):
    losses, _ = _per_position(logits, labels)
    return losses.sum() / len(labels)  # BUG: divided by B


def loss_divided_by_the_length(logits, labels):
    losses, _ = _per_position(logits, labels)
    return losses.sum() / labels.shape[1]  # BUG: divided by n


def loss_not_transposed(logits, labels):
    return F.cross_entropy(logits, labels, ignore_index=IGNORE)  # BUG: classes read on dim 1


def loss_of_the_log_of_the_softmax(logits, labels):
    labelled = labels != IGNORE
    probabilities = logits.softmax(-1)[labelled]  # (N, classes)
    return -probabilities.log().gather(-1, labels[labelled][:, None]).mean()  # BUG: log(0)


def loss_by_exponentiating(logits, labels):
    labelled = labels != IGNORE
    exponentials = logits.exp()  # BUG: overflows for large logits
    probabilities = exponentials / exponentials.sum(-1, keepdim=True)
    return -probabilities[labelled].log().gather(-1, labels[labelled][:, None]).mean()


def loss_scoring_the_ignored_positions_as_class_0(logits, labels):
    return F.cross_entropy(logits.transpose(1, 2), labels.clamp(min=0))  # BUG


def loss_leaving_out_class_0(logits, labels):
    labelled = labels > 0  # BUG: class 0 is a label too
    return F.cross_entropy(logits[labelled], labels[labelled])


def loss_gathering_minus_100(logits, labels):
    picked = logits.log_softmax(-1).gather(-1, labels[..., None])[..., 0]  # BUG: index -100
    return -picked[labels != IGNORE].mean()


def loss_with_the_helper(logits, labels):
    return encoder_only.token_classification_loss(logits, labels)


def loss_in_float32(logits, labels):
    return F.cross_entropy(logits.float().transpose(1, 2), labels)  # BUG: float32 result


def loss_detached(logits, labels):
    return F.cross_entropy(logits.detach().transpose(1, 2), labels)


def loss_as_a_python_number(logits, labels):
    return F.cross_entropy(logits.transpose(1, 2), labels).item()


def loss_normalising_the_logits_in_place(logits, labels):
    logits -= logits.amax(-1, keepdim=True)  # BUG: the caller's logits change
    return F.cross_entropy(logits.transpose(1, 2), labels)


def loss_clamping_the_labels_in_place(logits, labels):
    labelled = labels != IGNORE
    labels.clamp_(min=0)  # BUG: the caller's labels change
    losses = F.cross_entropy(logits.transpose(1, 2), labels, reduction="none")
    return (losses * labelled).sum() / labelled.sum()


def loss_with_view(logits, labels):
    return F.cross_entropy(logits.view(-1, logits.shape[-1]), labels.view(-1))  # BUG: view


def loss_with_nll_on_the_logits(logits, labels):
    return F.nll_loss(logits.transpose(1, 2), labels)  # BUG: no log_softmax


def loss_with_log_softmax_over_the_positions(logits, labels):
    return F.nll_loss(logits.log_softmax(1).transpose(1, 2), labels)  # BUG: dim 1


def loss_keeping_a_dimension(logits, labels):
    losses, labelled = _per_position(logits, labels)
    return losses.sum(dim=(0, 1), keepdim=True)[0] / labelled.sum()  # BUG: shape (1,)


# 2. Segment ids: typical wrong answers


def segments_counting_the_first_separator(ids, sep_id, pad_id):
    seen = (ids == sep_id).long().cumsum(1)  # BUG: counts the [SEP] at t itself
    return seen.clamp(max=1) * (ids != pad_id)


def segments_by_a_plain_cumsum(ids, sep_id, pad_id):
    return (ids == sep_id).long().cumsum(1) * (ids != pad_id)  # BUG: 1 at [SEP], 2 at the last


def segments_with_the_pads_at_1(ids, sep_id, pad_id):
    is_sep = (ids == sep_id).long()
    return (is_sep.cumsum(1) - is_sep).clamp(max=1)  # BUG: the pads after it stay 1


def segments_with_the_pads_at_2(ids, sep_id, pad_id):
    is_sep = (ids == sep_id).long()
    return is_sep.cumsum(1) - is_sep  # BUG: 2 after the closing [SEP]


def segments_as_a_mask(ids, sep_id, pad_id):
    is_sep = (ids == sep_id).long()
    return (is_sep.cumsum(1) - is_sep >= 1) & (ids != pad_id)  # BUG: bool


def segments_as_floats(ids, sep_id, pad_id):
    return segment_ids(ids, sep_id, pad_id).float()


def segments_of_separator_8001(ids, sep_id, pad_id):
    return segment_ids(ids, 8001, pad_id)  # BUG: [SEP] as a fixed id


def segments_of_pad_0(ids, sep_id, pad_id):
    return segment_ids(ids, sep_id, 0)  # BUG: <pad> as a fixed id


def segments_swapped(ids, sep_id, pad_id):
    return (1 - segment_ids(ids, sep_id, pad_id)) * (ids != pad_id)


def segments_from_row_0s_separator(ids, sep_id, pad_id):
    first = (ids[0] == sep_id).nonzero()[0, 0]  # BUG: row 0's for every row
    return ((torch.arange(ids.shape[1]) > first) & (ids != pad_id)).long()


def segments_without_the_closing_separator(ids, sep_id, pad_id):
    return segment_ids(ids, sep_id, pad_id) * (ids != sep_id)  # BUG: closing [SEP] at 0


def segments_writing_into_the_ids(ids, sep_id, pad_id):
    segments = segment_ids(ids, sep_id, pad_id)
    ids.masked_fill_(ids == pad_id, pad_id)  # BUG: an in-place operation on the input
    return segments


def segments_with_the_helper(ids, sep_id, pad_id):
    return encoder_only.segment_ids(ids, sep_id, pad_id)


# 3. Whole-word masking: typical wrong answers


def _chosen(word_ids, rate, seed, shape=None, dtype=torch.float32):
    words = max(int(word_ids.max()) + 1, 1)
    shape = (len(word_ids), words) if shape is None else shape
    generator = torch.Generator().manual_seed(seed)
    return torch.rand(shape, generator=generator, dtype=dtype) < rate


def mask_piece_by_piece(ids, word_ids, mask_id, rate, seed):
    chosen = _chosen(word_ids, rate, seed, ids.shape)  # BUG: a draw per position
    return ids.masked_fill(chosen & (word_ids >= 0), mask_id)


def mask_the_first_piece_only(ids, word_ids, mask_id, rate, seed):
    hidden = _chosen(word_ids, rate, seed).gather(1, word_ids.clamp(min=0)) & (word_ids >= 0)
    previous = torch.cat([torch.full_like(word_ids[:, :1], -1), word_ids[:, :-1]], 1)
    return ids.masked_fill(hidden & (word_ids != previous), mask_id)  # BUG: first pieces only


def mask_the_specials_with_word_0(ids, word_ids, mask_id, rate, seed):
    hidden = _chosen(word_ids, rate, seed).gather(1, word_ids.clamp(min=0))  # BUG: -1 -> word 0
    return ids.masked_fill(hidden, mask_id)


def mask_by_negative_indexing(ids, word_ids, mask_id, rate, seed):
    chosen = _chosen(word_ids, rate, seed)
    rows = torch.arange(len(ids))[:, None]
    return ids.masked_fill(chosen[rows, word_ids], mask_id)  # BUG: -1 reads the last word


def mask_with_the_global_generator(ids, word_ids, mask_id, rate, seed):
    torch.manual_seed(seed)  # BUG: reseeds torch's global generator
    chosen = torch.rand(len(ids), max(int(word_ids.max()) + 1, 1)) < rate
    hidden = chosen.gather(1, word_ids.clamp(min=0)) & (word_ids >= 0)
    return ids.masked_fill(hidden, mask_id)


def mask_with_an_unseeded_draw(ids, word_ids, mask_id, rate, seed):
    chosen = torch.rand(len(ids), max(int(word_ids.max()) + 1, 1)) < rate  # BUG: global, no seed
    hidden = chosen.gather(1, word_ids.clamp(min=0)) & (word_ids >= 0)
    return ids.masked_fill(hidden, mask_id)


def mask_in_place(ids, word_ids, mask_id, rate, seed):
    hidden = _chosen(word_ids, rate, seed).gather(1, word_ids.clamp(min=0)) & (word_ids >= 0)
    ids[hidden] = mask_id  # BUG: the caller's ids change
    return ids


def mask_with_the_helper(ids, word_ids, mask_id, rate, seed):
    return encoder_only.whole_word_mask(ids, word_ids, mask_id, rate, seed)


def mask_at_or_above_the_rate(ids, word_ids, mask_id, rate, seed):
    hidden = ~_chosen(word_ids, rate, seed)  # BUG: the draws at or above rate
    return ids.masked_fill(hidden.gather(1, word_ids.clamp(min=0)) & (word_ids >= 0), mask_id)


def mask_drawing_row_by_row(ids, word_ids, mask_id, rate, seed):
    generator = torch.Generator().manual_seed(seed)
    out = ids.clone()
    for b in range(len(ids)):
        words = int(word_ids[b].max()) + 1  # BUG: this row's words, not the batch's
        chosen = torch.rand(words, generator=generator) < rate
        for t in range(ids.shape[1]):
            if word_ids[b, t] >= 0 and chosen[word_ids[b, t]]:
                out[b, t] = mask_id
    return out


def mask_with_a_generator_per_row(ids, word_ids, mask_id, rate, seed):
    words = max(int(word_ids.max()) + 1, 1)
    out = ids.clone()
    for b in range(len(ids)):
        generator = torch.Generator().manual_seed(seed)  # BUG: every row draws row 0's numbers
        chosen = torch.rand(words, generator=generator) < rate
        hidden = chosen[word_ids[b].clamp(min=0)] & (word_ids[b] >= 0)
        out[b] = out[b].masked_fill(hidden, mask_id)
    return out


def mask_with_seed_0(ids, word_ids, mask_id, rate, seed):
    return whole_word_mask(ids, word_ids, mask_id, rate, 0)  # BUG: the seed ignored


def mask_with_8002(ids, word_ids, mask_id, rate, seed):
    return whole_word_mask(ids, word_ids, 8002, rate, seed)  # BUG: [MASK] as a fixed id


def mask_returning_the_mask(ids, word_ids, mask_id, rate, seed):
    return _chosen(word_ids, rate, seed).gather(1, word_ids.clamp(min=0)) & (word_ids >= 0)


def mask_with_one_word_too_few(ids, word_ids, mask_id, rate, seed):
    words = int(word_ids.max())  # BUG: the words are numbered from 0
    generator = torch.Generator().manual_seed(seed)
    chosen = torch.rand((len(ids), words), generator=generator) < rate
    return ids.masked_fill(chosen.gather(1, word_ids.clamp(min=0)) & (word_ids >= 0), mask_id)


def mask_gathering_minus_1(ids, word_ids, mask_id, rate, seed):
    hidden = _chosen(word_ids, rate, seed).gather(1, word_ids)  # BUG: -1 is no index for gather
    return ids.masked_fill(hidden & (word_ids >= 0), mask_id)


def mask_drawing_in_float64(ids, word_ids, mask_id, rate, seed):
    chosen = _chosen(word_ids, rate, seed, dtype=torch.float64)  # BUG: other numbers drawn
    return ids.masked_fill(chosen.gather(1, word_ids.clamp(min=0)) & (word_ids >= 0), mask_id)


WRONG = [
    ("token-classification loss", loss_over_every_position, "averages over every position"),
    ("token-classification loss", loss_summed, "the sum over the labelled positions: the loss"),
    ("token-classification loss", loss_mean_per_row, "a mean per row, then over the rows"),
    ("token-classification loss", loss_divided_by_the_batch_size, "divided by the batch size"),
    (
        "token-classification loss",
        loss_divided_by_the_length,
        "the answer is the sum over the labelled positions divided by",
    ),
    ("token-classification loss", loss_not_transposed, "the logits are not transposed"),
    (
        "token-classification loss",
        loss_not_transposed,
        "F.cross_entropy reads the classes on dim 1: pass logits.transpose(1, 2)",
    ),
    ("token-classification loss", loss_of_the_log_of_the_softmax, "the log of the softmax"),
    ("token-classification loss", loss_by_exponentiating, "exp(logits) overflows the dtype"),
    (
        "token-classification loss",
        loss_scoring_the_ignored_positions_as_class_0,
        "the ignored positions are scored as class 0",
    ),
    ("token-classification loss", loss_leaving_out_class_0, "leaves out the positions labelled 0"),
    ("token-classification loss", loss_gathering_minus_100, "a label of -100 is no class"),
    (
        "token-classification loss",
        loss_with_the_helper,
        "calls helpers.encoder_only.token_classification_loss",
    ),
    ("token-classification loss", loss_in_float32, "dtype torch.float32, expected torch.float64"),
    ("token-classification loss", loss_detached, "no gradient flows back to the inputs"),
    ("token-classification loss", loss_as_a_python_number, "returned a Python float"),
    (
        "token-classification loss",
        loss_normalising_the_logits_in_place,
        "its input `logits` in place",
    ),
    ("token-classification loss", loss_clamping_the_labels_in_place, "its input `labels` in"),
    ("token-classification loss", loss_with_view, ".view needs memory laid out in order"),
    ("token-classification loss", loss_with_nll_on_the_logits, "F.nll_loss is given the raw"),
    (
        "token-classification loss",
        loss_with_log_softmax_over_the_positions,
        "log_softmax is taken over the positions (dim 1)",
    ),
    ("token-classification loss", loss_keeping_a_dimension, "(one number, a 0-d tensor"),
    ("segment ids", segments_counting_the_first_separator, "the first [SEP] is counted in"),
    ("segment ids", segments_by_a_plain_cumsum, "the second [SEP] gets 2"),
    ("segment ids", segments_with_the_pads_at_1, "the pads get 1"),
    ("segment ids", segments_with_the_pads_at_2, "the pads get 2"),
    ("segment ids", segments_as_a_mask, "dtype torch.bool, expected torch.int64"),
    ("segment ids", segments_as_a_mask, "return int64 (.long())"),
    ("segment ids", segments_as_floats, "dtype torch.float32, expected torch.int64"),
    ("segment ids", segments_of_separator_8001, "looks for [SEP] as a fixed id, 8001"),
    ("segment ids", segments_of_pad_0, "looks for the pads as a fixed id, 0"),
    ("segment ids", segments_swapped, "the segments are swapped"),
    ("segment ids", segments_from_row_0s_separator, "every row takes row 0's first [SEP]"),
    ("segment ids", segments_without_the_closing_separator, "the closing [SEP] gets 0"),
    ("segment ids", segments_writing_into_the_ids, "runs an in-place operation on its input"),
    ("segment ids", segments_with_the_helper, "calls helpers.encoder_only.segment_ids"),
    ("whole-word masking", mask_piece_by_piece, "a draw per position (torch.rand((B, n)))"),
    ("whole-word masking", mask_the_first_piece_only, "only the first piece of each chosen"),
    ("whole-word masking", mask_the_specials_with_word_0, "take word 0's draw"),
    ("whole-word masking", mask_by_negative_indexing, "take the last word's draw"),
    ("whole-word masking", mask_with_the_global_generator, "draws from torch's global random"),
    ("whole-word masking", mask_with_an_unseeded_draw, "draws from torch's global random"),
    ("whole-word masking", mask_in_place, "changes its input `ids` in place"),
    ("whole-word masking", mask_with_the_helper, "calls helpers.encoder_only.whole_word_mask"),
    ("whole-word masking", mask_at_or_above_the_rate, "masks the words whose draw is at or abo"),
    ("whole-word masking", mask_drawing_row_by_row, "each row draws its own number of words"),
    ("whole-word masking", mask_with_a_generator_per_row, "a generator seeded afresh"),
    ("whole-word masking", mask_with_seed_0, "the draw ignores seed"),
    ("whole-word masking", mask_with_8002, "writes [MASK] as a fixed id, 8002"),
    ("whole-word masking", mask_returning_the_mask, "that is the mask of the chosen pieces"),
    ("whole-word masking", mask_with_one_word_too_few, "words = word_ids.max() + 1: the words"),
    ("whole-word masking", mask_gathering_minus_1, "word_ids holds -1 for [CLS], [SEP] and pads"),
    ("whole-word masking", mask_drawing_in_float64, "the draw is float64"),
]


@pytest.mark.parametrize(
    ("exercise", "answer", "words"), WRONG, ids=[f"{e}: {a.__name__}" for e, a, _ in WRONG]
)
def test_a_typical_wrong_answer_is_named(exercise, answer, words, run_checker):
    verdict, out = run_checker(CHECKERS[exercise][0], answer)
    assert verdict is False and out.startswith("Not yet") and words in out, out


# Right answers written in other styles: each must be accepted.


def loss_by_cross_entropy_with_ignore_index(logits, labels):
    return F.cross_entropy(logits.transpose(1, 2), labels, ignore_index=-100)


def loss_over_the_flattened_positions(logits, labels):
    return F.cross_entropy(logits.flatten(0, 1), labels.flatten())  # -100 is the default


def loss_by_logsumexp(logits, labels):
    labelled = labels != IGNORE
    safe = labels.clamp(min=0)
    chosen = logits.gather(-1, safe[..., None])[..., 0]  # (B, n)
    losses = logits.logsumexp(-1) - chosen
    return losses[labelled].sum() / labelled.sum()


def loss_row_by_row(logits, labels):
    total, count = 0.0, 0
    for row, row_labels in zip(logits, labels, strict=True):
        labelled = row_labels != IGNORE
        if labelled.any():
            total = total + F.cross_entropy(row[labelled], row_labels[labelled], reduction="sum")
            count += int(labelled.sum())
    return total / count


def loss_by_the_module(logits, labels):
    return nn.CrossEntropyLoss()(logits.reshape(-1, logits.shape[-1]), labels.reshape(-1))


def loss_by_nll_and_log_softmax(logits, labels):
    return F.nll_loss(F.log_softmax(logits, dim=-1).transpose(1, 2), labels, ignore_index=-100)


def segments_row_by_row(ids, sep_id, pad_id):
    segments = torch.zeros_like(ids)
    for b, row in enumerate(ids.tolist()):
        first = row.index(sep_id)
        for t in range(first + 1, len(row)):
            if row[t] != pad_id:
                segments[b, t] = 1
    return segments


def segments_after_the_argmax(ids, sep_id, pad_id):
    first = (ids == sep_id).int().argmax(dim=1, keepdim=True)  # (B, 1): the first [SEP]
    after = torch.arange(ids.shape[1]) > first
    return (after & (ids != pad_id)).long()


def segments_by_a_shifted_cumsum(ids, sep_id, pad_id):
    seen = F.pad((ids == sep_id).long().cumsum(1)[:, :-1], (1, 0))  # the [SEP]s before t
    return torch.where(ids == pad_id, 0, seen.clamp(max=1))


def segments_by_cummax(ids, sep_id, pad_id):
    through = (ids == sep_id).long().cummax(dim=1).values  # 1 from the first [SEP] on
    first = (ids == sep_id) & (through.cumsum(1) == 1)  # the first [SEP] itself
    return through * (~first).long() * (ids != pad_id).long()


def mask_word_by_word(ids, word_ids, mask_id, rate, seed):
    words = max(int(word_ids.max()) + 1, 1)
    generator = torch.Generator().manual_seed(seed)
    draw = torch.rand((len(ids), words), generator=generator)
    out = ids.clone()
    for b in range(len(ids)):
        for w in range(words):
            if draw[b, w] < rate:
                out[b][word_ids[b] == w] = mask_id
    return out


def mask_by_advanced_indexing(ids, word_ids, mask_id, rate, seed):
    words = max(int(word_ids.max()) + 1, 1)
    generator = torch.Generator().manual_seed(seed)
    chosen = torch.rand(len(ids), words, generator=generator) < rate
    rows = torch.arange(len(ids))[:, None]
    hidden = chosen[rows, word_ids.clamp(min=0)] & (word_ids != -1)
    return torch.where(hidden, mask_id, ids)


def mask_drawing_each_row_from_one_generator(ids, word_ids, mask_id, rate, seed):
    words = max(int(word_ids.max()) + 1, 1)
    generator = torch.Generator().manual_seed(seed)
    rows = []
    for row, row_words in zip(ids, word_ids, strict=True):
        chosen = torch.rand(words, generator=generator) < rate  # the batch's words, each row
        hidden = chosen[row_words.clamp(min=0)] & (row_words >= 0)
        rows.append(row.masked_fill(hidden, mask_id))
    return torch.stack(rows)


def mask_by_one_hot(ids, word_ids, mask_id, rate, seed):
    words = max(int(word_ids.max()) + 1, 1)
    generator = torch.Generator().manual_seed(seed)
    chosen = torch.rand((len(ids), words), generator=generator) < rate
    one_hot = F.one_hot(word_ids + 1, words + 1)[..., 1:].bool()  # (B, n, words), -1: none
    hidden = (one_hot & chosen[:, None, :]).any(-1)
    return ids.masked_fill(hidden, mask_id)


def mask_with_a_forked_global_generator(ids, word_ids, mask_id, rate, seed):
    with torch.random.fork_rng(devices=[]):  # the caller's random state is put back
        torch.manual_seed(seed)
        chosen = torch.rand(len(ids), max(int(word_ids.max()) + 1, 1)) < rate
    hidden = chosen.gather(1, word_ids.clamp(min=0)) & (word_ids >= 0)
    return ids.masked_fill(hidden, mask_id)


RIGHT = [
    ("token-classification loss", loss_by_cross_entropy_with_ignore_index),
    ("token-classification loss", loss_over_the_flattened_positions),
    ("token-classification loss", loss_by_logsumexp),
    ("token-classification loss", loss_row_by_row),
    ("token-classification loss", loss_by_the_module),
    ("token-classification loss", loss_by_nll_and_log_softmax),
    ("segment ids", segments_row_by_row),
    ("segment ids", segments_after_the_argmax),
    ("segment ids", segments_by_a_shifted_cumsum),
    ("segment ids", segments_by_cummax),
    ("whole-word masking", mask_word_by_word),
    ("whole-word masking", mask_by_advanced_indexing),
    ("whole-word masking", mask_drawing_each_row_from_one_generator),
    ("whole-word masking", mask_by_one_hot),
    ("whole-word masking", mask_with_a_forked_global_generator),
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


def test_the_checkers_own_copies_agree_with_helpers_encoder_only():
    """The mistakes are built from the checker's own copies: they must be the references."""
    for _, logits, labels in token_loss_cases():
        assert torch.equal(
            _token_loss(logits, labels), encoder_only.token_classification_loss(logits, labels)
        )
    for _, ids, sep_id, pad_id in segment_cases():
        assert torch.equal(
            _segments(ids, sep_id, pad_id), encoder_only.segment_ids(ids, sep_id, pad_id)
        )
    for _, ids, word_ids, mask_id, rate, seed in whole_word_cases():
        assert torch.equal(
            _whole_word_mask(ids, word_ids, mask_id, rate, seed),
            encoder_only.whole_word_mask(ids, word_ids, mask_id, rate, seed),
        )


@pytest.mark.parametrize("case", token_loss_cases(), ids=lambda case: case[0])
def test_every_loss_mistake_is_far_from_the_right_answer(case):
    """No wrong answer passes by rounding: each mistake is the right answer in this case (then
    the checker leaves it out) or outside the tolerance."""
    _, logits, labels = case
    right = _token_loss(logits, labels).double()
    for diagnosis, answer in _token_loss_mistakes(logits, labels).items():
        error = (answer.double() - right).abs()
        same = torch.allclose(answer.double(), right, atol=1e-7)
        far = 1e-5 * max(1.0, right.abs().item())
        assert same or not error.isfinite() or error > far, (diagnosis, error)


def test_the_cases_are_what_the_docstrings_say():
    cases = token_loss_cases()
    assert {logits.dtype for _, logits, _ in cases} == {torch.float32, torch.float64}
    assert any(not logits.is_contiguous() for _, logits, _ in cases)
    assert any(logits.abs().max() > 1000 for _, logits, _ in cases)  # exp overflows float32
    assert all(labels.dtype == torch.int64 for _, _, labels in cases)
    assert any(((labels != IGNORE).sum(1) == 0).any() for _, _, labels in cases)  # a row: none
    assert any((labels != IGNORE).sum() == 1 for _, _, labels in cases)  # a single label
    assert any(logits.shape[1] == logits.shape[2] for _, logits, _ in cases)  # n = classes
    assert all((labels == 0).any() for _, _, labels in cases)  # class 0 is a label
    counts = [(labels != IGNORE).sum(1) for _, _, labels in cases]
    assert any(len(set(c.tolist())) == len(c) > 2 for c in counts)  # very different numbers

    segments = segment_cases()
    pads = [(ids == pad_id).sum(1) for _, ids, _, pad_id in segments]
    assert any((p == 0).all() for p in pads)  # no pad at all
    assert any(p.max() >= 8 for p in pads)  # many pads
    assert any((sep_id, pad_id) == (3, 9) for _, _, sep_id, pad_id in segments)
    assert any((ids == 0).any() and pad_id != 0 for _, ids, _, pad_id in segments)
    assert any(
        ((ids == sep_id).int().argmax(1) == 2).any() for _, ids, sep_id, _ in segments
    )  # [CLS] token [SEP]: a first sentence of one token
    for _, ids, sep_id, _ in segments:
        assert ids.dtype == torch.int64 and ((ids == sep_id).sum(1) == 2).all()

    masking = whole_word_cases()
    assert {rate for *_, rate, _ in masking} >= {0.0, 0.15, 0.9}
    assert any(mask_id != 8002 for *_, mask_id, _, _ in masking)
    assert len({seed for *_, seed in masking}) == len(masking)
    assert any(
        len({int(row.max()) for row in word_ids}) > 1 for _, _, word_ids, *_ in masking
    )  # rows with different numbers of words
    for _, ids, word_ids, *_ in masking:
        assert ids.dtype == word_ids.dtype == torch.int64 and ids.shape == word_ids.shape
        pieces = torch.stack([(word_ids == w).sum(1) for w in range(int(word_ids.max()) + 1)])
        assert pieces.max() >= 2  # words of several pieces
    first, last = masking[0], masking[-1]
    assert torch.equal(first[1], last[1]) and first[-1] != last[-1]  # one input, two seeds


@pytest.mark.parametrize("exercise", CHECKERS)
def test_the_checker_docstrings_state_the_time_limit_and_the_ban(exercise):
    doc = " ".join(CHECKERS[exercise][0].__doc__.split())
    assert "within ANSWER_TIME_LIMIT_SECONDS (5 s)" in doc
    assert "refused by name" in doc
    assert "no in-place operation on them, even one that changes no value" in doc
    assert TORCH_GLOBAL_SETTINGS_NAMED in doc
    if exercise == "whole-word masking":  # its rule names the generator it draws from
        assert "the draw comes from a generator of its own, never from torch's global" in doc
        assert "torch.rand((B, words), generator=torch.Generator().manual_seed(seed))" in doc
    if exercise == "token-classification loss":
        assert "requires_grad as it came, no hook left on them, and no backward pass inside" in doc


# Answers that are not answers


def _none(*args):
    return None


def _raises(*args):
    raise KeyError("oops")


def _scalar(*args):
    return torch.tensor(0.5)


def _text(*args):
    return "segments"


def _exits(*args):
    raise SystemExit(1)


def _meta(*args):
    return torch.empty(2, 3, device="meta")


def _complex(*args):
    return torch.zeros(2, 3, dtype=torch.complex64)


def _list(*args):
    return [[0, 1], [1, 0]]


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
    expected = NOT_ANSWERS[answer]
    if answer is _scalar and exercise in SCALAR_ANSWERS:  # a loss: a scalar of the wrong value
        expected = "got 0.5, expected"
    assert verdict is False and out.startswith("Not yet") and expected in out, out


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
@pytest.mark.parametrize("given", [None, torch.zeros(3), "segment_ids"], ids=repr)
def test_a_checker_given_something_else_than_a_function_says_to_pass_the_function(
    exercise, given, run_checker
):
    verdict, out = run_checker(CHECKERS[exercise][0], given)
    assert verdict is False and out.startswith("Not yet: check_") and out.count("\n") == 1, out
    assert "takes your function itself" in out, out


def _switching(on: bool):
    def answer(logits, labels):
        if logits.is_leaf:
            logits.requires_grad_(on)  # BUG: the caller's tensor's requires_grad changes
        return token_classification_loss(logits, labels)

    return answer


@pytest.mark.parametrize("on", [True, False], ids=["on", "off"])
def test_a_loss_that_switches_the_logits_requires_grad_is_refused(on, run_checker):
    verdict, out = run_checker(check_token_classification_loss, _switching(on))
    assert verdict is False and "switches requires_grad" in out, out


def test_a_loss_that_changes_logits_without_gradients_is_refused(run_checker):
    def answer(logits, labels):
        loss = token_classification_loss(logits, labels)
        if not logits.requires_grad:
            logits.mul_(2)  # BUG: where autograd would not complain, the caller's logits change
        return loss

    verdict, out = run_checker(check_token_classification_loss, answer)
    assert verdict is False and "in place" in out, out


def test_the_global_generator_is_put_back_after_an_answer_that_reseeds_it(run_checker):
    state = torch.random.get_rng_state()
    verdict, out = run_checker(check_whole_word_mask, mask_with_the_global_generator)
    assert verdict is False
    assert torch.equal(torch.random.get_rng_state(), state)
    failures = out.splitlines()[1:]
    assert failures and all("draws from torch's global random generator" in f for f in failures)
    assert "this function needs no randomness" not in out, out


ALONE = [  # mistakes that coincide in some cases: each is named on its own in another
    ("whole-word masking", mask_the_specials_with_word_0, "take word 0's draw", "last word's"),
    ("whole-word masking", mask_by_negative_indexing, "take the last word's draw", "word 0's"),
    ("token-classification loss", loss_of_the_log_of_the_softmax, "the log of the softmax", "exp("),
    ("token-classification loss", loss_by_exponentiating, "exp(logits) overflows", "log of the"),
    ("segment ids", segments_counting_the_first_separator, "counted in segment 1: it", "pads get"),
]


@pytest.mark.parametrize(
    ("exercise", "answer", "words", "other"), ALONE, ids=[a.__name__ for _, a, _, _ in ALONE]
)
def test_a_mistake_is_named_alone_where_it_differs_from_another(
    exercise, answer, words, other, run_checker
):
    _, out = run_checker(CHECKERS[exercise][0], answer)
    assert any(words in line and other not in line for line in out.splitlines()), out


def test_a_wrong_segment_names_what_the_position_holds(run_checker):
    def segments_off_by_one_at_the_end(ids, sep_id, pad_id):
        segments = segment_ids(ids, sep_id, pad_id).clone()
        segments[:, -1] = 1 - segments[:, -1]  # BUG: the last position flipped
        return segments

    _, out = run_checker(check_segment_ids, segments_off_by_one_at_the_end)
    assert "position" in out and "whose segment is" in out, out


def test_a_wrong_masked_position_names_its_word_and_its_draw(run_checker):
    def mask_leaving_the_last_row_alone(ids, word_ids, mask_id, rate, seed):
        out = whole_word_mask(ids, word_ids, mask_id, rate, seed).clone()
        out[-1] = ids[-1]  # BUG: the last row never masked
        return out

    _, out = run_checker(check_whole_word_mask, mask_leaving_the_last_row_alone)
    assert "is a piece of word" in out and "is below rate" in out, out


def test_the_solutions_signatures_are_what_the_checkers_call():
    assert list(inspect.signature(token_classification_loss).parameters) == ["logits", "labels"]
    assert list(inspect.signature(segment_ids).parameters) == ["ids", "sep_id", "pad_id"]
    assert list(inspect.signature(whole_word_mask).parameters) == [
        "ids",
        "word_ids",
        "mask_id",
        "rate",
        "seed",
    ]
