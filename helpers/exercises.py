"""Check functions for the exercises: each runs a learner's function on cases with
known answers and says which case failed and how, or that all passed."""

import torch

from helpers.attention import masked_softmax
from helpers.kernel_regression import KERNELS, kernel_pooling


def _report(failures: list[str], passed: int) -> bool:
    if failures:
        print(f"Not yet: {len(failures)} of {len(failures) + passed} checks failed.")
        for failure in failures:
            print(f"  - {failure}")
        return False
    print(f"Correct: all {passed} checks passed.")
    return True


def _run_case(name, function, args, expected, failures, atol=1e-5):
    """Compare function(*args) with expected; append a failure message if they differ."""
    try:
        got = function(*args)
    except Exception as error:  # the learner's code may fail in any way; report it
        failures.append(f"{name}: raised {type(error).__name__}: {error}")
        return False
    got = torch.as_tensor(got)
    if got.shape != expected.shape:
        failures.append(f"{name}: shape {tuple(got.shape)}, expected {tuple(expected.shape)}")
    elif torch.isnan(got).any():
        failures.append(f"{name}: returned NaN")
    elif not torch.allclose(got.double(), expected.double(), atol=atol, rtol=0):
        worst = (got.double() - expected.double()).abs().max().item()
        failures.append(f"{name}: values differ from the expected ones by up to {worst:.3g}")
    else:
        return True
    return False


def check_kernel_pooling(pooling, kernel: str = "Epanechnikov") -> bool:
    """pooling(queries, keys, values, width) -> predictions (n_queries,), for the named kernel."""
    if kernel not in KERNELS:
        raise ValueError(f"kernel must be one of {sorted(KERNELS)}, got {kernel!r}")
    generator = torch.Generator().manual_seed(1)
    keys = torch.sort(torch.rand(30, generator=generator) * 5).values
    values = torch.randn(30, generator=generator)
    failures, passed = [], 0
    for width in (0.6, 1.5, 4.0):
        queries = torch.linspace(0.2, 4.8, 7)
        expected, _ = kernel_pooling(queries, keys, values, KERNELS[kernel], width)
        passed += _run_case(
            f"{kernel} kernel, width {width}",
            pooling,
            (queries, keys, values, width),
            expected,
            failures,
        )
    return _report(failures, passed)


def check_masked_softmax(learner_masked_softmax) -> bool:
    """learner_masked_softmax(scores, valid_lens) -> weights, as helpers.attention.masked_softmax."""
    generator = torch.Generator().manual_seed(2)
    scores = torch.randn(2, 3, 5, generator=generator)
    cases = [
        ("one valid length per example", scores, torch.tensor([2, 5])),
        ("one valid length per query", scores, torch.tensor([[1, 2, 3], [5, 4, 1]])),
        ("large scores (needs the max subtracted)", scores * 1000, torch.tensor([3, 4])),
        ("a fully masked row (valid length 0)", scores, torch.tensor([0, 3])),
        ("float16 scores", scores.half(), torch.tensor([1, 4])),
    ]
    failures, passed = [], 0
    for name, case_scores, lens in cases:
        expected = masked_softmax(case_scores, valid_lens=lens)
        passed += _run_case(
            name, learner_masked_softmax, (case_scores, lens), expected, failures, atol=2e-3
        )
    return _report(failures, passed)
