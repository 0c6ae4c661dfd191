"""Chapter 08's exercises: the pieces of an RNN translator that attention changes or needs.

1. check_encoder_summary: the bottleneck model's fixed vector, from a padded batch of
   bidirectional encoder states.
2. check_sentence_losses: one loss per sentence, over its real target tokens only.
3. check_context_vector: one step of Bahdanau attention, from the decoder state to the context.
"""

from collections.abc import Callable

import torch
import torch.nn.functional as F

from helpers.attention import AdditiveAttention, masked_softmax
from helpers.exercises.framework import report, run_case

__all__ = ["check_context_vector", "check_encoder_summary", "check_sentence_losses"]

FORBIDDEN = {
    "AdditiveAttention": AdditiveAttention.forward,
    "helpers.attention.masked_softmax": masked_softmax,
}
STATE_NAMES = ("state", "encoder_states", "W_q", "W_k", "w_v")


def _step_inputs(seed: int, lengths: tuple = (6, 2, 1), hidden: int = 4, keys: int = 8):
    """A decoder state (B, h), encoder states (B, S, k) with something in the pad positions
    (so that ignoring the mask shows), lengths (B,) and the attention's weights."""
    generator = torch.Generator().manual_seed(seed)
    attention = 5

    def draw(*shape):
        return torch.randn(*shape, generator=generator)

    lengths = torch.tensor(lengths)
    batch, length = len(lengths), int(lengths.max()) + 1  # the longest has a pad too
    return {
        "state": draw(batch, hidden),
        "encoder_states": draw(batch, length, keys),
        "lengths": lengths,
        "W_q": draw(attention, hidden) / hidden**0.5,
        "W_k": draw(attention, keys) / keys**0.5,
        "w_v": draw(attention),
    }


def _scores(state, encoder_states, W_q, W_k, w_v):
    queries = (state @ W_q.T)[:, None, :]  # (B, 1, a)
    keys = encoder_states @ W_k.T  # (B, S, a)
    return torch.tanh(queries + keys) @ w_v  # (B, S)


def _alignment(scores, lengths):
    return masked_softmax(scores[:, None, :], lengths)[:, 0]  # (B, S)


def _summary(states, lengths):
    half = states.shape[-1] // 2
    last = states[torch.arange(len(states)), lengths - 1, :half]  # left to right: its end
    return torch.cat([last, states[:, 0, half:]], dim=-1)  # right to left: the start


def check_encoder_summary(learner_summary: Callable) -> bool:
    """learner_summary(states (B, S, 2h), lengths (B,)) -> (B, 2h): the left-to-right half of
    each sentence's state at its last real token, joined with the right-to-left half of its
    state at position 0."""
    failures, passed = [], 0
    for seed, lengths in ((7, torch.tensor([6, 2, 1])), (8, torch.tensor([3, 5]))):
        generator = torch.Generator().manual_seed(seed)
        states = torch.randn(len(lengths), 6, 8, generator=generator)  # pads hold numbers too
        half = 4
        rows = torch.arange(len(lengths))
        mistakes = {
            "the last position is a pad for a shorter sentence: take each sentence's last real "
            "token (lengths - 1)": torch.cat([states[:, -1, :half], states[:, 0, half:]], -1),
            "each direction ends at a different place: the right-to-left GRU ends at position "
            "0": states[rows, lengths - 1],
            "the halves are swapped: the first half of each state is the left-to-right GRU's": (
                torch.cat([states[:, 0, half:], states[rows, lengths - 1, :half]], dim=-1)
            ),
        }
        passed += run_case(
            f"lengths {lengths.tolist()}",
            learner_summary,
            (states, lengths),
            _summary,
            failures,
            hint="left-to-right half at position lengths - 1, right-to-left half at position 0",
            mistakes=mistakes,
            names=("states", "lengths"),
        )
    return report(failures, passed)


def _sentence_losses(logits, targets, pad_id):
    per_token = F.cross_entropy(logits.transpose(1, 2), targets, reduction="none")  # (B, T)
    real = targets != pad_id
    return (per_token * real).sum(1) / real.sum(1)


def check_sentence_losses(learner_losses: Callable) -> bool:
    """learner_losses(logits (B, T, V), targets (B, T), pad_id) -> (B,): each sentence's mean
    cross-entropy over its real target tokens; pads count for nothing."""
    failures, passed = [], 0
    pad = 0
    for seed, targets in (
        (9, torch.tensor([[4, 7, 2, 0, 0], [5, 6, 3, 8, 2], [9, 2, 0, 0, 0]])),
        (10, torch.tensor([[3, 2, 0], [1, 4, 2]])),
    ):
        generator = torch.Generator().manual_seed(seed)
        logits = torch.randn(*targets.shape, 10, generator=generator) * 2
        per_token = F.cross_entropy(logits.transpose(1, 2), targets, reduction="none")
        real = targets != pad
        mistakes = {
            "the pads were counted: leave them out of the loss": per_token.mean(1),
            "divided by the padded length: divide by each sentence's number of real tokens": (
                (per_token * real).sum(1) / targets.shape[1]
            ),
            "one loss for the whole batch: return one per sentence, shape (B,)": (
                per_token[real].mean().expand(len(targets))
            ),
        }
        passed += run_case(
            f"targets {tuple(targets.shape)} with pads",
            lambda lg, tg: learner_losses(lg, tg, pad),
            (logits, targets),
            lambda lg, tg: _sentence_losses(lg, tg, pad),
            failures,
            atol=1e-5,
            hint="per-token cross-entropy (reduction='none'), zero at the pads, mean per row",
            mistakes=mistakes,
            names=("logits", "targets"),
        )
    return report(failures, passed)


def _context(state, encoder_states, lengths, W_q, W_k, w_v):
    weights = _alignment(_scores(state, encoder_states, W_q, W_k, w_v), lengths)  # (B, S)
    return (weights[:, :, None] * encoder_states).sum(1)  # (B, k)


def check_context_vector(learner_context: Callable) -> bool:
    """learner_context(state, encoder_states, lengths, W_q, W_k, w_v) -> context (B, k): the
    average of each sentence's encoder states, weighted by the masked softmax of the scores
    w_v · tanh(W_q state + W_k h_j); without AdditiveAttention or helpers' masked_softmax."""
    names = ("state", "encoder_states", "lengths", "W_q", "W_k", "w_v")
    failures, passed = [], 0
    for seed, lengths in ((5, (6, 2, 1)), (6, (3, 5))):
        given = _step_inputs(seed, lengths)
        args = tuple(given[name] for name in names)
        states, lengths = given["encoder_states"], given["lengths"]
        real = (torch.arange(states.shape[1]) < lengths[:, None]).float()  # (B, S)
        unmasked = _scores(*(given[name] for name in STATE_NAMES)).softmax(-1)
        mistakes = {
            "the plain average of the real states: weight them by the alignment": (
                (real[:, :, None] * states).sum(1) / lengths[:, None]
            ),
            "the pads were attended to: mask them before the softmax": (
                unmasked[:, :, None] * states
            ).sum(1),
            "the last real state: that is the bottleneck model's fixed context, not attention": (
                states[torch.arange(len(states)), lengths - 1]
            ),
        }
        passed += run_case(
            f"lengths {lengths.tolist()}",
            learner_context,
            args,
            _context,
            failures,
            hint="scores, a softmax over the real tokens only, then the weighted sum of the states",
            mistakes=mistakes,
            forbidden=FORBIDDEN,
            names=names,
        )
    return report(failures, passed)
