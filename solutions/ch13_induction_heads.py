"""Chapter 13's exercises, solved as a learner would: the previous-token score, the induction
score, and a GPT's logits with one head's output zeroed."""

import torch


def previous_token_score(weights):
    """weights (..., n, n) -> (...): the mean over the queries t = 1..n-1 of the weight on
    key t - 1, the token just before."""
    n = weights.shape[-1]
    queries = torch.arange(1, n)  # query 0 has no previous token
    return weights[..., queries, queries - 1].mean(dim=-1)


def induction_score(weights, length):
    """weights (..., 2 * length, 2 * length) -> (...): the mean over the queries of the copy,
    t = length..2*length-1, of the weight on key t - length + 1, the token after the earlier
    occurrence of the query's own token."""
    queries = torch.arange(length, 2 * length)
    return weights[..., queries, queries - length + 1].mean(dim=-1)


def logits_with_head_zeroed(model, ids, layer, head):
    """model(ids) (B, T, vocab) with head `head` of block `layer` writing nothing: W_o reads
    zeros in the head's columns of the merged heads."""
    d_head = model.config.d_model // model.config.num_heads
    columns = slice(head * d_head, (head + 1) * d_head)

    def zero_the_head(module, inputs):
        merged = inputs[0].clone()  # (B, T, d_model), the heads side by side
        merged[..., columns] = 0.0
        return (merged,)

    handle = model.blocks[layer].attention.W_o.register_forward_pre_hook(zero_the_head)
    try:
        with torch.no_grad():
            return model(ids)
    finally:
        handle.remove()  # the model stays as it came
