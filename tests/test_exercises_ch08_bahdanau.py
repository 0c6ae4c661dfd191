"""Chapter 08's checkers: its solutions and typical wrong answers (run by test_exercises.py,
with every other chapter's)."""

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
