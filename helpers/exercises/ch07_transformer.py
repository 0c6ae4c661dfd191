"""Chapter 07's exercises: the Transformer."""

from collections.abc import Callable

import torch

from helpers.exercises.framework import Refused, report, run_case
from helpers.transformer import Residual

__all__ = ["check_pre_norm_residual"]


def check_pre_norm_residual(learner_residual: Callable) -> bool:
    """learner_residual(x, sublayer, norm) -> the pre-norm residual connection's output."""
    generator = torch.Generator().manual_seed(7)
    torch.manual_seed(7)
    norm = torch.nn.LayerNorm(8)
    with torch.no_grad():
        norm.weight.uniform_(0.5, 1.5)
        norm.bias.uniform_(-0.5, 0.5)
    sublayer = torch.nn.Linear(8, 8)
    parameters = [*norm.parameters(), *sublayer.parameters()]

    def call_leaving_the_layers_alone(x):
        before = [p.detach().clone() for p in parameters]
        versions = [p._version for p in parameters]
        out = learner_residual(x, sublayer, norm)
        same = all(torch.equal(b, p) for b, p in zip(before, parameters, strict=True))
        if not same or versions != [p._version for p in parameters]:
            with torch.no_grad():
                for b, p in zip(before, parameters, strict=True):
                    p.copy_(b)
            raise Refused(
                "changes the weights of `norm` or `sublayer` in place: use them, do not modify them"
            )
        return out

    failures, passed = [], 0
    for shape in ((2, 3, 8), (1, 5, 8)):
        x = torch.randn(*shape, generator=generator) * 3 + 1
        with torch.no_grad():
            mistakes = {
                "that is post-norm: normalise the sublayer's input, not the sum": norm(
                    x + sublayer(x)
                ),
                "the residual is missing: add x back": sublayer(norm(x)),
                "add the original x, not the normalised one": norm(x) + sublayer(norm(x)),
            }
        passed += run_case(
            f"x {shape}",
            call_leaving_the_layers_alone,
            (x,),
            lambda x: x + sublayer(norm(x)),
            failures,
            1e-5,
            "pre-norm: x + sublayer(norm(x))",
            mistakes,
            forbidden={"the Residual module": Residual.forward},
            names=("x",),
        )
    return report(failures, passed)
