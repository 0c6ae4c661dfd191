"""Chapter 15's exercises: the pieces an encoder-only model (BERT) adds around its attention.

1. check_token_classification_loss: the mean cross-entropy over the labelled positions of a
   batch of token labels, IGNORE (-100) wherever a position carries no label.
2. check_segment_ids: which sentence of a pair each position belongs to, [CLS] first [SEP]
   second [SEP] <pad> ...: 0 up to and including the first [SEP], 1 after it, 0 on the pads.
3. check_whole_word_mask: whole-word masking: every piece of each chosen word replaced by
   [MASK], the words chosen by one seeded draw.

What every answer must do besides its values (the framework checks it, each docstring below
states it): each call returns within ANSWER_TIME_LIMIT_SECONDS, leaves torch's global settings
(grad mode, default dtype, random generator, anomaly detection, deterministic-algorithms
setting, thread count and module hooks) as they were, leaves its inputs as they came (no
in-place operation on them; the logits' requires_grad as it came) and does not call the copy
of the exercise's function in helpers.encoder_only.
"""

import re
from collections.abc import Callable

import torch
import torch.nn.functional as F

from helpers import encoder_only
from helpers.encoder_only import (
    CLS_ID,
    IGNORE,
    MASK_ID,
    SEP_ID,
    segment_ids,
    token_classification_loss,
    whole_word_mask,
)
from helpers.exercises.framework import (
    Refused,
    TimedAnswers,
    advise,
    exercise_checker,
    forbidden_functions,
    lower_precision_mistakes,
    named_together,
    report,
    run_case,
    wrong_only,
)
from helpers.translation import PAD_ID

__all__ = ["check_segment_ids", "check_token_classification_loss", "check_whole_word_mask"]

# The references, held under names of their own: an answer that rebinds this module's
# token_classification_loss changes what it calls, not what it is checked against
TOKEN_CLASSIFICATION_LOSS = token_classification_loss
SEGMENT_IDS = segment_ids
WHOLE_WORD_MASK = whole_word_mask


WRONG_VALUE = re.compile(r"at index \(([\d, ]*)\) got (\S+), expected (\S+) \((.*)\)$")


def _readable(got: object, shape: tuple) -> bool:
    """The answer is an ordinary real tensor of this shape, whose entries can be read."""
    return (
        isinstance(got, torch.Tensor)
        and got.layout == torch.strided
        and not (got.is_meta or got.is_nested or got.is_complex())
        and tuple(got.shape) == tuple(shape)
    )


def _in_place_of_the_hint(failures: list, name: str, hint: str, said: str) -> None:
    """Replace the general hint at the end of case `name`'s failure by `said`."""
    if failures and failures[-1].startswith(f"{name}: ") and failures[-1].endswith(f" ({hint})"):
        failures[-1] = f"{failures[-1][: -len(hint) - 3]} ({said})"


def _wrong_index(failure: str, name: str) -> tuple[int, ...] | None:
    """The index a wrong-value failure of case `name` points at, None for any other failure."""
    found = WRONG_VALUE.match(failure.removeprefix(f"{name}: "))
    if found is None or not found.group(1).strip():
        return None
    return tuple(int(i) for i in found.group(1).split(","))


# 1. The token-classification loss


def _tagged_rows(words: list[list[int]], n: int, classes: int, generator) -> torch.Tensor:
    """labels (B, n): row b is [CLS], then its words (each of words[b][w] pieces, the first
    labelled with a class, the later ones IGNORE), [SEP] and pads, all IGNORE but the words'
    first pieces. The first labelled position of the batch is class 0."""
    labels = torch.full((len(words), n), IGNORE, dtype=torch.int64)
    for b, pieces in enumerate(words):
        t = 1  # position 0 is [CLS]
        for count in pieces:
            labels[b, t] = torch.randint(classes, (), generator=generator)
            t += count
        assert t + 1 <= n, (words, n)  # [SEP] fits
    labelled = (labels != IGNORE).nonzero()
    if len(labelled):
        labels[tuple(labelled[0])] = 0
    return labels


