"""Check functions for the exercises: each runs a learner's function on cases with known
answers and checks its values, the gradients it passes back, that it leaves its inputs as they
were, and that it does not call the function it re-implements. It answers "Correct" or
"Not yet" with the case that failed and why; it never raises at a wrong answer."""

import contextlib
import sys
from collections.abc import Callable

import torch
import torch.nn.functional as F

from helpers.attention import (
    DotProductAttention,
    masked_softmax,
    merge_heads,
    scaled_dot_scores,
    split_heads,
)
from helpers.kernel_regression import KERNELS, kernel_pooling
from helpers.masks import causal_mask, causal_padding_mask, padding_mask
from helpers.positional import frequencies, sinusoidal_encoding
from helpers.transformer import Residual


class _Refused(Exception):
    """Raised by a checker's own wrapper around the learner's function: its message is the
    whole diagnosis."""


def _report(failures: list[str], passed: int) -> bool:
    if failures:
        print(f"Not yet: {len(failures)} of {len(failures) + passed} checks failed.")
        for failure in failures:
            print(f"  - {failure}")
        return False
    print(f"Correct: all {passed} checks passed.")
    return True


def _as_answer(got, convert=None):
    """(tensor, None), or (None, what is wrong with the learner's return value)."""
    if got is None:
        return None, "returned None: did the function forget to `return` its result?"
    if isinstance(got, tuple | list) and got and isinstance(got[0], torch.Tensor):
        return None, f"returned a {type(got).__name__} of {len(got)} tensors, expected one tensor"
    try:
        got = torch.as_tensor(got)
    except Exception:  # anything torch cannot read as numbers
        return None, f"returned a {type(got).__name__}, expected a tensor"
    if got.layout != torch.strided or got.is_meta or got.is_complex():
        kind = "complex" if got.is_complex() else "meta" if got.is_meta else "sparse"
        return None, f"returned a {kind} tensor, expected an ordinary real one"
    return (convert(got) if convert else got), None


def _learner_inputs(args: tuple) -> tuple[tuple, list]:
    """Fresh inputs for one call: each floating tensor is a copy of a leaf that records
    gradients (a copy, so that an in-place change is the learner's to own, not autograd's
    error about leaves). Returns (inputs, leaves), leaves[i] None for other arguments."""
    inputs, leaves = [], []
    for arg in args:
        if isinstance(arg, torch.Tensor) and arg.is_floating_point():
            leaf = arg.detach().clone().requires_grad_()
            inputs.append(leaf.clone())
            leaves.append(leaf)
        else:
            inputs.append(arg.clone() if isinstance(arg, torch.Tensor) else arg)
            leaves.append(None)
    return tuple(inputs), leaves


@contextlib.contextmanager
def _recording_calls(forbidden: dict[str, Callable]):
    """Record which of the forbidden functions run inside the block, however they were
    imported (Python functions by their code, torch's C functions by identity)."""
    codes = {f.__code__: label for label, f in forbidden.items() if hasattr(f, "__code__")}
    builtins = {id(f): label for label, f in forbidden.items() if not hasattr(f, "__code__")}
    seen: list[str] = []

    def profile(frame, event, arg):
        if event == "call" and frame.f_code in codes:
            seen.append(codes[frame.f_code])
        elif event == "c_call" and id(arg) in builtins:
            seen.append(builtins[id(arg)])

    previous = sys.getprofile()
    sys.setprofile(profile)
    try:
        yield seen
    finally:
        sys.setprofile(previous)


def _changed_in_place(args: tuple, inputs: tuple, versions: list, names: tuple) -> str | None:
    for index, (arg, given, version) in enumerate(zip(args, inputs, versions, strict=True)):
        if not isinstance(given, torch.Tensor):
            continue
        same = given.shape == arg.shape and torch.equal(given.detach(), arg)
        if given._version != version or not same:
            name = names[index] if index < len(names) else f"argument {index + 1}"
            return (
                f"changes its input `{name}` in place (an operation ending in _, such as "
                f"masked_fill_, or an assignment into it): the caller's tensor must stay as it "
                f"was, so work on a copy (masked_fill, without the underscore, returns one)"
            )
    return None


