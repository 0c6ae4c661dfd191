"""How much of helpers/ checks arguments and how much computes: a census, run by hand.

    .venv/bin/python tools/guard_census.py [--time] [--root another/checkout]

A statement is a check when it raises or asserts, when it is an ``if`` whose branch only raises,
when it calls a check (a function of ``helpers.validation``, or one named ``_check…``,
``check_…``, ``_validate…``, ``_refuse…``), or when it is written inside a check (such a
function, or a dataclass's ``__post_init__``). Every other statement computes.

It reports, for helpers/*.py as files: the statements of each kind and the raise/assert count;
and, along a learner's path (the statements of helpers/ that a typical call runs, each counted
once): check and compute statements for attention.py, gpt.py, induction.py and vision_models.py,
and the calls into checks made by one forward pass of chapter 12's seven-layer GPT. With
``--time``, the medians of a small multi-head attention call and of one training step of that GPT.
"""

import argparse
import ast
import re
import sys
from collections import Counter
from pathlib import Path

import torch

ROOT = Path(sys.argv[sys.argv.index("--root") + 1] if "--root" in sys.argv else __file__)
ROOT = ROOT.resolve() if "--root" in sys.argv else ROOT.resolve().parent.parent
sys.path.insert(0, str(ROOT))
HELPERS = ROOT / "helpers"
CHECK_NAME = re.compile(r"^_?(check|validate|refuse)|^__post_init__$")


def _is_check_call(node: ast.AST) -> bool:
    if not isinstance(node, ast.Call):
        return False
    func = node.func
    if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name):
        if func.value.id == "validation":
            return True
        return bool(CHECK_NAME.match(func.attr))
    if isinstance(func, ast.Attribute):
        return bool(CHECK_NAME.match(func.attr))
    return isinstance(func, ast.Name) and bool(CHECK_NAME.match(func.id))


def _only_raises(body: list[ast.stmt]) -> bool:
    return bool(body) and isinstance(body[-1], ast.Raise | ast.Assert)


def _is_check_statement(node: ast.stmt) -> bool:
    if isinstance(node, ast.Raise | ast.Assert):
        return True
    if isinstance(node, ast.If):
        return _only_raises(node.body) and (not node.orelse or _only_raises(node.orelse))
    if isinstance(node, ast.Expr | ast.Assign | ast.AnnAssign | ast.Return):
        return node.value is not None and _is_check_call(node.value)
    return False


class _Census(ast.NodeVisitor):
    """Each statement of a file, by the line it starts on, with its kind."""

    def __init__(self, in_validation: bool):
        self.kind_by_line: dict[int, str] = {}
        self.inside_check = [in_validation]
        self.raises = 0

    def generic_visit(self, node: ast.AST) -> None:
        if isinstance(node, ast.stmt) and not isinstance(
            node, ast.FunctionDef | ast.ClassDef | ast.AsyncFunctionDef
        ):
            if self.inside_check[-1]:
                kind = "guard"
            elif _is_check_statement(node):
                kind = (
                    "door"
                    if isinstance(node, ast.Expr | ast.Assign | ast.AnnAssign | ast.Return)
                    else "inline"
                )
            else:
                kind = "compute"
            self.kind_by_line.setdefault(node.lineno, kind)
            self.raises += isinstance(node, ast.Raise | ast.Assert)
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            self.inside_check.append(self.inside_check[-1] or bool(CHECK_NAME.match(node.name)))
            super().generic_visit(node)
            self.inside_check.pop()
            return
        super().generic_visit(node)


def census(path: Path) -> _Census:
    counted = _Census(in_validation=path.name == "validation.py")
    counted.visit(ast.parse(path.read_text(), str(path)))
    return counted


CENSUSES = {path: census(path) for path in sorted(HELPERS.rglob("*.py"))}


def _check_functions() -> set:
    """(file, first line) of every function that is a check, for counting calls into them."""
    found = set()
    for path in CENSUSES:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.FunctionDef) and (
                path.name == "validation.py" or CHECK_NAME.match(node.name)
            ):
                found.add((str(path), node.lineno))
    return found


def statements_run(call) -> tuple[Counter, Counter]:
    """The statements of helpers/ that call runs, by (file name, kind): each counted once, and
    each counted every time it runs."""
    runs = Counter()

    def tracer(frame, event, arg):
        filename = frame.f_code.co_filename
        if not filename.startswith(str(HELPERS)):
            return None
        if event == "line":
            runs[filename, frame.f_lineno] += 1
        return tracer

    sys.settrace(tracer)
    try:
        call()
    finally:
        sys.settrace(None)
    distinct, executed = Counter(), Counter()
    for (filename, line), times in runs.items():
        kind = CENSUSES[Path(filename)].kind_by_line.get(line)
        if kind is not None:
            distinct[Path(filename).name, kind] += 1
            executed[Path(filename).name, kind] += times
    return distinct, executed