def token_loss_cases() -> list[tuple[str, torch.Tensor, torch.Tensor]]:
    """(name, logits (B, n, classes), labels (B, n)) for every case the checker runs."""
    generator = torch.Generator().manual_seed(150)

    def case(name, words, n, classes, dtype=torch.float32, scale=2.0, classes_first=False):
        labels = _tagged_rows(words, n, classes, generator)
        shape = (len(words), classes, n) if classes_first else (len(words), n, classes)
        logits = scale * torch.randn(shape, generator=generator, dtype=torch.float64)
        if classes_first:
            logits = logits.transpose(1, 2)
        if scale > 100:  # the first label the largest logit of its position, far above e^88.7
            b, t = (labels != IGNORE).nonzero()[0].tolist()
            logits[b, t, labels[b, t]] = logits[b, t].abs().max() + scale / 2
        return name, logits.to(dtype), labels

    return [
        case(
            "(B=2, n=9, 5 classes): rows of 4 and 2 labelled words, words of 1 or 2 pieces",
            [[1, 2, 1, 1], [1, 2]],
            9,
            5,
        ),
        case(
            "(B=3, n=12, 7 classes): rows of 6, 2 and 1 labelled words, very different lengths",
            [[1, 1, 2, 1, 1, 1], [3, 2], [1]],
            12,
            7,
        ),
        case("float64 (B=2, n=8, 4 classes)", [[2, 1, 1], [1, 1, 1, 1, 1]], 8, 4, torch.float64),
        case(
            "(B=2, n=10, 6 classes), the logits stored classes first (a transposed view, not "
            "contiguous)",
            [[1, 1, 3, 1], [2, 2, 1]],
            10,
            6,
            classes_first=True,
        ),
        case(
            "(B=1, n=6, 3 classes): a single labelled position, one word of 3 pieces",
            [[3]],
            6,
            3,
        ),
        case(
            "(B=3, n=8, 5 classes): the middle row has no label at all ([CLS] [SEP] and pads)",
            [[2, 1, 1], [], [1, 1, 2, 1]],
            8,
            5,
        ),
        case(
            "(B=2, n=6, 6 classes): as many positions as classes",
            [[1, 1, 1, 1], [2, 1]],
            6,
            6,
        ),
        case(
            "(B=3, n=8, 5 classes), logits about 1,000 in size (1000 * randn), the first label "
            "the largest logit of its position: exp overflows float32 (e^88.7 is its largest) "
            "and most labels' probability underflows to 0",
            [[1, 2, 1], [1, 1, 1, 1], [2]],
            8,
            5,
            scale=1000.0,
        ),
    ]


