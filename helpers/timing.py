"""Timing that a reader can trust: the median of repeated calls after a warm-up.

A single call on a busy machine is noise (a thread woken late, a cache still cold), and the
fastest of a few is an optimist's figure. Notebooks print these times but never assert on
them: asserted claims use counts and bytes, which are the same on every machine.
"""

import statistics
import time
from collections.abc import Callable

from helpers import validation


def median_seconds(function: Callable[[], object], repeats: int = 7, warmup: int = 1) -> float:
    """Seconds per call of function(): the median of `repeats` calls after `warmup` calls."""
    if not callable(function):
        raise ValueError(f"function must be callable with no arguments, got {function!r}")
    repeats = validation.whole_number(repeats, "repeats")
    warmup = validation.whole_number(warmup, "warmup", minimum=0)
    for _ in range(warmup):
        function()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        function()
        times.append(time.perf_counter() - start)
    return statistics.median(times)
