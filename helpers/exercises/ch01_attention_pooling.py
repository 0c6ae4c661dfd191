"""Chapter 01's exercises: attention pooling with a kernel."""

from collections.abc import Callable

import torch

from helpers.exercises.framework import report, run_case, run_error_case
from helpers.kernel_regression import KERNELS, kernel_pooling

__all__ = ["check_kernel_pooling"]


def check_kernel_pooling(pooling: Callable, kernel: str = "Epanechnikov") -> bool:
    """pooling(queries, keys, values, width) -> predictions (n_queries,), for the named kernel,
    without calling kernel_pooling; a query with no key within reach raises a ValueError."""
    if kernel not in KERNELS:
        raise ValueError(f"kernel must be one of {sorted(KERNELS)}, got {kernel!r}")
    generator = torch.Generator().manual_seed(1)
    keys = torch.sort(torch.rand(30, generator=generator) * 5).values
    values = torch.randn(30, generator=generator)
    queries = torch.linspace(0.2, 4.8, 7)
    failures, passed = [], 0
    for width in (0.6, 1.5, 4.0):
        passed += run_case(
            f"{kernel} kernel, width {width}",
            pooling,
            (queries, keys, values, width),
            lambda q, k, v, w: kernel_pooling(q, k, v, KERNELS[kernel], w)[0],
            failures,
            forbidden={"kernel_pooling": kernel_pooling},
            names=("queries", "keys", "values", "width"),
        )
    if kernel in ("Boxcar", "Epanechnikov"):  # kernels that reach only so far
        far = torch.tensor([2.0, 40.0])  # no key lies within 0.6 of x = 40
        passed += run_error_case(
            "a query with no key within the width",
            pooling,
            (far, keys, values, 0.6),
            ValueError,
            "every weight is 0 there, so 0/0: raise a ValueError that names the query",
            failures,
        )
    return report(failures, passed)
