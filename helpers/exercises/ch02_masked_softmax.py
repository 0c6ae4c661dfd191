"""Chapter 02's exercises: masked softmax."""

from collections.abc import Callable

import torch

from helpers.attention import masked_softmax
from helpers.exercises.framework import report, run_case

__all__ = ["check_masked_softmax"]


def check_masked_softmax(learner_masked_softmax: Callable) -> bool:
    """learner_masked_softmax(scores, valid_lens) -> weights, like attention.masked_softmax,
    without calling it: values, gradients, and the caller's scores left as they were."""
    generator = torch.Generator().manual_seed(2)
    scores = torch.randn(2, 3, 5, generator=generator)
    cases = [
        ("one valid length per example", scores, torch.tensor([2, 5]), ""),
        ("one valid length per query", scores, torch.tensor([[1, 2, 3], [5, 4, 1]]), ""),
        ("large scores", scores * 1000, torch.tensor([3, 4]), "subtract the row maximum"),
        (
            "a fully masked row (valid length 0)",
            scores,
            torch.tensor([0, 3]),
            "a row with no allowed key must be all zeros",
        ),
        ("float16 scores", scores.half(), torch.tensor([1, 4]), "-1e9 does not fit in float16"),
    ]
    failures, passed = [], 0
    for name, case_scores, lens, hint in cases:
        passed += run_case(
            name,
            learner_masked_softmax,
            (case_scores, lens),
            lambda s, lens: masked_softmax(s, valid_lens=lens),
            failures,
            2e-3,
            hint,
            forbidden={"helpers.attention.masked_softmax": masked_softmax},
            names=("scores", "valid_lens"),
        )
    return report(failures, passed)