def _value_problem(got: torch.Tensor, expected: torch.Tensor, atol: float) -> str | None:
    if got.shape != expected.shape:
        return f"shape {tuple(got.shape)}, expected {tuple(expected.shape)}"
    if got.dtype != expected.dtype:
        why = "a boolean mask" if expected.dtype == torch.bool else "keep the input's dtype"
        return f"dtype {got.dtype}, expected {expected.dtype} ({why})"
    got, expected = got.detach(), expected.detach()
    if torch.isnan(got).any() and not torch.isnan(expected).any():
        where = tuple(torch.nonzero(torch.isnan(got))[0].tolist())
        return f"NaN at index {where}"
    error = (got.double() - expected.double()).abs().nan_to_num(0.0)
    if error.numel() and error.max() > atol:
        where = tuple(torch.nonzero(error == error.max())[0].tolist())
        return (
            f"at index {where} got {got[where].item():.4g}, expected {expected[where].item():.4g}"
        )
    return None


def _input_gradients(output: torch.Tensor, upstream: torch.Tensor, inputs: list) -> tuple:
    """d(sum(output * upstream)) / d(each input); None for an input the output does not use."""
    loss = (output * upstream.to(output.dtype)).sum()
    return torch.autograd.grad(loss, inputs, allow_unused=True)


def _gradient_problem(
    got: torch.Tensor, expected: torch.Tensor, leaves: list, reference_leaves: list, names: tuple
) -> str | None:
    """Compare the gradients that flow back to each floating input, for one fixed random
    upstream gradient."""
    if not any(leaf is not None for leaf in leaves) or not expected.requires_grad:
        return None
    if not got.requires_grad:
        return (
            "the values are right but no gradient flows back to the inputs (.detach(), "
            ".item(), numpy or torch.no_grad cut the graph): a model could not learn through it"
        )
    generator = torch.Generator().manual_seed(0)
    upstream = torch.randn(expected.shape, generator=generator, dtype=torch.float64)
    wanted = [leaf for leaf in reference_leaves if leaf is not None]
    given = [leaf for leaf in leaves if leaf is not None]
    reference = _input_gradients(expected, upstream, wanted)
    try:
        learner = _input_gradients(got, upstream, given)
    except RuntimeError as error:
        return f"the gradient cannot be computed through your function ({error})"
    floating = [i for i, leaf in enumerate(leaves) if leaf is not None]
    for index, mine, theirs, leaf in zip(floating, learner, reference, given, strict=True):
        name = names[index] if index < len(names) else f"argument {index + 1}"
        mine = torch.zeros_like(leaf) if mine is None else mine
        theirs = torch.zeros_like(leaf) if theirs is None else theirs
        if not mine.isfinite().all():
            where = tuple(torch.nonzero(~mine.isfinite())[0].tolist())
            return (
                f"the values are right but the gradient with respect to `{name}` is "
                f"{mine[where].item()} at index {where}: training through it would fail (a "
                f"-inf fill made finite afterwards, e.g. by nan_to_num, keeps NaN gradients)"
            )
        if not torch.allclose(mine.double(), theirs.double(), atol=1e-4, rtol=1e-3):
            error = (mine.double() - theirs.double()).abs()
            where = tuple(torch.nonzero(error == error.max())[0].tolist())
            return (
                f"the values are right but the gradient with respect to `{name}` differs at "
                f"index {where}: got {mine[where].item():.4g}, expected {theirs[where].item():.4g}"
            )
    return None


def _run_case(
    name: str,
    function: Callable,
    args: tuple,
    reference: Callable,
    failures: list[str],
    atol: float = 1e-5,
    hint: str = "",
    mistakes: dict | None = None,
    convert: Callable | None = None,
    forbidden: dict[str, Callable] | None = None,
    names: tuple = (),
    alternatives: tuple = (),
) -> bool:
    """Run function(*args) against reference(*args): its values, the gradients flowing back to
    every floating input, no input changed in place, and no forbidden function called.

    mistakes: {diagnosis: what that mistake returns}; a wrong answer equal to one of them is
    reported with that diagnosis instead of the general hint. convert: applied to the answer
    before it is compared (e.g. to accept float64 where float32 is expected). alternatives:
    other answers that are right too. names: the arguments' names, for the messages.
    """
    inputs, leaves = _learner_inputs(args)
    versions = [x._version if isinstance(x, torch.Tensor) else None for x in inputs]
    try:
        with _recording_calls(forbidden or {}) as called:
            got = function(*inputs)
    except _Refused as refusal:
        failures.append(f"{name}: {refusal}")
        return False
    except (Exception, SystemExit) as error:  # the learner's code may fail in any way
        failures.append(f"{name}: your function raised {type(error).__name__}: {error}")
        return False
    problem = _changed_in_place(args, inputs, versions, names)
    if called:
        problem = f"calls {called[0]}, which this exercise asks you to write yourself"
    answer, answer_problem = _as_answer(got, convert)
    problem = problem or answer_problem
    reference_inputs, reference_leaves = _learner_inputs(args)
    expected = reference(*reference_inputs)
    if problem is None and any(
        answer.shape == other.shape and torch.equal(answer.detach(), other)
        for other in alternatives
    ):
        return True
    if problem is None:
        problem = _value_problem(answer, expected, atol)
        if problem is not None:
            for diagnosis, mistaken in (mistakes or {}).items():
                if answer.shape == mistaken.shape and torch.allclose(
                    answer.detach().double(), mistaken.double(), atol=atol
                ):
                    hint = diagnosis
            problem += f" ({hint})" if hint else ""
    if problem is None and expected.is_floating_point() and expected.element_size() >= 4:
        problem = _gradient_problem(answer, expected, leaves, reference_leaves, names)
    if problem is None:
        return True
    failures.append(f"{name}: {problem}")
    return False