def _token_loss(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """The checker's own value of the loss (for its mistakes)."""
    return F.cross_entropy(logits.transpose(1, 2), labels, ignore_index=IGNORE)


def _token_loss_mistakes(logits: torch.Tensor, labels: torch.Tensor) -> dict:
    x = logits.detach()
    batch, n, classes = x.shape
    labelled = labels != IGNORE  # (B, n)
    safe = labels.clamp(min=0)  # (B, n): any class where there is no label
    losses = F.cross_entropy(x.transpose(1, 2), safe, reduction="none")  # (B, n)
    total = (losses * labelled).sum()
    right = _token_loss(x, labels)

    def mean_over(chosen):  # (B, n) bool: the positions averaged
        return F.cross_entropy(x[chosen], labels[chosen])

    def chosen_entry(table):  # (B, n, classes) -> (B, n): the entry at each label
        return table.gather(-1, safe[..., None])[..., 0]

    mistakes = {
        "averages over every position, the ignored ones counted as a loss of 0: divide the sum "
        "over the labelled positions by their number, (labels != -100).sum(), not by B * n": (
            total / (batch * n)
        ),
        "the sum over the labelled positions: the loss is their mean": total,
        "a mean per row, then over the rows: that weighs the labels of a row with few of them "
        "more than those of a row with many (and a row without any gives 0 / 0); take one mean "
        "over every labelled position of the batch": (
            (losses * labelled).sum(1) / labelled.sum(1)
        ).mean(),
        "the ignored positions are scored as class 0 (-100 clamped or replaced by 0, and every "
        "position averaged): a position without a label is no example of class 0; leave it out "
        "of the loss (ignore_index=-100, or select labels != -100)": F.cross_entropy(
            x.transpose(1, 2), safe
        ),
        "the sum over the labelled positions is divided by the batch size B: divide by the "
        "number of labelled positions": total / batch,
        "leaves out the positions labelled 0 (labels > 0 taken as the labelled ones): class 0 "
        "is a label like any other; only -100 marks a position without one": mean_over(labels > 0),
        "the sign is flipped (returns -loss): cross-entropy is MINUS the mean log-probability "
        "of the labels, a positive number": -right,
        "F.nll_loss is given the raw logits (or the logit at the label is averaged): it takes "
        "log-probabilities, so apply log_softmax(-1) first (or use F.cross_entropy, which does "
        "both)": -chosen_entry(x)[labelled].mean(),
        "probabilities are averaged where the loss takes log-probabilities: cross-entropy is "
        "-log softmax(logits)[label]": -chosen_entry(x.softmax(-1))[labelled].mean(),
        "F.cross_entropy is given probabilities (softmax): it takes the raw logits and applies "
        "log_softmax itself, so pass the logits as they are": F.cross_entropy(
            x.softmax(-1).transpose(1, 2), labels, ignore_index=IGNORE
        ),
        "log_softmax is taken over the positions (dim 1): each position's distribution is over "
        "the classes, the last dimension (dim=-1)": -chosen_entry(x.log_softmax(1))[
            labelled
        ].mean(),
        "label smoothing: the exercise's loss is the plain cross-entropy": F.cross_entropy(
            x.transpose(1, 2), labels, ignore_index=IGNORE, label_smoothing=0.1
        ),
        **lower_precision_mistakes(lambda lg: _token_loss(lg, labels), logits, "logits"),
    }
    if right.exp().isfinite():  # (an inf is named by what makes it below)
        mistakes[
            "returns exp(loss), the perplexity, not the mean cross-entropy: return the loss itself"
        ] = right.exp()
    if n == classes:  # F.cross_entropy reads (B, n, classes) as n classes over `classes` places
        mistakes[
            "the logits are not transposed: F.cross_entropy reads its classes on dim 1, so "
            "(B, n, classes) is read as n classes at each of `classes` places (it runs only "
            "because n = classes here); pass logits.transpose(1, 2), (B, classes, n), or "
            "flatten both to (B * n, classes) and (B * n,)"
        ] = F.cross_entropy(x, labels, ignore_index=IGNORE)
    naive_log = -chosen_entry(x.softmax(-1).log())[labelled].mean()
    if not naive_log.isfinite():
        mistakes[
            "the log of the softmax: a probability below the dtype's smallest number is 0 and "
            "its log -inf; take log_softmax (or F.cross_entropy), which subtracts the "
            "log-sum-exp without exponentiating the label's logit"
        ] = naive_log
    exponentials = x.exp()
    naive_exp = -chosen_entry((exponentials / exponentials.sum(-1, keepdim=True)).log())[
        labelled
    ].mean()
    if not naive_exp.isfinite():
        mistakes[
            "exp(logits) overflows the dtype (float32's largest number is about e^88.7) and "
            "inf / inf is NaN: take log_softmax (or F.cross_entropy, or logits - "
            "logits.logsumexp(-1, keepdim=True)), which subtracts each position's largest logit "
            "before exponentiating"
        ] = naive_exp
    return named_together(mistakes)


TOKEN_LOSS_HINT = (
    "the mean, over the positions whose label is not -100, of -log_softmax(logits)[label]"
)


def _name_a_wrong_value_of_the_loss(failures: list, name: str, got, logits, labels) -> None:
    """Replace the general hint, for a loss no mistake named, by what the answer's value is
    near: the mean over another set of positions, found by their count."""
    if not _readable(got, ()) or not got.is_floating_point():
        return
    x = logits.detach()
    losses = F.cross_entropy(x.transpose(1, 2), labels.clamp(min=0), reduction="none")
    labelled = labels != IGNORE
    total = (losses * labelled).sum().double()
    value = got.detach().double()
    if not value.isfinite() or value == 0:
        return
    divisor = total / value
    counted = int(divisor.round()) if divisor.abs() < 1e6 else 0
    if (divisor - counted).abs() < 1e-4 and counted >= 1 and counted != int(labelled.sum()):
        _in_place_of_the_hint(
            failures,
            name,
            TOKEN_LOSS_HINT,
            f"the answer is the sum over the labelled positions divided by {counted}, where "
            f"this case has {int(labelled.sum())} labelled positions: divide by their number, "
            f"(labels != -100).sum()",
        )


@exercise_checker
def check_token_classification_loss(learner_loss: Callable) -> bool:
    """learner_loss(logits, labels) -> a 0-d tensor: logits (B, n, classes) float32 or float64,
    not always contiguous (one case is stored classes first), some about 1,000 in size (where
    exp overflows float32 and a probability underflows to 0); labels (B, n) int64, a class in
    0..classes-1 at each labelled position and IGNORE (-100) at each position that carries no
    label ([CLS], [SEP], pads, a word's later pieces); rows with very different numbers of
    labels, one row with none, one case with a single labelled position. The mean
    cross-entropy, -log_softmax(logits)[label], over the labelled positions of the whole batch
    (F.cross_entropy(logits.transpose(1, 2), labels, ignore_index=-100)), in the logits' dtype,
    with gradients; F.cross_entropy, F.log_softmax, gather and logsumexp are yours to use. The
    inputs are left as they were (no in-place operation on them, even one that changes no
    value, the logits' requires_grad as it came, no hook left on them, and no backward pass
    inside, which would fill the .grad of the tensors the logits come from). Without calling
    helpers.encoder_only.token_classification_loss (refused by name). Each call must return
    within ANSWER_TIME_LIMIT_SECONDS (5 s) and leave torch's grad mode, default dtype, random
    generator, anomaly detection, deterministic-algorithms setting, thread count and module
    hooks as they were."""
    failures, passed, answers = [], 0, TimedAnswers(learner_loss)
    for name, logits, labels in token_loss_cases():
        seen = {}

        def learner(lg, lb, seen=seen):
            seen["got"] = answers(lg, lb)
            return seen["got"]

        right = _token_loss(logits, labels)
        scale = max(1.0, abs(right.item()))  # float32 keeps ~7 digits of a loss near 1,000
        before = len(failures)
        passed += run_case(
            name,
            learner,
            (logits, labels),
            TOKEN_CLASSIFICATION_LOSS,
            failures,
            atol=(1e-5 if logits.dtype == torch.float32 else 1e-10) * scale,
            hint=TOKEN_LOSS_HINT,
            mistakes=wrong_only(_token_loss_mistakes(logits, labels), right),
            forbidden=forbidden_functions(encoder_only, "token_classification_loss"),
            names=("logits", "labels"),
        )
        if len(failures) == before:
            continue
        if failures[-1].startswith(f"{name}: shape ("):
            failures[-1] += " (one number, a 0-d tensor: the mean over every labelled position)"
        _name_a_wrong_value_of_the_loss(failures, name, seen.get("got"), logits, labels)
        advise(
            failures,
            name,
            "your function raised",
            "Expected target size",
            "F.cross_entropy reads the classes on dim 1: pass logits.transpose(1, 2), "
            "(B, classes, n), or flatten both, logits.flatten(0, 1) and labels.flatten()",
        )
        for words in ("-100 is out of bounds", "Class values must be non-negative"):
            advise(
                failures,
                name,
                "your function raised",
                words,
                "a label of -100 is no class to index with: select the labelled positions "
                "first (labels != -100), or read the classes of labels.clamp(min=0) and leave "
                "the ignored positions out of the mean",
            )
        advise(
            failures,
            name,
            "your function raised",
            "view size is not compatible",
            ".view needs memory laid out in order, which this case's logits (a transposed "
            "view) are not: .reshape or .flatten copies when it must",
        )
    return report(failures, passed)


# 2. Segment ids


def _pairs(
    lengths: list[tuple[int, int]],
    generator,
    sep_id: int = SEP_ID,
    pad_id: int = PAD_ID,
    cls_id: int = CLS_ID,
    tokens: tuple[int, int] = (5, 8000),
    width: int | None = None,
    zero_in_second: bool = False,
) -> torch.Tensor:
    """ids (B, n): row b is [CLS], lengths[b][0] tokens, [SEP], lengths[b][1] tokens, [SEP],
    then pads up to the longest row (or `width`). The tokens are drawn from range(*tokens)
    avoiding sep_id, pad_id and cls_id; with zero_in_second, each second sentence's first
    token is 0 (an ordinary token where pad_id is not 0)."""
    ordinary = [t for t in range(*tokens) if t not in (sep_id, pad_id, cls_id)]

    def sentence(length):
        drawn = torch.randint(len(ordinary), (length,), generator=generator).tolist()
        return [ordinary[i] for i in drawn]

    rows = []
    for first, second in lengths:
        tail = sentence(second)
        if zero_in_second and tail:
            tail[0] = 0
        rows.append([cls_id, *sentence(first), sep_id, *tail, sep_id])
    n = max(map(len, rows)) if width is None else width
    return torch.tensor([row + [pad_id] * (n - len(row)) for row in rows], dtype=torch.int64)


def segment_cases() -> list[tuple[str, torch.Tensor, int, int]]:
    """(name, ids (B, n), sep_id, pad_id) for every case the checker runs."""
    generator = torch.Generator().manual_seed(151)
    return [
        (
            "two pairs, the second row padded; [SEP] = 8001, <pad> = 0",
            _pairs([(3, 2), (2, 1)], generator),
            SEP_ID,
            PAD_ID,
        ),
        (
            "three pairs of one length: no pad at all",
            _pairs([(2, 3), (3, 2), (1, 4)], generator),
            SEP_ID,
            PAD_ID,
        ),
        (
            "rows of very different lengths, one of them followed by 8 pads",
            _pairs([(4, 6), (1, 1), (2, 3)], generator),
            SEP_ID,
            PAD_ID,
        ),
        (
            "first sentences of a single token",
            _pairs([(1, 3), (1, 1)], generator),
            SEP_ID,
            PAD_ID,
        ),
        (
            "[SEP] = 3 and <pad> = 9 (not 8001 and 0), [CLS] = 2; id 0 an ordinary token, the "
            "first of each second sentence",
            _pairs(
                [(2, 3), (3, 1), (1, 2)],
                generator,
                sep_id=3,
                pad_id=9,
                cls_id=2,
                tokens=(0, 20),
                zero_in_second=True,
            ),
            3,
            9,
        ),
        (
            "one pair (B=1) and two pads after it",
            _pairs([(3, 2)], generator, width=10),
            SEP_ID,
            PAD_ID,
        ),
    ]


def _segments(ids: torch.Tensor, sep_id: int, pad_id: int) -> torch.Tensor:
    """The checker's own segment ids (for its mistakes): 1 after the first [SEP], not on pads."""
    is_sep = (ids == sep_id).long()
    before = is_sep.cumsum(1) - is_sep  # (B, n): the [SEP]s strictly before each position
    return ((before >= 1) & (ids != pad_id)).long()


def _segment_mistakes(ids: torch.Tensor, sep_id: int, pad_id: int) -> dict:
    is_sep = (ids == sep_id).long()
    through = is_sep.cumsum(1)  # (B, n): the [SEP]s at or before each position
    before = through - is_sep  # (B, n): those strictly before it
    not_pad = (ids != pad_id).long()
    right = _segments(ids, sep_id, pad_id)
    first_of_row_0 = int((ids[0] == sep_id).nonzero()[0, 0])
    mistakes = {
        "the first [SEP] is counted in segment 1: it closes the first sentence, so it is "
        "segment 0, and segment 1 starts after it (a cumsum of ids == sep_id counts the [SEP] "
        "at the position itself; the [SEP]s strictly before a position are the cumsum minus "
        "the position's own)": (through.clamp(max=1) * not_pad),
        "the first [SEP] is counted in segment 1 and the second [SEP] gets 2 (a cumsum of ids "
        "== sep_id, neither shifted nor clamped): the first [SEP] is segment 0, the second "
        "sentence and its closing [SEP] are 1": through * not_pad,
        "the closing [SEP] gets 0: it closes the second sentence, so it is segment 1 with it": (
            (before >= 1) & (ids != sep_id) & (ids != pad_id)
        ).long(),
        "the segments are swapped (1 for the first sentence, 0 for the second): [CLS], the "
        "first sentence and its [SEP] are segment 0, what follows them 1": (1 - right) * not_pad,
        "every position is 0: the second sentence, from the token after the first [SEP] to "
        "the closing [SEP], is segment 1": torch.zeros_like(right),
        "every row takes row 0's first [SEP] as its own: each row's first [SEP] lies where its "
        "first sentence ends, so find it in each row": (
            (torch.arange(ids.shape[1]) > first_of_row_0).long() * not_pad
        ),
        "only the first token after the first [SEP] is 1: segment 1 runs from it to the "
        "closing [SEP], the whole second sentence": torch.cat(
            [torch.zeros_like(is_sep[:, :1]), is_sep[:, :-1] * (through[:, :-1] == 1).long()], 1
        ),
    }
    if (ids == pad_id).any():  # mistakes on the pads, named only where a case has some
        mistakes |= {
            "the pads get 1: a pad belongs to no sentence, so it gets 0 (where ids == pad_id)": (
                before.clamp(max=1)
            ),
            "the pads get 2 (the count of [SEP]s before them, left in, not clamped): 0 on the "
            "pads (where ids == pad_id), and nowhere more than 1": before,
            "the first [SEP] is counted in segment 1, and the pads get 1: the first [SEP] "
            "closes the first sentence (segment 0), and a pad gets 0": through.clamp(max=1),
            "the first [SEP] is counted in segment 1 and the second [SEP] and the pads get 2 (a "
            "cumsum of ids == sep_id, as it comes): count the [SEP]s strictly before each "
            "position, at most 1, and 0 on the pads": through,
        }
    if sep_id != SEP_ID:
        mistakes[
            f"looks for [SEP] as a fixed id, {SEP_ID}, not sep_id ({sep_id} here): use the argument"
        ] = _segments(ids, SEP_ID, pad_id)
    if pad_id != PAD_ID:
        mistakes[
            f"looks for the pads as a fixed id, {PAD_ID}, not pad_id ({pad_id} here): use the "
            f"argument (here id {PAD_ID} is an ordinary token of the sentences)"
        ] = _segments(ids, sep_id, PAD_ID)
    return named_together(mistakes)


SEGMENT_HINT = "0 up to and including the first [SEP], 1 after it, 0 on the pads"


def _what_is_at(ids: torch.Tensor, b: int, t: int, sep_id: int, pad_id: int) -> str:
    """What position t of row b holds, in words."""
    token = int(ids[b, t])
    seps_before = int((ids[b, :t] == sep_id).sum())
    if token == pad_id:
        return "a pad"
    if token == sep_id:
        return "the first [SEP]" if seps_before == 0 else "the closing [SEP]"
    if t == 0:
        return "[CLS]"
    return "a token of the first sentence" if seps_before == 0 else "a token of the second sentence"


def _name_the_position(failures: list, name: str, ids, sep_id: int, pad_id: int) -> None:
    """Replace the general hint by what the position the failure points at holds."""
    index = _wrong_index(failures[-1], name) if failures else None
    if index is None or len(index) != 2:
        return
    b, t = index
    segment = int(_segments(ids, sep_id, pad_id)[b, t])
    _in_place_of_the_hint(
        failures,
        name,
        SEGMENT_HINT,
        f"position {t} of row {b} holds {_what_is_at(ids, b, t, sep_id, pad_id)}, whose "
        f"segment is {segment}: {SEGMENT_HINT}",
    )


@exercise_checker
def check_segment_ids(learner_segments: Callable) -> bool:
    """learner_segments(ids, sep_id, pad_id) -> (B, n) int64: ids (B, n) int64, each row
    [CLS] first [SEP] second [SEP] <pad> ..., rows of different lengths (some with no pad,
    some with many), a first sentence of a single token in some; sep_id and pad_id ints, not
    always 8001 and 0 (one case has sep_id 3 and pad_id 9, and 0 as an ordinary token). Segment
    0 for [CLS], the first sentence and the first [SEP]; 1 for the second sentence and its
    closing [SEP]; 0 on the pads. The ids are left as they were (no in-place operation on them,
    even one that changes no value). Without calling helpers.encoder_only.segment_ids (refused
    by name); a loop over the rows is accepted. Each call must return within
    ANSWER_TIME_LIMIT_SECONDS (5 s) and leave torch's grad mode, default dtype, random
    generator, anomaly detection, deterministic-algorithms setting, thread count and module
    hooks as they were."""
    failures, passed, answers = [], 0, TimedAnswers(learner_segments)
    for name, ids, sep_id, pad_id in segment_cases():
        right = _segments(ids, sep_id, pad_id)
        before = len(failures)
        passed += run_case(
            name,
            lambda i, sep_id=sep_id, pad_id=pad_id: answers(i, sep_id, pad_id),
            (ids,),
            lambda i, sep_id=sep_id, pad_id=pad_id: SEGMENT_IDS(i, sep_id, pad_id),
            failures,
            atol=0.0,
            hint=SEGMENT_HINT,
            mistakes=wrong_only(_segment_mistakes(ids, sep_id, pad_id), right),
            forbidden=forbidden_functions(encoder_only, "segment_ids", "_segment_ids"),
            names=("ids",),
        )
        if len(failures) == before:
            continue
        _name_the_position(failures, name, ids, sep_id, pad_id)
        advise(
            failures,
            name,
            "dtype torch.",
            "expected torch.int64",
            "segment ids index nn.Embedding(2, d_model), which takes integer ids: return "
            "int64 (.long()), not bool, float or int32",
        )
    return report(failures, passed)


# 3. Whole-word masking


def _word_rows(rows: list[list], generator, width: int | None = None, mask_id: int = MASK_ID):
    """(ids (B, n), word_ids (B, n)): row b is [CLS], its words, [SEP], pads up to the longest
    row (or `width`); rows[b] lists each word's number of pieces, None for a [SEP] between two
    sentences. The words of a row are numbered 0, 1, 2, ... across both sentences; [CLS],
    [SEP] and pads are -1. The pieces are ids drawn from 5..7999 (never mask_id)."""
    id_rows, word_rows = [], []
    for pieces in rows:
        ids, words, w = [CLS_ID], [-1], 0
        for count in pieces:
            if count is None:
                ids.append(SEP_ID)
                words.append(-1)
                continue
            drawn = torch.randint(5, 8000, (count,), generator=generator).tolist()
            ids += [token + (token == mask_id) for token in drawn]
            words += [w] * count
            w += 1
        id_rows.append([*ids, SEP_ID])
        word_rows.append([*words, -1])
    n = max(map(len, id_rows)) if width is None else width
    ids = torch.tensor([row + [PAD_ID] * (n - len(row)) for row in id_rows])
    word_ids = torch.tensor([row + [-1] * (n - len(row)) for row in word_rows])
    return ids, word_ids


def whole_word_cases() -> list[tuple[str, torch.Tensor, torch.Tensor, int, float, int]]:
    """(name, ids (B, n), word_ids (B, n), mask_id, rate, seed) for every case."""
    generator = torch.Generator().manual_seed(152)
    first = _word_rows([[1, 2, 1, 3, 1], [2, 1, 1]], generator)
    return [
        (
            "two rows of 5 and 3 words, some of 2 or 3 pieces; rate 0.5, seed 0",
            *first,
            MASK_ID,
            0.5,
            0,
        ),
        (
            "BERT's rate 0.15 over three rows of 8 words; seed 1",
            *_word_rows(
                [[1, 2, 1, 1, 3, 1, 1, 2], [2, 2, 1, 1, 1, 1, 2, 1], [1, 1, 1, 2, 1, 1, 1, 3]],
                generator,
            ),
            MASK_ID,
            0.15,
            1,
        ),
        (
            "rate 0: no word is chosen, the ids come back as they are; seed 2",
            *_word_rows([[2, 1, 3], [1, 1, 1, 2]], generator),
            MASK_ID,
            0.0,
            2,
        ),
        (
            "rate 0.9: nearly every word is masked; seed 3",
            *_word_rows([[1, 3, 2, 1, 1, 2], [2, 1, 2, 1]], generator),
            MASK_ID,
            0.9,
            3,
        ),
        (
            "pairs [CLS] first [SEP] second [SEP] (the middle [SEP] is -1 too); mask_id 4 (not "
            "8002); rate 0.4, seed 7",
            *_word_rows([[2, 1, None, 1, 2, 1], [1, 1, 2, None, 3]], generator, mask_id=4),
            4,
            0.4,
            7,
        ),
        (
            "one row of 2 words, one of 7 (the draw is (B, 7)), one of 4; rate 0.4, seed 123",
            *_word_rows([[2, 1], [1, 2, 1, 1, 2, 1, 1], [3, 1, 1, 2]], generator, width=14),
            MASK_ID,
            0.4,
            123,
        ),
        (
            "the first case's ids and word_ids again, seed 5: another seed, other words",
            *first,
            MASK_ID,
            0.5,
            5,
        ),
    ]


def _draw(seed: int, shape: tuple, dtype=torch.float32) -> torch.Tensor:
    return torch.rand(shape, generator=torch.Generator().manual_seed(seed), dtype=dtype)


def _word_count(word_ids: torch.Tensor) -> int:
    return max(int(word_ids.max()) + 1, 1) if word_ids.numel() else 1


def _whole_word_mistakes(ids, word_ids, mask_id: int, rate: float, seed: int) -> dict:
    batch, n = ids.shape
    words = _word_count(word_ids)
    is_word = word_ids >= 0
    index = word_ids.clamp(min=0)
    chosen = _draw(seed, (batch, words)) < rate  # (B, words)

    def by_word(picked):  # (B, >= words) bool -> (B, n): the pieces of the picked words
        return picked.gather(1, index) & is_word

    def masked(hidden):
        return ids.masked_fill(hidden, mask_id)

    first_piece = is_word & torch.cat(
        [torch.ones_like(is_word[:, :1]), word_ids[:, 1:] != word_ids[:, :-1]], 1
    )
    row_words = [max(int(row.max()) + 1, 0) for row in word_ids]
    one_generator = torch.Generator().manual_seed(seed)
    drawn_per_row = torch.ones(batch, words)  # 1: never below rate
    fresh_per_row = torch.ones(batch, words)
    for b, count in enumerate(row_words):
        drawn_per_row[b, :count] = torch.rand(count, generator=one_generator)
        fresh_per_row[b, :count] = _draw(seed, (count,))
    mistakes = {
        "a draw per position (torch.rand((B, n))): each piece is chosen on its own, so a word "
        "can be half hidden; draw one number per word, (B, words), and hide every piece of a "
        "chosen word": masked((_draw(seed, (batch, n)) < rate) & is_word),
        "only the first piece of each chosen word is masked: whole-word masking hides every "
        "piece of it (every position whose word_ids is that word)": masked(
            by_word(chosen) & first_piece
        ),
        "the -1 positions ([CLS], [SEP], pads) take word 0's draw (word_ids clamped, or -1 "
        "replaced by 0, without leaving them out after): they belong to no word and are never "
        "masked; keep only the positions where word_ids >= 0": masked(chosen.gather(1, index)),
        "the -1 positions ([CLS], [SEP], pads) take the last word's draw (an index of -1 reads "
        "the last column, as Python's negative indices do): they belong to no word and are "
        "never masked; keep only the positions where word_ids >= 0": masked(
            chosen.gather(1, torch.where(is_word, word_ids, words - 1))
        ),
        "masks the words whose draw is at or above rate: word w of row b is chosen where its "
        "draw is BELOW rate, so that about a share `rate` of the words is masked": masked(
            by_word(~chosen)
        ),
        "the draw is (words, B), then transposed: draw torch.rand((B, words)), one row of "
        "numbers per row of ids, as the generator fills it": masked(
            by_word(_draw(seed, (words, batch)).T < rate)
        ),
        "the draw is float64 (dtype=torch.float64 takes other numbers from the generator): "
        "draw torch.rand((B, words), generator=...) in the default float32": masked(
            by_word(_draw(seed, (batch, words), torch.float64) < rate)
        ),
        "the draw is (B, n), one number per position, and word w reads column w: draw one "
        "number per word, torch.rand((B, words)), words = word_ids.max() + 1": masked(
            by_word(_draw(seed, (batch, n)) < rate)
        ),
        "each row draws its own number of words from the generator (torch.rand(words in that "
        "row)): the draw is one (B, words) tensor, words = word_ids.max() + 1 over the whole "
        "batch, so a row with fewer words still takes `words` numbers": masked(
            by_word(drawn_per_row < rate)
        ),
        "each row draws from a generator seeded afresh (torch.Generator().manual_seed(seed) "
        "inside the loop over rows), so every row gets row 0's numbers: make the generator "
        "once and draw torch.rand((B, words)) from it": masked(by_word(fresh_per_row < rate)),
        "nothing is masked: the ids come back as they came; replace every piece of each chosen "
        "word by mask_id": ids.clone(),
        "every word piece is masked, whatever the draw: only the words whose draw is below "
        "rate": masked(is_word),
    }
    if seed != 0:
        mistakes[
            f"the draw ignores seed (it draws as seed 0 does): seed the generator with the "
            f"argument, torch.Generator().manual_seed(seed), seed = {seed} here"
        ] = masked(by_word(_draw(0, (batch, words)) < rate))
    if mask_id != MASK_ID:
        mistakes[
            f"writes [MASK] as a fixed id, {MASK_ID}, not mask_id ({mask_id} here): use the "
            f"argument"
        ] = ids.masked_fill(by_word(chosen), MASK_ID)
    return named_together(mistakes)


GLOBAL_GENERATOR = (
    "draws from torch's global random generator (torch.manual_seed, or torch.rand without "
    "generator=): every later random number of the caller would change, and the draw must "
    "come from a fresh generator of its own, torch.Generator().manual_seed(seed), passed as "
    "torch.rand((B, words), generator=generator)"
)
WHOLE_WORD_HINT = (
    "one draw, torch.rand((B, words), generator=torch.Generator().manual_seed(seed)); every "
    "piece of word w of row b becomes mask_id where draw[b, w] < rate"
)


def _own_generator(answers: Callable) -> Callable:
    """answers, with a refusal for drawing from the global generator that says where the draw
    belongs (the framework's own says the function needs no randomness)."""

    def call(*inputs):
        try:
            return answers(*inputs)
        except Refused as refusal:
            if str(refusal).startswith("reseeds or draws from torch's global random"):
                raise Refused(GLOBAL_GENERATOR) from None
            raise

    return call


def _name_the_word(failures: list, name: str, word_ids, rate: float, seed: int) -> None:
    """Replace the general hint by what decides the position the failure points at."""
    index = _wrong_index(failures[-1], name) if failures else None
    if index is None or len(index) != 2:
        return
    b, t = index
    word = int(word_ids[b, t])
    if word < 0:
        said = (
            f"position {t} of row {b} has word_ids -1 ([CLS], [SEP] or a pad): it belongs to "
            f"no word and is never masked"
        )
    else:
        draw = float(_draw(seed, (len(word_ids), _word_count(word_ids)))[b, word])
        if draw < rate:
            fate = f"is below rate {rate:g}: every piece of it becomes mask_id"
        else:
            fate = f"is not below rate {rate:g}: it keeps its ids"
        said = (
            f"position {t} of row {b} is a piece of word {word}, whose draw[{b}, {word}] = "
            f"{draw:.4f} {fate}; {WHOLE_WORD_HINT}"
        )
    _in_place_of_the_hint(failures, name, WHOLE_WORD_HINT, said)


@exercise_checker
def check_whole_word_mask(learner_mask: Callable) -> bool:
    """learner_mask(ids, word_ids, mask_id, rate, seed) -> (B, n) int64: ids (B, n) int64 rows
    [CLS] pieces [SEP] <pad> ... (or a pair, [CLS] first [SEP] second [SEP]); word_ids (B,
    n) int64, the word each position belongs to, 0, 1, 2, ... within its row (words of 1 to
    3 pieces, rows with different numbers of words), -1 for [CLS], [SEP] and pads; mask_id
    an int (not always 8002); rate a float from 0 to 0.9; seed an int. Exactly one random
    draw, torch.rand((B, words), generator=torch.Generator().manual_seed(seed)) with words =
    word_ids.max() + 1 (every case has a word): word w of row b is chosen where draw[b, w] <
    rate, and every piece of a chosen word becomes mask_id; every other position keeps its
    id. The inputs are left as they were (no in-place operation on them, even one that
    changes no value: work on a copy). Without calling helpers.encoder_only.whole_word_mask
    (refused by name); a loop over the rows or the words is accepted. Each call must return
    within ANSWER_TIME_LIMIT_SECONDS (5 s) and leave torch's grad mode, default dtype,
    random generator, anomaly detection, deterministic-algorithms setting, thread count and
    module hooks as they were: the draw comes from a generator of its own, never from
    torch's global one (torch.manual_seed reseeds that one for every later caller)."""
    failures, passed = [], 0
    answers = _own_generator(TimedAnswers(learner_mask))
    for name, ids, word_ids, mask_id, rate, seed in whole_word_cases():
        right = _whole_word_mask(ids, word_ids, mask_id, rate, seed)

        def learner(i, w, mask_id=mask_id, rate=rate, seed=seed):
            return answers(i, w, mask_id, rate, seed)

        def reference(i, w, mask_id=mask_id, rate=rate, seed=seed):
            return WHOLE_WORD_MASK(i, w, mask_id, rate, seed)

        before = len(failures)
        passed += run_case(
            name,
            learner,
            (ids, word_ids),
            reference,
            failures,
            atol=0.0,
            hint=WHOLE_WORD_HINT,
            mistakes=wrong_only(_whole_word_mistakes(ids, word_ids, mask_id, rate, seed), right),
            forbidden=forbidden_functions(encoder_only, "whole_word_mask"),
            names=("ids", "word_ids"),
        )
        if len(failures) == before:
            continue
        _name_the_word(failures, name, word_ids, rate, seed)
        advise(
            failures,
            name,
            "dtype torch.bool, expected torch.int64",
            "",
            "that is the mask of the chosen pieces: return the ids with mask_id there, "
            "ids.masked_fill(hidden, mask_id)",
        )
        if not failures[-1].startswith(f"{name}: dtype torch.bool"):
            advise(
                failures,
                name,
                "dtype torch.",
                "expected torch.int64",
                "keep the ids' dtype, int64: masked_fill, or torch.where(hidden, mask_id, ids), "
                "keeps it",
            )
        advise(
            failures,
            name,
            "your function raised",
            "index -1 is out of bounds",
            "word_ids holds -1 for [CLS], [SEP] and pads, which gather cannot read: gather "
            "with word_ids.clamp(min=0), then leave the -1 positions unmasked (& (word_ids "
            ">= 0))",
        )
        words = _word_count(word_ids)
        advise(
            failures,
            name,
            "your function raised",
            f"index {words - 1} is out of bounds for dimension 1 with size {words - 1}",
            "words = word_ids.max() + 1: the words are numbered from 0, so the draw needs one "
            "column more than the largest word index",
        )
    return report(failures, passed)


def _whole_word_mask(ids, word_ids, mask_id: int, rate: float, seed: int) -> torch.Tensor:
    """The checker's own whole-word masking (for its mistakes and the cases' tests)."""
    chosen = _draw(seed, (len(ids), _word_count(word_ids))) < rate
    hidden = chosen.gather(1, word_ids.clamp(min=0)) & (word_ids >= 0)
    return ids.masked_fill(hidden, mask_id)
