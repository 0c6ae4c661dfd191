"""Chapter 07's checkers: its solutions and typical wrong answers (run by test_exercises.py,
with every other chapter's)."""

import torch

from helpers.exercises import check_pre_norm_residual
from solutions.ch07_transformer import pre_norm_residual

CHECKERS = {
    "pre-norm residual": (check_pre_norm_residual, pre_norm_residual),
}


def post_norm(x, sublayer, norm):
    return norm(x + sublayer(x))


def no_residual(x, sublayer, norm):
    return sublayer(norm(x))


WRONG = [
    ("pre-norm residual", post_norm, "that is post-norm"),
    ("pre-norm residual", no_residual, "the residual is missing"),
]


def test_changing_the_layers_weights_in_place_is_refused(run_checker):
    def scales_the_norm(x, sublayer, norm):
        with torch.no_grad():
            norm.weight.mul_(1.0)  # values unchanged, but written in place
            norm.weight.add_(0.5)
            norm.weight.sub_(0.5)
        return x + sublayer(norm(x))

    verdict, out = run_checker(check_pre_norm_residual, scales_the_norm)
    assert not verdict and "changes the weights of `norm` or `sublayer` in place" in out, out
