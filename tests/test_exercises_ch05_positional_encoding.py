"""Chapter 05's checkers: its solutions and typical wrong answers (run by test_exercises.py,
with every other chapter's)."""

import torch

from helpers.exercises import check_sinusoidal_encoding
from helpers.positional import sinusoidal_encoding
from solutions.ch05_positional_encoding import sinusoidal

CHECKERS = {
    "sinusoidal encoding": (check_sinusoidal_encoding, sinusoidal),
}


def sines_and_cosines_swapped(max_len, d_model):
    encoding = sinusoidal(max_len, d_model)
    return torch.stack([encoding[:, 1::2], encoding[:, 0::2]], -1).flatten(1)


def calls_sinusoidal_encoding(max_len, d_model):
    return sinusoidal_encoding(max_len, d_model)


WRONG = [
    ("sinusoidal encoding", sines_and_cosines_swapped, "sin and cos swapped"),
    ("sinusoidal encoding", calls_sinusoidal_encoding, "calls sinusoidal_encoding"),
]
