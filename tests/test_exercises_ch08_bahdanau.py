"""Chapter 08's checkers: its solutions and typical wrong answers (run by test_exercises.py,
with every other chapter's)."""

import pytest
import torch
import torch.nn.functional as F

from helpers.attention import AdditiveAttention
from helpers.exercises import check_context_vector, check_encoder_summary, check_sentence_losses
from solutions.ch08_bahdanau import context_vector, encoder_summary, sentence_losses

CHECKERS = {
    "encoder summary": (check_encoder_summary, encoder_summary),
    "sentence losses": (check_sentence_losses, sentence_losses),
    "context vector": (check_context_vector, context_vector),
}


def summary_at_the_last_position(states, lengths):
    half = states.shape[-1] // 2
    return torch.cat([states[:, -1, :half], states[:, 0, half:]], dim=-1)


def summary_of_both_halves_at_the_end(states, lengths):
    return states[torch.arange(len(states)), lengths - 1]


def losses_over_the_pads(logits, targets, pad_id):
    return F.cross_entropy(logits.transpose(1, 2), targets, reduction="none").mean(1)


def losses_over_the_padded_length(logits, targets, pad_id):
    per_token = F.cross_entropy(logits.transpose(1, 2), targets, reduction="none")
    return (per_token * (targets != pad_id)).sum(1) / targets.shape[1]


def context_as_a_plain_average(state, encoder_states, lengths, W_q, W_k, w_v):
    real = (torch.arange(encoder_states.shape[1]) < lengths[:, None]).float()
    return (real[:, :, None] * encoder_states).sum(1) / lengths[:, None]


def context_from_the_last_state(state, encoder_states, lengths, W_q, W_k, w_v):
    return encoder_states[torch.arange(len(lengths)), lengths - 1]


def context_in_place(state, encoder_states, lengths, W_q, W_k, w_v):
    query = (state @ W_q.T).unsqueeze(1)
    scores = torch.tanh(query + encoder_states @ W_k.T) @ w_v
    real = torch.arange(scores.shape[1]) < lengths.unsqueeze(1)
    weights = scores.masked_fill(~real, float("-inf")).softmax(-1)
    encoder_states.mul_(weights.unsqueeze(-1))  # scales the caller's states
    return encoder_states.sum(1)


def context_with_the_module(state, encoder_states, lengths, W_q, W_k, w_v):
    attention = AdditiveAttention(encoder_states.shape[-1], state.shape[-1], len(w_v))
    with torch.no_grad():
        attention.W_q.weight.copy_(W_q)
        attention.W_k.weight.copy_(W_k)
        attention.w_v.weight.copy_(w_v[None])
    return attention(state[:, None], encoder_states, encoder_states, lengths)[:, 0]


WRONG = [
    ("encoder summary", summary_at_the_last_position, "take each sentence's last real token"),
    ("encoder summary", summary_of_both_halves_at_the_end, "ends at position 0"),
    ("sentence losses", losses_over_the_pads, "the pads were counted"),
    ("sentence losses", losses_over_the_padded_length, "divided by the padded length"),
    ("context vector", context_as_a_plain_average, "the plain average"),
    ("context vector", context_from_the_last_state, "the bottleneck model's fixed context"),
    ("context vector", context_in_place, "changes its input `encoder_states` in place"),
    ("context vector", context_with_the_module, "calls AdditiveAttention"),
]


# More typical mistakes, each named by its own message.


def summary_indexed_at_lengths(states, lengths):
    half = states.shape[-1] // 2
    return torch.cat([states[torch.arange(len(states)), lengths, :half], states[:, 0, half:]], -1)


def summary_with_the_directions_swapped(states, lengths):
    half = states.shape[-1] // 2
    rows = torch.arange(len(states))
    return torch.cat([states[:, 0, :half], states[rows, lengths - 1, half:]], dim=-1)


def summary_as_a_mean_over_time(states, lengths):
    real = (torch.arange(states.shape[1]) < lengths[:, None]).float()
    return (real[:, :, None] * states).sum(1) / lengths[:, None]


def _per_token(logits, targets):
    return F.cross_entropy(logits.transpose(1, 2), targets, reduction="none")


def losses_with_the_pad_hard_coded(logits, targets, pad_id):
    real = (targets != 0).float()
    return (_per_token(logits, targets) * real).sum(1) / real.sum(1)