def check_calls(call) -> tuple[int, int]:
    """(calls into checks, of which from code that is not itself a check) during call."""
    checks = _check_functions()
    total = outermost = 0
    depth = [0]

    def profiler(frame, event, arg):
        nonlocal total, outermost
        key = (frame.f_code.co_filename, frame.f_code.co_firstlineno)
        if key not in checks:
            return
        if event == "call":
            total += 1
            outermost += depth[0] == 0
            depth[0] += 1
        elif event == "return":
            depth[0] -= 1

    sys.setprofile(profiler)
    try:
        call()
    finally:
        sys.setprofile(None)
    return total, outermost


def _learner_calls() -> dict:
    from helpers import attention, gpt, induction, vision, vision_models

    torch.manual_seed(0)
    scores = torch.randn(2, 3, 4)
    queries, keys, values = torch.randn(2, 3, 8), torch.randn(2, 4, 8), torch.randn(2, 4, 8)
    valid_lens = torch.tensor([2, 4])
    mha = attention.MultiHeadAttention(8, 2)
    additive = attention.AdditiveAttention(8, 8, 16)
    dot = attention.DotProductAttention()

    def attention_path():
        attention.masked_softmax(scores, valid_lens)
        dot(queries, keys, values, valid_lens)
        additive(queries, keys, values, valid_lens)
        mha(queries, keys, values, valid_lens)

    config = gpt.GPTConfig(
        vocab_size=50, context_length=16, d_model=32, num_heads=4, num_layers=7, d_ff=64
    )
    model = gpt.GPT(config).eval()
    ids = torch.randint(0, 50, (2, 10))

    def gpt_path():
        model(ids)

    def induction_path():
        sequences = induction.repeated_sequences(2, 5, 20, generator=torch.Generator())
        weights = torch.softmax(torch.randn(2, 10, 10), -1)
        induction.induction_score(weights, 5)
        induction.previous_token_score(weights)
        del sequences

    images = torch.rand(2, 1, 8, 8)

    def vision_path():
        vit = vision_models.VisionTransformer(d_model=32, num_heads=4, num_layers=2, d_ff=64)
        vit(images)
        vision.patchify(images, 4)

    def training_step():
        model.train()
        loss = torch.nn.functional.cross_entropy(model(ids).flatten(0, 1), ids.flatten())
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()

    optimizer = torch.optim.AdamW(model.parameters())
    timed = {
        "a multi-head attention call, (2, 3, 8) queries": lambda: mha(queries, keys, values),
        "a training step of the seven-layer GPT, (2, 10) ids": training_step,
    }
    return (
        timed,
        {
            "attention.py": (attention_path, "masked_softmax, Dot/Additive/MultiHeadAttention"),
            "gpt.py": (gpt_path, "GPT(config)(ids), seven layers"),
            "induction.py": (induction_path, "repeated_sequences, induction/previous_token_score"),
            "vision_models.py": (vision_path, "VisionTransformer(...)(images), patchify"),
        },
        gpt_path,
    )


def _checks(kinds: Counter, name: str | None = None) -> tuple[int, int, int]:
    """(checks written inline in computing functions and calls to guards, statements inside
    guards, compute statements) in one file's counts, or across all files (name None)."""

    def total(*wanted):
        return sum(
            n for (file, kind), n in kinds.items() if kind in wanted and name in (None, file)
        )

    return total("inline", "door"), total("guard"), total("compute")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--time", action="store_true", help="also time two calls")
    parser.add_argument("--root", help="the project to count (another checkout), not this one")
    timing = parser.parse_args().time
    torch.set_num_threads(1)
    kinds = Counter()
    raises = 0
    for path, counted in CENSUSES.items():
        if path.parent == HELPERS:
            kinds.update(("", kind) for kind in counted.kind_by_line.values())
            raises += counted.raises
    in_code, in_guards, compute = _checks(kinds)
    print(
        f"helpers/*.py: {in_code + in_guards} check statements ({in_code} in computing "
        f"functions, {in_guards} in guards) and {compute} compute statements, {raises} "
        f"raise/assert"
    )
    timed, paths, gpt_path = _learner_calls()
    print("along a learner's path, statements run (each once / every time it runs):")
    for name, (call, what) in paths.items():
        distinct, executed = statements_run(call)
        print(
            f"  {name} ({what}): in the file, {_shown(_checks(distinct, name))} / "
            f"{_shown(_checks(executed, name))}; across helpers/, "
            f"{_shown(_checks(distinct))} / {_shown(_checks(executed))}"
        )
    total, outermost = check_calls(gpt_path)
    print(f"one forward of a seven-layer GPT: {total} calls into checks ({outermost} outermost)")
    if timing:
        from helpers.timing import median_seconds

        for what, call in timed.items():
            print(f"{what}: {median_seconds(call, repeats=201, warmup=20) * 1e6:.0f} µs (median)")


def _shown(counts: tuple[int, int, int]) -> str:
    in_code, in_guards, compute = counts
    checks = in_code + in_guards
    return f"check : compute {checks} : {compute} ({in_code} checks in the computing code)"


if __name__ == "__main__":
    main()
