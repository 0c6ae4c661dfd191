import os

import matplotlib
import pytest
import torch

from helpers.exercises.framework import Verdict

matplotlib.use("Agg")

# Under pytest-xdist each worker gets its share of the cores for torch, and so do the notebook
# kernels it starts: two workers of two threads each on two cores made training tests 4x slower.
if "PYTEST_XDIST_WORKER_COUNT" in os.environ:
    threads = max(1, (os.cpu_count() or 1) // int(os.environ["PYTEST_XDIST_WORKER_COUNT"]))
    torch.set_num_threads(threads)
    os.environ["OMP_NUM_THREADS"] = str(threads)


@pytest.fixture(autouse=True)
def seeded():
    """Every test sees the same random numbers, so a failure can be replayed."""
    torch.manual_seed(0)


@pytest.fixture
def run_checker(capsys):
    """run_checker(checker, answer) -> (verdict, what the checker printed)."""

    def run(checker, answer) -> tuple[bool, str]:
        verdict = checker(answer)
        assert isinstance(verdict, Verdict), f"a checker returned {verdict!r}, not a Verdict"
        return bool(verdict), capsys.readouterr().out

    return run
