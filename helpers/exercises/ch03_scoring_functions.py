"""Chapter 03's exercises: scoring functions."""

from collections.abc import Callable

import torch
import torch.nn.functional as F

from helpers.attention import DotProductAttention, masked_softmax, scaled_dot_scores
from helpers.exercises.framework import report, run_case

__all__ = ["check_dot_product_attention"]


def check_dot_product_attention(learner_attention: Callable) -> bool:
    """learner_attention(queries, keys, values, valid_lens) -> output, as DotProductAttention,
    built on masked_softmax without DotProductAttention or torch's scaled_dot_product_attention."""
    generator = torch.Generator().manual_seed(3)
    queries = torch.randn(2, 3, 16, generator=generator)
    keys = torch.randn(2, 5, 16, generator=generator)
    values = torch.randn(2, 5, 4, generator=generator)
    cases = [
        ("no mask", 1.0, None, ""),
        ("valid lengths (2, 5)", 1.0, torch.tensor([2, 5]), "keys at or past the length get 0"),
        (
            "one valid length per query",
            1.0,
            torch.tensor([[1, 2, 3], [5, 5, 0]]),
            "a query with valid length 0 gets all-zero weights",
        ),
        ("scores in the hundreds", 30.0, torch.tensor([3, 4]), "subtract the row maximum"),
    ]
    forbidden = {
        "DotProductAttention": DotProductAttention.forward,
        "helpers.attention.scaled_dot_scores": scaled_dot_scores,
        "torch's scaled_dot_product_attention": F.scaled_dot_product_attention,
    }
    failures, passed = [], 0
    for name, size, lens, hint in cases:
        q, k = queries * size, keys * size
        d = q.shape[-1]
        mistakes = {
            "looks unscaled: divide the scores by sqrt(d)": masked_softmax(
                q @ k.transpose(1, 2), lens
            )
            @ values,
            "divided by d: divide by sqrt(d)": masked_softmax(q @ k.transpose(1, 2) / d, lens)
            @ values,
        }
        passed += run_case(
            name,
            learner_attention,
            (q, k, values, lens),
            lambda q, k, v, lens: DotProductAttention()(q, k, v, valid_lens=lens),
            failures,
            1e-5,
            hint,
            mistakes,
            forbidden=forbidden,
            names=("queries", "keys", "values", "valid_lens"),
        )
    return report(failures, passed)