def losses_with_positive_ids_as_real(logits, targets, pad_id):
    real = (targets > 0).float()
    return (_per_token(logits, targets) * real).sum(1) / real.sum(1)


def _additive_scores(state, encoder_states, W_q, W_k, w_v, squash=torch.tanh):
    return squash((state @ W_q.T)[:, None] + encoder_states @ W_k.T) @ w_v  # (B, S)


def _weighted(weights, encoder_states):
    return (weights[:, :, None] * encoder_states).sum(1)


def _real(encoder_states, lengths):
    return torch.arange(encoder_states.shape[1]) < lengths[:, None]  # (B, S)


def context_with_a_mask_one_too_long(state, encoder_states, lengths, W_q, W_k, w_v):
    scores = _additive_scores(state, encoder_states, W_q, W_k, w_v)
    keep = torch.arange(encoder_states.shape[1]) <= lengths[:, None]
    return _weighted(scores.masked_fill(~keep, float("-inf")).softmax(-1), encoder_states)


def context_with_a_mask_one_too_short(state, encoder_states, lengths, W_q, W_k, w_v):
    scores = _additive_scores(state, encoder_states, W_q, W_k, w_v)
    keep = torch.arange(encoder_states.shape[1]) < lengths[:, None] - 1
    return _weighted(scores.masked_fill(~keep, float("-inf")).softmax(-1), encoder_states)


def context_without_tanh(state, encoder_states, lengths, W_q, W_k, w_v):
    scores = _additive_scores(state, encoder_states, W_q, W_k, w_v, squash=lambda x: x)
    real = _real(encoder_states, lengths)
    return _weighted(scores.masked_fill(~real, float("-inf")).softmax(-1), encoder_states)


def context_zeroing_pads_after_the_softmax(state, encoder_states, lengths, W_q, W_k, w_v):
    scores = _additive_scores(state, encoder_states, W_q, W_k, w_v)
    weights = scores.softmax(-1) * _real(encoder_states, lengths)
    return _weighted(weights, encoder_states)


def context_with_pads_scored_zero(state, encoder_states, lengths, W_q, W_k, w_v):
    scores = _additive_scores(state, encoder_states, W_q, W_k, w_v)
    real = _real(encoder_states, lengths)
    return _weighted(torch.where(real, scores, 0.0).softmax(-1), encoder_states)


def context_divided_by_sqrt_a(state, encoder_states, lengths, W_q, W_k, w_v):
    scores = _additive_scores(state, encoder_states, W_q, W_k, w_v) / len(w_v) ** 0.5
    real = _real(encoder_states, lengths)
    return _weighted(scores.masked_fill(~real, float("-inf")).softmax(-1), encoder_states)


WRONG += [
    ("encoder summary", summary_indexed_at_lengths, "one past the last real token"),
    ("encoder summary", summary_with_the_directions_swapped, "the directions are swapped"),
    ("encoder summary", summary_as_a_mean_over_time, "a mean over the positions"),
    ("sentence losses", losses_with_the_pad_hard_coded, "the pad id is taken to be 0"),
    ("sentence losses", losses_with_positive_ids_as_real, "the pad id is taken to be 0"),
    ("context vector", context_with_a_mask_one_too_long, "it lets in the first pad"),
    ("context vector", context_with_a_mask_one_too_short, "it leaves out the last real token"),
    ("context vector", context_without_tanh, "no tanh"),
    ("context vector", context_zeroing_pads_after_the_softmax, "zeroed after the softmax"),
    ("context vector", context_with_pads_scored_zero, "the pads were scored 0"),
    ("context vector", context_divided_by_sqrt_a, "divided by sqrt(a)"),
]


def test_indexing_at_lengths_is_named_where_it_raises_too(run_checker):
    verdict, out = run_checker(check_encoder_summary, summary_indexed_at_lengths)
    assert verdict is False, out
    assert "raised IndexError" in out and "its last real token is at lengths - 1" in out, out
    assert "one past the last real token" in out, out  # the case where it runs


# Right answers in other styles: each must be accepted.


def summary_by_a_loop(states, lengths):
    half = states.shape[-1] // 2
    rows = [
        torch.cat([states[b, int(n) - 1, :half], states[b, 0, half:]])
        for b, n in enumerate(lengths)
    ]
    return torch.stack(rows)


def summary_by_gather(states, lengths):
    half = states.shape[-1] // 2
    index = (lengths - 1)[:, None, None].expand(-1, 1, states.shape[-1])
    last = states.gather(1, index)[:, 0]  # (B, 2h)
    return torch.cat([last[:, :half], states[:, 0, half:]], dim=-1)


