import matplotlib
import pytest
import torch

from helpers.exercises.framework import Verdict

matplotlib.use("Agg")


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
