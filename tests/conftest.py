import matplotlib
import pytest
import torch

matplotlib.use("Agg")


@pytest.fixture(autouse=True)
def seeded():
    """Every test sees the same random numbers, so a failure can be replayed."""
    torch.manual_seed(0)