def _run_error_case(
    name: str, function: Callable, args: tuple, error: type, what: str, failures: list[str]
) -> bool:
    """The function must refuse these arguments with the given kind of error."""
    try:
        got = function(*args)
    except error:
        return True
    except (Exception, SystemExit) as other:
        failures.append(f"{name}: raised {type(other).__name__}: {other}; {what}")
        return False
    answer, _ = _as_answer(got)
    if answer is not None and answer.is_floating_point():
        shown = "returned [" + ", ".join(f"{v:.4g}" for v in answer.flatten().tolist()[:4]) + "]"
    else:
        shown = f"returned {got!r}"[:80]
    failures.append(f"{name}: {shown}; {what}")
    return False


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
        passed += _run_case(
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
        passed += _run_error_case(
            "a query with no key within the width",
            pooling,
            (far, keys, values, 0.6),
            ValueError,
            "every weight is 0 there, so 0/0: raise a ValueError that names the query",
            failures,
        )
    return _report(failures, passed)


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
        passed += _run_case(
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
    return _report(failures, passed)


def check_dot_product_attention(learner_attention: Callable) -> bool:
    """learner_attention(queries, keys, values, valid_lens) -> output, as DotProductAttention,
    built on masked_softmax without DotProductAttention or torch's scaled_dot_product_attention."""
    generator = torch.Generator().manual_seed(3)
    queries = torch.randn(2, 3, 16, generator=generator)
    keys = torch.randn(2, 5, 16, generator=generator)
    values = torch.randn(2, 5, 4, generator=generator)
    cases = [
        ("no mask", 1.0, None, ""),
        ("valid lengths (2, 5)", 1.0, torch.tensor([2, 5]), "keys at or past the length get 0"),
        (
            "one valid length per query",
            1.0,
            torch.tensor([[1, 2, 3], [5, 5, 0]]),
            "a query with valid length 0 gets all-zero weights",
        ),
        ("scores in the hundreds", 30.0, torch.tensor([3, 4]), "subtract the row maximum"),
    ]
    forbidden = {
        "DotProductAttention": DotProductAttention.forward,
        "helpers.attention.scaled_dot_scores": scaled_dot_scores,
        "torch's scaled_dot_product_attention": F.scaled_dot_product_attention,
    }
    failures, passed = [], 0
    for name, size, lens, hint in cases:
        q, k = queries * size, keys * size
        d = q.shape[-1]
        mistakes = {
            "looks unscaled: divide the scores by sqrt(d)": masked_softmax(
                q @ k.transpose(1, 2), lens
            )
            @ values,
            "divided by d: divide by sqrt(d)": masked_softmax(q @ k.transpose(1, 2) / d, lens)
            @ values,
        }
        passed += _run_case(
            name,
            learner_attention,
            (q, k, values, lens),
            lambda q, k, v, lens: DotProductAttention()(q, k, v, valid_lens=lens),
            failures,
            1e-5,
            hint,
            mistakes,
            forbidden=forbidden,
            names=("queries", "keys", "values", "valid_lens"),
        )
    return _report(failures, passed)


def check_split_merge(learner_split: Callable, learner_merge: Callable) -> bool:
    """learner_split(x, heads): (B, n, d) -> (B, heads, n, d / heads); learner_merge undoes it.

    The inputs count 0, 1, 2, ... so a wrong answer shows which feature landed where. The
    merge cases feed a fresh (contiguous) tensor, as attention's output is: a merge that
    uses view after a transpose fails there, though it survives merge(split(x)).
    """
    forbidden = {"split_heads": split_heads, "merge_heads": merge_heads}
    failures, passed = [], 0
    for batch, n, d, heads in ((2, 3, 8, 4), (1, 5, 12, 3), (3, 4, 6, 1)):
        x = torch.arange(batch * n * d, dtype=torch.float32).reshape(batch, n, d)
        name = f"x {tuple(x.shape)}, {heads} heads"
        passed += _run_case(
            f"split, {name}",
            learner_split,
            (x, heads),
            split_heads,
            failures,
            0,
            "head j holds features j*d_head up to (j+1)*d_head - 1 of every position",
            forbidden=forbidden,
            names=("x", "num_heads"),
        )
        passed += _run_case(
            f"merge, {name}",
            learner_merge,
            (split_heads(x, heads).contiguous(),),
            merge_heads,
            failures,
            0,
            "undo the split: transpose back, then reshape",
            forbidden=forbidden,
            names=("x",),
        )
    return _report(failures, passed)


def check_sinusoidal_encoding(learner_encoding: Callable) -> bool:
    """learner_encoding(max_len, d_model) -> (max_len, d_model), as sinusoidal_encoding."""
    failures, passed = [], 0
    for max_len, d_model in ((6, 4), (50, 16), (100, 64)):
        positions = torch.arange(max_len, dtype=torch.float64)[:, None]  # (max_len, 1)
        angles = positions * frequencies(d_model)  # (max_len, d/2)
        slow_angles = positions * 10000 ** (-torch.arange(d_model // 2) / d_model)
        mistakes = {
            "sin and cos swapped: even dimensions take sin": torch.stack(
                [angles.cos(), angles.sin()], -1
            ).flatten(1),
            "all sines first, then all cosines: interleave them": torch.cat(
                [angles.sin(), angles.cos()], -1
            ),
            "the exponent is 2j/d for the pair (2j, 2j+1), not j/d": torch.stack(
                [slow_angles.sin(), slow_angles.cos()], -1
            ).flatten(1),
        }
        passed += _run_case(
            f"max_len={max_len}, d_model={d_model}",
            learner_encoding,
            (max_len, d_model),
            sinusoidal_encoding,
            failures,
            1e-5,
            "P[i, 2j] = sin(i / 10000^(2j/d)), P[i, 2j+1] = cos(i / 10000^(2j/d))",
            {name: wrong.float() for name, wrong in mistakes.items()},
            convert=lambda got: got.float(),  # float64 is fine too
            forbidden={"sinusoidal_encoding": sinusoidal_encoding},
        )
    return _report(failures, passed)


def check_decoder_mask(learner_mask: Callable) -> bool:
    """learner_mask(tokens, pad_id) -> boolean (B, n, n), True where query i may attend to
    key j: causal, and no pad key, with pads anywhere. Masking the pad queries' rows as well
    (as chapter 06 recommends for a fully padded row) is right too."""
    pad = 0
    cases = {
        "right padding": torch.tensor([[5, 6, 7, 0, 0]]),
        "left padding": torch.tensor([[0, 0, 5, 6, 7]]),
        "a pad in the middle and a batch of two": torch.tensor([[5, 0, 6, 7, 8], [5, 6, 7, 8, 9]]),
    }
    failures, passed = [], 0
    for name, tokens in cases.items():
        n = tokens.shape[1]
        mistakes = {
            "True where attending is NOT allowed: that is torch's convention, not ours": ~(
                causal_padding_mask(tokens, pad)
            ),
            "not causal: query i must not see keys after i": padding_mask(tokens, pad).expand(
                -1, n, -1
            ),
            "pad keys are not masked": causal_mask(n).expand(len(tokens), -1, -1),
            "masks the pad queries' rows instead of the pad keys' columns": (
                (tokens != pad)[:, :, None] & causal_mask(n)
            ),
        }
        rows_too = causal_padding_mask(tokens, pad) & (tokens != pad)[:, :, None]
        passed += _run_case(
            name,
            lambda t: learner_mask(t, pad),
            (tokens,),
            lambda t: causal_padding_mask(t, pad),
            failures,
            0,
            "combine padding_mask and causal_mask with &",
            mistakes,
            forbidden={"causal_padding_mask": causal_padding_mask},
            names=("tokens",),
            alternatives=(rows_too,),
        )
    return _report(failures, passed)


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
            raise _Refused(
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
        passed += _run_case(
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
    return _report(failures, passed)