def summary_by_chunk_in_float64(states, lengths):
    forward, backward = states.double().chunk(2, dim=-1)
    ends = forward[torch.arange(len(lengths)), lengths - 1]
    return torch.cat([ends, backward[:, 0]], dim=-1).to(states.dtype)


def losses_with_ignore_index(logits, targets, pad_id):
    per_token = F.cross_entropy(
        logits.transpose(1, 2), targets, ignore_index=pad_id, reduction="none"
    )
    return per_token.sum(1) / (targets != pad_id).sum(1)


def losses_by_a_loop(logits, targets, pad_id):
    rows = []
    for sentence_logits, sentence_targets in zip(logits, targets, strict=True):
        real = sentence_targets != pad_id
        rows.append(F.cross_entropy(sentence_logits[real], sentence_targets[real]))
    return torch.stack(rows)


def losses_by_log_softmax_in_float64(logits, targets, pad_id):
    log_probs = logits.double().log_softmax(-1)
    picked = -log_probs.gather(-1, targets[..., None])[..., 0]  # (B, T)
    real = targets != pad_id
    losses = torch.where(real, picked, 0.0).sum(1) / real.sum(1)
    return losses.float()


def context_with_a_large_negative(state, encoder_states, lengths, W_q, W_k, w_v):
    scores = _additive_scores(state, encoder_states, W_q, W_k, w_v)
    real = _real(encoder_states, lengths)
    return _weighted(torch.where(real, scores, -1e9).softmax(-1), encoder_states)


def context_by_einsum(state, encoder_states, lengths, W_q, W_k, w_v):
    keys = torch.einsum("bsk,ak->bsa", encoder_states, W_k)
    query = torch.einsum("bh,ah->ba", state, W_q)
    scores = torch.einsum("bsa,a->bs", torch.tanh(query[:, None] + keys), w_v)
    weights = scores.masked_fill(~_real(encoder_states, lengths), float("-inf")).softmax(-1)
    return torch.einsum("bs,bsk->bk", weights, encoder_states)


def context_by_a_loop_over_the_real_tokens(state, encoder_states, lengths, W_q, W_k, w_v):
    contexts = []
    for b, n in enumerate(lengths.tolist()):
        real_states = encoder_states[b, :n]  # (n, k)
        scores = torch.tanh(W_q @ state[b] + real_states @ W_k.T) @ w_v  # (n,)
        contexts.append(scores.softmax(0) @ real_states)
    return torch.stack(contexts)


def context_renormalised_after_the_softmax(state, encoder_states, lengths, W_q, W_k, w_v):
    scores = _additive_scores(state, encoder_states, W_q, W_k, w_v)
    weights = scores.softmax(-1) * _real(encoder_states, lengths)
    return _weighted(weights / weights.sum(-1, keepdim=True), encoder_states)


def context_in_float64(state, encoder_states, lengths, W_q, W_k, w_v):
    state, encoder_states = state.double(), encoder_states.double()
    W_q, W_k, w_v = W_q.double(), W_k.double(), w_v.double()
    scores = _additive_scores(state, encoder_states, W_q, W_k, w_v)
    real = _real(encoder_states, lengths)
    weights = scores.masked_fill(~real, float("-inf")).softmax(-1)
    return _weighted(weights, encoder_states).float()


RIGHT = [
    ("encoder summary", summary_by_a_loop),
    ("encoder summary", summary_by_gather),
    ("encoder summary", summary_by_chunk_in_float64),
    ("sentence losses", losses_with_ignore_index),
    ("sentence losses", losses_by_a_loop),
    ("sentence losses", losses_by_log_softmax_in_float64),
    ("context vector", context_with_a_large_negative),
    ("context vector", context_by_einsum),
    ("context vector", context_by_a_loop_over_the_real_tokens),
    ("context vector", context_renormalised_after_the_softmax),
    ("context vector", context_in_float64),
]


@pytest.mark.parametrize(
    ("exercise", "answer"), RIGHT, ids=[f"{e}: {a.__name__}" for e, a in RIGHT]
)
def test_a_right_answer_written_another_way_is_accepted(exercise, answer, run_checker):
    verdict, out = run_checker(CHECKERS[exercise][0], answer)
    assert verdict is True and out.startswith("Correct"), out
